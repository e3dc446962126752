"""The services checks' own fixture: the config changes this kit made to each node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_talos.node import TalosNode
from pytest_talos.restarts import KIT_CHANGES, KitChange


def _state_dir(config: pytest.Config) -> Path | None:
    """Where the config guard journals (and logs its changes) in this run, if anywhere."""
    try:
        from pytest_talos.plugin.session import session_of

        return Path(session_of(config).settings.state_dir.value)
    except (KeyError, AttributeError, TypeError):
        return None


@pytest.fixture(scope="session")
def talos_kit_changes(request: pytest.FixtureRequest) -> Callable[[TalosNode], list[KitChange]]:
    """The machine config changes the kit's guard made to a node, in this process and in
    earlier runs or other workers that shared the state directory (node time)."""
    state_dir = _state_dir(request.config)

    def changes(node: TalosNode) -> list[KitChange]:
        return KIT_CHANGES.for_node(node.address, state_dir)

    return changes
