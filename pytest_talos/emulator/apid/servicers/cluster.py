"""cluster.ClusterService/HealthCheck: the server-side ``talosctl health``
(``pkg/cluster/check/default.go``, served by machined's ``v1alpha1`` server).

The conditions and their texts are those of ``pkg/cluster/check/default.go``; each is
checked against the emulated nodes' state and reported as ``waiting for <condition>: ...``
then ``...: OK``. A failing condition is re-checked every second (emulated) until the
request's ``wait_timeout``; then the stream ends with an error naming the condition.

Which nodes are checked follows ``buildClusterInfo``
(``internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go``): the request's
lists when it has any, each entry an IP (``pkg/cluster/cluster.go`` IPToNodeInfo), else the
node's discovery Members, else the Kubernetes Nodes. The Kubernetes conditions compare those
with the Kubernetes Node list both ways (``cluster.NodesMatch``) and read Kubernetes with
the caller's roles (``cluster.NewLocalClientProvider(..., authz.GetRoles(...))``): the
kubeconfig they need comes from the Kubeconfig RPC, os:admin only (``machined.go``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from pytest_talos._proto.cluster import cluster_pb2 as c
from pytest_talos.emulator.apid.servicers import Call, RPCFailure, require_control_plane
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.node.state import NodeState
from pytest_talos.errors import StatusCode

__all__ = ["CONDITIONS", "ClusterServicer"]

DEFAULT_WAIT = 20 * 60.0  # INFERRED: talosctl health's default --wait-timeout
POLL_INTERVAL = 1.0
# constants.LabelNodeRoleControlPlane (pkg/machinery/constants)
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
# What a Kubernetes condition meets when the caller is not os:admin: the Kubeconfig call of
# pkg/cluster/kubernetes.go refused by machined's authorizer. INFERRED: the gRPC status text.
K8S_DENIED = "rpc error: code = PermissionDenied desc = not authorized"


@dataclass(frozen=True)
class NodeInfo:
    """pkg/cluster NodeInfo: the internal IP and every IP the node is known by."""

    internal_ip: str
    ips: tuple[str, ...]


@dataclass(frozen=True)
class Targets:
    controlplanes: Sequence[NodeState]
    workers: Sequence[NodeState]
    missing: Sequence[str]
    expected: Sequence[NodeInfo] = ()  # the cluster info: control planes, then workers
    expected_controlplanes: Sequence[NodeInfo] = ()
    cluster: Sequence[NodeState] = ()  # every node: what the Kubernetes API lists
    admin: bool = True  # the caller's roles reach Kubernetes (os:admin)
    local: NodeState | None = None  # the node serving the check (the local client's target)

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
    """pkg/cluster/check/etcd.go EtcdConsistentAssertion: every control plane's member list
    (ordered by the answering node's hostname) matches the first one. With no control plane
    listed, client.WithNodes names none and only the serving node answers."""
    answers = sorted(t.controlplanes, key=lambda n: n.identity.hostname)
    if not answers:  # no node named: the serving node answers alone (one list agrees)
        return None
    known = _member_names(answers[0])
    for node in answers[1:]:
        names = _member_names(node)
        if len(names) != len(known):
            return (
                f"{node.identity.hostname}: expected to have [{' '.join(known)}] members, "
                f"got [{' '.join(names)}]"
            )
        unexpected = [name for name in names if name not in known]
        if unexpected:
            return f"{node.identity.hostname}: found unexpected etcd member {unexpected[0]}"
    return None


def _etcd_are_controlplanes(t: Targets) -> str | None:
    """pkg/cluster/check/etcd.go EtcdControlPlaneNodesAssertion: the hosts of the peer URLs
    in the serving node's member list are a subset of the control planes' IPs (a member
    list that lacks a control plane passes)."""
    if t.local is None:
        return None
    member_ips = [peer.address for peer in t.local.etcd_members()]
    node_ips = [ip for info in t.expected_controlplanes for ip in info.ips]
    if set(member_ips) <= set(node_ips):
        return None
    return (
        f"etcd member ips {_go_quote(member_ips)} are not subset of control plane node ips "
        f"{_go_quote(node_ips)}"
    )


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


def _kube_infos(t: Targets, *, controlplanes: bool = False) -> list[NodeInfo]:
    """The Kubernetes Nodes as NodeInfos (their InternalIP); ``controlplanes``: only those
    with the control-plane label (K8sFullControlPlaneAssertion)."""
    nodes = [s.kube_node() for s in t.cluster]
    if controlplanes:
        nodes = [n for n in nodes if CONTROL_PLANE_LABEL in n.labels]
    return [NodeInfo(n.address, (n.address,)) for n in nodes]


def _go_quote(items: Sequence[str]) -> str:
    """Go's ``%q`` of a string slice: ``["a" "b"]``."""
    return "[" + " ".join(f'"{item}"' for item in items) + "]"


def _nodes_match(expected: Sequence[NodeInfo], actual: Sequence[NodeInfo]) -> str | None:
    """pkg/cluster/cluster.go NodesMatch: every expected node shares an IP with one actual
    node, and no actual node is left over."""
    left = list(actual)
    for info in expected:
        found = next((a for a in left if set(a.ips) & set(info.ips)), None)
        if found is None:
            return f"can't find expected node with IPs {_go_quote(info.ips)}"
        left.remove(found)
    if left:
        ips = sorted((ip for a in left for ip in a.ips), key=ipaddress.ip_address)
        return f"unexpected nodes with IPs {_go_quote(ips)}"
    return None


def _k8s_report(t: Targets) -> str | None:
    # pkg/cluster/check/kubernetes.go K8sAllNodesReportedAssertion
    if not t.admin:
        return K8S_DENIED
    return _nodes_match(t.expected, _kube_infos(t))


def _static_pods(t: Targets) -> str | None:
    # K8sControlPlaneStaticPods reads StaticPodStatus through the Talos API: any role
    return _first([_service_problem(n, "kubelet") for n in t.controlplanes])


def _full_control_plane(t: Targets) -> str | None:
    # K8sFullControlPlaneAssertion: the control planes match the labelled Nodes, then pods
    if not t.admin:
        return K8S_DENIED
    mismatch = _nodes_match(t.expected_controlplanes, _kube_infos(t, controlplanes=True))
    return mismatch or _static_pods(t)


def _k8s_ready(t: Targets) -> str | None:
    # K8sAllNodesReadyAssertion: every Kubernetes Node, listed or not
    if not t.admin:
        return K8S_DENIED
    kube = [n.kube_node() for n in t.cluster]
    not_ready = [k.name for k in kube if not k.ready]  # Node names
    return f"some nodes are not ready: {not_ready}" if not_ready else None


def _k8s_only(t: Targets) -> str | None:
    """kube-proxy and coredns: their pods are ready whenever the nodes are (emulated)."""
    return K8S_DENIED if not t.admin else None


def _k8s_schedulable(t: Targets) -> str | None:
    # pkg/cluster/check/kubernetes.go K8sAllNodesSchedulableAssertion: spec.unschedulable
    if not t.admin:
        return K8S_DENIED
    cordoned = [k.name for k in (n.kube_node() for n in t.cluster) if k.unschedulable]
    return f"some nodes are not schedulable: {cordoned}" if cordoned else None


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
    ("all control plane components to be ready", _full_control_plane),
    ("all k8s nodes to report ready", _k8s_ready),
    ("kube-proxy to report ready", _k8s_only),
    ("coredns to report ready", _k8s_only),
    ("all k8s nodes to report schedulable", _k8s_schedulable),
)


def _parse_ip(text: str) -> str:
    """pkg/cluster/cluster.go IPToNodeInfo: netip.ParseAddr, whose error fails the request.
    INFERRED: Go's message for anything but a name without dots or colons."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise RPCFailure(StatusCode.UNKNOWN, f'ParseAddr("{text}"): unable to parse IP') from None


def _infos(ips: Sequence[str]) -> list[NodeInfo]:
    return [NodeInfo(ip, (ip,)) for ip in (_parse_ip(text) for text in ips)]


def _member_infos(call: Call) -> tuple[list[NodeInfo], list[NodeInfo]] | None:
    """The node's discovery Members as NodeInfos (pkg/cluster/check/discovery.go), control
    planes (and init) first; None without Members."""
    members = call.state.store.list("cluster", T.MEMBERS)
    if not members:
        return None
    controlplanes: list[NodeInfo] = []
    workers: list[NodeInfo] = []
    for member in members:
        spec = member.spec if isinstance(member.spec, dict) else {}
        ips = [_parse_ip(str(a)) for a in spec.get("addresses") or ()]
        if not ips:
            raise RPCFailure(StatusCode.UNKNOWN, f"no IP address found for member: {member.id}")
        role = spec.get("machineType")
        (controlplanes if role in ("controlplane", "init") else workers).append(
            NodeInfo(ips[0], tuple(ips))
        )
    return controlplanes, workers


def _kube_cluster_info(call: Call, nodes: Sequence[NodeState]) -> tuple[list[NodeInfo], ...]:
    """The last resort of buildClusterInfo: the Kubernetes Nodes, read with the caller's
    roles (a non-admin caller gets no kubeconfig, and the request fails)."""
    if not call.admin:
        raise RPCFailure(StatusCode.PERMISSION_DENIED, "not authorized")  # INFERRED: passed through
    kube = [n.kube_node() for n in nodes]
    return (
        [NodeInfo(k.address, (k.address,)) for k in kube if CONTROL_PLANE_LABEL in k.labels],
        [NodeInfo(k.address, (k.address,)) for k in kube if CONTROL_PLANE_LABEL not in k.labels],
    )


def _cluster_info(call: Call, info: c.ClusterInfo) -> tuple[list[NodeInfo], list[NodeInfo]]:
    """buildClusterInfo (v1alpha1_cluster.go): the explicit lists, else Members, else
    the Kubernetes Nodes."""
    if info.control_plane_nodes or info.worker_nodes:
        return _infos(info.control_plane_nodes), _infos(info.worker_nodes)
    members = _member_infos(call)
    if members is not None:
        return members
    controlplanes, workers = _kube_cluster_info(call, call.node.cluster_states())
    return controlplanes, workers


def _states_of(infos: Sequence[NodeInfo], nodes: Sequence[NodeState]) -> list[NodeState]:
    by_ip = {n.identity.address: n for n in nodes}
    return [by_ip[ip] for info in infos for ip in info.ips[:1] if ip in by_ip]


def _targets(call: Call, info: c.ClusterInfo) -> Targets:
    nodes = list(call.node.cluster_states())
    controlplanes, workers = _cluster_info(call, info)
    expected = [*controlplanes, *workers]
    known = {n.identity.address for n in nodes}
    return Targets(
        _states_of(controlplanes, nodes),
        _states_of(workers, nodes),
        [i.internal_ip for i in expected if not set(i.ips) & known],
        expected=expected,
        expected_controlplanes=controlplanes,
        cluster=nodes,
        admin=call.admin,
        local=call.state,
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
        # v1alpha1_cluster.go HealthCheck: the nodes checked, before any condition.
        discovered = _go_quote([info.internal_ip for info in targets.expected])
        yield c.HealthCheckProgress(message=f"discovered nodes: {discovered}")
        for name, check in CONDITIONS:
            yield c.HealthCheckProgress(message=f"waiting for {name}: ...")
            last = ""
            while (problem := check(targets)) is not None:
                if problem != last:
                    yield c.HealthCheckProgress(message=f"waiting for {name}: {problem}")
                    last = problem
                if clock.monotonic() >= deadline:
                    raise RPCFailure(StatusCode.DEADLINE_EXCEEDED, f"{name}: {problem}")  # INFERRED
                await clock.sleep(POLL_INTERVAL)
            yield c.HealthCheckProgress(message=f"waiting for {name}: OK")
