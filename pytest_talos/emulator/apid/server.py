"""apid of an emulated node: one grpclib server on ``<address>:50000`` behind mutual TLS.

What happens to a call, in order (``internal/app/apid/service.go``,
``internal/app/apid/pkg/director/director.go``,
``internal/app/machined/pkg/system/services/machined.go``):

1. TLS: a client certificate signed by the Talos CA is required (a fault profile can make
   it optional); right after the handshake the leaf certificate's ExtKeyUsage must be exactly
   ``[ClientAuth]`` (apid's ``verifyExtKeyUsage``), otherwise the connection is dropped.
2. Roles come from the certificate's Organization; a peer holding ``os:impersonator`` (a
   control plane forwarding a call) may pass the caller's roles as ``talos-role`` metadata.
3. Routing by ``node`` / ``nodes`` metadata: local, one-to-one proxy (reply verbatim) or
   one-to-many proxy (per-node ``metadata``, per-node errors). Only control planes forward,
   over real mTLS with their own ``os:impersonator`` client certificate.
4. Locally, the role rules of :data:`~.servicers.ROLE_RULES`
   (``PermissionDenied`` ``not authorized``), then the servicer.

Every received call is appended to the cluster's :class:`CallLog`.

Layout: this module (the listener, authentication, the call log), :mod:`.routing` (step 3
and the dialing of other nodes), :mod:`.dispatch` (step 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from grpclib.const import Handler
from grpclib.server import Stream

from pytest_talos._proto.cluster import cluster_grpc
from pytest_talos._proto.machine import machine_grpc
from pytest_talos._proto.v1alpha1 import state_grpc
from pytest_talos.emulator.apid.calllog import CallLog, CallRecord
from pytest_talos.emulator.apid.dispatch import LocalDispatcher, MethodTable
from pytest_talos.emulator.apid.forwarding import Route
from pytest_talos.emulator.apid.gate import (
    CheckedServer,
    Identity,
    PeerBook,
    apply_tls_faults,
    certificate_identity,
)
from pytest_talos.emulator.apid.inprocess import TargetLookup, relay_until
from pytest_talos.emulator.apid.latency import Latency
from pytest_talos.emulator.apid.routing import FORWARD_TIMEOUT, Directory, Router
from pytest_talos.emulator.apid.servicers import MUTATING_METHODS, NodeContext
from pytest_talos.emulator.apid.servicers.cluster import ClusterServicer
from pytest_talos.emulator.apid.servicers.cosi import StateServicer
from pytest_talos.emulator.apid.servicers.machine import machine_servicer
from pytest_talos.emulator.apid.status import as_grpc_error, handler_failure
from pytest_talos.emulator.faults import AuthenticationQuirk
from pytest_talos.talos_api import APID_PORT, IMPERSONATOR, change_level

__all__ = ["APID_PORT", "NodeServer", "method_table"]

_SERVICES: tuple[tuple[Any, Callable[[], Any]], ...] = (
    (machine_grpc.MachineServiceBase, machine_servicer),
    (cluster_grpc.ClusterServiceBase, ClusterServicer),
    (state_grpc.StateBase, StateServicer),
)


def method_table() -> MethodTable:
    """``{path: (generated handler spec, servicer method)}`` for every served RPC."""
    table: MethodTable = {}
    for base, make_servicer in _SERVICES:
        servicer = make_servicer()
        for path, handler in base.__mapping__(servicer).items():
            table[path] = (handler, handler.func)
    return table


def _metadata(stream: Stream[Any, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for key, value in (stream.metadata or {}).items():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        found.setdefault(key.lower(), []).append(text)
    return found


class NodeServer:
    """The apid listener of one node."""

    def __init__(
        self,
        context: NodeContext,
        *,
        address: str,
        tls: ssl.SSLContext,
        call_log: CallLog,
        directory: Directory,
        forward_tls: ssl.SSLContext | None = None,
        port: int = APID_PORT,
        forward_timeout: float = FORWARD_TIMEOUT,
        bind_address: str | None = None,
        route: Route | None = None,
        latency: Latency | None = None,
        forward_serial: str = "",
        targets: TargetLookup | None = None,
    ) -> None:
        self.context = context
        self.latency = latency or Latency()
        self.address = address
        # Where the listener is bound: the node's address, or (variant endpoint-only) the
        # private address only the cluster's control planes dial (see ``route``).
        self.bind_address = bind_address or address
        self.port = port
        self._tls = tls
        self._call_log = call_log
        self._server: CheckedServer | None = None
        self._down = asyncio.Event()  # set when the listener stops: in-process calls end
        self._peers = PeerBook(
            lax_eku=lambda: context.state.quirk(AuthenticationQuirk.APID_SKIPS_EKU_RULE),
            latency=self.latency,
        )
        self._table = method_table()
        self._local = LocalDispatcher(context, self._table)
        self._router = Router(
            self._local,
            self._table,
            address=address,
            port=port,
            directory=directory,
            forward_tls=forward_tls,
            forward_timeout=forward_timeout,
            route=route,
            forward_serial=forward_serial,
            targets=targets,
            latency=self.latency,
        )

    @property
    def serving(self) -> bool:
        return self._server is not None

    @property
    def can_forward(self) -> bool:
        return self._router.can_forward

    @property
    def forward_timeout(self) -> float:
        """Seconds a forwarded unary call without a client deadline may take."""
        return self._router.forward_timeout

    @forward_timeout.setter
    def forward_timeout(self, seconds: float) -> None:
        self._router.forward_timeout = seconds

    async def start(self) -> None:
        if self._server is not None:
            return
        mapping = {
            path: Handler(self._entry(path), spec.cardinality, spec.request_type, spec.reply_type)
            for path, (spec, _) in self._table.items()
        }
        state = self.context.state
        apply_tls_faults(self._tls, state.quirk, state.active_config)
        server = CheckedServer(self._peers, mapping)
        await server.start(self.bind_address, self.port, ssl=self._tls, reuse_address=True)
        self._down = asyncio.Event()
        self._server = server

    async def stop(self) -> None:
        """Close the listener and every open connection (a reboot takes the API down)."""
        server = self._server
        if server is None:
            return
        self._down.set()  # in-process forwarded calls break as their connections would
        server.close()
        # Not serving only once the listener is closed: a thread that sees serving go false
        # (a test, a harness) must find the port closed, not still taking connections.
        self._server = None
        self._peers.clear()
        self._router.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5.0)

    def forget(self, address: str) -> None:
        """Drop the cached channels to ``address`` (that node went down)."""
        self._router.forget(address)

    # ---- entry --------------------------------------------------------------------------

    def _entry(self, path: str) -> Callable[[Stream[Any, Any]], Any]:
        async def entry(stream: Stream[Any, Any]) -> None:
            try:
                await self._serve(path, stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                raise handler_failure(exc, stream) from None

        return entry

    def _identify(self, stream: Stream[Any, Any], md: Mapping[str, list[str]]) -> Identity:
        identity = self._peers.peers.get(stream.peer.addr())
        if identity is None:  # not filed (cannot happen with our protocol): read it now
            identity = certificate_identity(stream.peer.cert())
        return self._with_forwarded_roles(identity, md)

    @staticmethod
    def _with_forwarded_roles(identity: Identity, md: Mapping[str, list[str]]) -> Identity:
        if IMPERSONATOR in identity.roles and md.get("talos-role"):
            # pkg/grpc/middleware/authz/injector.go: roles re-sent by a forwarding control plane.
            return Identity(frozenset(md["talos-role"]), identity.serial, "proxyfrom" in md)
        return identity

    async def _serve(self, path: str, stream: Stream[Any, Any]) -> None:
        md = _metadata(stream)
        identity = self._identify(stream, md)
        request = await stream.recv_message()
        await self.latency.hop()  # this hop's round trip (the caller's, or the forwarder's)
        targets = self._router.targets(path, md, identity)
        self._record(path, identity, request, md)
        if targets is None:
            async for reply in self._local.serve(path, request, identity.roles, md):
                await stream.send_message(reply)
            return
        kind, names = targets
        if kind == "one":
            replies = self._router.one_to_one(path, names[0], request, identity, md, stream)
            async for reply in replies:
                await stream.send_message(reply)
            return
        await self._router.one_to_many(path, names, request, identity, md, stream)

    async def serve_forwarded(
        self,
        path: str,
        request: Any,
        forwarder_serial: str,
        pairs: Sequence[tuple[str, str]],
        timeout: float | None,
    ) -> AsyncIterator[Any]:
        """A call another node's apid forwards, handed over in process (:mod:`.inprocess`):
        served as :meth:`_serve` serves it from the forwarder's impersonator connection."""
        if self._server is None:
            raise ConnectionRefusedError("the target's apid does not serve")
        down = self._down
        md: dict[str, list[str]] = {}
        for key, value in pairs:  # as grpclib delivers them: keys in lower case
            md.setdefault(key.lower(), []).append(value)
        peer = Identity(frozenset({IMPERSONATOR}), forwarder_serial, False)
        identity = self._with_forwarded_roles(peer, md)
        await asyncio.wait_for(self.latency.hop(), timeout)  # the endpoint -> node hop
        if down.is_set():
            raise ConnectionResetError("the target's apid went down")
        self._record(path, identity, request, md)
        try:
            async for reply in relay_until(
                self._local.serve(path, request, identity.roles, md), down, timeout
            ):
                yield reply
        except (asyncio.CancelledError, ConnectionResetError, TimeoutError):
            raise  # the client gave up; the target went down; the deadline passed
        except Exception as exc:  # what the target's entry() turns into its status
            raise as_grpc_error(exc) from None

    def _record(
        self, path: str, identity: Identity, request: Any, md: Mapping[str, list[str]]
    ) -> None:
        mutating = path in MUTATING_METHODS and change_level(path, request) is not None
        self._call_log.append(
            CallRecord(
                node=self.context.state.hostname,
                address=self.address,
                method=path,
                roles=tuple(sorted(identity.roles)),
                mutating=mutating,
                forwarded=identity.forwarded,
                targets=tuple(md.get("node", []) + md.get("nodes", [])),
                client_serial=identity.serial,
            )
        )
