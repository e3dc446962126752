"""ChangeGate: the changes the clients that share it may send (checked before each call).

A plain library client has no gate and sends what it is asked. The pytest plugin gives the
clients it hands out one gate and sets its level per test (the ``talos_mutating`` /
``talos_disruptive`` marker, within ``--talos-allow``), so an unmarked test cannot change a
real node. Which calls change a node, and how much, is :mod:`pytest_talos.talos_api`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_talos.errors import ChangeNotAllowed
from pytest_talos.talos_api import ALLOW_LEVELS, ChangeLevel, change_level, permits

__all__ = ["ChangeGate", "Explainer"]

# (needed level, method name, node) -> the sentence a refusal starts with
Explainer = Callable[[ChangeLevel, str, str | None], str]


def _plain(needed: ChangeLevel, method: str, node: str | None) -> str:
    return f"{method} is a {needed} change, which this client's change gate does not allow"


class ChangeGate:
    """An allow level (``none``, ``mutating``, ``disruptive``) and how a refusal reads.

    ``changes`` counts the changing calls let through, and the changes announced by
    :meth:`note_change`: a reader that keeps what it read for later compares the count
    then and now to know whether anything was changed in between.
    """

    def __init__(self, allowed: str = "disruptive", explain: Explainer = _plain) -> None:
        self.allowed = allowed
        self.explain = explain
        self.changes = 0

    def note_change(self) -> None:
        """Count a change that may not pass through this gate (the plugin calls it when a
        test allowed to change the cluster starts: it may use other means than the API)."""
        self.changes += 1

    @property
    def allowed(self) -> str:
        return self._allowed

    @allowed.setter
    def allowed(self, level: str) -> None:
        if level not in ALLOW_LEVELS:
            raise ValueError(f"unknown allow level {level!r}; use one of {', '.join(ALLOW_LEVELS)}")
        self._allowed = level

    def check(self, method: str, request: Any, node: str | None) -> None:
        """Raise :class:`ChangeNotAllowed` (nothing is sent) unless the level covers the call."""
        needed = change_level(method, request)
        if needed is None:
            return
        if permits(self._allowed, needed):
            self.changes += 1  # counted before it is sent: a read begun earlier is now old
            return
        name = method.rsplit("/", 1)[-1]
        raise ChangeNotAllowed(
            self.explain(needed, name, node),
            needed=needed,
            allowed=self._allowed,
            node=node,
            method=method,
        )

    def __repr__(self) -> str:
        return f"ChangeGate(allowed={self._allowed!r})"
