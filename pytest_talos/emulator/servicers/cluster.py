"""cluster.ClusterService/HealthCheck: the server-side ``talosctl health``
(``pkg/cluster/check/default.go``, served by machined's ``v1alpha1`` server).

The conditions and their texts are those of ``pkg/cluster/check/default.go``; each is
checked against the emulated nodes' state and reported as ``waiting for <condition>: ...``
then ``...: OK``. A failing condition is re-checked every second (emulated) until the
request's ``wait_timeout``; then the stream ends with an error naming the condition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from pytest_talos._proto.cluster import cluster_pb2 as c
from pytest_talos.emulator.resources import T
from pytest_talos.emulator.servicers import Call, RPCFailure, require_control_plane
from pytest_talos.emulator.state import NodeState

__all__ = ["CONDITIONS", "ClusterServicer"]

DEFAULT_WAIT = 20 * 60.0  # INFERRED: talosctl health's default --wait-timeout
POLL_INTERVAL = 1.0


@dataclass(frozen=True)
class Targets:
    controlplanes: Sequence[NodeState]
    workers: Sequence[NodeState]
    missing: Sequence[str]

    @property
    def all(self) -> list[NodeState]:
        return [*self.controlplanes, *self.workers]


Check = Callable[[Targets], str | None]


def _service_problem(node: NodeState, service_id: str) -> str | None:
    service = node.services.services.get(service_id)
    if service is None:
        return f"{node.identity.address}: service {service_id!r} not defined"
    if not node.powered or not service.running or not service.health.healthy:
        state = service.state if node.powered else "Unknown"
        last = service.last_event.msg if service.last_event else ""
        return (
            f'{node.identity.address}: service "{service_id}" not in expected state '
            f'"Running": current state [{state}] {last}'
        ).rstrip()
    return None


def _first(problems: list[str | None]) -> str | None:
    found = [p for p in problems if p]
    return "; ".join(found) if found else None


def _etcd_healthy(t: Targets) -> str | None:
    return _first([_service_problem(n, "etcd") for n in t.controlplanes])


def _member_names(node: NodeState) -> list[str]:
    return sorted(peer.hostname for peer in node.etcd_members())


def _etcd_consistent(t: Targets) -> str | None:
    lists = {tuple(_member_names(n)) for n in t.controlplanes}
    return None if len(lists) <= 1 else "etcd members are not consistent across nodes"


def _etcd_are_controlplanes(t: Targets) -> str | None:
    expected = sorted(n.hostname for n in t.controlplanes)
    for node in t.controlplanes:
        if _member_names(node) != expected:
            return (
                f"etcd member list on {node.identity.address} {_member_names(node)} does not "
                f"match control plane nodes {expected}"
            )
    return None


def _apid_ready(t: Targets) -> str | None:
    down = [n.identity.address for n in t.all if not n.powered] + list(t.missing)
    return f"nodes not reachable: {', '.join(down)}" if down else None


def _ok(t: Targets) -> str | None:
    return None


def _no_diagnostics(t: Targets) -> str | None:
    for node in t.all:
        if node.store.list("runtime", T.DIAGNOSTICS):
            return f"{node.identity.address}: diagnostics found"
    return None


def _kubelet_healthy(t: Targets) -> str | None:
    return _first([_service_problem(n, "kubelet") for n in t.controlplanes])


def _boot_finished(t: Targets) -> str | None:
    pending = [n.identity.address for n in t.all if n.stage != "running"]
    return f"nodes not finished booting: {', '.join(pending)}" if pending else None


def _k8s_report(t: Targets) -> str | None:
    missing = [n.hostname for n in t.all if not n.powered]
    return f"nodes not reporting: {', '.join(missing)}" if missing else None


def _static_pods(t: Targets) -> str | None:
    return _first([_service_problem(n, "kubelet") for n in t.controlplanes])


def _k8s_ready(t: Targets) -> str | None:
    not_ready = [n.hostname for n in t.all if not n.kube_node().ready]
    return f"some nodes are not ready: {not_ready}" if not_ready else None


def _k8s_schedulable(t: Targets) -> str | None:
    # pkg/cluster/check/kubernetes.go K8sAllNodesSchedulableAssertion: spec.unschedulable
    cordoned = [n.hostname for n in t.all if n.kube_node().unschedulable]
    return f"some nodes are not schedulable: {cordoned}" if cordoned else _k8s_report(t)


CONDITIONS: tuple[tuple[str, Check], ...] = (
    ("etcd to be healthy", _etcd_healthy),
    ("etcd members to be consistent across nodes", _etcd_consistent),
    ("etcd members to be control plane nodes", _etcd_are_controlplanes),
    ("apid to be ready", _apid_ready),
    ("all nodes memory sizes", _ok),
    ("all nodes disk sizes", _ok),
    ("no diagnostics", _no_diagnostics),
    ("kubelet to be healthy", _kubelet_healthy),
    ("all nodes to finish boot sequence", _boot_finished),
    ("all k8s nodes to report", _k8s_report),
    ("all control plane static pods to be running", _static_pods),
    ("all control plane components to be ready", _static_pods),
    ("all k8s nodes to report ready", _k8s_ready),
    ("kube-proxy to report ready", _ok),
    ("coredns to report ready", _ok),
    ("all k8s nodes to report schedulable", _k8s_schedulable),
)


def _targets(call: Call, info: c.ClusterInfo) -> Targets:
    nodes = list(call.node.cluster_states())
    if not info.control_plane_nodes and not info.worker_nodes:
        return Targets(
            [n for n in nodes if n.identity.controlplane],
            [n for n in nodes if not n.identity.controlplane],
            [],
        )
    by_address = {n.identity.address: n for n in nodes} | {n.hostname: n for n in nodes}
    wanted = [*info.control_plane_nodes, *info.worker_nodes]
    missing = [name for name in wanted if name not in by_address]
    return Targets(
        [by_address[a] for a in info.control_plane_nodes if a in by_address],
        [by_address[a] for a in info.worker_nodes if a in by_address],
        missing,
    )


class ClusterServicer:
    async def HealthCheck(
        self, request: c.HealthCheckRequest, call: Call
    ) -> AsyncIterator[c.HealthCheckProgress]:
        require_control_plane(call)
        clock = call.node.clock
        wait = request.wait_timeout.ToTimedelta().total_seconds() or DEFAULT_WAIT
        deadline = clock.monotonic() + wait
        targets = _targets(call, request.cluster_info)
        for name, check in CONDITIONS:
            yield c.HealthCheckProgress(message=f"waiting for {name}: ...")
            last = ""
            while (problem := check(targets)) is not None:
                if problem != last:
                    yield c.HealthCheckProgress(message=f"waiting for {name}: {problem}")
                    last = problem
                if clock.monotonic() >= deadline:
                    raise RPCFailure("DEADLINE_EXCEEDED", f"{name}: {problem}")  # INFERRED
                await clock.sleep(POLL_INTERVAL)
            yield c.HealthCheckProgress(message=f"waiting for {name}: OK")
