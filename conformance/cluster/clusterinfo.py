"""The ClusterInfo a HealthCheck request carries for the whole cluster, built from the
Kubernetes Node list as machined's own fallback builds it (buildClusterInfo,
internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from pytest_talos.cluster import TalosCluster

__all__ = [
    "CONTROL_PLANE_LABEL",
    "OWN_DISCOVERY",
    "ClusterInfo",
    "cluster_info",
    "health_cluster_info",
    "kube_nodes",
]

# constants.LabelNodeRoleControlPlane (pkg/machinery/constants): what marks a control plane
# Node for buildClusterInfo and K8sFullControlPlaneAssertion (pkg/cluster/check/kubernetes.go).
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


@dataclass
class ClusterInfo:
    """What HealthCheck is told the cluster is: the InternalIP of every Kubernetes Node by
    role, or nothing (the node then finds its members itself, as ``talosctl health`` lets
    it), and where that came from."""

    control_planes: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    source: str = ""


def _internal_ip(node: Any) -> str | None:
    addresses = node.status.addresses if node.status is not None else None
    for address in addresses or ():
        if address.type == "InternalIP":
            try:
                return str(ipaddress.ip_address(address.address))
            except ValueError:
                return None
    return None


def cluster_info(kube_nodes: list[Any]) -> ClusterInfo:
    """ClusterInfo for the whole cluster from its Kubernetes Nodes, as buildClusterInfo's
    own fallback builds it (internal/app/machined/internal/server/v1alpha1/
    v1alpha1_cluster.go): each Node's InternalIP (pkg/cluster IPToNodeInfo takes IPs only),
    a control plane when it carries the control-plane label. An explicit list is taken as
    the whole cluster (K8sAllNodesReportedAssertion: ``unexpected nodes with IPs``), so it
    must name every Node; without an InternalIP on each, the node is left to find them."""
    info = ClusterInfo(source="the Kubernetes Node list (InternalIPs, control-plane label)")
    for node in kube_nodes:
        ip = _internal_ip(node)
        if ip is None:
            return ClusterInfo(
                source=f"the node's own discovery (Node {node.metadata.name} has no InternalIP)"
            )
        labels = node.metadata.labels or {}
        (info.control_planes if CONTROL_PLANE_LABEL in labels else info.workers).append(ip)
    return info


OWN_DISCOVERY = (
    "the node's own discovery Members, which cover every Kubernetes Node (as talosctl health asks)"
)


def health_cluster_info(kube: list[Any], member_addresses: list[set[str]]) -> ClusterInfo:
    """What to send: nothing, as ``talosctl health`` does, when the node's discovery
    Members cover every Kubernetes Node (the node then checks every member by all its
    addresses: pkg/cluster/check/discovery.go); else the Kubernetes Node list, so that a
    node whose discovery sees only part of the cluster (the discovery service unreachable)
    is not failed for Nodes it was never told of."""
    known = set().union(*member_addresses) if member_addresses else set()
    ips = [_internal_ip(node) for node in kube]
    if member_addresses and len(member_addresses) >= len(kube) and all(ip in known for ip in ips):
        return ClusterInfo(source=OWN_DISCOVERY)
    return cluster_info(kube)


def kube_nodes(cluster: TalosCluster) -> list[Any] | str:
    try:
        kube = cluster.kubernetes
        return list(kube.core_v1.list_node(_request_timeout=kube.request_timeout).items)
    except Exception as exc:  # TalosError (no kubeconfig) or the client's ApiException
        return f"{type(exc).__name__}: {str(exc)[:200]}"
