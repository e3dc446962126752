"""The WireGuard part of only-expected-ports, with no node: which LinkStatuses give a bound
port (:func:`wireguard_link_ports`) and how :func:`judge_ports` treats a UDP socket on it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from pytest_talos import models, ports
from pytest_talos.checks import PortObservation, judge_ports, wireguard_link_ports
from pytest_talos.errors import ConformanceFailure
from pytest_talos.node import TalosNode


def _link(name: str, spec: dict[str, Any]) -> models.Resource:
    meta = models.ResourceMetadata(
        namespace="network", type="LinkStatuses.net.talos.dev", id=name, version=1
    )
    return models.Resource(metadata=meta, spec=spec)


def test_only_wireguard_links_with_a_bound_port_count() -> None:
    links = [
        _link("siderolink", {"kind": "wireguard", "wireguard": {"listenPort": 47304}}),
        _link("wg0", {"kind": "wireguard", "wireguard": {"listenPort": 51111}}),
        _link("eth0", {"kind": "", "wireguard": {"listenPort": 5000}}),  # not a WireGuard link
        _link("wg1", {"kind": "wireguard"}),  # the device could not be read: no port shown
        _link("wg2", {"kind": "wireguard", "wireguard": {"listenPort": 0}}),
        _link("wg3", {"kind": "wireguard", "wireguard": {"listenPort": True}}),
    ]
    assert wireguard_link_ports(links) == (("siderolink", 47304), ("wg0", 51111))


def _udp(port: int) -> models.ConnectRecord:
    return models.ConnectRecord("udp", "0.0.0.0", port, "0.0.0.0", 0, "CLOSE")


def _judge(wireguard: tuple[tuple[str, int], ...]) -> None:
    node = cast(TalosNode, SimpleNamespace(name="node-1", host="10.5.0.2"))
    scan = ports.ScanResult("10.5.0.2", (), 0.0, address="10.5.0.2")
    sockets = (_udp(47304),)
    observation = PortObservation(
        "10.5.0.2", sockets, sockets, (("10.5.0.2", scan),), (), (), wireguard
    )
    judge_ports(node, observation, frozenset({50000}), frozenset({68, 4789}), frozenset())


def test_a_udp_socket_on_a_links_bound_port_passes() -> None:
    _judge((("siderolink", 47304),))


@pytest.mark.parametrize("wireguard", [(), (("wg0", 51111),)])
def test_a_udp_socket_no_link_is_bound_to_fails(wireguard: tuple[tuple[str, int], ...]) -> None:
    with pytest.raises(ConformanceFailure, match=r"unexpected UDP listener: 47304 on 0\.0\.0\.0"):
        _judge(wireguard)


# ---- listener owners: the host's own, or a host-network pod's ----------------------------

SHIM = "/usr/bin/containerd-shim-runc-v2"


def _proc(pid: int, ppid: int, command: str, args: str = "") -> models.ProcessInfo:
    return models.ProcessInfo(pid, ppid, "S", 1, 0.0, 0, 0, command, f"/usr/bin/{command}", args)


PROCESSES = (
    _proc(1, 0, "init"),
    _proc(100, 1, "containerd-shim", f"{SHIM} -namespace k8s.io -id abc123 -address /run"),
    _proc(101, 100, "cilium-agent"),
    _proc(102, 101, "cilium-health-r"),
    _proc(200, 1, "containerd-shim", f"{SHIM} -namespace system -id kubelet -address /s"),
    _proc(201, 200, "kubelet"),
    _proc(300, 1, "cilium-agent"),  # named like the pod's, but a child of PID 1
)


def _tcp(port: int, pid: int | None, name: str = "") -> models.ConnectRecord:
    return models.ConnectRecord("tcp6", "::", port, "::", 0, "LISTEN", pid, name)


def _judge_tcp(records: tuple[models.ConnectRecord, ...], open_ports: tuple[int, ...]) -> Any:
    node = cast(TalosNode, SimpleNamespace(name="node-1", host="10.5.0.2"))
    results = tuple(ports.PortResult(p, "open") for p in open_ports)
    scan = ports.ScanResult("10.5.0.2", results, 0.0, address="10.5.0.2")
    observation = PortObservation(
        "10.5.0.2", records, records, (("10.5.0.2", scan),), (), (), (), None, PROCESSES
    )
    allow = frozenset({50000, 10250})
    return judge_ports(node, observation, allow, frozenset(), frozenset())


def test_a_host_network_pods_listeners_are_listed_not_judged() -> None:
    records = (_tcp(50000, 1), _tcp(10250, 201), _tcp(4240, 102), _tcp(4244, 101))
    result = _judge_tcp(records, (50000, 10250, 4240, 4244))
    listed = result.evidence["host-network pod listeners (not judged here)"]
    assert "tcp6 :::4244 pod sandbox abc123 process ? (pid 101)" in listed
    assert ":4240 pod sandbox abc123" in listed


@pytest.mark.parametrize(
    "records",
    [
        (_tcp(4245, 300, "cilium-agent"),),  # a host process named like the CNI's agent
        (_tcp(4245, 201, "kubelet"),),  # a system-namespace container is the host's
        (_tcp(4245, None),),  # a kernel socket: the host's
        (_tcp(4245, 101), _tcp(4245, 300)),  # a pod's and a host process's on one port
        (_tcp(4245, 9999),),  # a PID not in the process table: the host's
    ],
)
def test_a_host_listener_beside_the_pods_still_fails(
    records: tuple[models.ConnectRecord, ...],
) -> None:
    with pytest.raises(ConformanceFailure, match="4245"):
        _judge_tcp(records, (4245,))


def test_a_pods_allowed_listener_the_node_refuses_still_fails() -> None:
    """Netstat and the scan must agree on pods' listeners too (only the allowlist is theirs)."""
    node = cast(TalosNode, SimpleNamespace(name="node-1", host="10.5.0.2"))
    scan = ports.ScanResult(
        "10.5.0.2", (ports.PortResult(10250, "closed"),), 0.0, address="10.5.0.2"
    )
    records = (_tcp(10250, 101),)
    observation = PortObservation(
        "10.5.0.2",
        records,
        records,
        (("10.5.0.2", scan),),
        (),
        ("10.5.0.2",),
        (),
        None,
        PROCESSES,
    )
    with pytest.raises(ConformanceFailure, match=r"refused by the node: 10250 on 10\.5\.0\.2"):
        judge_ports(node, observation, frozenset({10250}), frozenset(), frozenset())
