"""Guards: what every change to a node's machine config goes through first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pytest_talos.errors import TalosError

if TYPE_CHECKING:
    from pytest_talos.node._node import TalosNode

__all__ = ["ConfigProtector", "ReadOnlyGuard"]


class ConfigProtector(Protocol):
    """Called before every change to a node's machine config."""

    def protect(self, node: TalosNode) -> None:
        """Snapshot ``node``'s config so it can be restored, or raise to refuse the change."""


class ReadOnlyGuard:
    """A guard that refuses every change, with a reason that says how to allow it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def protect(self, node: TalosNode) -> None:
        raise TalosError(self.reason, node=node.name)

    def __repr__(self) -> str:
        return f"ReadOnlyGuard({self.reason!r})"
