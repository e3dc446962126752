"""The Kubernetes objects the emulated API server hands out, and the admin kubeconfig."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import yaml

Object = dict[str, Any]


def _timestamp(value: dt.datetime | str) -> str:
    if isinstance(value, str):
        return value
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(*parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _condition(
    kind: str,
    status: bool | None,
    reason: str,
    message: str,
    when: str,
    transition: str | None = None,
) -> dict[str, str]:
    text = "Unknown" if status is None else "True" if status else "False"
    return {
        "type": kind,
        "status": text,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": when,
        "lastTransitionTime": transition or when,
    }


# Kubernetes' node lifecycle controller, once kubelet missed the grace period: every
# condition turns Unknown with this reason and message.
NODE_STATUS_UNKNOWN = ("NodeStatusUnknown", "Kubelet stopped posting node status.")
_PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)

# kubelet's reasons and messages when a pressure condition is True
# (kubernetes pkg/kubelet/nodestatus/setters.go MemoryPressureCondition, ...).
_UNDER_PRESSURE = {
    "MemoryPressure": ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    "DiskPressure": ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    "PIDPressure": ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
}


def _node_addresses(name: str, addresses: Sequence[str | tuple[str, str]]) -> list[Object]:
    result = [
        {"type": "InternalIP", "address": item}
        if isinstance(item, str)
        else {"type": item[0], "address": item[1]}
        for item in addresses
    ]
    if not any(entry["type"] == "Hostname" for entry in result):
        result.append({"type": "Hostname", "address": name})
    return result


def make_node_object(
    name: str,
    *,
    labels: Mapping[str, str],
    ready: bool,
    addresses: Sequence[str | tuple[str, str]],
    kubelet_version: str,
    pod_cidr: str,
    resource_version: str | int,
    creation_ts: dt.datetime | str,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready_reason: str = "",
    ready_message: str = "",
    ready_since: dt.datetime | str | None = None,
    pressure: Collection[str] = (),
    heartbeat_ts: dt.datetime | str | None = None,
    unknown_since: dt.datetime | str | None = None,
    annotations: Mapping[str, str] | None = None,
    os_image: str = "Talos (v1.13.9)",
    kernel_version: str = "6.18.24-talos",
    container_runtime_version: str = "containerd://2.2.3",
    architecture: str = "amd64",
) -> Object:
    """A ``v1`` Node as a Talos 1.13 kubelet reports it.

    ``addresses`` are InternalIPs (plain strings) or ``(type, address)`` pairs; a
    ``Hostname`` address is added when missing. ``labels`` are merged over the labels
    kubelet always sets (arch, os, hostname). ``taints`` are ``{key, value?, effect}``.
    With ``unknown_since`` the node controller has given up on the kubelet (last heard of
    at ``heartbeat_ts``): every condition is Unknown, ``NodeStatusUnknown``. ``pressure``
    names the pressure conditions that are True (``MemoryPressure``, ...); ``ready_since``
    is the Ready condition's ``lastTransitionTime`` (default: the heartbeat).
    :class:`KubeAPIServer` replaces ``resourceVersion`` with its own counter when serving.
    """
    version = kubelet_version if kubelet_version.startswith("v") else f"v{kubelet_version}"
    created = _timestamp(creation_ts)
    beat = _timestamp(heartbeat_ts) if heartbeat_ts is not None else created
    base_labels = {
        "beta.kubernetes.io/arch": architecture,
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": architecture,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    }
    spec: Object = {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}
    if taints:
        spec["taints"] = [dict(taint) for taint in taints]
    if unschedulable:
        spec["unschedulable"] = True
    if unknown_since is not None:
        reason, message = NODE_STATUS_UNKNOWN
        since = _timestamp(unknown_since)
        conditions = [
            _condition(kind, None, reason, message, beat, since)
            for kind in [*(c[0] for c in _PRESSURE_CONDITIONS), "Ready"]
        ]
    else:
        conditions = [
            _condition(kind, False, reason, message, beat)
            if kind not in pressure
            else _condition(kind, True, *_UNDER_PRESSURE[kind], beat)
            for kind, reason, message in _PRESSURE_CONDITIONS
        ]
        conditions.append(
            _condition(
                "Ready",
                ready,
                ready_reason or ("KubeletReady" if ready else "KubeletNotReady"),
                ready_message
                or (
                    "kubelet is posting ready status"
                    if ready
                    else "container runtime network not ready: NetworkReady=false"
                ),
                beat,
                _timestamp(ready_since) if ready_since is not None else None,
            )
        )
    capacity = {
        "cpu": "2",
        "ephemeral-storage": "10218772Ki",
        "hugepages-2Mi": "0",
        "memory": "2048Mi",
        "pods": "110",
    }
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": _uid("node", name),
            "resourceVersion": str(resource_version),
            "creationTimestamp": created,
            "labels": {**base_labels, **labels},
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **(annotations or {}),
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "memory": "1848Mi"},
            "conditions": conditions,
            "addresses": _node_addresses(name, addresses),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _uid("machine-id", name).replace("-", ""),
                "systemUUID": _uid("system-uuid", name),
                "bootID": _uid("boot-id", name),
                "kernelVersion": kernel_version,
                "osImage": os_image,
                "containerRuntimeVersion": container_runtime_version,
                "kubeletVersion": version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": architecture,
            },
        },
    }


def make_pod_object(
    name: str,
    namespace: str,
    *,
    node_name: str,
    image: str,
    resource_version: str | int,
    creation_ts: dt.datetime | str,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    host_ip: str = "",
    pod_ip: str = "",
    host_network: bool = False,
    restart_count: int = 0,
    container_name: str = "",
) -> Object:
    """A running (or not ready) one-container ``v1`` Pod, e.g. a kube-system static pod.

    The container is named ``container_name``, or the pod name without a ``-<node>``
    suffix (``kube-apiserver-cp-1`` on ``cp-1`` runs container ``kube-apiserver``).
    """
    created = _timestamp(creation_ts)
    container = container_name or name.removesuffix(f"-{node_name}")
    status_word = "True" if ready else "False"
    pod_ips = [{"ip": pod_ip}] if pod_ip else []
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid("pod", namespace, name),
            "resourceVersion": str(resource_version),
            "creationTimestamp": created,
            "labels": dict(labels or {}),
        },
        "spec": {
            "nodeName": node_name,
            "hostNetwork": host_network,
            "restartPolicy": "Always",
            "containers": [{"name": container, "image": image}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": kind,
                    "status": "True" if kind == "PodScheduled" else status_word,
                    "lastTransitionTime": created,
                }
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "hostIP": host_ip,
            "podIP": pod_ip,
            "podIPs": pod_ips,
            "startTime": created,
            "containerStatuses": [
                {
                    "name": container,
                    "image": image,
                    "imageID": "",
                    "ready": ready,
                    "started": ready,
                    "restartCount": restart_count,
                    "containerID": f"containerd://{hashlib.sha256(name.encode()).hexdigest()}",
                    "state": {"running": {"startedAt": created}},
                }
            ],
            "qosClass": "Burstable",
        },
    }


def version_info(
    kubernetes_version: str = "1.36.0",
    *,
    git_commit: str = "",
    build_date: str = "2026-04-22T00:00:00Z",
    go_version: str = "go1.25.9",
    platform: str = "linux/amd64",
) -> Object:
    """The ``/version`` document of a kube-apiserver of ``kubernetes_version``."""
    version = kubernetes_version.removeprefix("v")
    major, minor = version.split(".")[:2]
    commit = git_commit or hashlib.sha1(version.encode(), usedforsecurity=False).hexdigest()
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(max(int(minor) - 1, 0)),
        "gitVersion": f"v{version}",
        "gitCommit": commit,
        "gitTreeState": "clean",
        "buildDate": build_date,
        "goVersion": go_version,
        "compiler": "gc",
        "platform": platform,
    }


def render_kubeconfig(
    *,
    cluster_name: str,
    server: str,
    ca_pem: bytes,
    client_cert_pem: bytes,
    client_key_pem: bytes,
    namespace: str = "default",
) -> bytes:
    """An admin kubeconfig as Talos hands it out (context ``admin@<cluster>``).

    It carries the client key by design (it is a credential, like a talosconfig); the
    caller decides where it goes.
    """
    user = f"admin@{cluster_name}"

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client_cert_pem),
                    "client-key-data": b64(client_key_pem),
                },
            }
        ],
        "contexts": [
            {
                "context": {"cluster": cluster_name, "namespace": namespace, "user": user},
                "name": user,
            }
        ],
        "current-context": user,
    }
    return yaml.safe_dump(document, sort_keys=False, width=1 << 16).encode("utf-8")
