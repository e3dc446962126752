"""One node of an emulated cluster: its state, its apid server, its extra listeners and (on
control planes) its Kubernetes API; what it needs of the cluster is :class:`NodeCluster`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from pytest_talos import pki
from pytest_talos.emulator import kubeapi
from pytest_talos.emulator.apid.calllog import CallLog
from pytest_talos.emulator.apid.latency import Latency
from pytest_talos.emulator.apid.listeners import ExtraListeners
from pytest_talos.emulator.apid.server import NodeServer
from pytest_talos.emulator.apid.servicers import ClientConfiguration
from pytest_talos.emulator.apid.tls import client_tls_context, server_tls_context
from pytest_talos.emulator.clock import Clock
from pytest_talos.emulator.cluster.pki import serial_of
from pytest_talos.emulator.faults import AuthenticationQuirk, FaultSet
from pytest_talos.emulator.faults.variants import VariantSet
from pytest_talos.emulator.node.identity import NodeHooks, NodeIdentity
from pytest_talos.emulator.node.net.wireguard import link_ips
from pytest_talos.emulator.node.state import NodeState

__all__ = ["EmulatedNode", "NodeCluster"]

T = TypeVar("T")
_log = logging.getLogger(__name__)


class NodeCluster(Protocol):
    """What a node asks of its cluster."""

    clock: Clock
    fault_set: FaultSet
    variant_set: VariantSet
    talos_version: str
    ca: pki.CertificateAuthority
    call_log_store: CallLog
    latency: Latency

    @property
    def emulated_nodes(self) -> list[EmulatedNode]: ...

    def identities(self) -> list[NodeIdentity]: ...

    def on_loop(self, action: Callable[[], T]) -> T: ...

    def kubeconfig_for(self, node: EmulatedNode) -> bytes: ...

    def client_configuration(self, roles: Sequence[str], ttl: float) -> ClientConfiguration: ...

    def resolve(self, host: str) -> str | None: ...

    def private_address(self, address: str) -> str | None: ...

    def route(self, address: str) -> str: ...

    def kube_server(self, node: EmulatedNode) -> kubeapi.KubeAPIServer: ...


class EmulatedNode(NodeHooks):
    """One node: its state, its apid server, its extra listeners, its Kubernetes API."""

    def __init__(self, cluster: NodeCluster, identity: NodeIdentity, config: bytes) -> None:
        self.cluster = cluster
        self.generated_config = config  # what `talosctl gen config` made: reset() goes back to it
        self.state = self._new_state(identity)
        self.server: NodeServer | None = None
        self.listeners: ExtraListeners | None = None
        self.kube: kubeapi.KubeAPIServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving_lock = asyncio.Lock()

    def _new_state(self, identity: NodeIdentity) -> NodeState:
        cluster = self.cluster
        return NodeState(
            identity,
            clock=cluster.clock,
            faults=cluster.fault_set,
            variants=cluster.variant_set,
            config=self.generated_config,
            talos_version=cluster.talos_version,
            peers=cluster.identities,
            hooks=self,
        )

    async def reset_state(self) -> None:
        """Forget everything this node did: stop serving, a fresh state from the generated
        config on the cluster's release (its identity and certificates are kept). The cluster
        boots it and serves it again (:meth:`EmulatedCluster.reset`)."""
        await self.stop_serving()
        self.state.stop()
        self.state = self._new_state(self.state.identity)

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
        return self.cluster.on_loop(lambda: action(self.state))

    # ---- NodeContext (what the servicers use) ------------------------------------------------

    def cluster_states(self) -> Sequence[NodeState]:
        return [node.state for node in self.cluster.emulated_nodes]

    def kubeconfig(self) -> bytes:
        return self.cluster.kubeconfig_for(self)

    def client_configuration(self, roles: Sequence[str], ttl: float) -> ClientConfiguration:
        return self.cluster.client_configuration(roles, ttl)

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
        # control planes forget their channels to this node
        for node in self.cluster.emulated_nodes:
            if node is not self and node.server is not None:
                node.server.forget(self.address)
        self._spawn(self.stop_serving())

    def api_up(self) -> None:
        self._spawn(self.start_serving())

    def kube_changed(self) -> None:
        for node in self.cluster.emulated_nodes:
            if node.kube is not None:
                node.kube.notify()

    # ---- serving ---------------------------------------------------------------------------

    def _build(self) -> None:
        cluster, ident = self.cluster, self.state.identity
        server_cert = pki.issue_apid_cert(
            cluster.ca,
            hostname=ident.hostname,
            fqdn=ident.fqdn,
            ips=[ident.address, *link_ips(self.state.active_config, node_id=ident.node_id)],
            hostname_san=not cluster.fault_set.quirk(
                AuthenticationQuirk.APID_CERT_LACKS_HOSTNAME_SAN, ident.hostname
            ),
        )
        no_mtls = cluster.fault_set.quirk(
            AuthenticationQuirk.APID_CLIENT_CERT_OPTIONAL, ident.hostname
        )
        tls = server_tls_context(
            ca_pem=cluster.ca.cert_pem,
            cert_pem=server_cert.cert_pem,
            key_pem=server_cert.key_pem,
            require_client_cert=not no_mtls,
            verify_client_cert=not cluster.fault_set.quirk(
                AuthenticationQuirk.APID_SKIPS_CLIENT_CERT_VERIFY, ident.hostname
            ),
        )
        forward_tls, forward_serial = None, ""
        if ident.controlplane:  # secrets/api.go: control-plane apid gets an os:impersonator cert
            impersonator = pki.issue_client_cert(cluster.ca, roles=["os:impersonator"])
            forward_tls = client_tls_context(
                ca_pem=cluster.ca.cert_pem,
                cert_pem=impersonator.cert_pem,
                key_pem=impersonator.key_pem,
            )
            forward_serial = serial_of(impersonator)
        # Variant endpoint-only: a worker listens on its private address only, so this
        # machine's direct connections to its own address are refused.
        bind = cluster.private_address(ident.address) or ident.address
        self.server = NodeServer(
            self,
            address=ident.address,
            tls=tls,
            call_log=cluster.call_log_store,
            directory=cluster.resolve,
            forward_tls=forward_tls,
            bind_address=bind,
            route=cluster.route,
            latency=cluster.latency,
            forward_serial=forward_serial,
            targets=self._apid_of,
        )
        self.listeners = ExtraListeners(bind, self.state.listeners(), cluster.latency)
        if ident.controlplane:
            self.kube = cluster.kube_server(self)

    def _apid_of(self, address: str, port: int) -> NodeServer | None:
        """The apid of the emulated node at ``address:port``, for in-process forwarding."""
        for node in self.cluster.emulated_nodes:
            server = node.server
            if node.address == address and server is not None and server.port == port:
                return server
        return None

    async def start_serving(self) -> None:
        async with self._serving_lock:  # a quick reboot must not overlap its own shutdown
            if self.server is None:
                self._build()
            else:
                self._listen_as_booted()
            assert self.server is not None
            assert self.listeners is not None
            await self.server.start()
            await self.listeners.start()
            if self.kube is not None:
                await self.kube.start()

    def _listen_as_booted(self) -> None:
        """The sockets of the system that booted, not of the first boot: an upgrade or a
        rollback changes the release, and etcd's listeners with it (v1.14.0-rc.1
        internal/app/machined/pkg/system/services/etcd.go listen-client-http-urls)."""
        assert self.listeners is not None
        self.listeners = ExtraListeners(
            self.listeners.address, self.state.listeners(), self.cluster.latency
        )

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
