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
