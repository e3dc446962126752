"""TalosNode: one node, its client, address and facts; reads and guarded changes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_talos import models, ports
from pytest_talos.client import DEFAULT_WATCH_TIMEOUT, StreamIterator, TalosClient
from pytest_talos.errors import TalosError
from pytest_talos.node._files import NodeFiles
from pytest_talos.node._guards import ConfigProtector
from pytest_talos.node._kubename import KubernetesName, read_kubernetes_name
from pytest_talos.patches import PatchInput, apply_patches
from pytest_talos.talos_api import ResourceType, split_host_port

__all__ = ["MACHINE_TYPE", "TalosNode", "as_patch_list", "host_of"]

MACHINE_TYPE = (ResourceType.MACHINE_TYPES, "machine-type", "config")


def host_of(address: str) -> str:
    """The host part of ``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address."""
    try:
        return split_host_port(address)[0]
    except ValueError:  # a malformed bracket: the text as given
        return address


class TalosNode:
    """One node: its client (targeted with ``node`` metadata), address and facts.

    ``address`` is the target as the endpoint reaches it (e.g. ``10.5.0.3``); ``host`` is
    its host part, scanned by :attr:`ports`. ``scan_baseline`` is an address where no node
    lives, probed to tell the node's ports from wildcard listeners on a shared host (the
    emulator sets it). ``expected_ports`` is the allowlist the plugin built for this node.
    ``unreachable`` is the error that kept the node from answering when its cluster was built
    (its hostname and role could not be read), ``None`` for a node that answered; see
    :attr:`reachable`. ``kubernetes`` presets :attr:`kubernetes_registration` (else it is
    read from the node when first needed).
    """

    def __init__(
        self,
        client: TalosClient,
        address: str,
        *,
        hostname: str | None = None,
        role: str | None = None,
        guard: ConfigProtector | None = None,
        scan_baseline: str | None = None,
        expected_ports: Iterable[int] | None = None,
        unreachable: TalosError | None = None,
        kubernetes: KubernetesName | None = None,
    ) -> None:
        self.client = client if client.node == address else client.with_node(address)
        self.unreachable = unreachable
        self.address = address
        self.guard = guard
        self.scan_baseline = scan_baseline
        self.expected_ports = None if expected_ports is None else frozenset(expected_ports)
        self._hostname = hostname
        self._role = role
        # Shared with the copies with_guard makes: a change through one is seen by all.
        self._kube_name: list[KubernetesName] = [] if kubernetes is None else [kubernetes]

    def __repr__(self) -> str:
        return f"TalosNode({self.name!r}, address={self.address!r}, role={self._role!r})"

    def with_guard(self, guard: ConfigProtector | None) -> TalosNode:
        """The same node (same connection) whose changes go through ``guard``."""
        copy = TalosNode(
            self.client,
            self.address,
            hostname=self._hostname,
            role=self._role,
            guard=guard,
            scan_baseline=self.scan_baseline,
            expected_ports=self.expected_ports,
            unreachable=self.unreachable,
        )
        copy._kube_name = self._kube_name
        return copy

    # ------------------------------------------------------------------ identity

    @property
    def reachable(self) -> bool:
        """Whether the node answered when its cluster was built (see ``unreachable``)."""
        return self.unreachable is None

    @property
    def name(self) -> str:
        """The hostname if known, else the address (never makes a call)."""
        return self._hostname or self.address

    @property
    def host(self) -> str:
        return host_of(self.address)

    @property
    def hostname(self) -> str:
        if self._hostname is None:
            self._hostname = self.client.hostname()
        return self._hostname

    @property
    def kubernetes_registration(self) -> KubernetesName:
        """The Kubernetes Node this node registers: its name, where the name came from and
        whether there is a Node at all (``machine.kubelet.skipNodeRegistration``).

        Read from the ``Nodenames.kubernetes.talos.dev`` resource (the FQDN with
        ``registerWithFQDN``, lower-cased, ``_`` as ``-``) and kept until a config change
        goes through this node (a change made elsewhere: call :meth:`forget_kubernetes_name`).
        When the resource cannot be read, the Hostname API's name is used, and not kept.
        """
        if self._kube_name:
            return self._kube_name[0]
        found = read_kubernetes_name(self)
        if not found.fallback:
            self._kube_name[:] = [found]
        return found

    @property
    def kubernetes_name(self) -> str:
        """The name of this node's Kubernetes Node (see :attr:`kubernetes_registration`)."""
        return self.kubernetes_registration.name

    def forget_kubernetes_name(self) -> None:
        """Read the Kubernetes name again next time (the config changed behind our back)."""
        self._kube_name.clear()

    @property
    def role(self) -> str:
        """``controlplane`` or ``worker`` (``init`` counts as controlplane), from MachineTypes."""
        if self._role is None:
            kind, ident, namespace = MACHINE_TYPE
            found = self.client.get(kind, ident, namespace)
            spec = found.typed_spec
            role = spec.machine_type if isinstance(spec, models.MachineTypeSpec) else "unknown"
            self._role = "controlplane" if role == "init" else role
        return self._role

    @property
    def is_controlplane(self) -> bool:
        return self.role == "controlplane"

    # ------------------------------------------------------------------ reading

    @property
    def version(self) -> models.Version:
        return self.client.version()

    @property
    def services(self) -> list[models.ServiceInfo]:
        return self.client.services()

    def service(self, service_id: str) -> models.ServiceInfo:
        """One service; NotFound if the node does not run it."""
        return self.client.service(service_id)

    @property
    def machine_config(self) -> models.MachineConfig:
        """The active config: exact bytes, parsed documents, resource version (os:admin)."""
        return self.client.machine_config()

    @property
    def files(self) -> NodeFiles:
        return NodeFiles(self)

    @property
    def processes(self) -> list[models.ProcessInfo]:
        return self.client.processes()

    @property
    def listeners(self) -> list[models.ConnectRecord]:
        """Listening sockets as the node itself reports them (Netstat)."""
        return [record for record in self.client.netstat(listening=True) if record.listening]

    def listener_for(self, port: int) -> list[models.ConnectRecord]:
        """The TCP listeners on ``port`` by the node's own account."""
        return [
            record
            for record in self.listeners
            if record.local_port == port and record.l4proto.startswith("tcp")
        ]

    def scan_ports(
        self,
        spec: str | Iterable[int] = ports.DEFAULT_PORTS,
        *,
        timeout: float = ports.DEFAULT_TIMEOUT,
        concurrency: int = ports.DEFAULT_CONCURRENCY,
    ) -> ports.ScanResult:
        """A TCP connect scan of the node's address from this machine."""
        return ports.scan(
            self.host,
            spec,
            timeout=timeout,
            concurrency=concurrency,
            baseline_host=self.scan_baseline,
        )

    @property
    def ports(self) -> frozenset[int]:
        """The open TCP ports (1-65535) seen from outside the node."""
        return frozenset(self.scan_ports().open_ports)

    def logs(self, service_id: str, *, tail: int = -1) -> str:
        """A service's log (``tail`` = last N lines; negative: everything kept)."""
        return self.client.logs(service_id, tail)

    def events(
        self,
        *,
        tail_events: int = 0,
        tail_id: str | None = None,
        tail_seconds: int = 0,
        actor_id: str | None = None,
        timeout: float = DEFAULT_WATCH_TIMEOUT,
    ) -> StreamIterator[models.Event]:
        """Runtime events as they happen; the stream ends (DeadlineExceeded) after ``timeout``.

        At most one of ``tail_events``, ``tail_id`` and ``tail_seconds`` may be set, as in
        the Talos API (0 = only new events, N = the last N, negative = all buffered).
        """
        return self.client.events(
            tail_events=tail_events,
            tail_id=tail_id,
            tail_seconds=tail_seconds,
            actor_id=actor_id,
            timeout=timeout,
        )

    def resource(self, kind: str, ident: str, namespace: str | None = None) -> models.Resource:
        return self.client.get(kind, ident, namespace)

    def resources(self, kind: str, namespace: str | None = None) -> list[models.Resource]:
        return self.client.list_resources(kind, namespace)

    def watch(
        self,
        kind: str,
        ident: str | None = None,
        namespace: str | None = None,
        *,
        timeout: float = DEFAULT_WATCH_TIMEOUT,
    ) -> StreamIterator[models.ResourceEvent]:
        return self.client.watch(kind, ident, namespace, timeout=timeout)

    # ------------------------------------------------------------------ changing

    def patched_config(self, *patches: PatchInput) -> bytes:
        """The active config with ``patches`` applied locally, as ``talosctl patch`` does."""
        return apply_patches(self.machine_config.raw, patches)

    def apply_patch(
        self,
        patch: PatchInput | Sequence[PatchInput],
        *,
        mode: models.ApplyMode = "no-reboot",
        guard: ConfigProtector | None = None,
        dry_run: bool = False,
        try_timeout: float | None = None,
    ) -> models.ApplyResult:
        """Patch the active config locally and apply the result (``talosctl patch``).

        ``patch`` is one patch (YAML/JSON text, bytes, a mapping, a JSON6902 op list, or
        ``@file``) or a list of patches. Unless ``dry_run``, the change goes through
        ``guard`` (or the node's own guard), which snapshots the config first.
        """
        patches = as_patch_list(patch)
        if not dry_run:
            self._protect(guard)
        data = self.patched_config(*patches)
        return self._apply(data, mode, dry_run=dry_run, try_timeout=try_timeout)

    def apply_config(
        self,
        data: bytes,
        *,
        mode: models.ApplyMode = "no-reboot",
        guard: ConfigProtector | None = None,
        dry_run: bool = False,
        try_timeout: float | None = None,
    ) -> models.ApplyResult:
        """Apply a whole machine config (through the guard unless ``dry_run``)."""
        if not dry_run:
            self._protect(guard)
        return self._apply(data, mode, dry_run=dry_run, try_timeout=try_timeout)

    def _apply(
        self, data: bytes, mode: models.ApplyMode, *, dry_run: bool, try_timeout: float | None
    ) -> models.ApplyResult:
        if not dry_run:  # the Kubernetes name follows the config (registerWithFQDN, hostname)
            self.forget_kubernetes_name()
        return self.client.apply_configuration(data, mode, dry_run=dry_run, try_timeout=try_timeout)

    def _protect(self, guard: ConfigProtector | None) -> None:
        # The node's own guard goes first: a read-only node refuses before anything else.
        guards = [g for g in (self.guard, guard) if g is not None]
        if not guards:
            raise TalosError(
                "this change needs a guard that can undo it: pass guard=ConfigGuard() "
                "(pytest_talos.checks); under pytest, use talos_node in a test marked "
                "talos_mutating, or pass guard=talos_config_guard",
                node=self.name,
            )
        for chosen in dict.fromkeys(guards):
            chosen.protect(self)


def as_patch_list(patch: PatchInput | Sequence[PatchInput]) -> list[PatchInput]:
    """One patch or several: a list of patches is told from a JSON6902 op list by its items."""
    if isinstance(patch, list) and patch and all(_is_patch(item) for item in patch):
        return list(patch)
    if isinstance(patch, tuple):
        return list(patch)
    return [patch]  # type: ignore[list-item]


def _is_patch(item: object) -> bool:
    # JSON6902 ops are mappings with "op"; anything else in a list is a patch of its own.
    return isinstance(item, str | bytes) or (isinstance(item, dict) and "op" not in item)
