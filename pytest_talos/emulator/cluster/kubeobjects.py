"""What the emulated Kubernetes API serves: the cluster's Nodes and kube-system Pods.

The objects are built on every request from the nodes' state (:meth:`NodeState.kube_node`):
each Node named as kubelet registers it (the nodename, :mod:`..node.kubelet`; none with
``skipNodeRegistration``), labels from ``machine.nodeLabels`` (issue #3) and the
extensions, readiness (fault ``node-not-ready``; Unknown once kubelet has not posted status
for the node-monitor grace period), and one pod per control-plane component plus a
kube-proxy pod per node, ready while kubelet runs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from pytest_talos.emulator import kubeapi
from pytest_talos.emulator.node.kubelet import kubelet_node_name, node_registered, node_taints
from pytest_talos.emulator.node.state import NodeState

__all__ = ["ClusterKubeProvider"]

_CONTROL_PLANE_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _when(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def _maybe_when(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else _when(seconds)


class ClusterKubeProvider:
    """A :class:`~..kubeapi.KubeProvider` over the cluster's nodes."""

    def __init__(self, states: Callable[[], Sequence[NodeState]], kubernetes_version: str):
        self._states = states
        self._version = kubernetes_version

    def nodes(self) -> list[dict[str, Any]]:
        objects = []
        for state in self._states():
            if not node_registered(state.active_config):
                continue  # skipNodeRegistration: kubelet_spec.go gives kubelet no kubeconfig
            info = state.kube_node()
            taints, annotations = node_taints(info, state.active_config, state.quirk)
            objects.append(
                kubeapi.make_node_object(
                    info.name,
                    labels=info.labels,
                    ready=info.ready,
                    addresses=[info.address],
                    kubelet_version=info.kubelet_version,
                    pod_cidr=info.pod_cidr,
                    resource_version=0,  # the API server stamps its own versions
                    creation_ts=_when(info.created),
                    taints=taints,
                    annotations=annotations,
                    unschedulable=info.unschedulable,
                    pressure=info.pressure,
                    ready_since=_maybe_when(info.ready_since),
                    os_image=info.os_image,
                    heartbeat_ts=_maybe_when(info.last_heartbeat),
                    unknown_since=_maybe_when(info.unknown_since),
                )
            )
        return objects

    def pods(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace not in (None, "kube-system"):
            return []
        return [pod for state in self._states() for pod in self._pods_of(state)]

    def _pods_of(self, state: NodeState) -> list[dict[str, Any]]:
        config = state.active_config
        if not node_registered(config):
            return []  # no Node: no mirror pods, nothing scheduled there
        node_name = kubelet_node_name(state.identity, config)  # static pods: <pod>-<node name>
        ready = state.powered and state.services.services["kubelet"].running
        names = [("kube-proxy", f"kube-proxy-{state.identity.node_id[:5].lower()}")]
        if state.identity.controlplane:
            names = [(c, f"{c}-{node_name}") for c in _CONTROL_PLANE_PODS] + names
        return [
            kubeapi.make_pod_object(
                name,
                "kube-system",
                node_name=node_name,
                image=f"registry.k8s.io/{component}:v{self._version}",
                resource_version=0,
                creation_ts=_when(state.booted_at),
                labels={"k8s-app": component, "tier": "control-plane"},
                ready=ready,
                host_ip=state.identity.address,
                pod_ip=state.identity.address,
                host_network=True,
            )
            for component, name in names
        ]

    def version(self) -> dict[str, Any]:
        return kubeapi.version_info(self._version)
