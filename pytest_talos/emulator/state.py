"""The truth of one emulated Talos node, in plain Python (no gRPC).

A :class:`NodeState` owns the machine config (active and persisted) and the MachineConfig
resource versions (``runtime/v1alpha2/v1alpha2_state.go``), the services (:mod:`.services`),
the runtime event buffer
(:mod:`.events`), the COSI resources (:mod:`.resources`), the static system data
(:mod:`.system`), the try-mode timer and the power state. The servicers translate protobuf
requests into calls here and raise gRPC statuses from :class:`NodeFailure`.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator import system
from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.events import (
    AddressPayload,
    EventBuffer,
    MachineStatusPayload,
    Payload,
    PhasePayload,
    RuntimeEvent,
    SequencePayload,
    ServiceStatePayload,
    TaskPayload,
    new_xid,
)
from pytest_talos.emulator.faults import Fault, FaultSet
from pytest_talos.emulator.machineconfig.accessors import (
    cni_name,
    coredns_enabled,
    discovery_enabled,
    proxy_disabled,
)
from pytest_talos.emulator.network import COREDNS_REPLICAS, NodeNetwork
from pytest_talos.emulator.nodeapply import (
    CONFIG_ANNOTATIONS,
    DEFAULT_TRY_TIMEOUT,
    ApplyRequest,
    ApplyResult,
    ConfigMixin,
    NodeFailure,
    go_duration,
)
from pytest_talos.emulator.resources import (
    DEFINITIONS,
    NAMESPACES,
    ResourceStore,
    StoreEvent,
    T,
)
from pytest_talos.emulator.services import Service, ServiceManager, ServiceRefused, services_for
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
    "ServiceRefused",
    "go_duration",
]

Role = Literal["controlplane", "worker"]
REBOOT_DOWNTIME = 5.0  # emulated seconds the API is down during a reboot (INFERRED)
LIFECYCLE_DELAY = 0.1  # emulated seconds from the reply to the start of the sequence (INFERRED)
# Emulated seconds from the stage change (services stopping) to apid going down (INFERRED):
# long enough for the Events streams to deliver the sequence's first events.
SHUTDOWN_DELAY = 0.5
# Kubernetes (not Talos): kube-controller-manager's --node-monitor-grace-period default. A
# Node whose kubelet has not posted status for this long turns Unknown (INFERRED, emulated s).
NODE_MONITOR_GRACE = 40.0
FLAP_PERIOD = 30.0  # fault flapping-service
# fault health-flap-running: cri's health check fails for HEALTH_FLAP_DOWN s every
# HEALTH_FLAP_PERIOD s (the error is what a dial of its socket says when it does not answer)
HEALTH_FLAP_PERIOD = 20.0
HEALTH_FLAP_DOWN = 5.0
CRI_UNHEALTHY = "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
# faults service-down, machined-unhealthy: emulated seconds after boot the defect shows
FAULT_AFTER_BOOT = 2.0
# fault machined-unhealthy: what the dial of the machine socket says when machined's listen
# backlog is full (INFERRED cause; the check is services/machined.go HealthFunc)
MACHINED_UNHEALTHY = (
    "dial unix /system/run/machined/machine.sock: connect: resource temporarily unavailable"
)
CONTAINER_ONLY = "method is not supported in container mode"  # runtime/mode.go capabilities
WRONG_VERSION = "v1.12.6"  # fault wrong-version
OWNER_SERVICES = "v1alpha1.ServiceController"


@dataclass(frozen=True)
class NodeIdentity:
    hostname: str
    role: Role
    address: str
    prefix_length: int = 24
    platform: str = "container"
    cluster_name: str = "talos-default"
    node_id: str = ""
    kubernetes_version: str = "1.36.0"
    extensions: tuple[str, ...] = ()  # system extension names (ExtensionStatuses)
    extension_services: tuple[str, ...] = ()  # ext-<name> services
    domain: str = ""  # DNS domain (DHCP, cloud metadata); "" for none

    @property
    def fqdn(self) -> str:
        """``host.domain`` when the node has a domain, else the short hostname."""
        return f"{self.hostname}.{self.domain}" if self.domain else self.hostname

    @property
    def controlplane(self) -> bool:
        return self.role == "controlplane"


@dataclass(frozen=True)
class KubeNodeInfo:
    """What the emulated Kubernetes API shows for this node.

    ``ready`` is Ready=True. ``status_unknown`` means the node controller gave up on a
    kubelet that stopped posting status: every condition reads Unknown (then ``ready`` is
    false), last heard of at ``last_heartbeat`` and turned Unknown at ``unknown_since``.
    """

    name: str
    address: str
    labels: dict[str, str]
    ready: bool
    controlplane: bool
    kubelet_version: str
    os_image: str
    pod_cidr: str
    created: float
    status_unknown: bool = False
    last_heartbeat: float | None = None  # emulated Unix seconds
    unknown_since: float | None = None
    ready_since: float | None = None  # Ready's lastTransitionTime when it is not ``created``
    pressure: tuple[str, ...] = ()  # the pressure conditions that are True
    unschedulable: bool = False  # cordoned (spec.unschedulable)


class NodeHooks:
    """What the node asks of its surroundings; the cluster overrides these."""

    def api_down(self) -> None:
        """The node stops serving (reboot, shutdown, reset): close its listeners."""

    def api_up(self) -> None:
        """The node serves again after a reboot."""

    def kube_changed(self) -> None:
        """The node's Kubernetes Node object changed (labels, readiness)."""


def _node_id(hostname: str, cluster: str) -> str:
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    number = int.from_bytes(hashlib.sha256(f"{cluster}/{hostname}".encode()).digest(), "big")
    chars: list[str] = []
    while number and len(chars) < 43:
        number, digit = divmod(number, 62)
        chars.append(alphabet[digit])
    return "".join(chars)


def etcd_member_id(hostname: str) -> int:
    return int.from_bytes(hashlib.sha256(hostname.encode()).digest()[:8], "big") >> 1


class NodeState(ConfigMixin):
    """One emulated node. Call from the cluster's event loop thread only."""

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
            identity = _with_node_id(identity)
        self.identity = identity
        self.clock = clock
        self.faults = faults
        self.variants = variants or VariantSet()
        self.talos_version = talos_version
        self.previous_version = talos_version
        self._next_version: str | None = None  # booted by the next power-on (upgrade, rollback)
        self.peers = peers
        self.hooks = hooks or NodeHooks()
        self.active_config = config
        self.persisted_config = config
        self.store = ResourceStore(clock.now)
        self.events = EventBuffer()
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
            container=identity.platform == "container",
        )
        self.powered = False
        self._boot_pending = False  # the boot sequence waits for every service to be up
        self.stage = "booting"
        self.rebooting = False  # a REBOOT-mode apply was accepted (v1alpha1_server.go)
        self._applying = False
        self._try_timer: Cancellable | None = None
        self._try_target: bytes | None = None
        self._flap_timer: Cancellable | None = None
        self._health_flap_timer: Cancellable | None = None  # fault health-flap-running
        self._lifecycle_timer: Cancellable | None = None
        self._sequence_actor = ""  # actor id of the lifecycle sequence running, if any
        self._status_held = False  # services change in bulk: publish the status once after
        self._last_status: tuple[str, bool, tuple[tuple[str, str], ...]] | None = None
        self._kubelet_silent_since: float | None = None  # emulated Unix seconds
        self._kube_status_unknown_since: float | None = None
        self._kube_grace_timer: Cancellable | None = None
        self._log_subscribers: list[Callable[[str, str], None]] = []
        self.services_revision = 0  # bumped on every service change (reply caches use it)
        self.booted_at = clock.time()
        self.rootfs = system.build_rootfs(
            hostname=identity.hostname,
            version=talos_version,
            controlplane=identity.controlplane,
            shell=self.fault(Fault.SHELL_PRESENT),
            sshd=self.fault(Fault.SSH_OPEN),
            package_manager=self.fault(Fault.PACKAGE_MANAGER_PRESENT),
            extensions=identity.extensions,
            extra_files=system.fault_files(self.fault),
        )

    # ---- small helpers ---------------------------------------------------------------

    @property
    def hostname(self) -> str:
        return self.identity.hostname

    @property
    def container(self) -> bool:
        return self.identity.platform == "container"

    def fault(self, fault: Fault) -> bool:
        """Whether the fault profile ``fault`` affects this node."""
        return self.faults.on(fault, self.hostname, controlplane=self.identity.controlplane)

    def variant(self, variant: Variant) -> bool:
        """Whether the cluster runs as the healthy variant ``variant``."""
        return self.variants.on(variant)

    def emit(self, payload: Payload, actor_id: str = "") -> RuntimeEvent:
        now = self.clock.time()
        event = RuntimeEvent(new_xid(now), now, payload, actor_id)
        self.events.append(event)
        return event

    # ---- boot --------------------------------------------------------------------------

    def boot(self) -> None:
        """Boot from the persisted config: fresh resources, events and services."""
        self.store.clear()
        self.events.clear()
        self.active_config = self.persisted_config
        self._try_target = None
        self.rebooting = False
        self.powered = True
        self.booted_at = self.clock.time()
        self._sequence_actor = ""
        self._last_status = None
        self._kubelet_silent_since = None
        self._kube_status_unknown_since = None
        self._cancel_kube_grace()
        self.stage = "booting"
        self._boot_pending = False
        self._publish_machine_status()  # booting, not ready: no service runs yet
        self.emit(AddressPayload(self.hostname, (self.identity.address,)))
        self._publish_static_resources()
        self._publish_machine_config()
        self.services.set_health_fault("machined", None)
        with self._status_held_back():  # then one status: the stage the boot reached
            self._emit_boot_sequence()
        if self.fault(Fault.MACHINED_UNHEALTHY):
            # fault machined-unhealthy: a little after boot, machined's health check (a dial
            # of its socket, services/machined.go HealthFunc) starts failing; it keeps running
            self.services.health_fault_later("machined", FAULT_AFTER_BOOT, MACHINED_UNHEALTHY)
        if self.fault(Fault.FLAPPING_SERVICE):
            self._schedule_flap()
        if self.fault(Fault.SERVICE_STUCK_PREPARING) and "trustd" in self.services.services:
            # fault service-stuck-preparing: trustd is restarted a little after boot and its
            # pre-start step never returns
            self.services.stick_later("trustd", FAULT_AFTER_BOOT)
        if self.fault(Fault.HEALTH_FLAP_RUNNING) and "cri" in self.services.services:
            self._schedule_health_flap(FAULT_AFTER_BOOT, failing=True)
        if self.fault(Fault.SERVICE_DOWN) and "trustd" in self.services.services:
            # fault service-down: trustd stops a little after boot and nothing starts it again
            self.services.stop_later("trustd", FAULT_AFTER_BOOT)
        self.hooks.kube_changed()

    def _emit_boot_sequence(self) -> None:
        """The initialize and boot sequences, with the services each phase starts, at once.

        internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go (Initialize, Boot)
        and v1alpha1_sequencer_tasks.go (the task names, StartAllServices). The boot ends
        (its SequenceEvent STOP, stage running) only once every service is up: until then
        StartAllServices is still waiting.
        """
        container = self.container
        self.emit(SequencePayload("initialize", "START"))
        if container:
            initialize = [
                ("machined", ("startApid", "startMachined", "startContainerd")),
                ("config", ("loadConfig",)),
            ]
        else:
            initialize = [
                ("systemRequirements", ("enforceKSPPRequirements",)),
                (
                    "earlyServices",
                    (
                        "startUdevd",
                        "startMachined",
                        "startApid",
                        "startAuditd",
                        "startSyslogd",
                        "startContainerd",
                    ),
                ),
                ("usb", ("waitForUSB",)),
                ("meta", ("reloadMeta",)),
                ("dashboard", ("startDashboard",)),
                ("config", ("loadConfig",)),
            ]
        for phase, tasks in initialize:
            self._run_phase(phase, tasks)
        self.emit(SequencePayload("initialize", "STOP"))
        self.emit(SequencePayload("boot", "START"))
        boot = [
            ("memorySizeCheck", ("memorySizeCheck",)),
            ("diskSizeCheck", ("diskSizeCheck",)),
            ("env", ("setUserEnvVars", "waitForCARoots")),
            ("dbus", ("startDBus",)),
            *([("sharedFilesystems", ("setupSharedFilesystems",))] if container else []),
            ("ephemeral", ("mountEphemeralPartition",)),
            *(
                []
                if container
                else [("udevSetup", ("writeUdevRules",)), ("userDisks", ("mountUserDisks",))]
            ),
            ("userSetup", ("writeUserFiles",)),
        ]
        for phase, tasks in boot:
            self._run_phase(phase, tasks)
        self.emit(PhasePayload("startEverything", "START"))
        self.emit(TaskPayload("startAllServices", "START"))
        # StartAllServices: cri, and trustd + etcd on control planes; kubelet is started by
        # controllers/k8s/kubelet_service.go, extension services by their controller
        self.services.boot(
            [
                "cri",
                "trustd",
                "etcd",
                "kubelet",
                *(sid for sid in self.services.services if sid.startswith("ext-")),
            ]
        )
        self._boot_pending = True
        self._finish_boot_when_up()

    def _run_phase(self, phase: str, tasks: Sequence[str]) -> None:
        starts = {  # the tasks that start a service (v1alpha1_sequencer_tasks.go)
            "startApid": "apid",
            "startMachined": "machined",
            "startContainerd": "containerd",
            "startUdevd": "udevd",
            "startAuditd": "auditd",
            "startSyslogd": "syslogd",
            "startDashboard": "dashboard",
        }
        self.emit(PhasePayload(phase, "START"))
        for task in tasks:
            self.emit(TaskPayload(task, "START"))
            if task in starts:
                self.services.boot([starts[task]])
            self.emit(TaskPayload(task, "STOP"))
        self.emit(PhasePayload(phase, "STOP"))

    def _finish_boot_when_up(self) -> None:
        """StartAllServices returns once every service is up: the boot sequence ends."""
        if not (self._boot_pending and self.powered and self.services.all_up()):
            return
        self._boot_pending = False
        self.emit(TaskPayload("startAllServices", "STOP"))
        self.emit(PhasePayload("startEverything", "STOP"))
        self.emit(SequencePayload("boot", "STOP"))
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
                "clusterId": _node_id("cluster", ident.cluster_name),
                "clusterName": ident.cluster_name,
            },
        )
        self._publish_network()
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

    # ---- network (controllers/network/*.go) ---------------------------------------------

    network: NodeNetwork | None = None  # the links and addresses of the booted node
    _cni_watch: Callable[[], None] | None = None

    def _k8s_subnets(self) -> list[str]:
        """What address_filter.go filters on: the config's pod and service CIDRs, plus the
        Node's podCIDR once the node is registered (the CNI runs then)."""
        subnets = [*mc.pod_subnets(self.active_config), *mc.service_subnets(self.active_config)]
        if self.network is not None and self.network.cni_up:
            subnets.append(self.kube_node().pod_cidr)
        return subnets

    def _publish_network(self) -> None:
        """Links and addresses of a freshly booted node: lo and eth0 (see :mod:`.network`).

        Flannel's links follow once kubelet runs healthy (it runs the flannel DaemonSet pod):
        a watch on the Services resource, like a controller's input, adds them.
        """
        ident = self.identity
        self.network = NodeNetwork(
            self.store,
            address=ident.address,
            prefix_length=ident.prefix_length,
            platform=ident.platform,
        )
        self.network.publish(self._k8s_subnets())
        if self._cni_watch is not None:
            self._cni_watch()
        self._cni_watch = self.store.subscribe(self._watch_for_cni)

    def _watch_for_cni(self, event: StoreEvent) -> None:
        found = event.resource
        if found.type != T.SERVICES or found.id != "kubelet" or event.kind == "destroyed":
            return
        network = self.network
        if network is None or network.cni_up or not found.spec.get("healthy"):
            return
        if cni_name(self.active_config) != "flannel":  # `none` or `custom`: not ours to model
            return
        network.start_cni(
            pod_block=self.kube_node().pod_cidr,
            pods=self._pod_network_pods(),
            k8s_subnets=[*self._k8s_subnets(), self.kube_node().pod_cidr],
        )

    def _pod_network_pods(self) -> int:
        """Pods on the pod network this node runs: its share of CoreDNS's replicas, spread
        over the workers (control planes are tainted NoSchedule) or, without workers, over
        the control planes (INFERRED placement: the scheduler's spreading, in node order)."""
        if not coredns_enabled(self.active_config):
            return 0
        peers = list(self.peers())
        nodes = [peer for peer in peers if not peer.controlplane] or peers
        return sum(
            1 for i in range(COREDNS_REPLICAS) if nodes[i % len(nodes)].hostname == self.hostname
        )

    def _member_addresses(self, peer: NodeIdentity) -> list[str]:
        """A member's addresses: its ``routed-no-k8s`` IPs (controllers/cluster/local_affiliate.go).
        Another node's are its address unless the cluster's CIDRs cover it."""
        if peer.hostname == self.hostname and self.network is not None:
            return [p.split("/", 1)[0] for p in self.network.addresses("routed-no-k8s")]
        ip = ipaddress.ip_address(peer.address)
        nets = [ipaddress.ip_network(c, strict=False) for c in self._k8s_subnets()]
        return [] if any(ip.version == n.version and ip in n for n in nets) else [peer.address]

    def publish_members(self) -> None:
        """Members.cluster.talos.dev: one per affiliate with a nodename
        (controllers/cluster/member.go), id = the nodename, ``hostname`` = the FQDN
        (local_affiliate.go, HostnameStatusSpec.FQDN). Discovery off in the machine config:
        no affiliates, no Members. Discovery service unreachable: only the local affiliate."""
        for member in self.store.list("cluster", T.MEMBERS):
            self.store.destroy("cluster", T.MEMBERS, member.id)
        if not discovery_enabled(self.active_config):
            return
        peers = list(self.peers())
        if self.variant(Variant.DISCOVERY_UNREACHABLE):
            peers = [peer for peer in peers if peer.hostname == self.hostname]
        if self.fault(Fault.MEMBER_HIDDEN):  # fault member-hidden: discovery misses the first node
            first = self.peers()[0].hostname
            peers = [peer for peer in peers if peer.hostname != first]
        for peer in peers:
            spec: dict[str, object] = {
                "nodeId": peer.node_id or _node_id(peer.hostname, peer.cluster_name),
                "addresses": self._member_addresses(peer),
                "hostname": peer.fqdn,
                "machineType": peer.role,
                "operatingSystem": f"Talos ({self.talos_version})",
            }
            if peer.controlplane:
                spec["controlPlane"] = {"apiServerPort": 6443}
            self.store.put(
                "cluster", T.MEMBERS, peer.hostname, spec, owner="cluster.MemberController"
            )

    def _publish_machine_config(self) -> None:
        """What AcquireController sets at boot (internal/app/machined/pkg/controllers/config/
        acquire.go): `v1alpha1` always; `persistent` only when the config did not come from
        the STATE partition alone (see :meth:`ConfigMixin._boot_config_from_state`)."""
        from_state = self._boot_config_from_state()
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
        self.emit(MachineStatusPayload(event_stage, not unmet, unmet), self._sequence_actor)

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
            self._track_kubelet(service)
            self.hooks.kube_changed()

    # ---- the Kubernetes node controller (Kubernetes behaviour, INFERRED) -----------------

    def _track_kubelet(self, kubelet: Service) -> None:
        """Start or stop the node-monitor grace period as kubelet stops or resumes posting.

        A kubelet posts node status only while it runs healthy; one that crash-loops (B4)
        never does. After NODE_MONITOR_GRACE without status the Node turns Unknown.
        """
        posting = kubelet.running and kubelet.health.healthy and not kubelet.health.unknown
        if posting:
            self._kubelet_silent_since = None
            self._kube_status_unknown_since = None
            self._cancel_kube_grace()
        elif self._kubelet_silent_since is None:
            self._kubelet_silent_since = self.clock.time()
            self._kube_grace_timer = self.clock.call_later(
                NODE_MONITOR_GRACE, self._kube_status_stale
            )

    def _kube_status_stale(self) -> None:
        self._kube_grace_timer = None
        if self.powered and self._kubelet_silent_since is not None:
            self._kube_status_unknown_since = self.clock.time()
            self.hooks.kube_changed()

    def _cancel_kube_grace(self) -> None:
        if self._kube_grace_timer is not None:
            self._kube_grace_timer.cancel()
            self._kube_grace_timer = None

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

    def _schedule_flap(self) -> None:
        # fault flapping-service: containerd is killed every FLAP_PERIOD s; the restart runner
        # brings it back 5 s later (runner/restart/restart.go)
        def flap() -> None:
            service = self.services.services["containerd"]
            if self.powered and service.running:
                self.services.fail(service, "signal: killed")
            self._schedule_flap()

        self._flap_timer = self.clock.call_later(FLAP_PERIOD, flap)

    def _schedule_health_flap(self, delay: float, *, failing: bool) -> None:
        # fault health-flap-running: cri keeps running; its health check fails, then passes
        # again (system/health/check.go reports each change, service_runner.go healthUpdate
        # records it as a Running event)
        def flip() -> None:
            if self.powered:
                self.services.set_health_fault("cri", CRI_UNHEALTHY if failing else None)
            wait = HEALTH_FLAP_DOWN if failing else HEALTH_FLAP_PERIOD - HEALTH_FLAP_DOWN
            self._schedule_health_flap(wait, failing=not failing)

        self._health_flap_timer = self.clock.call_later(delay, flip)

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

    # ---- version and system data --------------------------------------------------------

    def api_version_tag(self) -> str:
        return WRONG_VERSION if self.fault(Fault.WRONG_VERSION) else self.talos_version

    def processes(self) -> list[system.ProcessEntry]:
        pid1 = "machined"
        if self.fault(Fault.PID1_NOT_MACHINED):
            pid1 = "systemd"
        elif self.fault(Fault.PID1_SYSTEMD_AS_INIT):
            pid1 = "systemd-as-init"
        return system.processes_for(
            hostname=self.hostname,
            address=self.identity.address,
            running_services=self.running_services(),
            controlplane=self.identity.controlplane,
            proxy=not proxy_disabled(self.active_config),
            flannel=cni_name(self.active_config) == "flannel",
            coredns=self._pod_network_pods() > 0,
            pod_shell=self.variant(Variant.POD_SHELL),
            pid1=pid1,
            sshd=self.fault(Fault.SSH_OPEN),
            host_shell=self.fault(Fault.HOST_SHELL_PROCESS),
            web_terminal=self.fault(Fault.WEB_TERMINAL_RUNNING),
        )

    def mounts(self) -> list[system.MountEntry]:
        return system.mounts_for(
            platform=self.identity.platform,
            extensions=len(self.identity.extensions),
            rw_root=self.fault(Fault.RW_ROOTFS),
            rw_usr=self.fault(Fault.USR_WRITABLE),
        )

    def listeners(self) -> list[system.Listener]:
        """The host's sockets (kube-proxy's only while the config enables it), then those in
        pod network namespaces (``Listener.netns`` set: CoreDNS where it runs)."""
        return [
            *system.listeners_for(
                controlplane=self.identity.controlplane,
                proxy=not proxy_disabled(self.active_config),
                flannel=cni_name(self.active_config) == "flannel",
                sshd=self.fault(Fault.SSH_OPEN),
                extra_port=self.fault(Fault.EXTRA_PORT),
                faults=self.faults.on_node(self.hostname, controlplane=self.identity.controlplane),
            ),
            *system.pod_listeners(
                coredns=self._pod_network_pods() > 0, node_id=self.identity.node_id
            ),
        ]

    def file(self, path: str, *, follow: bool = False) -> system.FileEntry | None:
        """The entry at ``path`` as lstat (``follow``: stat) sees it, symlinked parents resolved."""
        if path == "/proc/mounts":  # generated: shows the root filesystem read-only
            content = system.proc_mounts(self.mounts())
            return system.FileEntry(path, "file", 0o444, content, mtime=int(self.booted_at))
        return self.rootfs.get(system.resolve(self.rootfs, path, follow_last=follow))

    def etcd_members(self) -> list[NodeIdentity]:
        """The etcd members: the control planes, named by their short hostname
        (controllers/etcd/spec.go names the member after HostnameStatus.hostname)."""
        members = [peer for peer in self.peers() if peer.controlplane]
        if self.fault(Fault.ETCD_MEMBER_MISSING) and members:
            members = members[:-1]
        return members

    def kube_node(self) -> KubeNodeInfo:
        ident = self.identity
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": self.hostname,
            "kubernetes.io/os": "linux",
        }
        if ident.controlplane:
            labels["node-role.kubernetes.io/control-plane"] = ""
        if not self.fault(Fault.LABELS_NOT_SYNCED):  # fault labels-not-synced
            labels.update(mc.node_labels(self.active_config))  # issue #3: labels from the config
            labels.update(self.labels_kept_after_revert)  # fault try-revert-keeps-label
        pods = mc.pod_subnets(self.active_config)
        unknown = self.powered and self._kube_status_unknown_since is not None
        flap_ready, flap_since = self._ready_flap()
        return KubeNodeInfo(
            name=self.hostname,
            address=ident.address,
            labels=labels,
            ready=self.powered
            and not unknown
            and not self.fault(Fault.NODE_NOT_READY)
            and flap_ready,
            controlplane=ident.controlplane,
            kubelet_version=f"v{ident.kubernetes_version}",
            os_image=f"Talos ({self.talos_version})",
            pod_cidr=_node_pod_cidr(pods[0] if pods else "10.244.0.0/16", ident.address),
            created=self.booted_at,
            status_unknown=unknown,
            last_heartbeat=self._kubelet_silent_since if unknown else None,
            unknown_since=self._kube_status_unknown_since if unknown else None,
            ready_since=flap_since,
            # fault node-memory-pressure: kubelet reports MemoryPressure=True
            pressure=("MemoryPressure",) if self.fault(Fault.NODE_MEMORY_PRESSURE) else (),
            unschedulable=self.fault(Fault.NODE_CORDONED),  # fault node-cordoned
        )

    def _ready_flap(self) -> tuple[bool, float | None]:
        """Fault ready-flapping: Ready turns False for the last 2 s of every 8 s of node time
        after boot. Whether Ready holds now, and when it last changed."""
        if not self.fault(Fault.READY_FLAPPING):
            return True, None
        period, down = 8.0, 2.0
        elapsed = max(self.clock.time() - self.booted_at, 0.0)
        start = self.booted_at + elapsed // period * period
        if elapsed % period >= period - down:
            return False, start + period - down
        return True, start if start > self.booted_at else None

    # ---- lifecycle (v1alpha1_server.go, runtime/mode.go) -------------------------------------

    def _require_metal(self) -> None:
        if self.container:
            raise NodeFailure("FAILED_PRECONDITION", CONTAINER_ONLY)

    def reboot(self) -> str:
        self._require_metal()
        actor = str(uuid.uuid4())
        self.clock.call_later(LIFECYCLE_DELAY, lambda: self._reboot_sequence(actor, "reboot"))
        return actor

    def shutdown(self) -> str:
        self._require_metal()
        actor = str(uuid.uuid4())
        self.clock.call_later(
            LIFECYCLE_DELAY, lambda: self._go_down(actor, "shutdown", "shutting down")
        )
        return actor

    def reset(self) -> str:
        # container.go: accepted in container mode, where it stops services and shuts down.
        actor = str(uuid.uuid4())
        self.clock.call_later(LIFECYCLE_DELAY, lambda: self._go_down(actor, "reset", "resetting"))
        return actor

    def upgrade(self, image: str) -> str:
        """Acknowledge now; go down as ``upgrading``; only the booted system is the new version."""
        self._require_metal()
        actor = str(uuid.uuid4())
        tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
        new_version = tag if tag.startswith("v") else self.talos_version
        self.clock.call_later(
            LIFECYCLE_DELAY,
            lambda: self._reboot_sequence(actor, "upgrade", "upgrading", next_version=new_version),
        )
        return actor

    def rollback(self) -> None:
        """Reboot into the previous version (the A/B switch takes effect at the next boot)."""
        self._require_metal()
        actor = str(uuid.uuid4())
        self.clock.call_later(
            LIFECYCLE_DELAY,
            lambda: self._reboot_sequence(actor, "reboot", next_version=self.previous_version),
        )

    def _go_down(
        self, actor: str, sequence: str, stage: str, then: Callable[[], None] | None = None
    ) -> None:
        """The stage changes and services stop; SHUTDOWN_DELAY later apid stops and the node
        is off (then ``then`` runs, e.g. the reboot's power-on timer)."""
        if self._lifecycle_timer is not None:
            self._lifecycle_timer.cancel()
        self._sequence_actor = actor
        self.emit(SequencePayload(sequence, "START"), actor)
        self.cancel_try()  # v1alpha1_runtime.go: try never persists, a reboot reverts it
        if self._flap_timer is not None:
            self._flap_timer.cancel()
        if self._health_flap_timer is not None:
            self._health_flap_timer.cancel()
            self.services.set_health_fault("cri", None)
        with self._status_held_back():  # then one status: the new stage, not ready
            self.stage = stage
            for service in reversed(list(self.services.services.values())):
                if service.id != "apid":  # apid serves until the very end
                    self.services.stop(service)
        self._lifecycle_timer = self.clock.call_later(SHUTDOWN_DELAY, lambda: self._power_off(then))

    def _power_off(self, then: Callable[[], None] | None) -> None:
        self._lifecycle_timer = None
        self.services.stop_all()
        self.services.cancel_all()
        self._cancel_kube_grace()
        self.powered = False
        self.hooks.api_down()
        self.hooks.kube_changed()
        if then is not None:
            then()

    def _reboot_sequence(
        self,
        actor: str,
        sequence: str,
        stage: str = "rebooting",
        *,
        next_version: str | None = None,
    ) -> None:
        """API down for a while, then boot the persisted config (staged applied, try dropped)
        and, after an upgrade or rollback, the other version."""
        self._next_version = next_version

        def stay_down() -> None:
            self._lifecycle_timer = self.clock.call_later(REBOOT_DOWNTIME, self.power_on)

        self._go_down(actor, sequence, stage, then=stay_down)

    def power_on(self) -> None:
        """Boot the node (after a reboot; tests may also power a shut-down node back on)."""
        if self.powered:
            return
        self._lifecycle_timer = None
        if self._next_version is not None:
            self.previous_version, self.talos_version = self.talos_version, self._next_version
            self._next_version = None
        release = system.os_release(self.talos_version)
        self.rootfs["/etc/os-release"] = system.FileEntry("/etc/os-release", "file", 0o644, release)
        self.boot()
        self.hooks.api_up()

    def stop(self) -> None:
        """Cancel every timer (the cluster is stopping)."""
        self.cancel_try()
        self.services.cancel_all()
        self._cancel_kube_grace()
        for timer in (self._flap_timer, self._health_flap_timer, self._lifecycle_timer):
            if timer is not None:
                timer.cancel()


def _with_node_id(identity: NodeIdentity) -> NodeIdentity:
    from dataclasses import replace

    return replace(identity, node_id=_node_id(identity.hostname, identity.cluster_name))


def _node_pod_cidr(pod_subnet: str, address: str) -> str:
    """A /24 of the pod subnet per node, picked by the node address (like kube-controller)."""
    try:
        network = ipaddress.ip_network(pod_subnet, strict=False)
        index = int(ipaddress.ip_address(address)) & 0xFF
        subnets = network.subnets(new_prefix=24) if network.prefixlen <= 24 else iter([network])
        for position, subnet in enumerate(subnets):
            if position == index:
                return str(subnet)
        return str(network)
    except ValueError:
        return pod_subnet
