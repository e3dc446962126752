"""The cluster as a whole: discovery agrees across nodes, etcd is made of exactly the control
planes, and the server-side health check (``talosctl health``, facts §11) completes."""

from __future__ import annotations

from typing import Any

import pytest

from conformance._support.context import Timing
from pytest_talos import models
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import ConformanceFailure, TalosError
from pytest_talos.node import TalosNode

MEMBERS = ("Members.cluster.talos.dev", "cluster")
HEALTH_WAIT = 60.0  # node seconds the health check may wait for a condition
_PROGRESS_LINES = 12


def _members(node: TalosNode) -> dict[str, str]:
    """``{hostname: machine type}`` as this node's discovery sees the cluster."""
    found = {}
    for member in node.resources(*MEMBERS):
        spec = member.typed_spec
        if isinstance(spec, models.MemberSpec):
            found[spec.hostname] = spec.machine_type
        else:
            data = member.spec or {}
            found[str(data.get("hostname", member.id))] = str(data.get("machineType", "?"))
    return found


@pytest.mark.talos_check(
    "cluster.members-consistent", severity="high",
    claim="Every node's discovery lists the same members, including every target node")
def test_members_are_consistent_across_nodes(
    talos_cluster: TalosCluster, talos_evidence: dict[str, Any]
) -> None:
    views = {node.name: _members(node) for node in talos_cluster.reachable}
    talos_evidence["members per node"] = {n: sorted(v) for n, v in views.items()}
    distinct = {tuple(sorted(view.items())) for view in views.values()}
    targets = {node.name: node.role for node in talos_cluster.reachable}
    missing = {name: role for name, role in targets.items()
               if any(view.get(name) != role for view in views.values())}
    if len(distinct) > 1 or missing:
        raise ConformanceFailure(
            "cluster.members-consistent", "the nodes disagree about the cluster's members",
            expected="one member list on every node, naming every target node with its role",
            observed="; ".join(f"{n}: {', '.join(f'{h}={t}' for h, t in sorted(v.items()))}"
                               for n, v in sorted(views.items())),
            evidence={"targets missing or with another role": missing} if missing else None)


@pytest.mark.talos_check(
    "cluster.etcd-members-are-control-planes", severity="critical",
    claim="On every control plane, etcd's members are exactly the control plane nodes")
def test_etcd_members_are_the_control_planes(
    talos_cluster: TalosCluster, talos_evidence: dict[str, Any]
) -> None:
    controlplanes = talos_cluster.controlplanes
    if not controlplanes:
        pytest.skip("no control plane among the target nodes")
    expected = sorted(host for host, kind in _members(controlplanes[0]).items()
                      if kind in ("controlplane", "init"))
    lists: dict[str, list[str]] = {}
    learners: dict[str, list[str]] = {}
    for node in controlplanes:
        members = node.client.etcd_members()
        lists[node.name] = sorted(m.hostname for m in members)
        learners[node.name] = sorted(m.hostname for m in members if m.is_learner)
    talos_evidence.update(control_planes=expected, etcd_members=lists)
    wrong = {n: v for n, v in lists.items() if v != expected}
    stuck = {n: v for n, v in learners.items() if v}
    if wrong or stuck:
        raise ConformanceFailure(
            "cluster.etcd-members-are-control-planes",
            "etcd membership does not match the control planes",
            expected=", ".join(expected),
            observed="; ".join(f"{n}: {', '.join(v) or 'none'}" for n, v in sorted(
                wrong.items())) or "learners left over",
            evidence={"learners": stuck} if stuck else None)


@pytest.mark.talos_check(
    "cluster.health-check-passes", severity="high",
    claim="The server-side cluster health check (talosctl health) completes")
def test_server_side_health_check_completes(
    talos_cluster: TalosCluster, talos_timing: Timing, talos_evidence: dict[str, Any]
) -> None:
    if not talos_cluster.controlplanes:
        pytest.skip("no control plane among the target nodes: the health check runs there")
    runner = talos_cluster.controlplane()
    progress: list[str] = []
    try:
        stream = runner.client.health_check(
            wait_timeout=HEALTH_WAIT,
            control_plane_nodes=[n.address for n in talos_cluster.controlplanes],
            worker_nodes=[n.address for n in talos_cluster.workers],
            timeout=talos_timing.real(HEALTH_WAIT) + runner.client.timeout,
        )
        for line in stream:
            progress.append(line.message)
    except TalosError as exc:
        raise ConformanceFailure(
            "cluster.health-check-passes", "the cluster health check did not complete",
            node=runner.name, expected="every health condition OK", observed=str(exc),
            evidence={"progress": "\n".join(progress[-_PROGRESS_LINES:]) or "(none)"},
        ) from None
    talos_evidence["conditions"] = [line for line in progress if line.endswith(": OK")]
