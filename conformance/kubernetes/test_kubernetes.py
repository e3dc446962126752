"""Kubernetes on Talos: the admin kubeconfig comes from the Talos API, every Talos node is a
Ready Kubernetes node that stays Ready, is schedulable and under no pressure, and the
cluster CIDRs stay clear of the node addresses (a pod CIDR that covers the host network,
e.g. 10.244.0.0/16 on a 10.244.x LAN, breaks routing)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
import yaml

from conformance._support.context import Timing
from conformance._support.early import ready_targets
from conformance.kubernetes.kubeconfig_rules import kubeconfig_tls_problems
from conformance.kubernetes.node_addresses import AddressBook
from conformance.kubernetes.node_lookup import registered_node
from conformance.kubernetes.ready_watch import READY_SETTLE, ReadyWatches, ready_changes
from conformance.kubernetes.taints import (
    LIFECYCLE_TAINTS,
    TAINT_GRACE,
    Taint,
    blocking_taints,
    declared_taint_keys,
    owned_taint_keys,
    taints_of,
)
from pytest_talos import models
from pytest_talos.checks import assert_node_ready
from pytest_talos.checks.kubernetes import read_kube_node
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.errors import ConformanceFailure, PermissionDenied, TalosError, WaitTimeout
from pytest_talos.node import TalosNode, v1alpha1_document
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.wait import wait_until

# Talos defaults when the machine config names none (pkg/machinery/constants/constants.go
# DefaultIPv4PodNet, DefaultIPv4ServiceNet).
DEFAULT_POD_SUBNETS = ("10.244.0.0/16",)
DEFAULT_SERVICE_SUBNETS = ("10.96.0.0/12",)
# Conditions that must not be True: kubelet posts the pressure ones
# (kubernetes pkg/kubelet/nodestatus/setters.go), the CNI or cloud route controller
# NetworkUnavailable (flannel sets it False once it runs; a node without it is fine).
PROBLEM_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


@pytest.mark.talos_role("controlplane")
@pytest.mark.talos_check(
    "kubernetes.kubeconfig-obtainable",
    severity="high",
    claim="A control plane hands out an admin kubeconfig through the Talos API; it verifies "
    "the API server by its CA, and it works",
)
def test_kubeconfig_is_obtainable_from_control_plane(
    talos_node: TalosNode, talos_evidence: dict[str, Any], talos_check_spec: CheckSpec
) -> None:
    try:
        kubeconfig = talos_node.client.kubeconfig()
        access = KubernetesAccess(kubeconfig)
    except PermissionDenied:
        raise  # the run's credentials, not the node (see conftest)
    except TalosError as exc:
        raise ConformanceFailure(
            talos_check_spec.id,
            "no usable kubeconfig from the Talos API",
            node=talos_node.name,
            expected="a .tar.gz holding one kubeconfig file",
            observed=str(exc),
        ) from None
    document = yaml.safe_load(kubeconfig)
    insecure = kubeconfig_tls_problems(document)
    if insecure:
        access.close()
        raise ConformanceFailure(
            talos_check_spec.id,
            "the kubeconfig from the Talos API does not verify the API server",
            node=talos_node.name,
            expected="certificate-authority-data for every cluster and no "
            "insecure-skip-tls-verify (pkg/kubeconfig/generate.go)",
            observed="; ".join(insecure),
        )
    try:
        server = document["clusters"][0]["cluster"]["server"]
        names = [
            n.metadata.name
            for n in access.core_v1.list_node(_request_timeout=access.request_timeout).items
        ]
    finally:
        access.close()
    talos_evidence.update(server=server, kubernetes_nodes=sorted(names))


@pytest.fixture(scope="module")
def ready_watches(talos_ready_watches: ReadyWatches) -> ReadyWatches:
    """The run's Ready watches (conformance/_support/early.py: started with the run's first
    check when no selected check changes nodes, else by this module's first Ready check)."""
    return talos_ready_watches


@pytest.mark.talos_check(
    "kubernetes.node-ready",
    severity="critical",
    claim="Every Talos node is a Kubernetes Node reporting Ready, and Ready holds while it "
    "is watched",
)
def test_node_is_ready_in_kubernetes(
    request: pytest.FixtureRequest,
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    ready_watches: ReadyWatches,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    registration = registered_node(talos_node)
    result = assert_node_ready(talos_cluster, talos_node, timeout=talos_timing.real(READY_SETTLE))
    talos_evidence.update(result.evidence)
    window = ready_watches.window
    ready_watches.start(
        ready_targets(request.session, talos_cluster)
    )  # every node's window at once
    seen = ready_watches.result(registration.name)
    talos_evidence["ready watched"] = f"{window:g}s (node time), {len(seen)} reads"
    changes = ready_changes(seen)
    if changes:
        raise ConformanceFailure(
            talos_check_spec.id,
            f"the Kubernetes Node's Ready condition changed while it was watched ({window:g}s)",
            node=talos_node.name,
            expected="Ready=True throughout, lastTransitionTime unchanged",
            observed="; ".join(changes),
        )


@pytest.mark.talos_check(
    "kubernetes.node-conditions-clear",
    severity="high",
    claim="Every Talos node's Node is schedulable (not cordoned), reports no memory, disk "
    "or PID pressure and no unavailable network, and carries no taint that keeps pods off "
    "(not-ready, unreachable, pressure, uninitialized by the cloud) but those its config sets",
)
def test_node_is_schedulable_without_pressure(
    talos_node: TalosNode,
    talos_kubernetes: KubernetesAccess,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    check = talos_check_spec.id
    registration = registered_node(talos_node)
    kube_node = read_kube_node(talos_kubernetes, talos_node, check)
    talos_evidence.update(registration.evidence())
    problems = _condition_problems(kube_node, talos_evidence)
    declared: frozenset[str] | None = None
    blocking = blocking_taints(taints_of(kube_node), owned_taint_keys(kube_node))
    if blocking:
        declared = _declared_taint_keys(talos_node)
        talos_evidence["taints the config declares"] = sorted(declared)
        blocking = blocking_taints(blocking, declared)
    waited = ""
    if blocking and not problems:  # a taint may lag its condition: give it the grace
        kube_node, blocking = _wait_taints_clear(
            talos_kubernetes, talos_node, talos_timing, kube_node, declared or frozenset(), check
        )
        waited = f" (still there after {TAINT_GRACE:g}s of node time)"
    talos_evidence["taints"] = [str(t) for t in taints_of(kube_node)] or "none"
    problems += [f"tainted {taint}{waited}" for taint in blocking]
    if problems:
        raise ConformanceFailure(
            check,
            "the Kubernetes Node is cordoned, under pressure or tainted to keep pods off",
            node=talos_node.name,
            expected="schedulable; "
            + ", ".join(f"{k} not True" for k in PROBLEM_CONDITIONS)
            + "; no lifecycle taint ("
            + ", ".join(sorted(LIFECYCLE_TAINTS))
            + ") but those the node's machine.nodeTaints declares",
            observed="; ".join(problems),
        )


def _condition_problems(kube_node: Any, evidence: dict[str, Any]) -> list[str]:
    conditions = {
        str(c.type): (str(c.status), " ".join(filter(None, [c.reason, c.message])))
        for c in getattr(kube_node.status, "conditions", None) or []
    }
    unschedulable = bool(getattr(kube_node.spec, "unschedulable", None))
    evidence["conditions"] = {kind: status for kind, (status, _) in conditions.items()}
    evidence["unschedulable"] = unschedulable
    problems = [
        f"{kind}=True" + (f" ({why})" if why else "")
        for kind in PROBLEM_CONDITIONS
        for status, why in [conditions.get(kind, ("", ""))]
        if status == "True"
    ]
    if unschedulable:
        problems.append("cordoned (spec.unschedulable: true)")
    return problems


def _declared_taint_keys(node: TalosNode) -> frozenset[str]:
    """The taint keys the node's config sets (:func:`declared_taint_keys`); none when the
    machine config cannot be read (it needs os:admin): the owned-taints annotation then
    speaks for the config."""
    try:
        return declared_taint_keys(v1alpha1_document(node.machine_config))
    except TalosError:
        return frozenset()


def _wait_taints_clear(
    kube: KubernetesAccess,
    node: TalosNode,
    timing: Timing,
    first: Any,
    declared: frozenset[str],
    check: str,
) -> tuple[Any, list[Taint]]:
    """Re-read the Node (``first`` as read before) until its lifecycle taints are gone or
    :data:`TAINT_GRACE` node seconds have passed: the Node as last read and the taints
    still on it."""

    def blocking(kube_node: Any) -> list[Taint]:
        owned = owned_taint_keys(kube_node) | declared
        return blocking_taints(taints_of(kube_node), owned)

    try:
        kube_node = wait_until(
            lambda: read_kube_node(kube, node, check),
            lambda found: not blocking(found),
            timeout=timing.real(TAINT_GRACE),
            description=f"the lifecycle taints of {node.kubernetes_name} to clear",
            node=node.name,
        )
    except WaitTimeout as exc:
        last = exc.last_observation
        kube_node = first if isinstance(last, (str, BaseException)) else last
    return kube_node, blocking(kube_node)


def _subnets(config: models.MachineConfig) -> tuple[list[str], list[str]]:
    main = next((d for d in config.documents if not d.get("kind")), {})
    network = (main.get("cluster") or {}).get("network") or {}
    pods = list(network.get("podSubnets") or DEFAULT_POD_SUBNETS)
    services = list(network.get("serviceSubnets") or DEFAULT_SERVICE_SUBNETS)
    return pods, services


@pytest.fixture(scope="module")
def address_book() -> AddressBook:
    """Node addresses read once per run: every per-node check compares all nodes' addresses."""
    return AddressBook()


def _cluster_addresses(
    book: AddressBook, cluster: TalosCluster, checked: TalosNode
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``{node: [ip, ...]}`` outside CNI links, and the nodes whose addresses could not be
    read (errors on the checked node itself propagate)."""
    addresses: dict[str, list[str]] = {}
    unreadable: dict[str, str] = {}
    nodes = cluster.reachable
    reports = book.of_all(nodes)
    for node in nodes:
        report = reports[node.address]
        if isinstance(report, TalosError):
            if node.address == checked.address:
                raise report
            unreadable[node.name] = str(report)
            continue
        addresses[node.name] = [prefix.split("/", 1)[0] for prefix in report.kept]
    return addresses, unreadable


def _overlaps(cidrs: dict[str, str], addresses: dict[str, list[str]]) -> list[str]:
    found = []
    networks = {cidr: ipaddress.ip_network(cidr, strict=False) for cidr in cidrs}
    for node, ips in sorted(addresses.items()):
        for ip in ips:
            address = ipaddress.ip_address(ip)
            found += [
                f"{cidrs[c]} {c} contains {node}'s address {ip}"
                for c, net in networks.items()
                if address.version == net.version and address in net
            ]
    pairs = list(networks.items())
    for i, (a, net_a) in enumerate(pairs):
        for b, net_b in pairs[i + 1 :]:
            if net_a.version == net_b.version and net_a.overlaps(net_b):
                found.append(f"{cidrs[a]} {a} overlaps {cidrs[b]} {b}")
    return found


@pytest.mark.talos_check(
    "kubernetes.cidrs-clear-of-nodes",
    severity="high",
    claim="The pod and service CIDRs do not overlap each other or any node's address",
)
def test_cluster_cidrs_do_not_overlap_node_addresses(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    address_book: AddressBook,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    pods, services = _subnets(talos_node.machine_config)
    cidrs = {**{c: "pod subnet" for c in pods}, **{c: "service subnet" for c in services}}
    addresses, unreadable = _cluster_addresses(address_book, talos_cluster, talos_node)
    talos_evidence.update(
        pod_subnets=pods,
        service_subnets=services,
        node_addresses=addresses,
        cni_addresses_left_out=dict(address_book.of(talos_node).skipped),
    )
    if unreadable:
        talos_evidence["addresses unreadable"] = unreadable
    problems = _overlaps(cidrs, addresses)
    if problems:
        raise ConformanceFailure(
            talos_check_spec.id,
            "cluster CIDRs overlap node addresses",
            node=talos_node.name,
            expected="pod/service CIDRs disjoint from node networks",
            observed="; ".join(problems),
        )
