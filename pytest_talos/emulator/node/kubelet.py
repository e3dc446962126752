"""What the Kubernetes API shows of an emulated node: its Node object and the node
controller's view of the kubelet (Kubernetes behaviour, INFERRED).

:class:`NodeMonitor` owns the node-monitor grace period: a kubelet posts node status only while
it runs healthy, and after :data:`NODE_MONITOR_GRACE` without status the Node turns Unknown.
:func:`kube_node_info` builds the Node as the node state is now, named as Talos names it
(:func:`nodename_of`, :func:`kubelet_node_name`) and labelled with the installed extensions
(:func:`extension_node_labels`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.faults import KubeQuirk
from pytest_talos.emulator.machineconfig.loader import main_document
from pytest_talos.emulator.node.identity import KubeNodeInfo, NodeIdentity, node_pod_cidr
from pytest_talos.emulator.node.services.runner import Service
from pytest_talos.talos_api import kubernetes_node_name

__all__ = [
    "EXTENSION_LABEL_PREFIX",
    "NODE_MONITOR_GRACE",
    "NodeMonitor",
    "extension_node_labels",
    "extension_versions",
    "kube_node_info",
    "kubelet_node_name",
    "node_registered",
    "node_taints",
    "nodename_of",
    "ready_flap",
    "talos_taints",
]

# pkg/machinery/constants/constants.go K8sExtensionPrefix
EXTENSION_LABEL_PREFIX = "extensions.talos.dev/"
# pkg/machinery/labels/validate.go: a qualified name's name part, and a label value (which
# may also be empty); both at most 63 characters.
_QUALIFIED_NAME = re.compile(r"^(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_MAX = 63

# Kubernetes (not Talos): kube-controller-manager's --node-monitor-grace-period default. A
# Node whose kubelet has not posted status for this long turns Unknown (INFERRED, emulated s).
NODE_MONITOR_GRACE = 40.0
# Quirk KUBE_READY_FLAPS: Ready turns False for the last READY_FLAP_DOWN s of every
# READY_FLAP_PERIOD s of node time after boot
READY_FLAP_PERIOD = 8.0
READY_FLAP_DOWN = 2.0


class NodeMonitor:
    """kube-controller-manager's node monitor for one node: when its kubelet went silent
    and when the Node turned Unknown (``on_unknown`` runs then, if ``still_watched()``)."""

    def __init__(
        self, clock: Clock, *, on_unknown: Callable[[], None], still_watched: Callable[[], bool]
    ) -> None:
        self._clock = clock
        self._on_unknown = on_unknown
        self._still_watched = still_watched
        self.silent_since: float | None = None  # emulated Unix seconds
        self.unknown_since: float | None = None
        self._grace_timer: Cancellable | None = None

    def reset(self) -> None:
        """A fresh boot: no silence, nothing Unknown."""
        self.silent_since = None
        self.unknown_since = None
        self.cancel()

    def track(self, kubelet: Service) -> None:
        """Start or stop the grace period as kubelet stops or resumes posting.

        A kubelet posts node status only while it runs healthy; one that crash-loops (B4)
        never does.
        """
        posting = kubelet.running and kubelet.health.healthy and not kubelet.health.unknown
        if posting:
            self.silent_since = None
            self.unknown_since = None
            self.cancel()
        elif self.silent_since is None:
            self.silent_since = self._clock.time()
            self._grace_timer = self._clock.call_later(NODE_MONITOR_GRACE, self._stale)

    def _stale(self) -> None:
        self._grace_timer = None
        if self._still_watched() and self.silent_since is not None:
            self.unknown_since = self._clock.time()
            self._on_unknown()

    def cancel(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None


def ready_flap(booted_at: float, now: float) -> tuple[bool, float | None]:
    """Quirk KUBE_READY_FLAPS: whether Ready holds at ``now``, and when it last changed."""
    period, down = READY_FLAP_PERIOD, READY_FLAP_DOWN
    elapsed = max(now - booted_at, 0.0)
    start = booted_at + elapsed // period * period
    if elapsed % period >= period - down:
        return False, start + period - down
    return True, start if start > booted_at else None


def _kubelet_section(config: bytes) -> dict[str, Any]:
    section = (main_document(config).get("machine") or {}).get("kubelet")
    return section if isinstance(section, dict) else {}


def nodename_of(hostname: str, domain: str, config: bytes) -> str:
    """The Nodenames resource's ``nodename`` (controllers/k8s/nodename.go): the FQDN when
    ``machine.kubelet.registerWithFQDN`` is true (HostnameStatusSpec.FQDN: ``host.domain``,
    or the short name without a domain), else the short hostname, through FromHostname."""
    fqdn = _kubelet_section(config).get("registerWithFQDN") is True
    name = f"{hostname}.{domain}" if fqdn and domain else hostname
    return kubernetes_node_name(name)


# pkg/machinery/constants/constants.go LabelNodeRoleControlPlane, AnnotationOwnedTaints
CONTROL_PLANE_TAINT_KEY = "node-role.kubernetes.io/control-plane"
OWNED_TAINTS_ANNOTATION = "talos.dev/owned-taints"
# Quirk KUBE_CLOUD_TAINT_STAYS: kubelet runs with --cloud-provider=external and no cloud
# controller manager ever initialises the Node (Kubernetes cloud-provider api well-known
# taint TaintExternalCloudProvider)
CLOUD_UNINITIALIZED_TAINT = {
    "key": "node.cloudprovider.kubernetes.io/uninitialized",
    "value": "true",
    "effect": "NoSchedule",
}
# The node lifecycle controller taints a cordoned node and one under pressure (kubernetes
# pkg/controller/nodelifecycle; INFERRED here: Kubernetes, not Talos). Not modelled: the
# not-ready/unreachable taints of a NotReady or Unknown Node.
_CONDITION_TAINTS = {
    "MemoryPressure": "node.kubernetes.io/memory-pressure",
    "DiskPressure": "node.kubernetes.io/disk-pressure",
    "PIDPressure": "node.kubernetes.io/pid-pressure",
}


def talos_taints(controlplane: bool, config: bytes) -> list[dict[str, str]]:
    """The NodeTaintSpecs Talos makes and NodeApplyController puts on the Node
    (controllers/k8s/node_taint_spec.go): ``node-role.kubernetes.io/control-plane``
    NoSchedule on a control plane unless ``cluster.allowSchedulingOnControlPlanes`` (or the
    older ``allowSchedulingOnMasters`` when that is unset:
    v1alpha1_clusterconfig.go ScheduleOnControlPlanes), then one per ``machine.nodeTaints``
    entry, its value ``value:effect`` or just ``effect`` (cut at the first colon)."""
    document = main_document(config)
    cluster = document.get("cluster") or {}
    allowed = cluster.get("allowSchedulingOnControlPlanes")
    if allowed is None:
        allowed = cluster.get("allowSchedulingOnMasters")
    taints = [] if allowed is True or not controlplane else [_control_plane_taint()]
    declared = (document.get("machine") or {}).get("nodeTaints") or {}
    for key, raw in declared.items() if isinstance(declared, dict) else ():
        value, colon, effect = str(raw).partition(":")
        taint = {"key": str(key), "value": value, "effect": effect}
        taints = [t for t in taints if t["key"] != taint["key"]]  # one spec per key
        taints.append(taint if colon else {"key": str(key), "effect": value})
    return taints


def _control_plane_taint() -> dict[str, str]:
    return {"key": CONTROL_PLANE_TAINT_KEY, "effect": "NoSchedule"}


def node_taints(
    info: KubeNodeInfo, config: bytes, quirk: Callable[[KubeQuirk], bool]
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The Node's ``spec.taints`` and the annotations Talos keeps for them: its own
    (:func:`talos_taints`, their keys owned in ``talos.dev/owned-taints`` as a sorted JSON
    list: node_apply.go marshalOwnedAnnotation), then what Kubernetes adds."""
    own = talos_taints(info.controlplane, config)
    taints = [*own]
    taints += [{"key": _CONDITION_TAINTS[kind], "effect": "NoSchedule"} for kind in info.pressure]
    if info.unschedulable:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    if quirk(KubeQuirk.KUBE_CLOUD_TAINT_STAYS):
        taints.append(dict(CLOUD_UNINITIALIZED_TAINT))
    keys = sorted({t["key"] for t in own})
    annotations = {OWNED_TAINTS_ANNOTATION: json.dumps(keys, separators=(",", ":"))} if keys else {}
    return taints, annotations


def node_registered(config: bytes) -> bool:
    """Whether kubelet registers a Node: not with ``machine.kubelet.skipNodeRegistration``
    (controllers/k8s/kubelet_spec.go then gives kubelet no kubeconfig)."""
    return _kubelet_section(config).get("skipNodeRegistration") is not True


def kubelet_node_name(identity: NodeIdentity, config: bytes) -> str:
    """The name kubelet registers its Node under: ``--hostname-override``, which
    controllers/k8s/kubelet_spec.go sets to the nodename unless the user's
    ``machine.kubelet.extraArgs`` has its own (then Talos leaves it alone); kubelet trims and
    lower-cases it (Kubernetes component-helpers/node/util GetHostname; INFERRED here)."""
    override = mc.kubelet_extra_args(config).get("hostname-override", "").strip().lower()
    return override or nodename_of(identity.hostname, identity.domain, config)


def extension_versions(identity: NodeIdentity, talos_version: str) -> dict[str, str]:
    """``{name: version}`` of the node's system extensions, as its ExtensionStatuses say
    (INFERRED: an emulated extension carries the Talos version it was built for)."""
    return dict.fromkeys(identity.extensions, talos_version)


def extension_node_labels(versions: Mapping[str, str]) -> dict[str, str]:
    """``extensions.talos.dev/<name>: <version>`` per installed extension, as
    controllers/k8s/node_label_spec.go extensionsToNodeKV adds them: only for a non-empty
    name whose label key is a valid qualified name and a version that is a valid label
    value (pkg/machinery/labels/validate.go); others are left out."""
    labels = {}
    for name, version in versions.items():
        if not name or len(name) > _LABEL_MAX or not _QUALIFIED_NAME.match(name):
            continue
        if len(version) > _LABEL_MAX or (version and not _QUALIFIED_NAME.match(version)):
            continue
        labels[EXTENSION_LABEL_PREFIX + name] = version
    return labels


def kube_node_info(
    identity: NodeIdentity,
    *,
    config: bytes,
    powered: bool,
    monitor: NodeMonitor,
    quirk: Callable[[KubeQuirk], bool],
    booted_at: float,
    now: float,
    talos_version: str,
    labels_kept_after_revert: Mapping[str, str],
) -> KubeNodeInfo:
    """The node's Kubernetes Node object, with what the active faults change in it."""
    name = kubelet_node_name(identity, config)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    }
    if identity.controlplane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    if not quirk(KubeQuirk.KUBE_LABELS_NEVER_SYNC):
        # NodeLabelSpec (node_label_spec.go): machine.nodeLabels, then the extensions
        labels.update(mc.node_labels(config))  # issue #3: labels from the config
        labels.update(extension_node_labels(extension_versions(identity, talos_version)))
        labels.update(labels_kept_after_revert)  # ApplyQuirk.TRY_REVERT_KEEPS_NODE_LABELS
    pods = mc.pod_subnets(config)
    unknown = powered and monitor.unknown_since is not None
    flap_ready, flap_since = (
        ready_flap(booted_at, now) if quirk(KubeQuirk.KUBE_READY_FLAPS) else (True, None)
    )
    return KubeNodeInfo(
        name=name,
        address=identity.address,
        labels=labels,
        ready=powered and not unknown and not quirk(KubeQuirk.KUBE_READY_FALSE) and flap_ready,
        controlplane=identity.controlplane,
        kubelet_version=f"v{identity.kubernetes_version}",
        os_image=f"Talos ({talos_version})",
        pod_cidr=node_pod_cidr(pods[0] if pods else "10.244.0.0/16", identity.address),
        created=booted_at,
        status_unknown=unknown,
        last_heartbeat=monitor.silent_since if unknown else None,
        unknown_since=monitor.unknown_since if unknown else None,
        ready_since=flap_since,
        pressure=("MemoryPressure",) if quirk(KubeQuirk.KUBE_MEMORY_PRESSURE) else (),
        unschedulable=quirk(KubeQuirk.KUBE_UNSCHEDULABLE),
    )
