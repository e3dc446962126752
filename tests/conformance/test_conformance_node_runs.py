"""NodeRuns: a changing per-node check run on every node at once, each through its own guard.

Plain objects stand in for the nodes and the guards (no sockets): what is tested is the
threading, the hand-over of outcomes and evidence, the cases run in turn, and the stop. The
suite's config checks use it against the emulator in the fault matrix (``try-no-revert``,
``try-not-cancelled``, ``lenient-validation``, ``dry-run-applies`` ...) and under a real
SIGTERM in ``tests/plugin/test_interruptions_node_runs.py``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from conformance._support.node_runs import NodeRun, NodeRuns
from pytest_talos.errors import ConformanceFailure, WaitCancelled
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode


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


CHECK = "config.try-mode-reverts"  # the check id the runs hand to every per-node run


def _nodes(*names: str) -> list[TalosNode]:
    return [cast(TalosNode, FakeNode(name)) for name in names]


def test_every_node_is_checked_at_once_through_its_own_guard() -> None:
    nodes = _nodes("a", "b", "c")
    together = threading.Barrier(len(nodes), timeout=30)  # breaks if run one after another
    guards = Guards()

    def check(node: TalosNode, run: NodeRun) -> str:
        together.wait()
        run.evidence["seen"] = node.name
        return f"{node.name} via {cast(FakeNode, node).guard}"

    lines: list[str] = []
    runs = NodeRuns(nodes, check, guards, check_id=CHECK, label="the check", announce=lines.append)
    assert not runs.started
    evidence: list[dict[str, Any]] = [{}, {}, {}]
    results = [runs.outcome(node, found) for node, found in zip(nodes, evidence, strict=True)]
    assert results == [f"{n} via guard:the check[{n}]" for n in "abc"]
    assert evidence == [{"seen": n} for n in "abc"]
    assert lines == ["conformance: the check on 3 nodes at once"]
    assert sorted(guards.entered) == sorted(guards.left) == [f"the check[{n}]" for n in "abc"]
    assert runs.close(5) == []


def test_a_nodes_failure_reaches_its_own_test_only_with_its_evidence() -> None:
    nodes = _nodes("good", "bad")

    def check(node: TalosNode, run: NodeRun) -> str:
        run.evidence["looked at"] = node.name
        if node.name == "bad":
            raise ConformanceFailure("x.check", "it broke", node=node.name)
        return "fine"

    runs = NodeRuns(nodes, check, Guards(), check_id=CHECK, label="the check")
    evidence: dict[str, Any] = {}
    with pytest.raises(ConformanceFailure, match="it broke"):
        runs.outcome(nodes[1], evidence)
    assert evidence == {"looked at": "bad"}  # kept although the check failed
    assert runs.outcome(nodes[0], {}) == "fine"


def test_the_cases_of_one_node_run_in_turn_each_through_a_fresh_guard() -> None:
    nodes = _nodes("a", "b")
    busy: dict[str, int] = {"a": 0, "b": 0}
    overlap: list[str] = []
    lock = threading.Lock()

    def check(node: TalosNode, run: NodeRun) -> str:
        with lock:
            busy[node.name] += 1
            if busy[node.name] > 1:
                overlap.append(f"{node.name}/{run.case}")
        threading.Event().wait(0.02)
        with lock:
            busy[node.name] -= 1
        return f"{node.name}/{run.case}"

    guards = Guards()
    runs = NodeRuns(nodes, check, guards, check_id=CHECK, label="c", cases=("env", "files"))
    got = [runs.outcome(node, {}, case) for node in nodes for case in ("env", "files")]
    assert got == ["a/env", "a/files", "b/env", "b/files"]
    assert overlap == []  # never two changes on one node at once
    assert sorted(guards.entered) == ["c[a-env]", "c[a-files]", "c[b-env]", "c[b-files]"]


def test_a_node_outside_the_set_or_asked_again_runs_on_the_tests_own_node() -> None:
    inside, outside = _nodes("in", "out")
    calls: list[tuple[str, object, bool]] = []

    def check(node: TalosNode, run: NodeRun) -> str:
        calls.append((node.name, cast(FakeNode, node).guard, run.cancelled()))
        run.evidence["ran"] = True
        return node.name

    guards = Guards()
    runs = NodeRuns([inside], check, guards, check_id=CHECK, label="c")
    evidence: dict[str, Any] = {}
    assert runs.outcome(outside, evidence) == "out"  # not in the set: run here
    assert evidence == {"ran": True}  # straight into the test's evidence
    assert not runs.started
    assert runs.outcome(inside, {}) == "in"
    assert runs.outcome(inside, {}) == "in"  # a second time: run here again
    assert calls == [("out", None, False), ("in", "guard:c[in]", False), ("in", None, False)]
    assert guards.entered == ["c[in]"]


def test_close_stops_the_checks_still_running_and_their_guards_restore() -> None:
    nodes = _nodes("slow", "quick")
    started = threading.Barrier(len(nodes) + 1, timeout=30)

    def check(node: TalosNode, run: NodeRun) -> str:
        started.wait()
        if node.name == "quick":
            return "done"
        event = threading.Event()
        while not run.cancelled():
            event.wait(0.01)
        raise WaitCancelled("stopped", node=node.name)

    guards = Guards()
    lines: list[str] = []
    runs = NodeRuns(nodes, check, guards, check_id=CHECK, label="the check", announce=lines.append)
    outcome: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: outcome.update(quick=runs.outcome(nodes[1], {})))
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
        runs.outcome(nodes[0], {})  # what stopped it, for a test that asks later


def test_a_stop_between_cases_leaves_the_later_cases_unstarted() -> None:
    nodes = _nodes("a")
    first_done = threading.Event()
    runs: NodeRuns[str]

    def check(node: TalosNode, run: NodeRun) -> str:
        if run.case == "one":
            runs._stop.set()  # the run stops while the first case ends
            first_done.set()
        return run.case

    guards = Guards()
    runs = NodeRuns(nodes, check, guards, check_id=CHECK, label="c", cases=("one", "two"))
    assert runs.outcome(nodes[0], {}, "one") == "one"
    with pytest.raises(WaitCancelled, match="c: the run is stopping"):
        runs.outcome(nodes[0], {}, "two")
    assert guards.entered == ["c[a-one]"]


def test_after_close_nothing_starts() -> None:
    nodes = _nodes("a")
    guards = Guards()
    runs = NodeRuns(nodes, lambda node, run: "ran", guards, check_id=CHECK, label="c")
    assert runs.close(1) == []
    with pytest.raises(WaitCancelled, match="c was not started: the run is stopping"):
        runs.outcome(nodes[0], {})
    assert guards.entered == []


def test_every_run_carries_the_check_id_in_threads_and_in_the_test() -> None:
    nodes = _nodes("a", "b")
    runs = NodeRuns(nodes, lambda node, run: run.check_id, Guards(), check_id=CHECK, label="c")
    assert [runs.outcome(node, {}) for node in nodes] == [CHECK, CHECK]
    # a node outside the set runs its check in its test, with the same id
    assert runs.outcome(cast(TalosNode, FakeNode("x")), {}) == CHECK
