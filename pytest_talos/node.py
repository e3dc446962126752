"""TalosNode: one Talos node seen through its API, in the style of testinfra's ``host``.

Every property is a fresh API call (nothing is cached except the hostname and the role,
which do not change while a node runs), so a test always sees the node as it is now::

    node.version.tag                      # "v1.13.9"
    node.service("kubelet").healthy       # True
    node.files.exists("/bin/sh")          # False on Talos
    node.machine_config.version           # MachineConfigs v1alpha1 resource version
    node.ports                            # open TCP ports, scanned from outside
    node.apply_patch({"machine": {"nodeLabels": {"a": "b"}}})   # through a guard

Changes go through a *guard* (:class:`ConfigProtector`): before the first change to a node
the guard snapshots its machine config so that it can restore it afterwards
(:class:`pytest_talos.checks.ConfigGuard`), or refuses the change (:class:`ReadOnlyGuard`).
"""

from __future__ import annotations

import builtins
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from pytest_talos import models, ports
from pytest_talos.client import DEFAULT_WATCH_TIMEOUT, StreamIterator, TalosClient
from pytest_talos.errors import PermissionDenied, TalosError
from pytest_talos.patches import PatchInput, apply_patches
from pytest_talos.talos_api import APID_PORT, TRUSTD_PORT, ResourceType, split_host_port

__all__ = [
    "MACHINE_TYPE",
    "ConfigProtector",
    "NodeFiles",
    "ReadOnlyGuard",
    "TalosNode",
    "default_expected_ports",
    "expected_ports_for",
    "host_of",
    "is_missing_path",
]

MACHINE_TYPE = (ResourceType.MACHINE_TYPES, "machine-type", "config")
KUBELET_PORT = 10250
KUBE_APISERVER_PORT = 6443
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
KUBE_PROXY_HEALTHZ_PORT = 10256


def default_expected_ports(
    role: str | None, config: models.MachineConfig | None = None
) -> frozenset[int]:
    """The TCP ports a healthy Talos node of ``role`` opens on its address, given its active
    machine ``config`` (``None``: assume Talos's defaults).

    Every node: apid 50000 (``controllers/runtime/api_service_config.go``), kubelet 10250
    (``controllers/k8s/kubelet_spec.go``) and kube-proxy's health check 10256, which the
    hostNetwork kube-proxy DaemonSet serves on all addresses unless ``cluster.proxy.disabled``
    (``controllers/k8s/internal/k8stemplates/kube-proxy.go``; Talos passes no
    ``--healthz-bind-address``, Kubernetes' default is ``0.0.0.0:10256``). Control planes add
    trustd 50001, etcd 2379/2380 and the API server
    (``cluster.controlPlane.localAPIServerPort``, 6443). The loopback-only ports (kubelet
    10248, KubePrism 7445, kube-proxy metrics 10249, controller-manager 10257, scheduler
    10259, host DNS 53) are not reachable from outside and not listed. A
    ``healthz-bind-address`` or ``metrics-bind-address`` in ``cluster.proxy.extraArgs`` moves
    or exposes those ports; other CNIs (Cilium) add theirs through the
    ``pytest_talos_expected_ports`` hook.
    """
    main = _v1alpha1(config)
    ports = {APID_PORT, KUBELET_PORT}
    proxy = _dig(main, "cluster", "proxy")
    if not (isinstance(proxy, dict) and proxy.get("disabled") is True):
        extra = proxy.get("extraArgs") if isinstance(proxy, dict) else None
        args = extra if isinstance(extra, dict) else {}
        ports |= _bound_port(args.get("healthz-bind-address"), KUBE_PROXY_HEALTHZ_PORT)
        ports |= _bound_port(args.get("metrics-bind-address"), None)
    if role in ("controlplane", "init"):
        api = _dig(main, "cluster", "controlPlane", "localAPIServerPort")
        api_port = api if isinstance(api, int) and not isinstance(api, bool) and api > 0 else None
        ports |= {TRUSTD_PORT, api_port or KUBE_APISERVER_PORT, ETCD_CLIENT_PORT, ETCD_PEER_PORT}
    return frozenset(ports)


def expected_ports_for(node: TalosNode) -> frozenset[int]:
    """:func:`default_expected_ports` for ``node``'s role and its active machine config.

    Reading the config needs os:admin (it is a sensitive resource); without it Talos's
    defaults are assumed (kube-proxy enabled), which never fails a healthy node.
    """
    try:
        config: models.MachineConfig | None = node.machine_config
    except PermissionDenied:
        config = None
    return default_expected_ports(node.role, config)


def _v1alpha1(config: models.MachineConfig | None) -> dict[str, Any]:
    for document in config.documents if config is not None else ():
        if isinstance(document, dict) and document.get("version") == "v1alpha1":
            return document
    return {}


def _dig(document: Any, *path: str) -> Any:
    for key in path:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def _bound_port(value: Any, default: int | None) -> set[int]:
    """The port a kube-proxy ``*-bind-address`` flag exposes on the node's addresses.

    Unset: ``default``. Empty or port 0: off. A loopback host: not reachable from outside.
    A value we cannot parse keeps ``default`` (never fail a healthy node on our parsing).
    """
    if isinstance(value, list):  # extraArgs values may be lists; the last one wins
        value = value[-1] if value else None
    if value is None:
        return {default} if default else set()
    text = str(value).strip()
    if not text:
        return set()
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not port_text.isdigit():
        return {default} if default else set()
    port = int(port_text)
    if port == 0 or host.startswith("127.") or host in ("::1", "localhost"):
        return set()
    return {port}


def is_missing_path(exc: TalosError) -> bool:
    """Whether ``exc`` says a path does not exist, whatever its gRPC code.

    List returns the walker's ``lstat <path>: no such file or directory`` as code Unknown
    (``pkg/archiver/walker.go``), Read a ``stat`` error as NotFound (``v1alpha1_server.go``).
    """
    return "no such file or directory" in str(exc)


def host_of(address: str) -> str:
    """The host part of ``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address."""
    try:
        return split_host_port(address)[0]
    except ValueError:  # a malformed bracket: the text as given
        return address


class ConfigProtector(Protocol):
    """Called before every change to a node's machine config."""

    def protect(self, node: TalosNode) -> None:
        """Snapshot ``node``'s config so it can be restored, or raise to refuse the change."""


class ReadOnlyGuard:
    """A guard that refuses every change, with a reason that says how to allow it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def protect(self, node: TalosNode) -> None:
        raise TalosError(self.reason, node=node.name)

    def __repr__(self) -> str:
        return f"ReadOnlyGuard({self.reason!r})"


class NodeFiles:
    """The node's filesystem through the List and Read APIs (read-only, like the node)."""

    def __init__(self, node: TalosNode) -> None:
        self._node = node

    def list(
        self, path: str = "/", *, recurse: bool = False, depth: int = 0
    ) -> builtins.list[models.FileInfo]:
        """Entries under ``path`` (``recurse`` with ``depth`` 0: the whole tree)."""
        return self._node.client.list(path, recurse, depth)

    def entries(self, path: str) -> builtins.list[models.FileInfo] | None:
        """The entries directly in directory ``path``, or ``None`` if nothing exists there.

        A symlinked ``path`` is followed (``/bin`` lists ``/usr/bin``; names are the real
        paths). Any error but a missing path is raised.
        """
        try:
            listing = self.list(path)
        except TalosError as exc:
            if is_missing_path(exc):
                return None
            raise
        return [entry for entry in listing if not _is_listing_root(entry, path)]

    def names(self, path: str) -> builtins.list[str]:
        """The base names of the entries directly in directory ``path``."""
        return sorted(
            posixpath.basename(entry.name.rstrip("/"))
            for entry in self.list(path)
            if not entry.error and not _is_listing_root(entry, path)
        )

    def info(self, path: str) -> models.FileInfo | None:
        """The entry for ``path``, or ``None`` if nothing exists there."""
        parent, name = posixpath.split(path.rstrip("/") or "/")
        entries = self.entries(parent or "/")
        if entries is None:
            return None
        for entry in entries:
            if not entry.error and posixpath.basename(entry.name.rstrip("/")) == name:
                return entry
        return None

    def exists(self, path: str) -> bool:
        return self.info(path) is not None

    def read(self, path: str) -> bytes:
        """A regular file's bytes (the Read API needs os:admin)."""
        return self._node.client.read(path)

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8", errors="replace")


def _is_listing_root(entry: models.FileInfo, path: str) -> bool:
    """The walked root itself: relative name ``.`` (a directory) or the path (a file)."""
    return entry.relative_name == "." or entry.name.rstrip("/") == (path.rstrip("/") or "/")


class TalosNode:
    """One node: its client (targeted with ``node`` metadata), address and facts.

    ``address`` is the target as the endpoint reaches it (e.g. ``10.5.0.3``); ``host`` is
    its host part, scanned by :attr:`ports`. ``scan_baseline`` is an address where no node
    lives, probed to tell the node's ports from wildcard listeners on a shared host (the
    emulator sets it). ``expected_ports`` is the allowlist the plugin built for this node.
    ``unreachable`` is the error that kept the node from answering when its cluster was built
    (its hostname and role could not be read), ``None`` for a node that answered; see
    :attr:`reachable`.
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
    ) -> None:
        self.client = client if client.node == address else client.with_node(address)
        self.unreachable = unreachable
        self.address = address
        self.guard = guard
        self.scan_baseline = scan_baseline
        self.expected_ports = None if expected_ports is None else frozenset(expected_ports)
        self._hostname = hostname
        self._role = role

    def __repr__(self) -> str:
        return f"TalosNode({self.name!r}, address={self.address!r}, role={self._role!r})"

    def with_guard(self, guard: ConfigProtector | None) -> TalosNode:
        """The same node (same connection) whose changes go through ``guard``."""
        return TalosNode(
            self.client,
            self.address,
            hostname=self._hostname,
            role=self._role,
            guard=guard,
            scan_baseline=self.scan_baseline,
            expected_ports=self.expected_ports,
            unreachable=self.unreachable,
        )

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
        patches = _as_patch_list(patch)
        if not dry_run:
            self._protect(guard)
        data = self.patched_config(*patches)
        return self.client.apply_configuration(
            data, mode, dry_run=dry_run, try_timeout=try_timeout
        )

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
        return self.client.apply_configuration(
            data, mode, dry_run=dry_run, try_timeout=try_timeout
        )

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


def _as_patch_list(patch: PatchInput | Sequence[PatchInput]) -> list[PatchInput]:
    """One patch or several: a list of patches is told from a JSON6902 op list by its items."""
    if isinstance(patch, list) and patch and all(_is_patch(item) for item in patch):
        return list(patch)
    if isinstance(patch, tuple):
        return list(patch)
    return [patch]  # type: ignore[list-item]


def _is_patch(item: object) -> bool:
    # JSON6902 ops are mappings with "op"; anything else in a list is a patch of its own.
    return isinstance(item, str | bytes) or (isinstance(item, dict) and "op" not in item)
