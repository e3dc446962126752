"""An emulated Talos cluster: nodes on their own loopback addresses, wired together.

``EmulatedCluster`` is both a synchronous context manager (it then runs its own event loop
on a background thread) and an asynchronous one (it then runs on the caller's loop)::

    with EmulatedCluster(controlplanes=1, workers=1) as cluster:
        print(cluster.talosconfig_path, [n.address for n in cluster.nodes])

Addresses: every node gets its own address in a ``127.A.B.0/24`` picked so that nothing
listens there yet (first node ``.2``, like talosctl's ``10.5.0.2``), so several clusters can
run side by side (pytest-xdist). ``vacant_address`` is an address of the same /24 where no
node lives: a port that answers there too belongs to a wildcard listener of the host, not
to a node — the baseline a port scanner uses to attribute answers on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeVar

from pytest_talos.emulator import desired, kubeapi, pki
from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.addresses import EmulatorError, pick_subnet
from pytest_talos.emulator.calllog import CallLog, CallRecord
from pytest_talos.emulator.clock import Clock
from pytest_talos.emulator.faults import Fault, FaultProfile, FaultSet, resolve_faults
from pytest_talos.emulator.identity import NodeHooks, NodeIdentity
from pytest_talos.emulator.kubeobjects import ClusterKubeProvider
from pytest_talos.emulator.listeners import ExtraListeners, ListenerError
from pytest_talos.emulator.nodeapply import ApplyRequest
from pytest_talos.emulator.server import NodeServer
from pytest_talos.emulator.servicers import ClientConfiguration
from pytest_talos.emulator.state import NodeState
from pytest_talos.emulator.tls import client_tls_context, server_tls_context
from pytest_talos.emulator.variants import DEFAULT_EXTENSIONS, Variant, VariantSet
from pytest_talos.errors import ConfigError
from pytest_talos.patches import apply_patches

__all__ = ["ClientIdentity", "EmulatedCluster", "EmulatedNode", "EmulatorError", "NodeInfo"]

T = TypeVar("T")
_log = logging.getLogger(__name__)
Platform = Literal["container", "metal"]
START_TIMEOUT = 60.0
_HOSTNAME_PLACEHOLDER = "emulated-node-hostname-placeholder"
KUBE_PORT = 6443


@dataclass(frozen=True)
class NodeInfo:
    hostname: str
    role: Literal["controlplane", "worker"]
    address: str


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate the cluster issued, and a talosconfig around it."""

    roles: tuple[str, ...]
    serial: str  # lower-case hex, as CallRecord.client_serial
    cert_pem: bytes
    talosconfig: bytes = field(repr=False)  # holds the private key
    path: Path | None = None


def _serial_of(cert: pki.CertAndKey) -> str:
    return format(cert.cert.serial_number, "x")


class EmulatedNode(NodeHooks):
    """One node: its state, its apid server, its extra listeners, its Kubernetes API."""

    def __init__(self, cluster: EmulatedCluster, identity: NodeIdentity, config: bytes) -> None:
        self.cluster = cluster
        self.state = NodeState(
            identity,
            clock=cluster.clock,
            faults=cluster.fault_set,
            variants=cluster.variant_set,
            config=config,
            talos_version=cluster.talos_version,
            peers=cluster._identities,
            hooks=self,
        )
        self.server: NodeServer | None = None
        self.listeners: ExtraListeners | None = None
        self.kube: kubeapi.KubeAPIServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving_lock = asyncio.Lock()

    # ---- facts and helpers for tests --------------------------------------------------------

    @property
    def hostname(self) -> str:
        return self.state.hostname

    @property
    def address(self) -> str:
        return self.state.identity.address

    @property
    def role(self) -> str:
        return self.state.identity.role

    @property
    def clock(self) -> Clock:
        return self.cluster.clock

    @property
    def serving(self) -> bool:
        return self.server is not None and self.server.serving

    def run(self, action: Callable[[NodeState], T]) -> T:
        """Run ``action(state)`` on the cluster's loop thread and return its result."""
        return self.cluster._on_loop(lambda: action(self.state))

    # ---- NodeContext (what the servicers use) ------------------------------------------------

    def cluster_states(self) -> Sequence[NodeState]:
        return [node.state for node in self.cluster._nodes]

    def kubeconfig(self) -> bytes:
        return self.cluster._kubeconfig_for(self)

    def client_configuration(self, roles: Sequence[str], ttl: float) -> ClientConfiguration:
        return self.cluster._client_configuration(roles, ttl)

    # ---- NodeHooks (what the state asks for) ---------------------------------------------------

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("emulated node %s: %s", self.hostname, task.exception())

    def api_down(self) -> None:
        for node in self.cluster._nodes:  # control planes forget their channels to this node
            if node is not self and node.server is not None:
                node.server.forget(self.address)
        self._spawn(self.stop_serving())

    def api_up(self) -> None:
        self._spawn(self.start_serving())

    def kube_changed(self) -> None:
        for node in self.cluster._nodes:
            if node.kube is not None:
                node.kube.notify()

    # ---- serving ---------------------------------------------------------------------------

    def _build(self) -> None:
        cluster, ident = self.cluster, self.state.identity
        server_cert = pki.issue_apid_cert(
            cluster.ca,
            hostname=ident.hostname,
            fqdn=ident.fqdn,
            ips=[ident.address],
            hostname_san=not cluster.fault_set.on(Fault.APID_CERT_MISSING_SAN, ident.hostname),
        )
        no_mtls = cluster.fault_set.on(Fault.NO_MTLS, ident.hostname)
        tls = server_tls_context(
            ca_pem=cluster.ca.cert_pem,
            cert_pem=server_cert.cert_pem,
            key_pem=server_cert.key_pem,
            require_client_cert=not no_mtls,
            verify_client_cert=not cluster.fault_set.on(
                Fault.CLIENT_CERTS_UNVERIFIED, ident.hostname
            ),
        )
        forward_tls = None
        if ident.controlplane:  # secrets/api.go: control-plane apid gets an os:impersonator cert
            impersonator = pki.issue_client_cert(cluster.ca, roles=["os:impersonator"])
            forward_tls = client_tls_context(
                ca_pem=cluster.ca.cert_pem,
                cert_pem=impersonator.cert_pem,
                key_pem=impersonator.key_pem,
            )
        self.server = NodeServer(
            self,
            address=ident.address,
            tls=tls,
            call_log=cluster.call_log_store,
            directory=cluster._resolve,
            forward_tls=forward_tls,
        )
        self.listeners = ExtraListeners(ident.address, self.state.listeners())
        if ident.controlplane:
            self.kube = cluster._kube_server(self)

    async def start_serving(self) -> None:
        async with self._serving_lock:  # a quick reboot must not overlap its own shutdown
            if self.server is None:
                self._build()
            assert self.server is not None
            assert self.listeners is not None
            await self.server.start()
            await self.listeners.start()
            if self.kube is not None:
                await self.kube.start()

    async def stop_serving(self) -> None:
        async with self._serving_lock:
            if self.server is not None:
                await self.server.stop()
            if self.listeners is not None:
                await self.listeners.stop()
            if self.kube is not None:
                await self.kube.stop()

    async def close(self) -> None:
        self.state.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.stop_serving()


class EmulatedCluster:
    """A cluster of emulated Talos nodes serving the Talos API over mTLS on loopback."""

    def __init__(
        self,
        controlplanes: int = 1,
        workers: int = 1,
        faults: Iterable[str | FaultProfile] = (),
        time_scale: float = 1.0,
        platform: Platform = "container",
        talos_version: str = "v1.13.9",
        kubernetes_version: str = "1.36.0",
        subnet: str | None = None,
        *,
        name: str = "talos-default",
        talosconfig_path: str | os.PathLike[str] | None = None,
        extensions: Sequence[str] = (),
        extension_services: Sequence[str] = (),
        variants: Iterable[str | Variant] = (),
        domain: str = "",
    ) -> None:
        _check_arguments(controlplanes, workers, time_scale, platform)
        self.variant_set = VariantSet.of(variants, domain)
        if self.variant_set.on(Variant.METAL):
            platform = "metal"
        if self.variant_set.on(Variant.EXTENSIONS) and not extensions:
            extensions = DEFAULT_EXTENSIONS
        self.name = name
        self.controlplanes, self.workers = controlplanes, workers
        self.platform: Platform = platform
        self.extensions = tuple(extensions)
        self.extension_services = tuple(extension_services)
        self.talos_version = talos_version
        self.kubernetes_version = kubernetes_version.removeprefix("v")
        self.faults = resolve_faults(faults)
        self.clock = Clock(time_scale)
        self._subnet_arg = subnet
        self._talosconfig_arg = Path(talosconfig_path) if talosconfig_path else None
        self.call_log_store = CallLog()
        self._nodes: list[EmulatedNode] = []
        self._config_templates: dict[tuple[str, bool], bytes] = {}
        self._base_configs: dict[str, bytes] = {}  # role -> generated base (write_desired)
        self._started = False
        self._tempdir: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fault_set = FaultSet()
        self.subnet: ipaddress.IPv4Network | None = None
        self._talosconfig_file: Path | None = None
        self._admin: ClientIdentity | None = None

    # ---- public read-only facts ---------------------------------------------------------------

    @property
    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n.hostname, n.state.identity.role, n.address) for n in self._nodes]

    def node(self, name: str) -> EmulatedNode:
        """A node by hostname or address."""
        for node in self._nodes:
            if name in (node.hostname, node.address):
                return node
        known = ", ".join(n.hostname for n in self._nodes)
        raise KeyError(f"no emulated node {name!r}; nodes: {known}")

    @property
    def endpoint(self) -> str:
        """``<first control plane address>:50000``."""
        return f"{self._nodes[0].address}:50000"

    @property
    def vacant_address(self) -> str:
        """An address of the cluster's /24 where no node lives (the scan baseline)."""
        assert self.subnet is not None, "start the cluster first"
        return str(self.subnet[1])

    @property
    def talosconfig_path(self) -> Path:
        assert self._talosconfig_file is not None, "start the cluster first"
        return self._talosconfig_file

    @property
    def talosconfig_bytes(self) -> bytes:
        return self.admin_client_identity.talosconfig

    @property
    def admin_client_identity(self) -> ClientIdentity:
        assert self._admin is not None, "start the cluster first"
        return self._admin

    @property
    def call_log(self) -> list[CallRecord]:
        return self.call_log_store.snapshot()

    def issue_client(
        self, roles: Sequence[str], *, path: str | os.PathLike[str] | None = None
    ) -> ClientIdentity:
        """A new client certificate with ``roles`` and a talosconfig for this cluster."""
        cert = pki.issue_client_cert(self.ca, roles=list(roles))
        target = Path(path) if path is not None else None
        data = pki.write_talosconfig(
            target,
            context=self.name,
            endpoints=self._endpoints(),
            nodes=[n.address for n in self._nodes],
            ca_pem=self.ca.cert_pem,
            client=cert,
            time_scale=self.clock.time_scale,
            scan_baseline=self.vacant_address,
        )
        return ClientIdentity(tuple(roles), _serial_of(cert), cert.cert_pem, data, target)

    def write_desired(self, directory: str | os.PathLike[str]) -> Path:
        """Write the desired state the nodes were generated from (base configs, variant
        patches, ``talos-desired.yaml``) into ``directory``; returns the mapping file.
        ``pytest conformance --talos-desired DIR`` finds a healthy cluster in sync with it."""
        files = desired.desired_files(
            bases=self._base_configs,
            variant_patches=_variant_patches(self.variant_set),
            nodes=[desired.DesiredNode(n.hostname, n.role) for n in self._nodes],
            placeholder=_HOSTNAME_PLACEHOLDER,
        )
        return desired.write_desired_files(Path(directory), files)

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Build every node and serve; returns once all listeners accept connections."""
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        self.clock.bind(self._loop)
        self._prepare_pki()
        self._prepare_nodes()
        self._write_admin_talosconfig()
        try:
            await asyncio.gather(*(node.start_serving() for node in self._nodes))
        except (OSError, ListenerError) as exc:
            await self.stop()
            raise EmulatorError(f"cannot start the emulated cluster: {exc}") from None
        self._started = True

    async def stop(self) -> None:
        await asyncio.gather(*(node.close() for node in self._nodes), return_exceptions=True)
        self._started = False
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    async def __aenter__(self) -> EmulatedCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> EmulatedCluster:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="talos-emulator", daemon=True)
        self._thread.start()
        self._loop = loop
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result(START_TIMEOUT)
        except BaseException:
            self._shutdown_thread()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._shutdown_thread()

    def _shutdown_thread(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(START_TIMEOUT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._thread = None

    def _on_loop(self, action: Callable[[], T]) -> T:
        loop = self._loop
        assert loop is not None, "start the cluster first"
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return action()

        async def run() -> T:
            return action()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(START_TIMEOUT)

    # ---- building ------------------------------------------------------------------------------

    def _prepare_pki(self) -> None:
        # pkg/machinery/config/generate/secrets/ca.go NewTalosCA: Ed25519
        self.ca = pki.CertificateAuthority.generate(organization="talos")
        expiring = any(p.fault is Fault.CLIENT_CERT_EXPIRING for p in self.faults)
        validity = pki.EXPIRING_CLIENT_VALIDITY if expiring else pki.DEFAULT_CLIENT_VALIDITY
        admin = pki.issue_client_cert(self.ca, roles=["os:admin"], validity=validity)
        self._admin_cert = admin
        # pkg/machinery/config/generate/secrets: the Kubernetes CA is ECDSA P-256.
        self.kube_ca = pki.CertificateAuthority.generate(
            organization="kubernetes", key_type="ecdsa"
        )
        self._kube_admin = pki.issue_client_cert(
            self.kube_ca, roles=["system:masters"], common_name="admin", key_type="ecdsa"
        )

    def _prepare_nodes(self) -> None:
        self.subnet = (
            ipaddress.IPv4Network(self._subnet_arg, strict=False)
            if self._subnet_arg
            else pick_subnet()
        )
        controlplane: Literal["controlplane", "worker"] = "controlplane"
        worker: Literal["controlplane", "worker"] = "worker"
        roles = [controlplane] * self.controlplanes + [worker] * self.workers
        counters: dict[str, int] = {"controlplane": 0, "worker": 0}
        identities = []
        for index, role in enumerate(roles):
            counters[role] += 1
            identities.append(
                NodeIdentity(
                    hostname=f"{self.name}-{role}-{counters[role]}",
                    role=role,
                    address=str(self.subnet[2 + index]),
                    prefix_length=self.subnet.prefixlen,
                    platform=self.platform,
                    cluster_name=self.name,
                    kubernetes_version=self.kubernetes_version,
                    extensions=self.extensions,
                    extension_services=self.extension_services,
                    domain=self.variant_set.domain,
                )
            )
        last_cp = [i.hostname for i in identities if i.role == "controlplane"][-1]
        self.fault_set = FaultSet(
            self.faults, last_node=identities[-1].hostname, last_controlplane=last_cp
        )
        endpoint = f"https://{identities[0].address}:6443"
        self._nodes = [
            EmulatedNode(self, ident, self._config_for(ident, endpoint)) for ident in identities
        ]
        for node in self._nodes:
            node.state.boot()
            if self.fault_set.on(Fault.CONFIG_STAGED, node.hostname):  # fault config-staged
                staged = apply_patches(node.state.active_config, [desired.CONFIG_STAGED_PATCH])
                node.state.apply_configuration(ApplyRequest(staged, "STAGED"))

    def _config_for(self, ident: NodeIdentity, endpoint: str) -> bytes:
        # Configs differ per node only by hostname (and the cidr-overlap fault): generate one
        # template per kind and fill the hostname in, which keeps 50-node starts fast.
        overlap = self.fault_set.on(Fault.CIDR_OVERLAP, ident.hostname)
        key = (ident.role, overlap)
        template = self._config_templates.get(key)
        if template is None:
            pods: Sequence[str] = mc.DEFAULT_POD_SUBNETS
            if overlap:
                pods = ("127.0.0.0/8",)  # fault cidr-overlap: the pod CIDR covers node addresses
            template = mc.generate_config(
                cluster_name=self.name,
                hostname=_HOSTNAME_PLACEHOLDER,
                role=ident.role,
                address=ident.address,
                endpoint=endpoint,
                pod_subnets=pods,
                kubernetes_version=self.kubernetes_version,
                # talosctl cluster create: docker sets no install image, qemu (metal) does
                # (clusterops/configmaker/internal/makers/{docker,qemu}.go).
                install_image=(
                    f"ghcr.io/siderolabs/installer:{self.talos_version}"
                    if self.platform == "metal"
                    else None
                ),
                ca_crt_pem=self.ca.cert_pem,
                kubernetes_ca_crt_pem=self.kube_ca.cert_pem,
            )
            self._base_configs.setdefault(ident.role, template)
            template = _with_variant_patches(template, self.variant_set)
            self._config_templates[key] = template
        config = template.replace(_HOSTNAME_PLACEHOLDER.encode(), ident.hostname.encode())
        if self.fault_set.on(Fault.CONFIG_DRIFT, ident.hostname):  # fault config-drift
            config = apply_patches(config, [desired.CONFIG_DRIFT_PATCH])
        return config

    def _states(self) -> list[NodeState]:
        return [node.state for node in self._nodes]

    def _identities(self) -> list[NodeIdentity]:
        return [node.state.identity for node in self._nodes]

    def _endpoints(self) -> list[str]:
        return [n.address for n in self._nodes if n.state.identity.controlplane]

    def _write_admin_talosconfig(self) -> None:
        path = self._talosconfig_arg
        if path is None:
            self._tempdir = tempfile.mkdtemp(prefix="talos-emulator-")
            path = Path(self._tempdir) / "talosconfig"
        data = pki.write_talosconfig(
            path,
            context=self.name,
            endpoints=self._endpoints(),
            nodes=[n.address for n in self._nodes],
            ca_pem=self.ca.cert_pem,
            client=self._admin_cert,
            time_scale=self.clock.time_scale,
            scan_baseline=self.vacant_address,
        )
        self._talosconfig_file = path
        self._admin = ClientIdentity(
            ("os:admin",), _serial_of(self._admin_cert), self._admin_cert.cert_pem, data, path
        )

    def _resolve(self, host: str) -> str | None:
        """A ``node`` target (address or hostname) to the address to dial."""
        with contextlib.suppress(ValueError):
            return str(ipaddress.ip_address(host))
        for node in self._nodes:
            if node.hostname == host:
                return node.address
        return None

    def _kube_server(self, node: EmulatedNode) -> kubeapi.KubeAPIServer:
        ident = node.state.identity
        cert = pki.issue_kube_apiserver_cert(
            self.kube_ca,
            hostname=ident.hostname,
            fqdn=ident.fqdn,
            ips=[ident.address],
            endpoint_host=ident.address,  # the server of _kubeconfig_for
            expired=self.fault_set.on(Fault.KUBE_CERT_EXPIRED, ident.hostname, controlplane=True),
        )
        ssl_context = kubeapi.server_ssl_context(
            cert_pem=cert.cert_pem, key_pem=cert.key_pem, client_ca_pem=self.kube_ca.cert_pem
        )
        return kubeapi.KubeAPIServer(
            node.address,
            KUBE_PORT,
            server_ssl=ssl_context,
            provider=ClusterKubeProvider(self._states, self.kubernetes_version),
        )

    def _kubeconfig_for(self, node: EmulatedNode) -> bytes:
        return kubeapi.render_kubeconfig(
            cluster_name=self.name,
            server=f"https://{node.address}:{KUBE_PORT}",
            ca_pem=self.kube_ca.cert_pem,
            client_cert_pem=self._kube_admin.cert_pem,
            client_key_pem=self._kube_admin.key_pem_talos,
        )

    def _client_configuration(self, roles: Sequence[str], ttl: float) -> ClientConfiguration:
        cert = pki.issue_client_cert(self.ca, roles=list(roles), validity=dt.timedelta(seconds=ttl))
        # v1alpha1_server.go GenerateClientConfiguration: context `<role without os:>@<cluster>`
        # for one role; no endpoints.
        context = f"{roles[0].removeprefix('os:')}@{self.name}" if len(roles) == 1 else self.name
        talosconfig = pki.write_talosconfig(
            None, context=context, endpoints=[], ca_pem=self.ca.cert_pem, client=cert
        )
        return ClientConfiguration(self.ca.cert_pem, cert.cert_pem, cert.key_pem_talos, talosconfig)


def _variant_patches(variants: VariantSet) -> list[tuple[str, str]]:
    """``(variant, patch)`` for the variants that live in the machine config."""
    patches: list[tuple[str, str]] = []
    if variants.on(Variant.KUBE_PROXY_DISABLED):
        patches.append((Variant.KUBE_PROXY_DISABLED, "cluster:\n  proxy:\n    disabled: true\n"))
    if variants.on(Variant.DISCOVERY_DISABLED):
        patches.append((Variant.DISCOVERY_DISABLED, "cluster:\n  discovery:\n    enabled: false\n"))
    return patches


def _with_variant_patches(config: bytes, variants: VariantSet) -> bytes:
    """The config as an operator patches it for the variants that live in the machine config."""
    patches = [patch for _, patch in _variant_patches(variants)]
    return apply_patches(config, patches) if patches else config


def _check_arguments(controlplanes: int, workers: int, time_scale: float, platform: str) -> None:
    if controlplanes < 1:
        raise ConfigError(
            f"an emulated cluster needs at least one control plane, not "
            f"{controlplanes}; pass controlplanes=1 or more"
        )
    if workers < 0 or controlplanes + workers > 250:
        raise ConfigError(
            f"cannot emulate {controlplanes} control planes and {workers} workers; "
            "use 0 or more workers and at most 250 nodes in total"
        )
    if not time_scale > 0:
        raise ConfigError(f"time_scale must be a positive number, not {time_scale!r}")
    if platform not in ("container", "metal"):
        raise ConfigError(f"platform must be 'container' or 'metal', not {platform!r}")
