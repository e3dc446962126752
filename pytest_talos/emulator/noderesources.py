"""The COSI resources a node publishes about itself at boot and as its machine runs:
controllers/runtime/machine_status.go, controllers/config/acquire.go, controllers/k8s and
controllers/cluster (the network's resources come from :mod:`.nodenet`)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import ClassVar

from pytest_talos.emulator.events import MachineStatusPayload, Payload
from pytest_talos.emulator.identity import NodeIdentity, etcd_member_id, node_id_for
from pytest_talos.emulator.kubenode import extension_versions, node_registered, nodename_of
from pytest_talos.emulator.nodeapply import CONFIG_ANNOTATIONS
from pytest_talos.emulator.nodenet import NodeNetworking
from pytest_talos.emulator.resources import DEFINITIONS, NAMESPACES, T
from pytest_talos.emulator.services import ServiceManager
from pytest_talos.emulator.store import ResourceStore, StoreEvent

__all__ = [
    "MachineStatus",
    "NodenameController",
    "publish_boot_resources",
    "publish_machine_config",
    "unhealthy",
]


def publish_boot_resources(
    store: ResourceStore, identity: NodeIdentity, *, talos_version: str, networking: NodeNetworking
) -> None:
    """What a freshly booted node's controllers publish, in the order they do it."""
    for definition in DEFINITIONS.values():
        store.put("meta", T.RESOURCE_DEFINITIONS, definition.id, definition.spec())
    for name, description in NAMESPACES.items():
        store.put("meta", T.NAMESPACES, name, {"description": description})
    store.put("runtime", T.VERSIONS, "version", {"version": talos_version, "name": "Talos"})
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


def unhealthy(services: ServiceManager, *, controlplane: bool) -> list[str]:
    """What keeps the machine from being ready (controllers/runtime/machine_status.go
    servicesCheck): a running service whose health is known and bad, or a required one
    (apid, machined, kubelet; etcd and trustd on control planes) that is not running."""
    required = {"apid", "machined", "kubelet"}
    if controlplane:
        required |= {"etcd", "trustd"}
    return sorted(
        s.id
        for s in services.services.values()
        if (s.running and not s.health.unknown and not s.health.healthy)
        or (not s.running and s.id in required)
    )


class MachineStatus:
    """The machine's stage and the MachineStatuses resource and events that report it."""

    def __init__(
        self,
        store: ResourceStore,
        *,
        unhealthy_services: Callable[[], list[str]],
        emit: Callable[[Payload, str], object],
    ) -> None:
        self._store = store
        self._unhealthy_services = unhealthy_services
        self._emit = emit
        self.stage = "booting"
        self.held = False  # services change in bulk: publish the status once after
        self._last: tuple[str, bool, tuple[tuple[str, str], ...]] | None = None

    def forget(self) -> None:
        """A fresh boot: the next publish reports whatever the status is."""
        self._last = None

    def publish(self, actor: str) -> None:
        """The MachineStatuses resource and, when it changes, a MachineStatusEvent
        (``controllers/runtime/machine_status.go``).

        The event carries exactly what the resource says: stage, ready, unmet conditions.
        """
        unhealthy_now = self._unhealthy_services()
        unmet: tuple[tuple[str, str], ...] = ()
        if unhealthy_now:
            unmet = (("services", f"unhealthy services: {', '.join(unhealthy_now)}"),)
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

    @contextlib.contextmanager
    def held_back(self, actor: Callable[[], str]) -> Iterator[None]:
        """Services change in bulk (boot, shutdown): publish the machine status once, after."""
        self.held = True
        try:
            yield
        finally:
            self.held = False
        self.publish(actor())
