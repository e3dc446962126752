"""What the plugin knows about a test item, for other plugins (the conformance suite's)
to ask instead of reading markers or parameter values themselves.

* :func:`changes_level`: what a test may change (its ``talos_mutating`` /
  ``talos_disruptive`` marker), and :func:`held_back`: whether ``--talos-allow`` keeps it from
  running.
* :func:`node_param`: the hostname a ``talos_node`` test runs on, or ``None`` for a
  cluster-wide test and for the placeholder parameter (:class:`NoNode`) a test gets when
  there is no node to run it on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_talos.plugin.settings import TalosSettings

__all__ = ["UNREACHABLE", "NoNode", "changes_level", "held_back", "node_param"]


@dataclass(frozen=True)
class NoNode:
    """The ``talos_node`` parameter of a test with no node to run on: the targets could not
    be listed (``UNREACHABLE``), or none has the role the test asks for."""

    why: str

    def __str__(self) -> str:
        return f"<{self.why}>"


UNREACHABLE = NoNode("unreachable")


def changes_level(item: pytest.Item) -> str | None:
    """``"disruptive"``, ``"mutating"`` or ``None`` (read-only), from the item's markers."""
    if item.get_closest_marker("talos_disruptive"):
        return "disruptive"
    return "mutating" if item.get_closest_marker("talos_mutating") else None


def held_back(item: pytest.Item, settings: TalosSettings) -> str | None:
    """The change level that ``--talos-allow`` does not permit for this item (it is skipped
    with a reason naming the flag), else ``None``."""
    level = changes_level(item)
    if level == "disruptive" and not settings.allows_disruptive:
        return level
    if level == "mutating" and not settings.allows_mutating:
        return level
    return None


def node_param(item: pytest.Item) -> str | None:
    """The hostname of the node a parametrized ``talos_node`` test runs on, else ``None``."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("talos_node") if callspec is not None else None
    return None if value is None or isinstance(value, NoNode) else str(value)
