"""The port faults: the node's Netstat and its real sockets disagree, or a UDP socket appears.

hidden-listener (10250 answers, Netstat omits it), netstat-ghost (Netstat shows :::9100,
nothing answers), udp-listener (UDP 0.0.0.0:69 in Netstat).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator import EmulatedCluster

from .conftest import RawClient

M = "/machine.MachineService/"


def _netstat(client: RawClient, address: str) -> set[tuple[str, str, int]]:
    request = m.NetstatRequest(
        filter=m.NetstatRequest.LISTENING,
        l4proto=m.NetstatRequest.L4proto(tcp=True, tcp6=True, udp=True, udp6=True),
        netns=m.NetstatRequest.NetNS(hostnetwork=True),
    )
    records = client.call(address, M + "Netstat", request).messages[0].connectrecord
    return {(r.l4proto, r.localip, r.localport) for r in records}


def _answers(address: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((address, port)) == 0


@pytest.fixture
def node(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> Callable[..., tuple[RawClient, str]]:
    def make(*faults: str) -> tuple[RawClient, str]:
        cluster = make_cluster(faults=list(faults), workers=0)
        return client_for(cluster), cluster.nodes[-1].address

    return make


def test_healthy_node_netstat_matches_its_sockets(
    node: Callable[..., tuple[RawClient, str]],
) -> None:
    client, address = node()
    listed = _netstat(client, address)
    assert ("tcp6", "::", 10250) in listed
    assert ("udp", "0.0.0.0", 4789) in listed  # Flannel's VXLAN
    assert _answers(address, 10250)
    assert not {port for _, _, port in listed} & {69, 9100}


def test_hidden_listener(node: Callable[..., tuple[RawClient, str]]) -> None:
    client, address = node("hidden-listener")
    assert 10250 not in {port for proto, _, port in _netstat(client, address) if "tcp" in proto}
    assert _answers(address, 10250)


def test_netstat_ghost(node: Callable[..., tuple[RawClient, str]]) -> None:
    client, address = node("netstat-ghost")
    assert ("tcp6", "::", 9100) in _netstat(client, address)
    assert not _answers(address, 9100)


def test_udp_listener(node: Callable[..., tuple[RawClient, str]]) -> None:
    client, address = node("udp-listener")
    assert ("udp", "0.0.0.0", 69) in _netstat(client, address)
