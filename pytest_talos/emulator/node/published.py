"""The COSI resources a node publishes about itself at boot and as its machine runs:
controllers/runtime/machine_status.go, controllers/config/acquire.go, controllers/k8s and
controllers/cluster (the network's resources come from :mod:`.net.place`)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import ClassVar, Protocol

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.cosi.registry import NAMESPACES, T, definitions_on
from pytest_talos.emulator.cosi.store import ResourceStore, StoreEvent
from pytest_talos.emulator.faults import KubeQuirk, Quirk
from pytest_talos.emulator.node.apply import CONFIG_ANNOTATIONS
from pytest_talos.emulator.node.events import MachineStatusPayload, Payload
from pytest_talos.emulator.node.identity import (
    KubeNodeInfo,
    NodeIdentity,
    etcd_member_id,
    node_id_for,
)
from pytest_talos.emulator.node.kubelet import (
    READY_FLAP_DOWN,
    READY_FLAP_PERIOD,
    extension_versions,
    node_registered,
    nodename_of,
)
from pytest_talos.emulator.node.net.place import NodeNetworking
from pytest_talos.emulator.node.services.runner import ServiceManager, go_quote
from pytest_talos.releases import Release, release_of

__all__ = [
    "MachineStatus",
    "NodenameController",
    "StatusSource",
    "next_ready_flap",
    "publish_boot_resources",
    "publish_image_verification_rules",
    "publish_machine_config",
    "readiness",
    "service_problems",
    "unhealthy",
]


def publish_boot_resources(
    store: ResourceStore, identity: NodeIdentity, *, talos_version: str, networking: NodeNetworking
) -> None:
    """What a freshly booted node's controllers publish, in the order they do it."""
    for definition in definitions_on(release_of(talos_version).release).values():
        store.put("meta", T.RESOURCE_DEFINITIONS, definition.id, definition.spec())
    for name, description in NAMESPACES.items():
        store.put("meta", T.NAMESPACES, name, {"description": description})
    # the spec's name exists from v1.13 on (pytest_talos.releases version_resource_name)
    name = release_of(talos_version).release.version_resource_name
    version = {"version": talos_version, **({"name": name} if name else {})}
    store.put("runtime", T.VERSIONS, "version", version)
    # config/machine_type.go: the spec is the bare machine.Type (`controlplane`).
    store.put("config", T.MACHINE_TYPES, "machine-type", identity.role)
    store.put("cluster", T.IDENTITIES, "local", {"nodeId": identity.node_id})
    store.put(
        "cluster",
        T.INFOS,
        "current",
        {
            "clusterId": node_id_for("cluster", identity.cluster_name),
            "clusterName": identity.cluster_name,
        },
    )
    networking.publish()
    # network/hostname_status.go: the short hostname and the domain (DHCP, cloud, config).
    store.put(
        "network",
        T.HOSTNAME_STATUSES,
        "hostname",
        {"hostname": identity.hostname, "domainname": identity.domain},
    )
    # controllers/k8s/nodename.go: Nodenames follows once the active config is published too.
    NodenameController.attach(store, identity).reconcile()
    if identity.controlplane:
        member_id = f"{etcd_member_id(identity.hostname):016x}"
        store.put("etcd", T.ETCD_MEMBERS, "local", {"memberID": member_id})
    versions = extension_versions(identity, talos_version)
    for index, name in enumerate(identity.extensions):
        # INFERRED spec shape (no proto restated: proto_spec stays empty).
        spec = {
            "image": f"{index:03d}-{name}.sqsh",
            "metadata": {
                "name": name,
                "version": versions[name],
                "author": "Sidero Labs",
                "description": f"{name} extension",
            },
        }
        store.put("runtime", T.EXTENSION_STATUSES, str(index), spec)
    networking.publish_members()


class NodenameController:
    """k8s.NodenameController (internal/app/machined/pkg/controllers/k8s/nodename.go): from
    the active MachineConfig and the HostnameStatus, Nodenames/nodename in ``k8s`` holds the
    Kubernetes node name (the FQDN with ``machine.kubelet.registerWithFQDN``, through
    nodename.FromHostname), the HostnameStatus version it came from and
    ``skipNodeRegistration``. It runs again whenever either input changes (an applied
    config too), and publishes nothing until both exist."""

    _attached: ClassVar[weakref.WeakKeyDictionary[ResourceStore, NodenameController]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, store: ResourceStore, identity: NodeIdentity) -> None:
        self._store = weakref.ref(store)
        self._identity = identity

    @classmethod
    def attach(cls, store: ResourceStore, identity: NodeIdentity) -> NodenameController:
        """The store's controller, subscribed to its inputs once (a reboot clears the store,
        not its subscribers)."""
        controller = cls._attached.get(store)
        if controller is None:
            controller = cls._attached[store] = cls(store, identity)
            store.subscribe(controller.on_event)
        return controller

    def on_event(self, event: StoreEvent) -> None:
        found = event.resource
        inputs = {(T.MACHINE_CONFIGS, "v1alpha1"), (T.HOSTNAME_STATUSES, "hostname")}
        if event.kind != "destroyed" and (found.type, found.id) in inputs:
            self.reconcile()

    def reconcile(self) -> None:
        store = self._store()
        if store is None:
            return
        config = store.get("config", T.MACHINE_CONFIGS, "v1alpha1")
        status = store.get("network", T.HOSTNAME_STATUSES, "hostname")
        if config is None or status is None or not isinstance(config.spec, bytes):
            return
        try:
            name = nodename_of(status.spec["hostname"], status.spec["domainname"], config.spec)
        except ValueError:  # FromHostname found nothing to keep: the controller errors out
            return
        spec = {
            "nodename": name,
            "hostnameVersion": str(status.version),
            "skipNodeRegistration": not node_registered(config.spec),
        }
        store.put("k8s", T.NODENAMES, "nodename", spec, owner="k8s.NodenameController")


def publish_machine_config(
    store: ResourceStore, *, active: bytes, persisted: bytes, from_state: bool
) -> None:
    """What AcquireController sets at boot (internal/app/machined/pkg/controllers/config/
    acquire.go): `v1alpha1` always; `persistent` only when the config did not come from
    the STATE partition alone (see ``MachineConfigState.boot_config_from_state``)."""
    store.put(
        "config",
        T.MACHINE_CONFIGS,
        "v1alpha1",
        active,
        annotations=CONFIG_ANNOTATIONS,
        always_bump=True,
    )
    if not from_state:
        store.put(
            "config",
            T.MACHINE_CONFIGS,
            "persistent",
            persisted,
            annotations=CONFIG_ANNOTATIONS,
            always_bump=True,
        )


def publish_image_verification_rules(
    store: ResourceStore, *, active: bytes, release: Release
) -> None:
    """ImageVerificationConfigController (controllers/security/image_verification_config.go):
    one ImageVerificationRule per rule of the active config, ids ``0000``, ``0001``… in the
    config's order, the rest cleaned up; nothing on a release without image verification."""
    rules = mc.image_verification_rules(active) if release.has_image_verification else []
    wanted = {f"{index:04d}": spec for index, spec in enumerate(rules)}
    for resource in store.list("security", T.IMAGE_VERIFICATION_RULES):
        if resource.id not in wanted:
            store.destroy("security", T.IMAGE_VERIFICATION_RULES, resource.id)
    for id_, spec in wanted.items():
        store.put("security", T.IMAGE_VERIFICATION_RULES, id_, spec)


def unhealthy(services: ServiceManager, *, controlplane: bool) -> list[str]:
    """The services that keep the machine from being ready (the ids of :func:`service_problems`)."""
    return sorted(
        {problem.split(" ", 1)[0] for problem in service_problems(services, controlplane)}
    )


# controllers/runtime/machine_status.go getReadinessChecks: what every node needs running
REQUIRED_SERVICES = ("apid", "machined", "kubelet")
REQUIRED_ON_CONTROL_PLANES = ("etcd", "trustd")


def service_problems(services: ServiceManager, controlplane: bool) -> list[str]:
    """controllers/runtime/machine_status.go servicesCheck, over the Services resources
    (one per Running service, controllers/v1alpha1/service.go), by id: ``<id> not
    healthy`` for a running one whose health is known and bad; then ``<id> not running``
    for each required service (apid, machined, kubelet; etcd and trustd on control planes)
    that is not running, in that order."""
    running = sorted(s.id for s in services.services.values() if s.running)
    problems = []
    for sid in running:
        health = services.services[sid].health
        if not health.unknown and not health.healthy:
            problems.append(f"{sid} not healthy")
    required = REQUIRED_SERVICES + (REQUIRED_ON_CONTROL_PLANES if controlplane else ())
    problems += [f"{sid} not running" for sid in required if sid not in running]
    return problems


class StatusSource(Protocol):
    """What the machine status controller reads of its node."""

    clock: Clock
    powered: bool
    booted_at: float
    services: ServiceManager

    @property
    def controlplane(self) -> bool: ...

    def kube_node(self) -> KubeNodeInfo: ...

    def quirk(self, quirk: Quirk) -> bool: ...


Unmet = tuple[tuple[str, str], ...]


def node_ready_problem(store: ResourceStore, node: StatusSource) -> str | None:
    """controllers/runtime/machine_status.go nodeReadyCheck: nothing until the Nodenames
    resource exists or with skipNodeRegistration; else the Kubernetes Node's Ready (its
    NodeStatus, controllers/k8s/node_status.go, follows the Node)."""
    nodename = store.get("k8s", T.NODENAMES, "nodename")
    if nodename is None or not isinstance(nodename.spec, dict):
        return None
    if nodename.spec.get("skipNodeRegistration"):
        return None
    name = nodename.spec.get("nodename", "")
    if not node.powered:
        return f"node {go_quote(name)} status is not available yet"
    return None if node.kube_node().ready else f"node {go_quote(name)} is not ready"


def readiness(store: ResourceStore, node: StatusSource, stage: str) -> Unmet:
    """The unmet conditions (controllers/runtime/machine_status.go getReadinessChecks), in
    the controller's order: time, network, services, staticPods, nodeReady; checked only in
    the booting and running stages. The emulated clock is synced and the network ready
    once the node is up (time sync and network bring-up are not modelled: INFERRED), and
    the static pods' status is not modelled."""
    if stage not in ("booting", "running"):
        return ()
    unmet: list[tuple[str, str]] = []
    if not node.clock.synced:
        unmet.append(("time", "time is not synced"))
    problems = service_problems(node.services, node.controlplane)
    if problems:
        unmet.append(("services", ", ".join(problems)))
    not_ready = node_ready_problem(store, node)
    if not_ready:
        unmet.append(("nodeReady", not_ready))
    return tuple(unmet)


class MachineStatus:
    """The machine's stage and the MachineStatuses resource and events that report it."""

    def __init__(
        self,
        store: ResourceStore,
        *,
        node: StatusSource,
        emit: Callable[[Payload, str], object],
    ) -> None:
        self._store = store
        self._node = node
        self._emit = emit
        self.stage = "booting"
        self.held = False  # services change in bulk: publish the status once after
        self._last: tuple[str, bool, Unmet] | None = None
        self._recheck: Cancellable | None = None

    def forget(self) -> None:
        """A fresh boot: the next publish reports whatever the status is."""
        self._last = None

    def publish(self, actor: str) -> None:
        """The MachineStatuses resource and, when it changes, a MachineStatusEvent
        (``controllers/runtime/machine_status.go``).

        The event carries exactly what the resource says: stage, ready, unmet conditions.
        """
        unmet = readiness(self._store, self._node, self.stage)
        self._recheck_at_next_flap()
        status = (self.stage, not unmet, unmet)
        if status == self._last:
            return
        self._last = status
        spec = {
            "stage": self.stage,
            "status": {
                "ready": not unmet,
                "unmetConditions": [{"name": name, "reason": why} for name, why in unmet],
            },
        }
        self._store.put(
            "runtime", T.MACHINE_STATUSES, "machine", spec, owner="runtime.MachineStatusController"
        )
        event_stage = self.stage.upper().replace(" ", "_")  # "shutting down" -> SHUTTING_DOWN
        self._emit(MachineStatusPayload(event_stage, not unmet, unmet), actor)

    def _recheck_at_next_flap(self) -> None:
        """Fault ready-flapping: the Node's Ready changes with time alone, and the
        controller follows each change of its NodeStatus input: look again then."""
        node = self._node
        if self._recheck is not None or not node.quirk(KubeQuirk.KUBE_READY_FLAPS):
            return

        def again() -> None:
            self._recheck = None
            if node.powered and not self.held:
                self.publish("")

        delay = next_ready_flap(node.booted_at, node.clock.time()) - node.clock.time()
        self._recheck = node.clock.call_later(delay, again)

    def cancel(self) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None

    @contextlib.contextmanager
    def held_back(self, actor: Callable[[], str]) -> Iterator[None]:
        """Services change in bulk (boot, shutdown): publish the machine status once, after."""
        self.held = True
        try:
            yield
        finally:
            self.held = False
        self.publish(actor())


def next_ready_flap(booted_at: float, now: float) -> float:
    """When the flapping Ready (:func:`~.kubelet.ready_flap`) next changes (a little after,
    so the change has happened)."""
    period, down = READY_FLAP_PERIOD, READY_FLAP_DOWN
    into = max(now - booted_at, 0.0) % period
    edge = period - down if into < period - down else period
    return now + (edge - into) + 0.01
