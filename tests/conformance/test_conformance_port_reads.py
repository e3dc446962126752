"""The port check's fan-out: an observation is served only while nothing changed since it
began and it is young enough; otherwise the node's test observes its node itself."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import cast

import pytest

from conformance._support.fanout import changes_made
from conformance.immutability.port_reads import PortRead, port_fanout
from pytest_talos.checks import PortObservation
from pytest_talos.client import ChangeGate
from pytest_talos.errors import ChangeNotAllowed
from pytest_talos.node import TalosNode


@dataclass(frozen=True)
class _Node:
    address: str

    @property
    def host(self) -> str:
        return self.address


@dataclass
class _Observer:
    """A read that records each node it observes; ``hold`` keeps a node's read open until
    released (to make a change while it runs)."""

    hold: dict[str, threading.Event] = field(default_factory=dict)
    began: threading.Event = field(default_factory=threading.Event)  # a held read began
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, node: TalosNode, gate: ChangeGate | None) -> PortRead:
        changes = changes_made(gate)  # as read_ports: the count when the read begins
        with self.lock:
            self.calls.append(node.address)
            count = self.calls.count(node.address)
        if node.address in self.hold:
            self.began.set()
            assert self.hold[node.address].wait(10)
        observation = PortObservation(node.host, (), (), (), (), (f"read #{count}",))
        return PortRead(changes, (), None, observation)


def _nodes(count: int) -> list[TalosNode]:
    return [cast(TalosNode, _Node(f"10.0.0.{i}")) for i in range(1, count + 1)]


def _which(read: PortRead) -> str:
    return read.observation.addresses[0]


def test_without_changes_every_test_gets_the_fan_outs_observation() -> None:
    nodes, gate, observer = _nodes(4), ChangeGate(), _Observer()
    fan = port_fanout(nodes, gate, read=observer)

    assert [_which(fan.get(node)) for node in nodes] == ["read #1"] * 4
    assert sorted(observer.calls) == sorted(n.address for n in nodes)  # once per node
    assert fan.rounds == 1


def test_a_change_after_the_fan_out_makes_the_later_tests_observe_again() -> None:
    nodes, gate, observer = _nodes(3), ChangeGate(), _Observer()
    fan = port_fanout(nodes, gate, read=observer)

    assert _which(fan.get(nodes[0])) == "read #1"
    gate.check("/machine.MachineService/ServiceRestart", None, "10.0.0.1")  # let through
    assert _which(fan.get(nodes[1])) == "read #2"
    assert _which(fan.get(nodes[2])) == "read #2"
    assert observer.calls.count("10.0.0.1") == 1


def test_a_change_while_the_observation_ran_refuses_it() -> None:
    nodes, gate = _nodes(2), ChangeGate()
    observer = _Observer(hold={"10.0.0.2": threading.Event()})
    fan = port_fanout(nodes, gate, read=observer)

    assert _which(fan.get(nodes[0])) == "read #1"
    assert observer.began.wait(10)  # node 2's read has begun, and is still running
    gate.note_change()  # say, a test marked talos_mutating started meanwhile
    observer.hold["10.0.0.2"].set()
    assert _which(fan.get(nodes[1])) == "read #2"


def test_an_old_observation_is_not_used() -> None:
    nodes, gate, observer = _nodes(2), ChangeGate(), _Observer()
    fan = port_fanout(nodes, gate, read=observer, max_age=0.05)

    assert _which(fan.get(nodes[0])) == "read #1"
    time.sleep(0.2)  # node 2's observation is now too old
    assert _which(fan.get(nodes[1])) == "read #2"


def test_the_gate_counts_changes_let_through_and_announced_only() -> None:
    gate = ChangeGate("mutating")
    gate.check("/machine.MachineService/Version", None, "n")  # reads: not a change
    assert gate.changes == 0
    gate.check("/machine.MachineService/ServiceRestart", None, "n")
    assert gate.changes == 1
    with pytest.raises(ChangeNotAllowed):
        gate.check("/machine.MachineService/Reboot", None, "n")  # refused: nothing changed
    assert gate.changes == 1
    gate.note_change()
    assert gate.changes == 2
    assert changes_made(None) == 0  # a library client without a gate
