"""The port check's per-node reads, made for every node it checks at once.

``immutability.only-expected-ports`` reads a node's own addresses (AddressStatuses, CNI
links left out), then observes it (:func:`~pytest_talos.checks.observe_ports`: Netstat, a
full TCP scan of each address, Netstat again). Against real nodes the scans wait on the
network, so the first node's test observes every node the check will run on, two at a
time (:class:`~conformance._support.fanout.FanOut`), and each later test judges its node's
observation. An observation is used only if nothing was changed since it began (the change
gate's count of changes, :attr:`~pytest_talos.client.ChangeGate.changes`, is the same) and
it is at most :data:`FANOUT_MAX_AGE` real seconds old; otherwise the test observes its node
itself, as it would without the fan-out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from conformance._support.fanout import FanOut, changes_made
from conformance._support.reach import PORT_SCAN_NEEDS, DirectReach
from conformance.kubernetes.node_addresses import ADDRESSES, LINKS, host_addresses
from pytest_talos.checks import (
    PortObservation,
    expected_udp_ports_for,
    observe_listeners,
    observe_ports,
)
from pytest_talos.client import ChangeGate
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode, expected_ports_for
from pytest_talos.ports.workers import WORKERS

__all__ = [
    "FANOUT_MAX_AGE",
    "READERS",
    "PortRead",
    "expected_pod_ports",
    "expected_udp_ports",
    "pod_ports_opted_in",
    "port_fanout",
    "read_ports",
]

# Real seconds an observation stays usable when nothing was changed meanwhile: a port a
# healthy node opens or closes by itself would show in a read a minute later as well.
FANOUT_MAX_AGE = 120.0
# Nodes observed at once: against real nodes their scans' network waits overlap; on a
# loopback emulator the scans are CPU-bound (kernel time per port). Each full scan runs in
# a worker process of its own (pytest_talos.ports.workers), so as many as there are
# workers (one per CPU, two at least) use the cores without sharing this process's GIL.
READERS = max(2, WORKERS)


@dataclass(frozen=True)
class PortRead:
    """One node's read: the gate's change count when it began, the node's own addresses
    (or why they could not be read), and the observation of them."""

    changes: int
    addresses: tuple[str, ...]
    addresses_note: str | None
    observation: PortObservation
    unreached: str | None = None  # the skip reason: no direct reach, Netstat judged alone


def read_ports(
    node: TalosNode, gate: ChangeGate | None, reach: DirectReach | None = None
) -> PortRead:
    """The node's own addresses, then its observation (every call with its deadline). A
    node this machine reaches only through the endpoint (``reach``) gets Netstat read and
    no scan; its read carries the one-line reason."""
    changes = changes_made(gate)
    note = None
    try:
        # CNI links left out (their pod-CIDR addresses are not the node's); AddressStatuses
        # is readable with os:reader.
        report = host_addresses(node.resources(*ADDRESSES), node.resources(*LINKS))
        addresses: tuple[str, ...] = tuple(report.kept)
    except TalosError as exc:
        addresses = ()
        note = f"AddressStatuses unreadable ({exc}): node address only"
    unreached = None if reach is None else reach.reason(node, PORT_SCAN_NEEDS)
    if unreached is not None:
        observation = observe_listeners(node, addresses=addresses, why=unreached)
        return PortRead(changes, addresses, note, observation, unreached)
    return PortRead(changes, addresses, note, observe_ports(node, addresses=addresses))


def port_fanout(
    nodes: Sequence[TalosNode],
    gate: ChangeGate | None,
    *,
    max_age: float = FANOUT_MAX_AGE,
    readers: int = READERS,
    read: Callable[[TalosNode, ChangeGate | None], PortRead] | None = None,
    reach: DirectReach | None = None,
) -> FanOut[PortRead]:
    """Every one of ``nodes`` read at once (``readers`` at a time); a read is served to its
    node's test only while no change was made since it began and within ``max_age``.
    ``read`` defaults to :func:`read_ports` with ``reach``."""
    reader = read or (lambda node, changes: read_ports(node, changes, reach))
    return FanOut(
        nodes,
        lambda node: reader(node, gate),
        max_age=max_age,
        usable=lambda done: done.changes == changes_made(gate),
        readers=readers,
    )


def expected_udp_ports(config: pytest.Config, node: TalosNode) -> frozenset[int]:
    """The UDP ports ``node`` may bind off loopback: what its config opens
    (:func:`~pytest_talos.checks.expected_udp_ports_for`), as the
    ``pytest_talos_expected_udp_ports`` hook implementations edit it."""
    ports = set(expected_udp_ports_for(node))
    config.hook.pytest_talos_expected_udp_ports(node=node, role=node.role, ports=ports)
    return frozenset(ports)


def pod_ports_opted_in(config: pytest.Config) -> bool:
    """Whether a plugin or conftest implements ``pytest_talos_expected_pod_ports`` (which
    turns ``immutability.pod-listeners-expected`` on)."""
    return bool(config.pluginmanager.hook.pytest_talos_expected_pod_ports.get_hookimpls())


def expected_pod_ports(config: pytest.Config, node: TalosNode) -> frozenset[int]:
    """The ports host-network pods on ``node`` may listen on: what Talos's own pods open
    (:func:`~pytest_talos.node.expected_ports_for`), as the hook implementations edit it."""
    ports = set(expected_ports_for(node))
    config.hook.pytest_talos_expected_pod_ports(node=node, role=node.role, ports=ports)
    return frozenset(ports)
