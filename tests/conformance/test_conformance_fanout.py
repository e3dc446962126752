"""FanOut: every node read at once, each result served once while fresh, else read again."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from conformance._support.fanout import FanOut, checked_fanout, gated_fanout, run_checked
from pytest_talos.client import ChangeGate
from pytest_talos.errors import ConformanceFailure
from pytest_talos.node import ReadOnlyGuard, TalosNode


@dataclass(frozen=True)
class _Node:
    address: str


@dataclass
class _Reads:
    """A read function that records which node it read, on which thread, and when."""

    delay: float = 0.0
    fail: frozenset[str] = frozenset()
    calls: list[str] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, node: Any) -> str:
        with self.lock:
            self.calls.append(node.address)
            self.threads.add(threading.current_thread().name)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            if node.address in self.fail:
                raise RuntimeError(f"{node.address} did not answer")
            return f"read {node.address} #{self.calls.count(node.address)}"
        finally:
            with self.lock:
                self.in_flight -= 1


def _nodes(count: int) -> list[TalosNode]:
    return [cast(TalosNode, _Node(f"10.0.0.{i}")) for i in range(1, count + 1)]


def test_every_node_is_read_at_once_and_each_test_gets_its_own_result() -> None:
    nodes = _nodes(5)
    reads = _Reads(delay=0.2)
    fan = FanOut(nodes, reads, max_age=60.0)

    results = [fan.get(node) for node in nodes]

    assert results == [f"read {n.address} #1" for n in nodes]
    assert sorted(reads.calls) == sorted(n.address for n in nodes)  # one read per node
    assert reads.most_in_flight == 5  # all at once, not one after another
    assert all(name.startswith("talos-fanout") for name in reads.threads)
    assert fan.rounds == 1


def test_readers_are_bounded() -> None:
    nodes = _nodes(6)
    reads = _Reads(delay=0.1)
    fan = FanOut(nodes, reads, max_age=60.0, readers=2)

    for node in nodes:
        fan.get(node)

    assert reads.most_in_flight == 2
    assert len(reads.calls) == 6


def test_a_stale_result_is_read_again_with_the_nodes_not_yet_served() -> None:
    nodes = _nodes(3)
    reads = _Reads()
    fan = FanOut(nodes, reads, max_age=0.05)

    assert fan.get(nodes[0]) == "read 10.0.0.1 #1"
    time.sleep(0.2)  # the other two results are now too old to use
    assert fan.get(nodes[1]) == "read 10.0.0.2 #2"
    assert fan.get(nodes[2]) == "read 10.0.0.3 #2"

    assert fan.rounds == 2
    assert reads.calls.count("10.0.0.1") == 1  # a served node is not read again


def test_after_a_stale_round_only_as_many_nodes_as_were_used_in_time_are_read() -> None:
    nodes = _nodes(8)
    reads = _Reads()
    fan = FanOut(nodes, reads, max_age=0.1)

    for node in nodes[:2]:  # two tests in time: their results are used
        assert fan.get(node).endswith("#1")
    time.sleep(0.2)  # the tests slowed down: the six other results went stale unused
    assert fan.get(nodes[2]) == "read 10.0.0.3 #2"
    # the new round read three nodes (two used in time, one more), from the one asked for
    assert fan.round_sizes == [8, 3]
    for node in nodes[3:5]:  # served from that round, in time
        assert fan.get(node).endswith("#2")
    assert sorted(reads.calls[8:]) == ["10.0.0.3", "10.0.0.4", "10.0.0.5"]
    time.sleep(0.2)
    assert fan.get(nodes[5]) == "read 10.0.0.6 #2"
    assert fan.round_sizes == [8, 3, 3]  # three used in time: up to four, three are left
    assert [fan.get(node) for node in nodes[6:]] == ["read 10.0.0.7 #2", "read 10.0.0.8 #2"]
    assert fan.rounds == 3


def test_a_result_is_served_once_then_read_afresh() -> None:
    nodes = _nodes(2)
    reads = _Reads()
    fan = FanOut(nodes, reads, max_age=60.0)

    assert fan.get(nodes[0]) == "read 10.0.0.1 #1"
    assert fan.get(nodes[0]) == "read 10.0.0.1 #2"


def test_an_unusable_result_makes_the_test_read_its_node_itself() -> None:
    nodes = _nodes(2)
    reads = _Reads()
    fan = FanOut(nodes, reads, max_age=60.0, usable=lambda value: not value.endswith("#1"))

    assert fan.get(nodes[1]) == "read 10.0.0.2 #2"


def test_a_node_outside_the_set_is_read_on_its_own() -> None:
    reads = _Reads()
    fan = FanOut(_nodes(2), reads, max_age=60.0)

    assert fan.get(cast(TalosNode, _Node("10.9.9.9"))) == "read 10.9.9.9 #1"
    assert fan.rounds == 0


def test_a_node_that_failed_raises_for_its_test_only() -> None:
    nodes = _nodes(2)
    fan = FanOut(nodes, _Reads(fail=frozenset({"10.0.0.1"})), max_age=60.0)

    with pytest.raises(RuntimeError, match=r"10\.0\.0\.1 did not answer"):
        fan.get(nodes[0])
    assert fan.get(nodes[1]) == "read 10.0.0.2 #1"
    assert fan.rounds == 1  # the failure did not make the others read again


# --------------------------------------------------------------------------- checks run whole


@dataclass(frozen=True)
class _GuardedNode:
    address: str
    guard: object = None

    def with_guard(self, guard: object) -> _GuardedNode:
        return _GuardedNode(self.address, guard)


def _gate(changes: int) -> ChangeGate:
    gate = ChangeGate()
    for _ in range(changes):
        gate.note_change()
    return gate


def test_a_read_only_check_runs_on_a_node_that_refuses_changes() -> None:
    seen: list[object] = []

    def check(node: Any, evidence: dict[str, Any], check_id: str) -> None:
        seen.append(node.guard)
        evidence["id"] = check_id

    read = run_checked(
        check, "api.resources-readable", _gate(3), cast(TalosNode, _GuardedNode("n"))
    )

    assert isinstance(seen[0], ReadOnlyGuard)
    assert (read.evidence, read.raised, read.changes) == ({"id": "api.resources-readable"}, None, 3)


def test_a_check_run_hands_its_test_the_evidence_then_what_it_raised() -> None:
    failure = ConformanceFailure("services.logs-readable", "some service logs cannot be read")

    def check(node: Any, evidence: dict[str, Any], check_id: str) -> None:
        evidence["log bytes (tail)"] = {"apid": 0}
        raise failure

    read = run_checked(check, "services.logs-readable", None, cast(TalosNode, _GuardedNode("n")))
    evidence: dict[str, Any] = {"node": "n"}

    with pytest.raises(ConformanceFailure) as raised:
        read.deliver(evidence)
    assert raised.value is failure
    assert evidence == {"node": "n", "log bytes (tail)": {"apid": 0}}


def test_a_check_run_keeps_a_skip_for_its_test() -> None:
    def check(node: Any, evidence: dict[str, Any], check_id: str) -> None:
        evidence["scanned"] = False
        pytest.skip("reached only through the endpoint")

    read = run_checked(
        check, "immutability.no-shell-or-ssh", None, cast(TalosNode, _GuardedNode("n"))
    )
    evidence: dict[str, Any] = {}

    with pytest.raises(pytest.skip.Exception, match="only through the endpoint"):
        read.deliver(evidence)
    assert evidence == {"scanned": False}


def test_a_check_run_begun_before_a_change_is_run_again_by_its_test() -> None:
    gate = ChangeGate()
    runs: list[str] = []

    both_began = threading.Barrier(2, timeout=10)

    def check(node: Any, evidence: dict[str, Any], check_id: str) -> None:
        runs.append(node.address)
        if len(runs) <= 2:
            both_began.wait()  # the fan-out's two runs began before the change

    nodes = [cast(TalosNode, _GuardedNode(f"10.0.0.{i}")) for i in (1, 2)]
    fan = checked_fanout(nodes, check, "x", gate)
    fan.get(nodes[0])
    gate.note_change()  # a mutating check changed a node after the fan-out began
    fan.get(nodes[1])

    assert sorted(runs) == ["10.0.0.1", "10.0.0.2", "10.0.0.2"]


def test_a_gated_read_is_served_unchanged_and_read_again_after_a_change() -> None:
    gate = ChangeGate()
    nodes = _nodes(3)
    calls: list[str] = []
    all_began = threading.Barrier(3, timeout=10)

    def read(node: Any) -> str:
        calls.append(node.address)
        if len(calls) <= 3:
            all_began.wait()  # the fan-out's three reads began before the change
        return f"read {node.address} #{calls.count(node.address)}"

    fan = gated_fanout(nodes, read, gate)

    first = fan.get(nodes[0])
    assert (first.value, first.changes) == ("read 10.0.0.1 #1", 0)
    assert fan.get(nodes[1]).value == "read 10.0.0.2 #1"  # nothing changed: the fan-out's
    gate.note_change()  # a mutating check changed a node after the fan-out's reads began
    again = fan.get(nodes[2])
    assert (again.value, again.changes) == ("read 10.0.0.3 #2", 1)  # read by its test
    assert sorted(calls) == sorted(n.address for n in [*nodes, nodes[2]])
