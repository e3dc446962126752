"""only-expected-ports on the shapes production clusters have (issue 21): WireGuard links
(SideroLink's random port, a user's listenPort) and metrics bound to the node's addresses
through extraArgs, against emulated nodes over real mTLS."""

from __future__ import annotations

import pytest

from pytest_talos.checks import (
    assert_only_expected_ports,
    assert_pod_listeners_expected,
    expected_udp_ports_for,
    wireguard_link_ports,
)
from pytest_talos.errors import ConformanceFailure
from pytest_talos.node import expected_ports_for
from tests.integration.checks_support import connected

TALOS_RANGE = "1-11000,49000-51000"
LINKS = ("LinkStatuses.net.talos.dev", "network")


def _udp_sockets(node: object) -> set[int]:
    listeners = node.listeners  # type: ignore[attr-defined]
    return {r.local_port for r in listeners if r.l4proto.startswith("udp") and not r.netns}


@pytest.mark.parametrize(("variant", "link"), [("siderolink", "siderolink"), ("wireguard", "wg0")])
def test_a_wireguard_links_bound_port_is_allowed(variant: str, link: str) -> None:
    with connected(variants=[variant]) as (_, cluster):
        for node in (cluster.controlplane(), cluster.worker()):
            found = dict(wireguard_link_ports(node.resources(*LINKS)))
            port = found[link]
            if variant == "wireguard":
                assert port == 51111  # the WireguardConfig's listenPort
            # the socket is there, off loopback, and the config alone does not allow it
            assert port in _udp_sockets(node)
            assert port not in expected_udp_ports_for(node)
            result = assert_only_expected_ports(node, port_spec=TALOS_RANGE)
            assert f"{link} UDP {port}" in result.evidence["WireGuard links (LinkStatuses)"]


def test_siderolink_ports_differ_per_node_and_its_address_is_not_routed() -> None:
    with connected(variants=["siderolink"]) as (_, cluster):
        nodes = (cluster.controlplane(), cluster.worker())
        ports = {dict(wireguard_link_ports(n.resources(*LINKS)))["siderolink"] for n in nodes}
        assert len(ports) == 2  # the kernel picked each one
        node = nodes[0]
        addresses = {
            r.spec["address"]
            for r in node.resources("AddressStatuses.net.talos.dev", "network")
            if r.spec.get("linkName") == "siderolink"
        }
        assert len(addresses) == 1
        assert next(iter(addresses)).startswith("fdae:41e4:649b:9303:")
        routed = node.resources("NodeAddresses.net.talos.dev", "network")
        by_id = {r.id: r.spec.get("addresses") or [] for r in routed}
        assert next(iter(addresses)) in by_id["current"]
        assert next(iter(addresses)) not in by_id["routed"]  # NotSideroLinkIP


def test_a_wireguard_looking_socket_no_link_owns_fails() -> None:
    with connected(["stray-wireguard-socket"], variants=["siderolink"]) as (_, cluster):
        node = cluster.worker()
        with pytest.raises(ConformanceFailure) as failure:
            assert_only_expected_ports(node, port_spec=TALOS_RANGE)
        text = str(failure.value)
        assert "unexpected UDP listener: 47305 on 0.0.0.0" in text
        assert "WireGuard links (LinkStatuses): siderolink UDP" in text


def test_metrics_exposed_through_extra_args_are_expected() -> None:
    with connected(variants=["metrics-exposed"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        assert {2381, 10257, 10259} <= expected_ports_for(node)
        result = assert_only_expected_ports(node, port_spec="1-11000,49000-51000")
        assert {2381, 10257, 10259} <= set(result.evidence["open"])


def test_the_cilium_pods_listeners_are_listed_not_judged() -> None:
    with connected(variants=["cilium"]) as (_, cluster):
        node = cluster.worker()
        result = assert_only_expected_ports(node, port_spec=TALOS_RANGE)
        listed = result.evidence["host-network pod listeners (not judged here)"]
        assert "tcp6 :::4244 pod sandbox" in listed
        assert "process cilium-agent" in listed
        assert "process cilium-health-r" in listed  # comm is cut at 15 characters
        assert {4240, 4244} <= set(result.evidence["open"])
        with pytest.raises(ConformanceFailure, match="outside its allowlist: 4244"):
            assert_pod_listeners_expected(node, expected_ports_for(node) | {4240})
        assert_pod_listeners_expected(node, expected_ports_for(node) | {4240, 4244})


def test_a_host_process_beside_the_cni_fails() -> None:
    with connected(["host-listener-beside-cni"], variants=["cilium"]) as (_, cluster):
        with pytest.raises(ConformanceFailure) as failure:
            assert_only_expected_ports(cluster.worker(), port_spec=TALOS_RANGE)
        text = str(failure.value)
        assert "unexpected open TCP port: 4245" in text
        assert "4240" not in text.split("\n", 1)[0]  # the pod's own stay out of the verdict
