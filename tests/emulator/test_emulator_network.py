"""Node addresses, links, names and discovery as a Talos v1.13.9 node has them.

controllers/network/node_address.go (NodeAddresses), controllers/k8s/address_filter.go (the
-no-k8s / -only-k8s filters), resources/network/{link,address}_status.go,
controllers/cluster/{member,local_affiliate}.go (Members), resources/k8s/nodename.go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from google.protobuf import empty_pb2

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.resource.definitions.enums import enums_pb2
from pytest_talos._proto.resource.definitions.network import network_pb2
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.node.net.network import (
    Address,
    Link,
    cni_links,
    host_links,
    node_addresses,
)
from pytest_talos.emulator.node.state import NodeState
from tests.emulator.conftest import RawClient

M = "/machine.MachineService/"
C = "/cosi.resource.State/"
K8S = ["10.244.0.0/16", "10.96.0.0/12"]


# ---- the model ----------------------------------------------------------------------------


def test_container_eth0_is_a_veth_and_metal_eth0_a_nic() -> None:
    container = {
        i.name: i
        for i in host_links(address="10.5.0.2", prefix_length=24, platform="container")
        if isinstance(i, Link)
    }
    metal = {
        i.name: i
        for i in host_links(address="10.5.0.2", prefix_length=24, platform="metal")
        if isinstance(i, Link)
    }
    assert container["eth0"].spec()["kind"] == "veth"  # Docker: the container end of a pair
    assert container["eth0"].spec()["hardwareAddr"] == "02:42:0a:05:00:02"
    assert metal["eth0"].spec()["kind"] == ""
    assert metal["eth0"].physical
    assert container["lo"].spec()["type"] == "loopback"


def test_current_holds_the_cni_addresses_and_no_k8s_drops_them() -> None:
    host = host_links(address="10.5.0.2", prefix_length=24, platform="container")
    before = node_addresses(host, k8s_subnets=K8S)
    cni = cni_links(pod_block="10.244.1.0/24", pods=1, seed="x")
    after = node_addresses([*host, *cni], k8s_subnets=[*K8S, "10.244.1.0/24"], previous=before)
    assert before.get("current") == ("10.5.0.2/24",)
    assert after.get("current") == ("10.5.0.2/24", "10.244.1.0/32", "10.244.1.1/24")
    assert after.get("routed") == after.get("current")
    assert after.get("default") == ("10.5.0.2/24",)  # set before the CNI ran, and kept
    for base in ("current", "routed", "accumulative"):
        assert after.get(f"{base}-no-k8s") == ("10.5.0.2/24",)
        assert after.get(f"{base}-only-k8s") == ("10.244.1.0/32", "10.244.1.1/24")
    assert set(after.by_id) == {
        "default",
        "current",
        "routed",
        "accumulative",
        *(
            f"{b}-{f}"
            for b in ("current", "routed", "accumulative")
            for f in ("no-k8s", "only-k8s")
        ),
    }


def test_loopback_link_local_and_host_scope_are_never_node_addresses() -> None:
    items = [
        *host_links(address="10.5.0.2", prefix_length=24, platform="metal"),
        *cni_links(pod_block="10.244.1.0/24", pods=2, seed="x"),
    ]
    found = node_addresses(items, k8s_subnets=K8S).get("accumulative")
    assert not any(a.startswith(("127.", "::1", "fe80", "169.254")) for a in found)


def test_address_ids_and_specs() -> None:
    items = host_links(address="10.5.0.2", prefix_length=24, platform="container")
    by_id = {i.id: i.spec() for i in items if isinstance(i, Address)}
    assert by_id["eth0/10.5.0.2/24"] == {
        "address": "10.5.0.2/24",
        "local": "10.5.0.2",
        "broadcast": "10.5.0.255",
        "linkIndex": 2,
        "linkName": "eth0",
        "family": "inet4",
        "scope": "global",
        "flags": "permanent",
        "priority": 0,
    }
    assert by_id["lo/127.0.0.1/8"]["scope"] == "host"
    assert "lo/169.254.116.108/32" in by_id  # hostdns_config.go puts it on lo


def test_cni_links_flannel_bridge_and_pod_veths() -> None:
    items = cni_links(pod_block="10.244.3.0/24", pods=2, seed="x", first_index=3)
    links = {i.name: i for i in items if isinstance(i, Link)}
    addresses = {i.id for i in items if isinstance(i, Address)}
    assert links["flannel.1"].kind == "vxlan"
    assert links["cni0"].kind == "bridge"
    veths = [link for link in links.values() if link.kind == "veth"]
    assert len(veths) == 2
    assert all(v.master_index == links["cni0"].index and v.slave_kind == "bridge" for v in veths)
    assert {"flannel.1/10.244.3.0/32", "cni0/10.244.3.1/24"} <= addresses
    first = cni_links(pod_block="10.244.3.0/24", pods=0, seed="x")[0]
    assert isinstance(first, Link)
    assert first.name == "flannel.1"
    assert not any(
        getattr(i, "name", "") == "cni0"
        for i in cni_links(pod_block="10.244.3.0/24", pods=0, seed="x")
    )


# ---- the emulated cluster -----------------------------------------------------------------


def _wait_for_cni(cluster: EmulatedCluster) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(
            cluster.node(n.hostname).run(lambda s: bool(s.network and s.network.cni_up))
            for n in cluster.nodes
        ):
            return
        time.sleep(0.05)
    raise AssertionError("flannel never came up")


def _specs(cluster: EmulatedCluster, host: str, type_: str, ns: str) -> dict[str, Any]:
    def read(state: NodeState) -> dict[str, Any]:
        return {r.id: r.spec for r in state.store.list(ns, type_)}

    return cluster.node(host).run(read)


@pytest.fixture(scope="module")
def domain_cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 2, variants=["domain"], time_scale=20) as cluster:
        _wait_for_cni(cluster)
        yield cluster


def test_flannel_addresses_reach_current_once_kubelet_runs(
    domain_cluster: EmulatedCluster,
) -> None:
    for info in domain_cluster.nodes:
        addresses = _specs(domain_cluster, info.hostname, T.NODE_ADDRESSES, "network")
        current = addresses["current"]["addresses"]
        assert f"{info.address}/24" in current
        assert any(a.startswith("10.244.") and a.endswith(".0/32") for a in current)
        assert addresses["current-no-k8s"]["addresses"] == [f"{info.address}/24"]
        assert addresses["default"]["addresses"] == [f"{info.address}/24"]
        links = _specs(domain_cluster, info.hostname, T.LINK_STATUSES, "network")
        assert links["flannel.1"]["kind"] == "vxlan"
        # CoreDNS (2 replicas) runs on the workers: only they have the cni0 bridge
        assert ("cni0" in links) == (info.role == "worker")
        if info.role == "worker":
            assert any(a.endswith(".1/24") and a.startswith("10.244.") for a in current)


def test_members_carry_the_fqdn_under_the_short_nodename(domain_cluster: EmulatedCluster) -> None:
    first = domain_cluster.nodes[0].hostname
    members = _specs(domain_cluster, first, T.MEMBERS, "cluster")
    assert sorted(members) == sorted(n.hostname for n in domain_cluster.nodes)
    for info in domain_cluster.nodes:
        assert members[info.hostname]["hostname"] == f"{info.hostname}.cluster.example"
        assert members[info.hostname]["addresses"] == [info.address]
    status = _specs(domain_cluster, first, T.HOSTNAME_STATUSES, "network")["hostname"]
    assert status == {"hostname": first, "domainname": "cluster.example"}
    nodename = _specs(domain_cluster, first, T.NODENAMES, "k8s")["nodename"]
    assert nodename == {"nodename": first, "hostnameVersion": "1", "skipNodeRegistration": False}


def test_hostname_api_and_etcd_member_names_are_short(
    domain_cluster: EmulatedCluster, client_for: Callable[..., RawClient]
) -> None:
    client = client_for(domain_cluster)
    cp = domain_cluster.nodes[0]
    hostname = client.call(cp.address, M + "Hostname", empty_pb2.Empty())
    assert hostname.messages[0].hostname == cp.hostname
    reply = client.call(cp.address, M + "EtcdMemberList", m.EtcdMemberListRequest())
    assert [x.hostname for x in reply.messages[0].members] == [cp.hostname]


@pytest.mark.parametrize(
    ("variant", "expected"),
    [("discovery-disabled", "none"), ("discovery-unreachable", "itself")],
)
def test_discovery_off_or_unreachable(
    make_cluster: Callable[..., EmulatedCluster], variant: str, expected: str
) -> None:
    cluster = make_cluster(variants=[variant], time_scale=20)
    for info in cluster.nodes:
        members = _specs(cluster, info.hostname, T.MEMBERS, "cluster")
        assert sorted(members) == ([] if expected == "none" else [info.hostname])


def test_discovery_is_read_from_the_active_machine_config(
    make_cluster: Callable[..., EmulatedCluster],
) -> None:
    cluster = make_cluster(variants=["discovery-disabled"], time_scale=20)
    node = cluster.node(cluster.nodes[0].hostname)
    assert b"enabled: false" in node.run(lambda s: s.active_config)

    def enable_and_publish(state: NodeState) -> list[str]:
        state.active_config = state.active_config.replace(b"enabled: false", b"enabled: true")
        state.publish_members()
        return [r.id for r in state.store.list("cluster", T.MEMBERS)]

    assert sorted(node.run(enable_and_publish)) == sorted(n.hostname for n in cluster.nodes)


def test_member_hidden_fault_hides_the_first_node_from_the_last(
    make_cluster: Callable[..., EmulatedCluster],
) -> None:
    cluster = make_cluster(faults=["member-hidden"], time_scale=20)
    first, last = cluster.nodes[0].hostname, cluster.nodes[-1].hostname
    assert first not in _specs(cluster, last, T.MEMBERS, "cluster")
    assert first in _specs(cluster, first, T.MEMBERS, "cluster")


def test_link_and_address_statuses_over_cosi(
    domain_cluster: EmulatedCluster, client_for: Callable[..., RawClient]
) -> None:
    client = client_for(domain_cluster)
    worker = domain_cluster.nodes[-1]

    def listed(type_: str) -> dict[str, Any]:
        request = s.ListRequest(namespace="network", type=type_)
        return {
            x.resource.metadata.id: x.resource
            for x in client.call(worker.address, C + "List", request, node=worker.address)
        }

    links = listed(T.LINK_STATUSES)
    cni0 = network_pb2.LinkStatusSpec.FromString(links["cni0"].spec.proto_spec)
    assert cni0.kind == "bridge"
    assert cni0.operational_state == enums_pb2.OPER_STATE_UP
    eth0 = network_pb2.LinkStatusSpec.FromString(links["eth0"].spec.proto_spec)
    assert (eth0.type, eth0.kind, eth0.hardware_addr[:2]) == (
        enums_pb2.LINK_ETHER,
        "veth",
        b"\x02\x42",
    )
    assert yaml.safe_load(links["eth0"].spec.yaml_spec)["kind"] == "veth"
    addresses = listed(T.ADDRESS_STATUSES)
    eth0_address = network_pb2.AddressStatusSpec.FromString(
        addresses[f"eth0/{worker.address}/24"].spec.proto_spec
    )
    assert eth0_address.link_name == "eth0"
    assert eth0_address.address.prefix_length == 24
    assert eth0_address.family == enums_pb2.FAMILY_INET4
    lo = network_pb2.AddressStatusSpec.FromString(addresses["lo/127.0.0.1/8"].spec.proto_spec)
    assert lo.scope == enums_pb2.SCOPE_HOST
