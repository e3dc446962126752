"""The cluster as a whole: discovery agrees across nodes (when it is on and reachable), etcd
is made of exactly the control planes, and the server-side health check (``talosctl
health``, pkg/cluster/check/default.go) completes."""

from __future__ import annotations

from typing import Any

import pytest

from conformance._support.context import Timing
from conformance.cluster.clusterinfo import ClusterInfo, health_cluster_info, kube_nodes
from conformance.cluster.discovery import (
    DISABLED_REASON,
    UNREACHABLE_REASON,
    Member,
    discovery_enabled,
    members,
    short_name,
)
from pytest_talos.cluster import TalosCluster, read_each
from pytest_talos.errors import ConformanceFailure, TalosError
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance import ADMIN
from pytest_talos.plugin.conformance.catalogue import CheckSpec

HEALTH_WAIT = 60.0  # node seconds the health check may wait for a condition
_PROGRESS_LINES = 12
_CONTROL_PLANE = ("controlplane", "init")


def _role(machine_type: str) -> str:
    return "controlplane" if machine_type in _CONTROL_PLANE else machine_type


def _find(view: dict[str, Member], node: TalosNode) -> Member | None:
    """The member that is ``node``: same short name, else one of its addresses."""
    found = view.get(short_name(node.hostname))
    if found is None:
        found = next((m for m in view.values() if node.host in m.addresses), None)
    return found


def _views(cluster: TalosCluster) -> tuple[dict[str, dict[str, Member]], list[str]]:
    """Each node's Members, and the nodes whose machine config has discovery off (an empty
    list counts as off when the config cannot be read)."""
    views: dict[str, dict[str, Member]] = {}
    disabled: list[str] = []
    nodes = cluster.reachable
    read = read_each(nodes, lambda node: (members(node), discovery_enabled(node)))
    for node, (found, enabled) in zip(nodes, read, strict=True):
        if enabled is False or (enabled is None and not found):
            disabled.append(node.name)
        else:
            views[node.name] = found
    return views, disabled


def _sees_only_itself(view: dict[str, Member], node: TalosNode) -> bool:
    return len(view) == 1 and _find(view, node) is not None


@pytest.mark.talos_check(
    "cluster.members-consistent",
    severity="high",
    claim="Every node's discovery lists the same members, including every target node",
)
def test_members_are_consistent_across_nodes(
    talos_cluster: TalosCluster, talos_evidence: dict[str, Any], talos_check_spec: CheckSpec
) -> None:
    views, disabled = _views(talos_cluster)
    talos_evidence["members per node"] = {n: sorted(v) for n, v in views.items()}
    if disabled:
        talos_evidence["discovery disabled on"] = disabled
    if not views:
        pytest.skip(DISABLED_REASON)
    nodes = [node for node in talos_cluster.reachable if node.name in views]
    alone = sorted(n.name for n in nodes if _sees_only_itself(views[n.name], n))
    if len(nodes) > 1 and len(alone) == len(nodes):
        pytest.skip(UNREACHABLE_REASON)
    roles = {n: {name: _role(m.machine_type) for name, m in v.items()} for n, v in views.items()}
    distinct = {tuple(sorted(r.items())) for r in roles.values()}
    missing: dict[str, str] = {}
    for node in nodes:
        seen = [_find(view, node) for view in views.values()]
        if any(m is None or _role(m.machine_type) != node.role for m in seen):
            missing[node.name] = node.role
    if len(distinct) > 1 or missing:
        evidence: dict[str, Any] = {}
        if missing:
            evidence["targets missing or with another role"] = missing
        if alone:
            evidence["nodes whose discovery sees only themselves"] = alone
        raise ConformanceFailure(
            talos_check_spec.id,
            "the nodes disagree about the cluster's members",
            expected="one member list on every node, naming every target node with its role",
            observed="; ".join(
                f"{n}: {', '.join(f'{h}={t}' for h, t in sorted(v.items())) or 'none'}"
                for n, v in sorted(roles.items())
            ),
            evidence=evidence or None,
        )


def _discovered_controlplanes(cluster: TalosCluster, node: TalosNode) -> set[str] | None:
    """The control planes ``node``'s discovery knows, or None when discovery is off or sees
    only the node itself (then the target control planes are all there is to go by)."""
    view = members(node)
    if not view or discovery_enabled(node) is False:
        return None
    if len(cluster.reachable) > 1 and _sees_only_itself(view, node):
        return None
    return {name for name, m in view.items() if _role(m.machine_type) == "controlplane"}


@pytest.mark.talos_check(
    "cluster.etcd-members-are-control-planes",
    severity="critical",
    claim="On every control plane, etcd's members are exactly the control plane nodes",
)
def test_etcd_members_are_the_control_planes(
    talos_cluster: TalosCluster, talos_evidence: dict[str, Any], talos_check_spec: CheckSpec
) -> None:
    controlplanes = talos_cluster.controlplanes
    if not controlplanes:
        pytest.skip("no control plane among the target nodes")
    targets = {short_name(node.hostname) for node in controlplanes}
    discovered = _discovered_controlplanes(talos_cluster, controlplanes[0])
    expected = sorted(targets | (discovered or set()))
    lists: dict[str, list[str]] = {}
    learners: dict[str, list[str]] = {}
    for node in controlplanes:
        found = node.client.etcd_members()
        lists[node.name] = sorted(short_name(m.hostname) for m in found)
        learners[node.name] = sorted(short_name(m.hostname) for m in found if m.is_learner)
    talos_evidence.update(control_planes=expected, etcd_members=lists)
    if discovered is None:
        # Without discovery, control planes outside the targets are unknown: every target
        # must be a member and the control planes must agree; extra members are not judged.
        talos_evidence["expected from"] = "the target control planes (no usable discovery)"
        agree = len({tuple(v) for v in lists.values()}) == 1
        wrong = {n: v for n, v in lists.items() if not targets <= set(v) or not agree}
    else:
        # Every target is a member, and every member is a control plane the node knows of.
        # Discovery keeps a vanished node for 30 minutes (discovery_service.go), and Talos's
        # own check asks no more than that (pkg/cluster/check/etcd.go): a control plane that
        # is gone from etcd but still discovered is no fault.
        talos_evidence["expected from"] = "the target control planes and discovery's"
        allowed = targets | discovered
        agree = len({tuple(v) for v in lists.values()}) == 1
        wrong = {n: v for n, v in lists.items() if not targets <= set(v) <= allowed or not agree}
    stuck = {n: v for n, v in learners.items() if v}
    if wrong or stuck:
        raise ConformanceFailure(
            talos_check_spec.id,
            "etcd membership does not match the control planes",
            expected=", ".join(expected),
            observed="; ".join(f"{n}: {', '.join(v) or 'none'}" for n, v in sorted(wrong.items()))
            or "learners left over",
            evidence={"learners": stuck} if stuck else None,
        )


def _member_addresses(runner: TalosNode) -> list[set[str]]:
    """Each discovery Member's addresses as the node running the check sees them."""
    try:
        members = runner.resources("Members.cluster.talos.dev", "cluster")
    except TalosError:
        return []
    found = []
    for member in members:
        spec = member.spec if isinstance(member.spec, dict) else {}
        found.append({str(address) for address in spec.get("addresses") or ()})
    return found


def _health_cluster_info(
    cluster: TalosCluster, runner: TalosNode, evidence: dict[str, Any]
) -> ClusterInfo:
    nodes = kube_nodes(cluster)
    if isinstance(nodes, str):
        info = ClusterInfo(source=f"the node's own discovery (no Kubernetes Node list: {nodes})")
    else:
        info = health_cluster_info(nodes, _member_addresses(runner))
    evidence["cluster info from"] = info.source
    if info.control_planes or info.workers:
        evidence["control plane IPs"] = info.control_planes
        evidence["worker IPs"] = info.workers
    return info


@pytest.mark.talos_check(
    "cluster.health-check-passes",
    severity="high",
    claim="The server-side cluster health check (talosctl health) completes for the whole cluster",
)
def test_server_side_health_check_completes(
    talos_cluster: TalosCluster,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    if not talos_cluster.controlplanes:
        pytest.skip("no control plane among the target nodes: the health check runs there")
    roles = talos_cluster.client.roles
    if ADMIN not in roles:
        # v1alpha1_cluster.go runs the conditions with the caller's roles; the Kubernetes
        # ones fetch a kubeconfig through the Kubeconfig RPC, os:admin only (machined.go).
        pytest.skip(
            f"needs {ADMIN}: the health check reads Kubernetes with the caller's roles and "
            f"only {ADMIN} may fetch the kubeconfig; this talosconfig has "
            f"{', '.join(roles) or 'no role'}"
        )
    runner = talos_cluster.controlplane()
    info = _health_cluster_info(talos_cluster, runner, talos_evidence)
    progress: list[str] = []
    try:
        stream = runner.client.health_check(
            wait_timeout=HEALTH_WAIT,
            control_plane_nodes=info.control_planes,
            worker_nodes=info.workers,
            timeout=talos_timing.real(HEALTH_WAIT) + runner.client.timeout,
        )
        for line in stream:
            progress.append(line.message)
    except TalosError as exc:
        raise ConformanceFailure(
            talos_check_spec.id,
            "the cluster health check did not complete",
            node=runner.name,
            expected="every health condition OK",
            observed=str(exc),
            evidence={"progress": "\n".join(progress[-_PROGRESS_LINES:]) or "(none)"},
        ) from None
    talos_evidence["conditions"] = [line for line in progress if line.endswith(": OK")]
