"""What the Kubernetes API shows of an emulated node: its Node object and the node
controller's view of the kubelet (Kubernetes behaviour, INFERRED).

:class:`NodeMonitor` owns the node-monitor grace period: a kubelet posts node status only while
it runs healthy, and after :data:`NODE_MONITOR_GRACE` without status the Node turns Unknown.
:func:`kube_node_info` builds the Node as the node state is now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.faults import Quirk
from pytest_talos.emulator.identity import KubeNodeInfo, NodeIdentity, node_pod_cidr
from pytest_talos.emulator.services import Service

__all__ = ["NODE_MONITOR_GRACE", "NodeMonitor", "kube_node_info", "ready_flap"]

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


def kube_node_info(
    identity: NodeIdentity,
    *,
    config: bytes,
    powered: bool,
    monitor: NodeMonitor,
    quirk: Callable[[Quirk], bool],
    booted_at: float,
    now: float,
    talos_version: str,
    labels_kept_after_revert: Mapping[str, str],
) -> KubeNodeInfo:
    """The node's Kubernetes Node object, with what the active faults change in it."""
    hostname = identity.hostname
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": hostname,
        "kubernetes.io/os": "linux",
    }
    if identity.controlplane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    if not quirk(Quirk.KUBE_LABELS_NEVER_SYNC):
        labels.update(mc.node_labels(config))  # issue #3: labels from the config
        labels.update(labels_kept_after_revert)  # Quirk.TRY_REVERT_KEEPS_NODE_LABELS
    pods = mc.pod_subnets(config)
    unknown = powered and monitor.unknown_since is not None
    flap_ready, flap_since = (
        ready_flap(booted_at, now) if quirk(Quirk.KUBE_READY_FLAPS) else (True, None)
    )
    return KubeNodeInfo(
        name=hostname,
        address=identity.address,
        labels=labels,
        ready=powered and not unknown and not quirk(Quirk.KUBE_READY_FALSE) and flap_ready,
        controlplane=identity.controlplane,
        kubelet_version=f"v{identity.kubernetes_version}",
        os_image=f"Talos ({talos_version})",
        pod_cidr=node_pod_cidr(pods[0] if pods else "10.244.0.0/16", identity.address),
        created=booted_at,
        status_unknown=unknown,
        last_heartbeat=monitor.silent_since if unknown else None,
        unknown_since=monitor.unknown_since if unknown else None,
        ready_since=flap_since,
        pressure=("MemoryPressure",) if quirk(Quirk.KUBE_MEMORY_PRESSURE) else (),
        unschedulable=quirk(Quirk.KUBE_UNSCHEDULABLE),
    )
