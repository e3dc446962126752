"""The truth of one emulated Talos node, in plain Python (no gRPC).

A :class:`NodeState` composes one state object per concern, each owning its data:

- :class:`~.nodeapply.MachineConfigState`: the machine configs, the apply flow, try mode;
- :class:`~.services.ServiceManager` and :class:`~.servicefaults.ServiceFaults`: the
  services, their runner and the faults that act on them;
- :class:`~.hostview.NodeHost`: the root filesystem, mounts, processes and sockets;
- :class:`~.nodenet.NodeNetworking`: links, addresses, the pod network, discovery, etcd;
- :class:`~.kubenode.NodeMonitor`: what Kubernetes knows of the kubelet;
- :class:`~.lifecycle.Lifecycle`: power and the lifecycle sequences.

The node itself keeps the boot, the COSI resources it publishes (``runtime/v1alpha2``) and the
runtime event buffer (:mod:`.events`). The servicers translate protobuf requests into calls
here and raise gRPC statuses from :class:`NodeFailure`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator import system
from pytest_talos.emulator.bootseq import finish_boot_sequence, run_boot_sequence
from pytest_talos.emulator.clock import Clock
from pytest_talos.emulator.errors import NodeFailure, ServiceRefused
from pytest_talos.emulator.events import (
    AddressPayload,
    EventBuffer,
    MachineStatusPayload,
    Payload,
    RuntimeEvent,
    ServiceStatePayload,
    new_xid,
)
from pytest_talos.emulator.faults import Fault, FaultSet
from pytest_talos.emulator.hostview import NodeHost
from pytest_talos.emulator.identity import (
    KubeNodeInfo,
    NodeHooks,
    NodeIdentity,
    Role,
    etcd_member_id,
    node_id_for,
    with_node_id,
)
from pytest_talos.emulator.kubenode import NodeMonitor, kube_node_info
from pytest_talos.emulator.lifecycle import Lifecycle
from pytest_talos.emulator.network import NodeNetwork
from pytest_talos.emulator.nodeapply import (
    CONFIG_ANNOTATIONS,
    DEFAULT_TRY_TIMEOUT,
    ApplyRequest,
    ApplyResult,
    MachineConfigState,
    go_duration,
)
from pytest_talos.emulator.nodenet import NodeNetworking
from pytest_talos.emulator.resources import DEFINITIONS, NAMESPACES, ResourceStore, T
from pytest_talos.emulator.servicefaults import ServiceFaults
from pytest_talos.emulator.services import Service, ServiceManager, services_for
from pytest_talos.emulator.variants import Variant, VariantSet

__all__ = [
    "DEFAULT_TRY_TIMEOUT",
    "ApplyRequest",
    "ApplyResult",
    "KubeNodeInfo",
    "NodeFailure",
    "NodeHooks",
    "NodeIdentity",
    "NodeState",
    "Role",
    "ServiceRefused",
    "etcd_member_id",
    "go_duration",
]

WRONG_VERSION = "v1.12.6"  # fault wrong-version
OWNER_SERVICES = "v1alpha1.ServiceController"


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
        self.machine_config = MachineConfigState(
            config,
            clock=clock,
            store=self.store,
            container=self.container,
            fault=self.fault,
            on_active_changed=self._on_active_changed,
            reboot=lambda actor, sequence: self.lifecycle.reboot_sequence(actor, sequence),
        )
        self.services = ServiceManager(
            services_for(
                controlplane=identity.controlplane,
                platform=identity.platform,
                extension_services=identity.extension_services,
            ),
            clock=clock,
            on_change=self._on_service_change,
            on_log=self._on_service_log,
            failure_reason=self._failure_reason,
            container=self.container,
        )
        self.service_faults = ServiceFaults(
            self.services, clock=clock, fault=self.fault, powered=lambda: self.powered
        )
        self.host = NodeHost(
            identity,
            talos_version=talos_version,
            fault=self.fault,
            node_faults=lambda: faults.on_node(identity.hostname, controlplane=self.controlplane),
            pod_shell=self.variant(Variant.POD_SHELL),
        )
        self.networking = NodeNetworking(
            identity,
            store=self.store,
            config=lambda: self.active_config,
            peers=peers,
            fault=self.fault,
            discovery_reachable=not self.variant(Variant.DISCOVERY_UNREACHABLE),
            talos_version=lambda: self.talos_version,
        )
        self.monitor = NodeMonitor(
            clock, on_unknown=self.hooks.kube_changed, still_watched=lambda: self.powered
        )
        self.lifecycle = Lifecycle(self, clock)
        self.powered = False
        self._boot_pending = False  # the boot sequence waits for every service to be up
        self.stage = "booting"
        self._status_held = False  # services change in bulk: publish the status once after
        self._last_status: tuple[str, bool, tuple[tuple[str, str], ...]] | None = None
        self._log_subscribers: list[Callable[[str, str], None]] = []
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

    def fault(self, fault: Fault) -> bool:
        """Whether the fault profile ``fault`` affects this node."""
        return self.faults.on(fault, self.hostname, controlplane=self.controlplane)

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
    def persisted_config(self) -> bytes:
        return self.machine_config.persisted_config

    @property
    def rebooting(self) -> bool:
        return self.machine_config.rebooting

    @property
    def try_pending(self) -> bool:
        return self.machine_config.try_pending

    @property
    def rootfs(self) -> dict[str, system.FileEntry]:
        return self.host.rootfs

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
        self._last_status = None
        self.monitor.reset()
        self.stage = "booting"
        self._boot_pending = False
        self._publish_machine_status()  # booting, not ready: no service runs yet
        self.emit(AddressPayload(self.hostname, (self.identity.address,)))
        self._publish_static_resources()
        self._publish_machine_config()
        self.services.set_health_fault("machined", None)
        with self._status_held_back():  # then one status: the stage the boot reached
            run_boot_sequence(self.emit, self.services, container=self.container)
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
        self.stage = "running"
        if not self._status_held:
            self._publish_machine_status()

    # ---- resources -------------------------------------------------------------------

    def _publish_static_resources(self) -> None:
        store, ident = self.store, self.identity
        for definition in DEFINITIONS.values():
            store.put("meta", T.RESOURCE_DEFINITIONS, definition.id, definition.spec())
        for name, description in NAMESPACES.items():
            store.put("meta", T.NAMESPACES, name, {"description": description})
        store.put(
            "runtime", T.VERSIONS, "version", {"version": self.talos_version, "name": "Talos"}
        )
        # config/machine_type.go: the spec is the bare machine.Type (`controlplane`).
        store.put("config", T.MACHINE_TYPES, "machine-type", ident.role)
        store.put("cluster", T.IDENTITIES, "local", {"nodeId": ident.node_id})
        store.put(
            "cluster",
            T.INFOS,
            "current",
            {
                "clusterId": node_id_for("cluster", ident.cluster_name),
                "clusterName": ident.cluster_name,
            },
        )
        self.networking.publish()
        # network/hostname_status.go: the short hostname and the domain (DHCP, cloud, config).
        hostname = store.put(
            "network",
            T.HOSTNAME_STATUSES,
            "hostname",
            {"hostname": self.hostname, "domainname": ident.domain},
        )
        # controllers/k8s/nodename.go: the short hostname (no registerWithFQDN here) and the
        # version of the HostnameStatus it came from.
        nodename = {
            "nodename": self.hostname,
            "hostnameVersion": str(hostname.version),
            "skipNodeRegistration": False,
        }
        store.put("k8s", T.NODENAMES, "nodename", nodename, owner="k8s.NodenameController")
        if ident.controlplane:
            member_id = f"{etcd_member_id(self.hostname):016x}"
            store.put("etcd", T.ETCD_MEMBERS, "local", {"memberID": member_id})
        for index, name in enumerate(ident.extensions):
            # INFERRED spec shape (no proto restated: proto_spec stays empty).
            spec = {
                "image": f"{index:03d}-{name}.sqsh",
                "metadata": {
                    "name": name,
                    "version": self.talos_version,
                    "author": "Sidero Labs",
                    "description": f"{name} extension",
                },
            }
            store.put("runtime", T.EXTENSION_STATUSES, str(index), spec)
        self.publish_members()

    def publish_members(self) -> None:
        """The Members resources, as discovery sees the cluster now (see :mod:`.nodenet`)."""
        self.networking.publish_members()

    def _publish_machine_config(self) -> None:
        """What AcquireController sets at boot (internal/app/machined/pkg/controllers/config/
        acquire.go): `v1alpha1` always; `persistent` only when the config did not come from
        the STATE partition alone (see :meth:`MachineConfigState.boot_config_from_state`)."""
        from_state = self.machine_config.boot_config_from_state()
        self.store.put(
            "config",
            T.MACHINE_CONFIGS,
            "v1alpha1",
            self.active_config,
            annotations=CONFIG_ANNOTATIONS,
            always_bump=True,
        )
        if not from_state:
            self.store.put(
                "config",
                T.MACHINE_CONFIGS,
                "persistent",
                self.persisted_config,
                annotations=CONFIG_ANNOTATIONS,
                always_bump=True,
            )

    def _publish_machine_status(self) -> None:
        """The MachineStatuses resource and, when it changes, a MachineStatusEvent
        (``controllers/runtime/machine_status.go``).

        The event carries exactly what the resource says: stage, ready, unmet conditions.
        """
        unhealthy = self.unhealthy_services()
        unmet: tuple[tuple[str, str], ...] = ()
        if unhealthy:
            unmet = (("services", f"unhealthy services: {', '.join(unhealthy)}"),)
        status = (self.stage, not unmet, unmet)
        if status == self._last_status:
            return
        self._last_status = status
        spec = {
            "stage": self.stage,
            "status": {
                "ready": not unmet,
                "unmetConditions": [{"name": name, "reason": why} for name, why in unmet],
            },
        }
        self.store.put(
            "runtime", T.MACHINE_STATUSES, "machine", spec, owner="runtime.MachineStatusController"
        )
        event_stage = self.stage.upper().replace(" ", "_")  # "shutting down" -> SHUTTING_DOWN
        actor = self.lifecycle.sequence_actor
        self.emit(MachineStatusPayload(event_stage, not unmet, unmet), actor)

    @contextlib.contextmanager
    def _status_held_back(self) -> Iterator[None]:
        """Services change in bulk (boot, shutdown): publish the machine status once, after."""
        self._status_held = True
        try:
            yield
        finally:
            self._status_held = False
        self._publish_machine_status()

    def unhealthy_services(self) -> list[str]:
        """What keeps the machine from being ready (controllers/runtime/machine_status.go
        servicesCheck): a running service whose health is known and bad, or a required one
        (apid, machined, kubelet; etcd and trustd on control planes) that is not running."""
        required = {"apid", "machined", "kubelet"}
        if self.identity.controlplane:
            required |= {"etcd", "trustd"}
        return sorted(
            s.id
            for s in self.services.services.values()
            if (s.running and not s.health.unknown and not s.health.healthy)
            or (not s.running and s.id in required)
        )

    # ---- machine config -------------------------------------------------------------------

    def apply_configuration(self, request: ApplyRequest) -> ApplyResult:
        return self.machine_config.apply_configuration(request)

    def cancel_try(self) -> None:
        self.machine_config.cancel_try()

    def _on_active_changed(self, old: bytes, new: bytes) -> None:
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
        # system/events/events.go AsProto: an event carries the health only when it is a
        # Running one (service_runner.go UpdateState, healthUpdate); else the zero Status
        health = service.health if service.running else None
        self.emit(
            ServiceStatePayload(
                service.id,
                service.state.upper(),
                message,
                healthy=health.healthy if health else False,
                unknown=health.unknown if health else True,
                last_message=health.last_message if health else "",
            )
        )
        # controllers/v1alpha1/service.go: the Services resource exists only while the
        # service is Running (created or updated on each RUNNING event, else destroyed).
        if service.running:
            spec = {
                "running": True,
                "healthy": service.health.healthy,
                "unknown": service.health.unknown,
            }
            self.store.put("runtime", T.SERVICES, service.id, spec, owner=OWNER_SERVICES)
        elif not self.fault(Fault.SERVICES_RESOURCE_STALE):
            self.store.destroy("runtime", T.SERVICES, service.id)
        if self.powered and not self._status_held:
            self._publish_machine_status()
        if self._boot_pending:
            self._finish_boot_when_up()
        if service.id == "kubelet":
            self.monitor.track(service)
            self.hooks.kube_changed()

    def _on_service_log(self, service: Service, line: str) -> None:
        for subscriber in list(self._log_subscribers):
            subscriber(service.id, line)

    def subscribe_logs(self, subscriber: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``subscriber(service_id, line)`` for every new service log line."""
        self._log_subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._log_subscribers:
                self._log_subscribers.remove(subscriber)

        return unsubscribe

    def _failure_reason(self, service_id: str) -> str | None:
        """Why a service cannot run right now, as the lines it logs before it exits.

        A kubelet given an unknown flag exits at once and is restarted every 5 s; the cause
        shows only in its last event and its log (observed on Talos v1.13.10 nodes).
        """
        if service_id != "kubelet":
            return None
        unknown = mc.unknown_kubelet_flags(self.active_config)
        if unknown:
            flag = unknown[0]
            return (
                f"Error: failed to parse kubelet flag: unknown flag: --{flag}\n"
                f'E0000 command failed err="failed to parse kubelet flag: unknown flag: --{flag}"'
            )
        if self.fault(Fault.KUBELET_CRASHLOOP):
            return (
                'E0000 command failed err="failed to run Kubelet: validate service connection: '
                'CRI v1 runtime API is not implemented for endpoint"'
            )
        return None

    def service_start(self, service_id: str) -> str:
        return self.services.api_start(service_id)

    def service_stop(self, service_id: str) -> str:
        return self.services.api_stop(service_id)

    def service_restart(self, service_id: str) -> str:
        return self.services.api_restart(service_id)

    def service_log(self, service_id: str) -> list[str]:
        """A service's log; runtime/logging/circular.go: a log exists once the service's
        runner first wrote to it, else `log "<id>" was not registered`."""
        service = self.services.services.get(service_id)
        # fault logs-broken: containerd runs, but its log is not registered
        broken = service_id == "containerd" and self.fault(Fault.LOGS_BROKEN)
        if service is None or not service.log_registered or broken:
            raise NodeFailure("UNKNOWN", f'log "{service_id}" was not registered')
        if service_id == "apid" and self.fault(Fault.EMPTY_LOGS):
            return []  # fault empty-logs: apid runs, but its log holds nothing
        return list(service.log)

    def running_services(self) -> list[str]:
        return [s.id for s in self.services.services.values() if s.running]

    # ---- version, host and Kubernetes views ------------------------------------------------

    def api_version_tag(self) -> str:
        return WRONG_VERSION if self.fault(Fault.WRONG_VERSION) else self.talos_version

    def processes(self) -> list[system.ProcessEntry]:
        return self.host.processes(
            running_services=self.running_services(),
            config=self.active_config,
            pod_network_pods=self.networking.pod_network_pods(),
        )

    def mounts(self) -> list[system.MountEntry]:
        return self.host.mounts()

    def listeners(self) -> list[system.Listener]:
        return self.host.listeners(
            config=self.active_config, pod_network_pods=self.networking.pod_network_pods()
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
            fault=self.fault,
            booted_at=self.booted_at,
            now=self.clock.time(),
            talos_version=self.talos_version,
            labels_kept_after_revert=self.machine_config.labels_kept_after_revert,
        )

    # ---- lifecycle (see :mod:`.lifecycle`) -----------------------------------------------------

    def reboot(self) -> str:
        return self.lifecycle.reboot()

    def shutdown(self) -> str:
        return self.lifecycle.shutdown()

    def reset(self) -> str:
        return self.lifecycle.reset()

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
        self.cancel_try()
        self.service_faults.cancel()
        with self._status_held_back():  # then one status: the new stage, not ready
            self.stage = stage
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
        self.cancel_try()
        self.services.cancel_all()
        self.monitor.cancel()
        self.service_faults.cancel(reset_health=False)
        self.lifecycle.cancel()
