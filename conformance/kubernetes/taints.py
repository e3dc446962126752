"""The taints of a Kubernetes Node that say it takes no pods (unit-tested on their own).

Kubernetes puts these on a Node itself: the node lifecycle controller mirrors the node's
conditions and ``spec.unschedulable`` into ``node.kubernetes.io/*`` taints (kubernetes
``pkg/controller/nodelifecycle/node_lifecycle_controller.go``; ``out-of-service`` is the
operator's mark of a node that is shut down), kubelet with ``--cloud-provider=external``
registers with ``node.cloudprovider.kubernetes.io/uninitialized`` until a cloud controller
manager has initialised the node, and the cloud node lifecycle controller adds
``node.cloudprovider.kubernetes.io/shutdown``. On a healthy, Ready node none of them stays.

Talos adds only ``node-role.kubernetes.io/control-plane:NoSchedule`` on control planes
(unless ``cluster.allowSchedulingOnControlPlanes``) and the taints of ``machine.nodeTaints``
(``internal/app/machined/pkg/controllers/k8s/node_taint_spec.go``; kubelet registers with the
control-plane one, ``kubelet_spec.go``), and records the keys it owns in the Node's
``talos.dev/owned-taints`` annotation, a JSON list (``controllers/k8s/node_apply.go``).
A lifecycle key the node's own config declares is the operator's choice, not a symptom.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTROL_PLANE_TAINT",
    "LIFECYCLE_TAINTS",
    "OWNED_TAINTS_ANNOTATION",
    "TAINT_GRACE",
    "Taint",
    "blocking_taints",
    "declared_taint_keys",
    "owned_taint_keys",
    "taints_of",
]

LIFECYCLE_TAINTS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/out-of-service",
        "node.cloudprovider.kubernetes.io/uninitialized",
        "node.cloudprovider.kubernetes.io/shutdown",
    }
)
# pkg/machinery/constants/constants.go LabelNodeRoleControlPlane
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"
# pkg/machinery/constants/constants.go AnnotationOwnedTaints
OWNED_TAINTS_ANNOTATION = "talos.dev/owned-taints"
# Node seconds a lifecycle taint may outlive the condition behind it. The lifecycle
# controller re-taints a node on every Node update and in its monitor pass (every
# --node-monitor-period, 5 s by default); the NoExecute taints go through a queue it drains
# every 100 ms. So a taint lags its condition by about one monitor period: four of them.
TAINT_GRACE = 20.0


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


def taints_of(kube_node: Any) -> list[Taint]:
    """``spec.taints`` of a Kubernetes client Node object."""
    found = getattr(getattr(kube_node, "spec", None), "taints", None) or []
    return [
        Taint(str(t.key or ""), str(t.value or ""), str(t.effect or ""))
        for t in found
        if getattr(t, "key", None)
    ]


def owned_taint_keys(kube_node: Any) -> frozenset[str]:
    """The taint keys Talos says it owns (its ``talos.dev/owned-taints`` annotation);
    empty when the annotation is missing or not a JSON list of strings."""
    annotations = getattr(getattr(kube_node, "metadata", None), "annotations", None) or {}
    try:
        owned = json.loads(annotations.get(OWNED_TAINTS_ANNOTATION) or "[]")
    except ValueError:
        return frozenset()
    if not isinstance(owned, list):
        return frozenset()
    return frozenset(key for key in owned if isinstance(key, str))


def blocking_taints(taints: Iterable[Taint], declared: Iterable[str] = ()) -> list[Taint]:
    """The lifecycle taints among ``taints`` whose key the node does not declare itself
    (``declared``: its ``machine.nodeTaints`` keys, the keys Talos owns)."""
    allowed = frozenset(declared) | {CONTROL_PLANE_TAINT}
    return [t for t in taints if t.key in LIFECYCLE_TAINTS and t.key not in allowed]


def _dig(document: Any, *path: str) -> Any:
    for key in path:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def declared_taint_keys(document: Any) -> frozenset[str]:
    """The taint keys the v1alpha1 config ``document`` sets: ``machine.nodeTaints``
    (node_taint_spec.go makes a taint of each) and those kubelet registers with
    (``machine.kubelet.extraConfig`` ``registerWithTaints``, ``extraArgs``
    ``register-with-taints`` as ``key[=value]:effect,...``: kubelet_spec.go passes both on)."""
    keys: set[str] = set()
    declared = _dig(document, "machine", "nodeTaints")
    keys |= {str(key) for key in declared} if isinstance(declared, dict) else set()
    registered = _dig(document, "machine", "kubelet", "extraConfig", "registerWithTaints")
    for taint in registered if isinstance(registered, list) else []:
        keys |= {str(taint["key"])} if isinstance(taint, dict) and taint.get("key") else set()
    flag = _dig(document, "machine", "kubelet", "extraArgs", "register-with-taints")
    for item in str(flag or "").split(","):
        keys |= {item.split("=", 1)[0].split(":", 1)[0].strip()} - {""}
    return frozenset(keys)
