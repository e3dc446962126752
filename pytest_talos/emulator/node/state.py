"""The truth of one emulated Talos node, in plain Python (no gRPC).

A :class:`NodeState` composes one state object per concern, each owning its data:

- :class:`~.apply.MachineConfigState`: the machine configs, the apply flow, try mode;
- :class:`~.services.runner.ServiceManager` and :class:`~.services.faults.ServiceFaults`: the
  services, their runner and the faults that act on them;
- :class:`~.host.view.NodeHost`: the root filesystem, mounts, processes and sockets;
- :class:`~.net.place.NodeNetworking`: links, addresses, the pod network, discovery, etcd;
- :class:`~.kubelet.NodeMonitor`: what Kubernetes knows of the kubelet;
- :class:`~.lifecycle.Lifecycle`: power and the lifecycle sequences.

The node itself keeps the boot, the COSI resources it publishes (``runtime/v1alpha2``) and the
runtime event buffer (:mod:`.events`). The servicers translate protobuf requests into calls
here and raise gRPC statuses from :class:`RPCFailure`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.clock import Clock
from pytest_talos.emulator.cosi.store import ResourceStore
from pytest_talos.emulator.faults import FaultProfile, FaultSet, MachineApiQuirk, Quirk
from pytest_talos.emulator.faults.variants import CLOCK_STEPPED_AHEAD, Variant, VariantSet
from pytest_talos.emulator.node.apply import (
    ApplyRequest,
    ApplyResult,
    MachineConfigState,
)
from pytest_talos.emulator.node.boot import finish_boot_sequence, run_boot_sequence
from pytest_talos.emulator.node.events import (
    AddressPayload,
    EventBuffer,
    Payload,
    RuntimeEvent,
    new_xid,
)
from pytest_talos.emulator.node.host import system
from pytest_talos.emulator.node.host.view import NodeHost
from pytest_talos.emulator.node.identity import (
    KubeNodeInfo,
    NodeHooks,
    NodeIdentity,
    with_node_id,
)
from pytest_talos.emulator.node.kubelet import NodeMonitor, kube_node_info
from pytest_talos.emulator.node.lifecycle import Lifecycle
from pytest_talos.emulator.node.net.network import NodeNetwork
from pytest_talos.emulator.node.net.place import NodeNetworking
from pytest_talos.emulator.node.published import (
    MachineStatus,
    publish_boot_resources,
    publish_image_verification_rules,
    publish_machine_config,
    unhealthy,
)
from pytest_talos.emulator.node.sandbox import sandboxd_enabled
from pytest_talos.emulator.node.services.faults import ServiceFaults
from pytest_talos.emulator.node.services.published import (
    LogFanout,
    failure_reason,
    publish_service_resource,
    service_event,
    service_log,
)
from pytest_talos.emulator.node.services.runner import Service, ServiceManager, services_for
from pytest_talos.releases import Release, release_of

__all__ = ["NodeState"]

WRONG_VERSION = "v1.12.6"  # MachineApiQuirk.VERSION_TAG_WRONG


class NodeState:
    """One emulated node. Call from the cluster's event loop thread only."""

    lifecycle: Lifecycle
    powered: bool

    def __init__(
        self,
        identity: NodeIdentity,
        *,
        clock: Clock,
        faults: FaultSet,
        config: bytes,
        talos_version: str,
        peers: Callable[[], Sequence[NodeIdentity]],
        hooks: NodeHooks | None = None,
        variants: VariantSet | None = None,
    ) -> None:
        if not identity.node_id:
            identity = with_node_id(identity)
        self.identity = identity
        self.clock = clock
        self.faults = faults
        self.variants = variants or VariantSet()
        self.talos_version = talos_version
        self.previous_version = talos_version
        self.peers = peers
        self.hooks = hooks or NodeHooks()
        self.store = ResourceStore(clock.now)
        self.events = EventBuffer()
        self.logs = LogFanout()
        self.machine_config = MachineConfigState(
            config,
            clock=clock,
            store=self.store,
            container=self.container,
            quirk=self.quirk,
            on_active_changed=self._on_active_changed,
            reboot=lambda actor, sequence: self.lifecycle.reboot_sequence(actor, sequence),
        )
        self.services = ServiceManager(
            services_for(
                controlplane=identity.controlplane,
                platform=identity.platform,
                extension_services=identity.extension_services,
                sandboxd=sandboxd_enabled(
                    release_of(talos_version).release, identity.platform, config
                ),
            ),
            clock=clock,
            on_change=self._on_service_change,
            on_log=self.logs.publish,
            failure_reason=self._failure_reason,
            container=self.container,
        )
        self.service_faults = ServiceFaults(
            self.services,
            clock=clock,
            profiles=self.fault_profiles,
            powered=lambda: self.powered,
            seed=identity.hostname,
        )
        self.host = NodeHost(
            identity,
            talos_version=talos_version,
            node_profiles=self.fault_profiles,
            pod_shell=self.variant(Variant.POD_SHELL),
            cilium=self.variant(Variant.CILIUM),
        )
        self.networking = NodeNetworking(
            identity,
            store=self.store,
            config=lambda: self.active_config,
            peers=peers,
            quirk=self.quirk,
            discovery_reachable=not self.variant(Variant.DISCOVERY_UNREACHABLE),
            talos_version=lambda: self.talos_version,
        )
        self.monitor = NodeMonitor(
            clock, on_unknown=lambda: self.hooks.kube_changed(), still_watched=lambda: self.powered
        )
        self.lifecycle = Lifecycle(self, clock)
        self.powered = False
        self._boot_pending = False  # the boot sequence waits for every service to be up
        self.status = MachineStatus(self.store, node=self, emit=self.emit)
        self.services_revision = 0  # bumped on every service change (reply caches use it)
        self.booted_at = clock.time()

    # ---- who the node is -----------------------------------------------------------------

    @property
    def hostname(self) -> str:
        return self.identity.hostname

    @property
    def container(self) -> bool:
        return self.identity.platform == "container"

    @property
    def controlplane(self) -> bool:
        return self.identity.controlplane

    def fault_profiles(self) -> tuple[FaultProfile, ...]:
        """The profiles of the faults that affect this node, in catalogue order."""
        return self.faults.profiles_on(self.hostname, controlplane=self.controlplane)

    def quirk(self, quirk: Quirk) -> bool:
        """Whether a fault profile that affects this node turns the behaviour ``quirk`` on."""
        return self.faults.quirk(quirk, self.hostname, controlplane=self.controlplane)

    def variant(self, variant: Variant) -> bool:
        """Whether the cluster runs as the healthy variant ``variant``."""
        return self.variants.on(variant)

    def emit(self, payload: Payload, actor_id: str = "") -> RuntimeEvent:
        now = self.clock.time()
        event = RuntimeEvent(new_xid(now), now, payload, actor_id)
        self.events.append(event)
        return event

    # ---- the parts' data, where callers read it ----------------------------------------------

    @property
    def active_config(self) -> bytes:
        return self.machine_config.active_config

    @active_config.setter
    def active_config(self, data: bytes) -> None:
        self.machine_config.active_config = data

    @property
    def try_pending(self) -> bool:
        return self.machine_config.try_pending

    @property
    def rootfs(self) -> dict[str, system.FileEntry]:
        return self.host.rootfs

    @property
    def stage(self) -> str:
        return self.status.stage

    @property
    def network(self) -> NodeNetwork | None:
        return self.networking.network

    # ---- boot --------------------------------------------------------------------------

    def boot(self) -> None:
        """Boot from the persisted config: fresh resources, events and services."""
        self.store.clear()
        self.events.clear()
        self.machine_config.reset_for_boot()
        self.powered = True
        self.booted_at = self.clock.time()
        self.lifecycle.sequence_actor = ""
        self.status.forget()
        self.monitor.reset()
        self.status.stage = "booting"
        self._boot_pending = False
        self._publish_machine_status()  # booting, not ready: no service runs yet
        self.emit(AddressPayload(self.hostname, (self.identity.address,)))
        publish_boot_resources(
            self.store,
            self.identity,
            talos_version=self.talos_version,
            networking=self.networking,
        )
        publish_machine_config(
            self.store,
            active=self.active_config,
            persisted=self.machine_config.persisted_config,
            from_state=self.machine_config.boot_config_from_state(),
        )
        publish_image_verification_rules(
            self.store, active=self.active_config, release=self.release
        )
        self.services.set_health_fault("machined", None)
        with self._status_held_back():  # then one status: the stage the boot reached
            run_boot_sequence(
                self.emit,
                self.services,
                container=self.container,
                rtc_ahead=CLOCK_STEPPED_AHEAD if self.variant(Variant.CLOCK_STEPPED) else 0.0,
            )
            self._boot_pending = True
            self._finish_boot_when_up()
        self.service_faults.arm_after_boot()
        self.hooks.kube_changed()

    def _finish_boot_when_up(self) -> None:
        """StartAllServices returns once every service is up: the boot sequence ends."""
        if not (self._boot_pending and self.powered and self.services.all_up()):
            return
        self._boot_pending = False
        finish_boot_sequence(self.emit)
        self.status.stage = "running"
        if not self.status.held:
            self._publish_machine_status()

    # ---- resources -------------------------------------------------------------------

    def _publish_machine_status(self) -> None:
        self.status.publish(self.lifecycle.sequence_actor)

    def _status_held_back(self) -> contextlib.AbstractContextManager[None]:
        return self.status.held_back(lambda: self.lifecycle.sequence_actor)

    def unhealthy_services(self) -> list[str]:
        return unhealthy(self.services, controlplane=self.controlplane)

    def publish_members(self) -> None:
        """The Members resources, as discovery sees the cluster now (see :mod:`.net.place`)."""
        self.networking.publish_members()

    # ---- machine config -------------------------------------------------------------------

    def apply_configuration(self, request: ApplyRequest) -> ApplyResult:
        return self.machine_config.apply_configuration(request)

    def _on_active_changed(self, old: bytes, new: bytes) -> None:
        publish_image_verification_rules(self.store, active=new, release=self.release)
        if mc.kubelet_extra_args(old) != mc.kubelet_extra_args(new):
            # kubelet is restarted with its new arguments (so it fails, or heals).
            self.services.restart_if_running("kubelet")
        if mc.node_labels(old) != mc.node_labels(new):
            self.hooks.kube_changed()

    # ---- services ----------------------------------------------------------------------

    def _on_service_change(self, service: Service, message: str | None) -> None:
        """A service changed: ``message`` is its new event (None: only what ServiceList shows
        changed, e.g. its health while not Running, and no event is published)."""
        self.services_revision += 1
        if message is None:
            return
        self.emit(service_event(service, message))
        publish_service_resource(self.store, service, quirk=self.quirk)
        if self.powered and not self.status.held:
            self._publish_machine_status()
        if self._boot_pending:
            self._finish_boot_when_up()
        if service.id == "kubelet":
            self.monitor.track(service)
            self.hooks.kube_changed()

    def subscribe_logs(self, subscriber: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``subscriber(service_id, line)`` for every new service log line."""
        return self.logs.subscribe(subscriber)

    def _failure_reason(self, service_id: str) -> str | None:
        return failure_reason(service_id, config=self.active_config, quirk=self.quirk)

    def service_start(self, service_id: str) -> str:
        return self.services.api_start(service_id)

    def service_stop(self, service_id: str) -> str:
        return self.services.api_stop(service_id)

    def service_restart(self, service_id: str) -> str:
        return self.services.api_restart(service_id)

    def service_log(self, service_id: str) -> list[str]:
        return service_log(self.services, service_id, quirk=self.quirk)

    # ---- version, host and Kubernetes views ------------------------------------------------

    def api_version_tag(self) -> str:
        return (
            WRONG_VERSION if self.quirk(MachineApiQuirk.VERSION_TAG_WRONG) else self.talos_version
        )

    def processes(self) -> list[system.ProcessEntry]:
        return self.host.processes(
            running_services=[s.id for s in self.services.services.values() if s.running],
            config=self.active_config,
            pod_network_pods=self.networking.pod_network_pods(),
        )

    def mounts(self) -> list[system.MountEntry]:
        return self.host.mounts()

    @property
    def release(self) -> Release:
        """The release-table entry of the Talos the node runs now (an upgrade changes it)."""
        return release_of(self.talos_version).release

    def listeners(self) -> list[system.Listener]:
        return self.host.listeners(
            config=self.active_config,
            pod_network_pods=self.networking.pod_network_pods(),
            etcd_extra_ports=self.release.etcd_extra_ports,
        )

    def file(self, path: str, *, follow: bool = False) -> system.FileEntry | None:
        """The entry at ``path`` as lstat (``follow``: stat) sees it, symlinked parents resolved."""
        return self.host.file(path, follow=follow, booted_at=self.booted_at)

    def etcd_members(self) -> list[NodeIdentity]:
        return self.networking.etcd_members()

    def kube_node(self) -> KubeNodeInfo:
        return kube_node_info(
            self.identity,
            config=self.active_config,
            powered=self.powered,
            monitor=self.monitor,
            quirk=self.quirk,
            booted_at=self.booted_at,
            now=self.clock.time(),
            talos_version=self.talos_version,
            labels_kept_after_revert=self.machine_config.labels_kept_after_revert,
        )

    # ---- lifecycle (the sequences are :mod:`.lifecycle`'s; these are their steps) ----------

    def reboot(self) -> str:
        return self.lifecycle.reboot()

    def upgrade(self, image: str) -> str:
        return self.lifecycle.upgrade(image)

    def rollback(self) -> None:
        self.lifecycle.rollback()

    def power_on(self) -> None:
        """Boot the node (after a reboot; tests may also power a shut-down node back on)."""
        self.lifecycle.power_on()

    def enter_stage(self, stage: str) -> None:
        """The first step of going down: a try is reverted (v1alpha1_runtime.go: try never
        persists), the service faults stop, the stage changes and every service but apid
        stops (apid serves until the very end)."""
        self.machine_config.cancel_try()
        self.service_faults.cancel()
        with self._status_held_back():  # then one status: the new stage, not ready
            self.status.stage = stage
            for service in reversed(list(self.services.services.values())):
                if service.id != "apid":
                    self.services.stop(service)

    def power_off(self) -> None:
        """The last step of going down: every service stops and the API goes away."""
        self.services.stop_all()
        self.services.cancel_all()
        self.monitor.cancel()
        self.powered = False
        self.hooks.api_down()
        self.hooks.kube_changed()

    def boot_version(self, version: str | None) -> None:
        """Power on into ``version`` (None: the same one) and boot the persisted config."""
        if version is not None:
            self.previous_version, self.talos_version = self.talos_version, version
        self.host.booted_version(self.talos_version)
        self.boot()
        self.hooks.api_up()

    def stop(self) -> None:
        """Cancel every timer (the cluster is stopping)."""
        self.machine_config.cancel_try()
        self.services.cancel_all()
        self.monitor.cancel()
        self.service_faults.cancel(reset_health=False)
        self.lifecycle.cancel()
