"""NodeRuns: a changing per-node check run on every node at once, each through its own guard.

Plain objects stand in for the nodes and the guards (no sockets): what is tested is the
threading, the hand-over of outcomes and the stop. The suite's try-mode checks use it
against the emulator in the fault matrix (``try-no-revert``, ``try-revert-keeps-label``,
``try-not-cancelled``) and under a real SIGTERM in
``tests/plugin/test_interruptions_node_runs.py``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from conformance._support.node_runs import NodeRuns
from pytest_talos.errors import ConformanceFailure, WaitCancelled
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode
from pytest_talos.wait import Cancelled


@dataclass
class FakeNode:
    name: str
    guard: object = None

    @property
    def address(self) -> str:
        return f"addr-{self.name}"

    def with_guard(self, guard: object) -> FakeNode:
        return FakeNode(self.name, guard)


@dataclass
class Guards:
    """A guard factory that records which guards were entered and left, by label."""

    entered: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def __call__(self, label: str) -> Iterator[ConfigGuard]:
        with self.lock:
            self.entered.append(label)
        try:
            yield cast(ConfigGuard, f"guard:{label}")
        finally:
            with self.lock:
                self.left.append(label)


def _nodes(*names: str) -> list[TalosNode]:
    return [cast(TalosNode, FakeNode(name)) for name in names]


def test_every_node_is_checked_at_once_through_its_own_guard() -> None:
    nodes = _nodes("a", "b", "c")
    together = threading.Barrier(len(nodes), timeout=30)  # breaks if run one after another
    guards = Guards()

    def check(node: TalosNode, cancelled: Cancelled) -> str:
        together.wait()
        return f"{node.name} via {cast(FakeNode, node).guard}"

    lines: list[str] = []
    runs = NodeRuns(nodes, check, guards, label="the check", announce=lines.append)
    assert not runs.started
    results = [runs.outcome(node) for node in nodes]
    assert results == [f"{n} via guard:the check[{n}]" for n in "abc"]
    assert lines == ["conformance: the check on 3 nodes at once"]
    assert sorted(guards.entered) == sorted(guards.left) == [f"the check[{n}]" for n in "abc"]
    assert runs.close(5) == []


def test_a_nodes_failure_reaches_its_own_test_only() -> None:
    nodes = _nodes("good", "bad")

    def check(node: TalosNode, cancelled: Cancelled) -> str:
        if node.name == "bad":
            raise ConformanceFailure("x.check", "it broke", node=node.name)
        return "fine"

    runs = NodeRuns(nodes, check, Guards(), label="the check")
    with pytest.raises(ConformanceFailure, match="it broke"):
        runs.outcome(nodes[1])
    assert runs.outcome(nodes[0]) == "fine"


def test_a_node_outside_the_set_or_asked_again_runs_on_the_tests_own_node() -> None:
    inside, outside = _nodes("in", "out")
    calls: list[tuple[str, object, bool]] = []

    def check(node: TalosNode, cancelled: Cancelled) -> str:
        calls.append((node.name, cast(FakeNode, node).guard, cancelled()))
        return node.name

    guards = Guards()
    runs = NodeRuns([inside], check, guards, label="c")
    assert runs.outcome(outside) == "out"  # not in the set: run here, unguarded by NodeRuns
    assert not runs.started
    assert runs.outcome(inside) == "in"
    assert runs.outcome(inside) == "in"  # a second time: run here again
    assert calls == [("out", None, False), ("in", "guard:c[in]", False), ("in", None, False)]
    assert guards.entered == ["c[in]"]


def test_close_stops_the_checks_still_running_and_their_guards_restore() -> None:
    nodes = _nodes("slow", "quick")
    started = threading.Barrier(len(nodes) + 1, timeout=30)

    def check(node: TalosNode, cancelled: Cancelled) -> str:
        started.wait()
        if node.name == "quick":
            return "done"
        event = threading.Event()
        while not cancelled():
            event.wait(0.01)
        raise WaitCancelled("stopped", node=node.name)

    guards = Guards()
    lines: list[str] = []
    runs = NodeRuns(nodes, check, guards, label="the check", announce=lines.append)
    outcome: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: outcome.update(quick=runs.outcome(nodes[1])))
    reader.start()
    started.wait()
    reader.join(30)
    assert outcome == {"quick": "done"}
    assert runs.close(30) == []
    assert sorted(guards.left) == ["the check[quick]", "the check[slow]"]
    assert lines[-2:] == [
        "conformance: stopping the check on slow; restoring their original config",
        "conformance: slow: original config restored",
    ]
    with pytest.raises(WaitCancelled):
        runs.outcome(nodes[0])  # what stopped it, for a test that asks later


def test_after_close_nothing_starts() -> None:
    nodes = _nodes("a")
    guards = Guards()
    runs = NodeRuns(nodes, lambda node, cancelled: "ran", guards, label="c")
    assert runs.close(1) == []
    with pytest.raises(WaitCancelled, match="c was not started: the run is stopping"):
        runs.outcome(nodes[0])
    assert guards.entered == []
