"""Node addresses, names and discovery checks: true on every healthy variant, failing on
their faults, and the address rules of ``kubernetes.cidrs-clear-of-nodes`` one by one.

The suite runs (kubernetes, cluster and the resources check) in a subprocess against the
emulator, as a user runs it; the address rules are tested on resource data directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.cluster.discovery import short_name
from conformance.kubernetes.node_addresses import AddressBook, host_addresses
from tests.conformance.suite_runner import MATRIX_ARGS, SUITE, run_suite

PATHS = [
    str(SUITE / "kubernetes"),
    str(SUITE / "cluster"),
    str(SUITE / "api" / "test_api.py") + "::test_core_resources_are_readable",
]
CIDRS = "kubernetes.cidrs-clear-of-nodes"
MEMBERS = "cluster.members-consistent"
ETCD = "cluster.etcd-members-are-control-planes"
RESOURCES = "api.resources-readable"


# ---- the address rules --------------------------------------------------------------------


@dataclass
class _Res:
    id: str
    spec: dict[str, Any]


def _link(
    name: str,
    index: int,
    kind: str = "",
    *,
    master: int = 0,
    type_: str = "ether",
    state: str = "up",
    carrier: bool = True,
) -> _Res:
    spec: dict[str, Any] = {
        "index": index,
        "type": type_,
        "kind": kind,
        "operationalState": state,
        "linkState": carrier,
    }
    if master:
        spec["masterIndex"] = master
    return _Res(name, spec)


def _addr(link: str, prefix: str, scope: str = "global") -> _Res:
    return _Res(f"{link}/{prefix}", {"address": prefix, "linkName": link, "scope": scope})


def _kept(addresses: list[_Res], links: list[_Res]) -> list[str]:
    return list(host_addresses(addresses, links).kept)


FLANNEL_LINKS = [
    _link("lo", 1, type_="loopback", state="unknown", carrier=False),
    _link("eth0", 2, "veth"),  # a Docker container's eth0 is the container end of a veth
    _link("flannel.1", 3, "vxlan", state="unknown"),
    _link("cni0", 4, "bridge"),
    _link("veth1234abcd", 5, "veth", master=4),
]
FLANNEL_ADDRESSES = [
    _addr("lo", "127.0.0.1/8", "host"),
    _addr("lo", "169.254.116.108/32", "host"),
    _addr("eth0", "10.5.0.2/24"),
    _addr("flannel.1", "10.244.0.0/32"),
    _addr("cni0", "10.244.0.1/24"),
    _addr("cni0", "fe80::1/64", "link"),
    _addr("veth1234abcd", "fe80::2/64", "link"),
]


def test_flannel_links_are_left_out_and_docker_eth0_is_kept() -> None:
    report = host_addresses(FLANNEL_ADDRESSES, FLANNEL_LINKS)
    assert report.kept == ("10.5.0.2/24",)
    assert report.skipped["flannel.1/10.244.0.0/32"] == "CNI link"
    assert report.skipped["cni0/10.244.0.1/24"] == "CNI link"
    assert report.skipped["lo/127.0.0.1/8"] == "scope host"


@pytest.mark.parametrize(
    ("link", "kept"),
    [
        (_link("cilium_host", 3, "veth"), False),  # Cilium's router address, from the pod CIDR
        (_link("lxc12ab", 3, "veth"), False),
        (_link("vxlan.calico", 3, "vxlan"), False),
        (_link("kube-ipvs0", 3, "dummy"), False),  # kube-proxy IPVS service addresses
        (_link("overlay0", 3, "vxlan"), False),  # any vxlan is an overlay
        (_link("dummy0", 3, "dummy"), False),
        (_link("podbr", 3, "bridge"), False),  # a bridge with no uplink
        (_link("veth9", 3, "veth", master=7), False),  # enslaved: a pod's end
        (_link("eth1", 3), True),  # a NIC
        (_link("bond0", 3, "bond"), True),
        (_link("eth0.100", 3, "vlan"), True),
        (_link("eth2", 3, carrier=False), False),  # a NIC without carrier is not up
        (_link("eth3", 3, state="down"), False),
    ],
)
def test_link_rules(link: _Res, kept: bool) -> None:
    address = _addr(link.id, "192.168.7.2/24")
    assert _kept([address], [link]) == (["192.168.7.2/24"] if kept else [])


def test_a_bridge_over_a_nic_carries_the_host_address() -> None:
    links = [_link("br0", 3, "bridge"), _link("eth0", 2, master=3)]
    assert _kept([_addr("br0", "10.244.1.5/24")], links) == ["10.244.1.5/24"]


def test_link_local_and_multicast_are_not_node_addresses() -> None:
    links = [_link("eth0", 2)]
    found = [_addr("eth0", "fe80::5/64"), _addr("eth0", "169.254.3.3/16")]
    assert _kept(found, links) == []


class _CountingNode:
    def __init__(self, address: str) -> None:
        self.address = address
        self.calls = 0

    def resources(self, kind: str, namespace: str | None = None) -> list[_Res]:
        self.calls += 1
        return FLANNEL_ADDRESSES if kind.startswith("AddressStatuses") else FLANNEL_LINKS


def test_each_node_is_read_once_per_run() -> None:
    book = AddressBook()
    nodes = [_CountingNode(f"10.5.0.{i}") for i in range(2, 7)]
    for _ in nodes:  # every per-node check asks for every node
        for node in nodes:
            book.of(node)  # type: ignore[arg-type]
    assert [node.calls for node in nodes] == [2] * len(nodes)  # addresses + links, once


def test_short_names() -> None:
    assert short_name("cp-1.cluster.example") == "cp-1"
    assert short_name("CP-1") == "cp-1"


# ---- the suite on the emulator ------------------------------------------------------------


def _run(tmp_path: Path, *args: str) -> dict[str, set[str]]:
    run = run_suite(
        ["--talos-emulator", "--talos-allow", "disruptive", *MATRIX_ARGS, *args],
        tmp_path / "report",
        paths=PATHS,
    )
    assert run.results is not None, run.describe()
    return {
        **run.outcomes(),
        "_skips": {c["message"] for c in run.checks if c["outcome"] == "skipped"},
    }


def _variants(*names: str) -> list[str]:
    return [arg for name in names for arg in ("--talos-emulator-variant", name)]


@pytest.mark.parametrize(
    "variants",
    [(), ("domain",), ("metal",), ("metal", "domain", "discovery-disabled")],
    ids=lambda v: "+".join(v) or "default",
)
def test_healthy_clusters_pass(tmp_path: Path, variants: tuple[str, ...]) -> None:
    outcomes = _run(tmp_path, *_variants(*variants))
    for check in (CIDRS, ETCD, RESOURCES):
        assert outcomes[check] == {"passed"}, outcomes
    expected = {"skipped"} if "discovery-disabled" in variants else {"passed"}
    assert outcomes[MEMBERS] == expected, outcomes


@pytest.mark.parametrize(
    ("variant", "reason"),
    [
        ("discovery-disabled", "discovery is disabled"),
        ("discovery-unreachable", "discovery unreachable"),
    ],
)
def test_discovery_off_or_unreachable_skips_with_the_reason(
    tmp_path: Path, variant: str, reason: str
) -> None:
    outcomes = _run(tmp_path, *_variants(variant))
    assert outcomes[MEMBERS] == {"skipped"}, outcomes
    assert any(message.startswith(reason) for message in outcomes["_skips"]), outcomes
    for check in (CIDRS, ETCD, RESOURCES):
        assert outcomes[check] == {"passed"}, outcomes


@pytest.mark.parametrize(
    ("args", "broken"),
    [
        (("--talos-emulator-fault", "cidr-overlap"), CIDRS),
        (("--talos-emulator-fault", "member-hidden"), MEMBERS),
        (("--talos-emulator-fault", "member-hidden", *_variants("domain")), MEMBERS),
        (("--talos-emulator-fault", "etcd-member-missing"), ETCD),
        (("--talos-emulator-fault", "etcd-member-missing", *_variants("discovery-disabled")), ETCD),
        (
            ("--talos-emulator-fault", "etcd-member-missing", *_variants("discovery-unreachable")),
            ETCD,
        ),
        (("--talos-emulator-fault", "cidr-overlap", *_variants("metal")), CIDRS),
    ],
    ids=[
        "cidr-overlap",
        "member-hidden",
        "member-hidden+domain",
        "etcd-member-missing",
        "etcd-member-missing+discovery-disabled",
        "etcd-member-missing+discovery-unreachable",
        "cidr-overlap+metal",
    ],
)
def test_faults_are_caught(tmp_path: Path, args: tuple[str, ...], broken: str) -> None:
    outcomes = _run(tmp_path, *args)
    assert outcomes[broken] == {"failed"}, outcomes


def test_a_discovered_control_plane_gone_from_etcd_is_no_fault_of_the_targets(
    tmp_path: Path,
) -> None:
    # Two control planes; etcd lacks the second (etcd-member-missing), and the run targets
    # only the first. The second is still in Members (discovery keeps a vanished node 30
    # minutes), so it may be missing from etcd: Talos's own check asks only that the members
    # are control planes (pkg/cluster/check/etcd.go). The target itself must be a member.
    args = ["--talos-emulator=2:0", "--talos-emulator-fault", "etcd-member-missing"]
    run = run_suite(
        [*args, *MATRIX_ARGS, "--talos-nodes", "talos-default-controlplane-1"],
        tmp_path / "one",
        paths=[str(SUITE / "cluster" / "test_cluster.py")],
    )
    assert run.outcomes()[ETCD] == {"passed"}, run.describe()
    both = run_suite([*args, *MATRIX_ARGS], tmp_path / "both", paths=[str(SUITE / "cluster")])
    assert both.outcomes()[ETCD] == {"failed"}, both.describe()


def test_a_run_that_targets_only_a_worker_reaches_kubernetes_through_the_endpoint(
    tmp_path: Path,
) -> None:
    """Kubeconfig and GenerateClientConfiguration are served by a control plane: with none
    among the targets they go to the endpoint (a control plane, as a talosconfig's endpoints
    are). Before, the kubeconfig failed and the early Ready watch's setup error failed the
    run's first check, api.version-answers, on a healthy cluster."""
    run = run_suite(
        ["--talos-emulator", *MATRIX_ARGS, "--talos-nodes", "talos-default-worker-1"],
        tmp_path / "worker",
        paths=[str(SUITE / "api" / "test_api.py"), str(SUITE / "kubernetes")],
    )
    outcomes = run.outcomes()
    assert outcomes["api.version-answers"] == {"passed"}, run.describe()
    assert outcomes["kubernetes.node-ready"] == {"passed"}, run.describe()
    assert outcomes["api.reader-cannot-read-secrets"] == {"passed"}, run.describe()
    assert "error" not in {o for found in outcomes.values() for o in found}, run.describe()
