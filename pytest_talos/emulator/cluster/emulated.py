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

Variant ``endpoint-only``: the workers are on a network this machine does not reach. Their
listeners are bound to a second free ``127.C.D.0/24`` (the private network), nothing listens
on their own addresses (a direct connection is refused), and a control plane forwarding a
call to a worker's address dials its private address (:meth:`EmulatedCluster.route`),
verifying the worker's certificate against the worker's own address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal, TypeVar

from pytest_talos import pki
from pytest_talos.emulator import kubeapi
from pytest_talos.emulator.apid.calllog import CallLog, CallRecord
from pytest_talos.emulator.apid.latency import Latency
from pytest_talos.emulator.apid.listeners import ListenerError, check_served_ports
from pytest_talos.emulator.apid.servicers import ClientConfiguration
from pytest_talos.emulator.clock import Clock
from pytest_talos.emulator.cluster import desired
from pytest_talos.emulator.cluster.addresses import EmulatorError, pick_subnet
from pytest_talos.emulator.cluster.configs import (
    HOSTNAME_PLACEHOLDER,
    VARIANT_PATCH_ROLES,
    NodeConfigs,
    check_arguments,
    node_identities,
    variant_patches,
)
from pytest_talos.emulator.cluster.kubeobjects import ClusterKubeProvider
from pytest_talos.emulator.cluster.member import EmulatedNode
from pytest_talos.emulator.cluster.pki import ClusterPKI, serial_of
from pytest_talos.emulator.errors import CannotListen
from pytest_talos.emulator.faults import (
    FaultProfile,
    FaultSet,
    GeneratedConfigQuirk,
    resolve_faults,
)
from pytest_talos.emulator.faults.variants import (
    DEFAULT_EXTENSIONS,
    HA_CONTROLPLANES,
    Variant,
    VariantSet,
)
from pytest_talos.emulator.node.apply import ApplyRequest
from pytest_talos.emulator.node.identity import NodeIdentity
from pytest_talos.emulator.node.net.wireguard import link_ips
from pytest_talos.emulator.node.state import NodeState
from pytest_talos.errors import ConfigError
from pytest_talos.patches import apply_patches
from pytest_talos.releases import Release, release_named

__all__ = ["ClientIdentity", "EmulatedCluster", "EmulatedNode", "EmulatorError", "NodeInfo"]

T = TypeVar("T")
Platform = Literal["container", "metal"]
START_TIMEOUT = 60.0
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


# The emulator's v1.13 clusters have always run Kubernetes 1.36.0 (INFERRED: a docker
# cluster created with talosctl's default at the time); the other releases run their
# DefaultKubernetesVersion (pkg/machinery/constants/constants.go at the tag read).
_V1_13_KUBERNETES = "1.36.0"


def _default_kubernetes(release: Release) -> str:
    return _V1_13_KUBERNETES if release.line == "v1.13" else release.kubernetes_version


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
        kubernetes_version: str | None = None,
        subnet: str | None = None,
        *,
        name: str = "talos-default",
        talosconfig_path: str | os.PathLike[str] | None = None,
        extensions: Sequence[str] = (),
        extension_services: Sequence[str] = (),
        variants: Iterable[str | Variant] = (),
        domain: str = "",
        latency: float = 0.0,
    ) -> None:
        check_arguments(controlplanes, workers, time_scale, platform)
        self.variant_set = VariantSet.of(variants, domain)
        if self.variant_set.on(Variant.METAL):
            platform = "metal"
        if self.variant_set.on(Variant.EXTENSIONS) and not extensions:
            extensions = DEFAULT_EXTENSIONS
        if self.variant_set.on(Variant.THREE_CONTROL_PLANES):
            controlplanes = HA_CONTROLPLANES  # the variant is the shape, whatever was asked
        self.name = name
        self.controlplanes, self.workers = controlplanes, workers
        self.platform: Platform = platform
        self.extensions = tuple(extensions)
        self.extension_services = tuple(extension_services)
        # "v1.14", "v1.14.x" or a full tag: the release table's entry (pytest_talos.releases)
        try:
            self.release, talos_version = release_named(talos_version)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.talos_version = talos_version
        if kubernetes_version is None:
            kubernetes_version = _default_kubernetes(self.release)
        self.kubernetes_version = kubernetes_version.removeprefix("v")
        self.faults = resolve_faults(faults)
        self.clock = Clock(time_scale)
        self.latency = Latency(latency)  # seconds of round trip per hop (latency.py)
        self._subnet_arg = subnet
        self._talosconfig_arg = Path(talosconfig_path) if talosconfig_path else None
        self.call_log_store = CallLog()
        self._nodes: list[EmulatedNode] = []
        self._configs = NodeConfigs(
            cluster_name=name,
            kubernetes_version=self.kubernetes_version,
            talos_version=talos_version,
            platform=platform,
            variants=self.variant_set,
        )
        self._started = False
        self._tempdir: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fault_set = FaultSet()
        self.subnet: ipaddress.IPv4Network | None = None
        self.private_subnet: ipaddress.IPv4Network | None = None
        self._private: dict[str, str] = {}  # worker address -> private address (endpoint-only)
        self._talosconfig_file: Path | None = None
        self._admin: ClientIdentity | None = None

    # ---- public read-only facts ---------------------------------------------------------------

    @property
    def emulated_nodes(self) -> list[EmulatedNode]:
        return list(self._nodes)

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
        return ClientIdentity(tuple(roles), serial_of(cert), cert.cert_pem, data, target)

    def write_desired(self, directory: str | os.PathLike[str]) -> Path:
        """Write the desired state the nodes were generated from (base configs, variant
        patches, ``talos-desired.yaml``) into ``directory``; returns the mapping file.
        ``pytest conformance --talos-desired DIR`` finds a healthy cluster in sync with it."""
        files = desired.desired_files(
            bases=self._configs.bases,
            variant_patches=variant_patches(self.variant_set),
            nodes=[desired.DesiredNode(n.hostname, n.role) for n in self._nodes],
            placeholder=HOSTNAME_PLACEHOLDER,
            patch_roles=VARIANT_PATCH_ROLES,
        )
        return desired.write_desired_files(Path(directory), files)

    # ---- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Build every node and serve; returns once all listeners accept connections."""
        if self._started:
            return
        check_served_ports()  # beside a local Kubernetes: which port, once, before anything
        self._loop = asyncio.get_running_loop()
        self.clock.bind(self._loop)
        self._prepare_pki()
        self._prepare_nodes()
        self._write_admin_talosconfig()
        try:
            await asyncio.gather(*(node.start_serving() for node in self._nodes))
        except ListenerError as exc:
            await self.stop()
            raise CannotListen(f"cannot start the emulated cluster: {exc.strerror}") from None
        except OSError as exc:
            await self.stop()
            raise EmulatorError(f"cannot start the emulated cluster: {exc}") from None
        self._started = True

    async def reset_async(self) -> None:
        """Back to the state :meth:`start` left, as moto's ``backend.reset()``: every node
        forgets what was applied, upgraded, rebooted or stopped and boots again from its
        generated config on the cluster's release; the call log is emptied. What a client
        holds stays valid: the addresses, the CAs, the talosconfig and every certificate."""
        if not self._started:
            return
        await asyncio.gather(*(node.reset_state() for node in self._nodes))
        self.call_log_store.clear()
        self._boot_nodes()
        await asyncio.gather(*(node.start_serving() for node in self._nodes))

    def reset(self) -> None:
        """:meth:`reset_async` for a cluster run in its own thread (``with EmulatedCluster()``)."""
        loop = self._loop
        assert loop is not None, "start the cluster first"
        asyncio.run_coroutine_threadsafe(self.reset_async(), loop).result(START_TIMEOUT)

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

    def on_loop(self, action: Callable[[], T]) -> T:
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
        expiring = any(
            GeneratedConfigQuirk.ADMIN_CERT_EXPIRES_SOON in p.quirks for p in self.faults
        )
        self.pki = ClusterPKI(client_expiring=expiring)
        self.ca, self.kube_ca = self.pki.ca, self.pki.kube_ca
        self._admin_cert = self.pki.admin

    def _prepare_nodes(self) -> None:
        self.subnet = (
            ipaddress.IPv4Network(self._subnet_arg, strict=False)
            if self._subnet_arg
            else pick_subnet()
        )
        identities = node_identities(
            self.subnet,
            controlplanes=self.controlplanes,
            workers=self.workers,
            name=self.name,
            platform=self.platform,
            kubernetes_version=self.kubernetes_version,
            extensions=self.extensions,
            extension_services=self.extension_services,
            domain=self.variant_set.domain,
        )
        self._place_private_workers(identities)
        last_cp = [i.hostname for i in identities if i.role == "controlplane"][-1]
        self.fault_set = FaultSet(
            self.faults, last_node=identities[-1].hostname, last_controlplane=last_cp
        )
        endpoint = f"https://{identities[0].address}:6443"
        self._nodes = [
            EmulatedNode(self, ident, self._config_for(ident, endpoint)) for ident in identities
        ]
        self._boot_nodes()

    def _boot_nodes(self) -> None:
        for node in self._nodes:
            node.state.boot()
            if self.fault_set.quirk(
                GeneratedConfigQuirk.CONFIG_CHANGE_STAGED_AT_START, node.hostname
            ):
                staged = apply_patches(node.state.active_config, [desired.CONFIG_STAGED_PATCH])
                node.state.apply_configuration(ApplyRequest(staged, "STAGED"))

    def _place_private_workers(self, identities: Sequence[NodeIdentity]) -> None:
        """Variant endpoint-only: each worker's listeners on the private network."""
        self._private = {}
        if not self.variant_set.on(Variant.ENDPOINT_ONLY):
            return
        workers = [ident for ident in identities if not ident.controlplane]
        if not workers:
            return
        self.private_subnet = pick_subnet()
        for index, ident in enumerate(workers):
            self._private[ident.address] = str(self.private_subnet[2 + index])

    def private_address(self, address: str) -> str | None:
        """Where a node's listeners are bound when only the cluster reaches it (variant
        endpoint-only), else None (they are on the node's own address)."""
        return self._private.get(address)

    def route(self, address: str) -> str:
        """The socket address that reaches the node at ``address`` from a control plane: its
        private address when it has one, else the address itself."""
        return self._private.get(address, address)

    def _config_for(self, ident: NodeIdentity, endpoint: str) -> bytes:
        return self._configs.config_for(
            ident,
            endpoint=endpoint,
            ca_pem=self.ca.cert_pem,
            kube_ca_pem=self.kube_ca.cert_pem,
            cidr_overlap=self.fault_set.quirk(
                GeneratedConfigQuirk.POD_CIDR_OVERLAPS_NODES, ident.hostname
            ),
            drift=self.fault_set.quirk(
                GeneratedConfigQuirk.CONFIG_DRIFTS_FROM_DESIRED, ident.hostname
            ),
        )

    def _states(self) -> list[NodeState]:
        return [node.state for node in self._nodes]

    def identities(self) -> list[NodeIdentity]:
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
            ("os:admin",), serial_of(self._admin_cert), self._admin_cert.cert_pem, data, path
        )

    def resolve(self, host: str) -> str | None:
        """A ``node`` target (address or hostname) to the address to dial."""
        with contextlib.suppress(ValueError):
            return str(ipaddress.ip_address(host))
        for node in self._nodes:
            if node.hostname == host:
                return node.address
        return None

    def kube_server(self, node: EmulatedNode) -> kubeapi.KubeAPIServer:
        ident = node.state.identity
        expired = self.fault_set.quirk(
            GeneratedConfigQuirk.KUBE_APISERVER_CERT_EXPIRED, ident.hostname, controlplane=True
        )
        extra = link_ips(node.state.active_config, node_id=ident.node_id)
        cert = self.pki.kube_apiserver_cert(ident, expired=expired, extra_ips=extra)
        ssl_context = kubeapi.server_ssl_context(
            cert_pem=cert.cert_pem, key_pem=cert.key_pem, client_ca_pem=self.kube_ca.cert_pem
        )
        return kubeapi.KubeAPIServer(
            node.address,
            KUBE_PORT,
            server_ssl=ssl_context,
            provider=ClusterKubeProvider(self._states, self.kubernetes_version),
        )

    def kubeconfig_for(self, node: EmulatedNode) -> bytes:
        server = f"https://{node.address}:{KUBE_PORT}"
        return self.pki.kubeconfig(cluster_name=self.name, server=server)

    def client_configuration(self, roles: Sequence[str], ttl: float) -> ClientConfiguration:
        return self.pki.client_configuration(roles, ttl, cluster_name=self.name)
