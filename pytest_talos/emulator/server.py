"""apid of an emulated node: one grpclib server on ``<address>:50000`` behind mutual TLS.

What happens to a call, in order (``internal/app/apid/service.go``,
``internal/app/apid/pkg/director/director.go``,
``internal/app/machined/pkg/system/services/machined.go``):

1. TLS: a client certificate signed by the Talos CA is required (fault ``no-mtls`` makes it
   optional); right after the handshake the leaf certificate's ExtKeyUsage must be exactly
   ``[ClientAuth]`` (apid's ``verifyExtKeyUsage``), otherwise the connection is dropped.
2. Roles come from the certificate's Organization; a peer holding ``os:impersonator`` (a
   control plane forwarding a call) may pass the caller's roles as ``talos-role`` metadata.
3. Routing by ``node`` / ``nodes`` metadata: local, one-to-one proxy (reply verbatim) or
   one-to-many proxy (per-node ``metadata``, per-node errors). Only control planes forward,
   over real mTLS with their own ``os:impersonator`` client certificate.
4. Locally, the role rules of :data:`~pytest_talos.emulator.servicers.ROLE_RULES`
   (``PermissionDenied`` ``not authorized``), then the servicer.

Every received call is appended to the cluster's :class:`CallLog`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from grpclib.const import Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from pytest_talos._proto.cluster import cluster_grpc
from pytest_talos._proto.machine import machine_grpc
from pytest_talos._proto.v1alpha1 import state_grpc
from pytest_talos.emulator.apidtls import (
    CheckedServer,
    Identity,
    PeerBook,
    apply_tls_faults,
    certificate_identity,
)
from pytest_talos.emulator.calllog import CallLog, CallRecord
from pytest_talos.emulator.errors import ConfigRejected, RPCFailure, ServiceRefused
from pytest_talos.emulator.faults import Fault
from pytest_talos.emulator.forwarding import (
    ONE_TO_MANY_PREFIXES,
    ChannelPool,
    combine_unary,
    forward_metadata,
    relay_streams,
)
from pytest_talos.emulator.grpcerrors import (
    CONNECTION_LOST,
    DEADLINE_TEXT,
    as_grpc_error,
    failure_reason,
    is_deadline,
)
from pytest_talos.emulator.servicers import (
    MUTATING_METHODS,
    Call,
    NodeContext,
    allowed_roles,
)
from pytest_talos.emulator.servicers.cluster import ClusterServicer
from pytest_talos.emulator.servicers.cosi import StateServicer
from pytest_talos.emulator.servicers.machine import MachineServicer
from pytest_talos.talos_api import (
    ADMIN,
    APID_PORT,
    IMPERSONATOR,
    READER,
    change_level,
    split_host_port,
)

__all__ = ["APID_PORT", "NodeServer", "method_table"]

FORWARD_TIMEOUT = 30.0  # seconds, for forwarded unary calls without a client deadline
# A forwarded call gets the client's deadline plus this: the client's own deadline (which
# cancels the forwarded call with it) always ends the call first, never ours.
DEADLINE_GRACE = 1.0

# ---- routing ------------------------------------------------------------------------------

_SERVICES: tuple[tuple[Any, type[Any]], ...] = (
    (machine_grpc.MachineServiceBase, MachineServicer),
    (cluster_grpc.ClusterServiceBase, ClusterServicer),
    (state_grpc.StateBase, StateServicer),
)


def method_table() -> dict[str, tuple[Handler, Any]]:
    """``{path: (generated handler spec, servicer method)}`` for every served RPC."""
    table: dict[str, tuple[Handler, Any]] = {}
    for base, servicer_class in _SERVICES:
        servicer = servicer_class()
        for path, handler in base.__mapping__(servicer).items():
            table[path] = (handler, handler.func)
    return table


def _metadata(stream: Stream[Any, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for key, value in (stream.metadata or {}).items():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        found.setdefault(key.lower(), []).append(text)
    return found


_M = "/machine.MachineService/"
# Faults that hand os:reader a method its rule (servicers.ROLE_RULES) keeps for os:admin.
_READER_GRANTS = {
    Fault.READER_GETS_KUBECONFIG: _M + "Kubeconfig",
    Fault.READER_MINTS_ADMIN: _M + "GenerateClientConfiguration",
}


Directory = Callable[[str], str | None]  # target as given -> node address (or None)


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
    ) -> None:
        self.context = context
        self.address = address
        self.port = port
        self._tls = tls
        self._forward_tls = forward_tls
        self._call_log = call_log
        self._directory = directory
        self._server: CheckedServer | None = None
        self._peers = PeerBook(lax_eku=lambda: context.state.fault(Fault.ANY_EKU_ACCEPTED))
        self._channels = ChannelPool(forward_tls)
        self._table = method_table()
        self.forward_timeout = forward_timeout  # seconds, unary forwards without a deadline

    @property
    def serving(self) -> bool:
        return self._server is not None

    @property
    def can_forward(self) -> bool:
        return self._forward_tls is not None

    async def start(self) -> None:
        if self._server is not None:
            return
        mapping = {
            path: Handler(self._entry(path), spec.cardinality, spec.request_type, spec.reply_type)
            for path, (spec, _) in self._table.items()
        }
        state = self.context.state
        apply_tls_faults(self._tls, state.fault, state.active_config)
        server = CheckedServer(self._peers, mapping)
        await server.start(self.address, self.port, ssl=self._tls, reuse_address=True)
        self._server = server

    async def stop(self) -> None:
        """Close the listener and every open connection (a reboot takes the API down)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self._peers.clear()
        self._channels.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5.0)

    # ---- entry --------------------------------------------------------------------------

    def _entry(self, path: str) -> Callable[[Stream[Any, Any]], Any]:
        async def entry(stream: Stream[Any, Any]) -> None:
            try:
                await self._serve(path, stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                raise as_grpc_error(exc) from None

        return entry

    def _identify(self, stream: Stream[Any, Any], md: Mapping[str, list[str]]) -> Identity:
        identity = self._peers.peers.get(stream.peer.addr())
        if identity is None:  # not filed (cannot happen with our protocol): read it now
            identity = certificate_identity(stream.peer.cert())
        if IMPERSONATOR in identity.roles and md.get("talos-role"):
            # pkg/grpc/middleware/authz/injector.go: roles re-sent by a forwarding control plane.
            return Identity(frozenset(md["talos-role"]), identity.serial, "proxyfrom" in md)
        return identity

    async def _serve(self, path: str, stream: Stream[Any, Any]) -> None:
        md = _metadata(stream)
        identity = self._identify(stream, md)
        request = await stream.recv_message()
        targets = self._targets(path, md, identity)
        self._record(path, identity, request, md)
        if targets is None:
            async for reply in self._local(path, request, identity.roles, md):
                await stream.send_message(reply)
            return
        kind, names = targets
        if kind == "one":
            async for reply in self._one_to_one(path, names[0], request, identity, md, stream):
                await stream.send_message(reply)
            return
        await self._one_to_many(path, names, request, identity, md, stream)

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

    # ---- routing (internal/app/apid/pkg/director/director.go) --------------------------------

    def _is_self(self, target: str) -> bool:
        host = _host_of(target)
        return host in (self.address, self.context.state.hostname)

    def _targets(
        self, path: str, md: Mapping[str, list[str]], identity: Identity
    ) -> tuple[str, list[str]] | None:
        if identity.forwarded:
            return None  # director.go: a call with proxyfrom is never re-forwarded
        node, nodes = md.get("node", []), md.get("nodes", [])
        if node:
            if len(node) > 1:
                raise GRPCError(Status.INVALID_ARGUMENT, "node metadata must be single-valued")
            if self._is_self(node[0]):
                return None
            self._require_forwarding()
            return "one", node
        if nodes:
            if not path.startswith(ONE_TO_MANY_PREFIXES):
                raise GRPCError(
                    Status.INVALID_ARGUMENT,
                    f"one-2-many proxying is not supported for method {path}",
                )
            if any(not self._is_self(target) for target in nodes):
                self._require_forwarding()
            return "many", nodes
        return None

    def _require_forwarding(self) -> None:
        if not self.can_forward:  # backend/apid.go: workers have no client certificate
            raise GRPCError(Status.PERMISSION_DENIED, "no request forwarding")

    # ---- local ------------------------------------------------------------------------------

    async def _local(
        self, path: str, request: Any, roles: frozenset[str], md: Mapping[str, list[str]]
    ) -> AsyncIterator[Any]:
        if not roles & (allowed_roles(path) | self._fault_grants(path, request)):
            raise GRPCError(Status.PERMISSION_DENIED, "not authorized")  # pkg/grpc/middleware/authz
        if self._reader_applies(path, request, roles):
            roles = roles | {ADMIN}
        spec, method = self._table[path]
        call = Call(path, roles, self.context, md)
        try:
            if spec.cardinality.server_streaming:
                async for reply in method(request, call):
                    yield reply
            else:
                yield await method(request, call)
        except (RPCFailure, ConfigRejected, ServiceRefused) as exc:
            raise as_grpc_error(exc) from None

    def _fault_grants(self, path: str, request: Any) -> frozenset[str]:
        """Roles a fault adds to a method's rule (healthy: none)."""
        state = self.context.state
        for fault, method in _READER_GRANTS.items():
            if path == method and state.fault(fault):
                return frozenset({READER})
        return frozenset()

    def _reader_applies(self, path: str, request: Any, roles: frozenset[str]) -> bool:
        """Fault reader-applies-for-real: the handler's admin-only rule (v1alpha1_server.go
        ApplyConfiguration) is kept for dry runs but not for real applies."""
        state = self.context.state
        return (
            path == _M + "ApplyConfiguration"
            and READER in roles
            and ADMIN not in roles
            and not getattr(request, "dry_run", True)
            and state.fault(Fault.READER_APPLIES_FOR_REAL)
        )

    # ---- forwarding --------------------------------------------------------------------------

    def forget(self, address: str) -> None:
        """Drop the cached channels to ``address`` (that node went down)."""
        self._channels.forget(address)

    async def _remote(
        self,
        path: str,
        target: str,
        request: Any,
        identity: Identity,
        md: Mapping[str, list[str]],
        timeout: float | None,
    ) -> AsyncIterator[Any]:
        address = self._directory(_host_of(target))
        port = _port_of(target)
        if address is None or not ipaddress.ip_address(address).is_loopback:
            raise GRPCError(Status.UNAVAILABLE, _dial_error(target, "no route to host"))
        spec, _ = self._table[path]
        channel = self._channels.get(address, port)
        try:
            async with channel.request(
                path,
                spec.cardinality,
                spec.request_type,
                spec.reply_type,
                timeout=timeout,
                metadata=forward_metadata(
                    md, proxyfrom=f"{self.address}:{self.port}", roles=identity.roles
                ),
            ) as remote:
                await remote.send_message(request, end=True)
                async for reply in remote:
                    yield reply
        except (GRPCError, asyncio.CancelledError):
            raise  # the target's own status (relayed), or the client gave up: cancel with it
        except Exception as exc:
            if not is_deadline(exc):  # never reuse a connection to a node that went down
                self._channels.drop(address, port, channel)
            raise _forward_error(target, exc) from None

    def _timeout(self, stream: Stream[Any, Any], streaming: bool) -> float | None:
        if stream.deadline is not None:
            return max(stream.deadline.time_remaining(), 0.001) + DEADLINE_GRACE
        return None if streaming else self.forward_timeout

    async def _replies(
        self,
        path: str,
        target: str,
        request: Any,
        identity: Identity,
        md: Mapping[str, list[str]],
        timeout: float | None,
    ) -> AsyncIterator[Any]:
        if self._is_self(target):
            async for reply in self._local(path, request, identity.roles, md):
                yield reply
        else:
            async for reply in self._remote(path, target, request, identity, md, timeout):
                yield reply

    async def _one_to_one(
        self,
        path: str,
        target: str,
        request: Any,
        identity: Identity,
        md: Mapping[str, list[str]],
        stream: Stream[Any, Any],
    ) -> AsyncIterator[Any]:
        # siderolabs/grpc-proxy one-to-one mode: the backend's reply is relayed verbatim.
        spec, _ = self._table[path]
        timeout = self._timeout(stream, spec.cardinality.server_streaming)
        async for reply in self._remote(path, target, request, identity, md, timeout):
            yield reply

    async def _one_to_many(
        self,
        path: str,
        targets: Sequence[str],
        request: Any,
        identity: Identity,
        md: Mapping[str, list[str]],
        stream: Stream[Any, Any],
    ) -> None:
        spec, _ = self._table[path]
        streaming = spec.cardinality.server_streaming
        timeout = self._timeout(stream, streaming)

        def replies(target: str) -> AsyncIterator[Any]:
            return self._replies(path, target, request, identity, md, timeout)

        if streaming:
            await relay_streams(spec.reply_type, targets, replies, stream.send_message)
            return
        await stream.send_message(await combine_unary(spec.reply_type, targets, replies))


def _host_of(target: str) -> str:
    try:
        return split_host_port(target)[0]
    except ValueError:  # a malformed bracket: the text as given
        return target


def _port_of(target: str) -> int:
    with contextlib.suppress(ValueError):
        port = split_host_port(target)[1]
        if port is not None:
            return int(port)
    return APID_PORT


def _forward_error(target: str, exc: Exception) -> GRPCError:
    """A failed forward as grpc-go reports it: its deadline, or an unreachable node."""
    if is_deadline(exc):
        return GRPCError(Status.DEADLINE_EXCEEDED, DEADLINE_TEXT)
    if isinstance(exc, OSError | CONNECTION_LOST):
        return GRPCError(Status.UNAVAILABLE, _dial_error(target, failure_reason(exc)))
    return as_grpc_error(exc)


def _dial_error(target: str, reason: str) -> str:
    # INFERRED: grpc-go's wording for a backend apid cannot reach.
    host, port = _host_of(target), _port_of(target)
    return (
        f'connection error: desc = "transport: Error while dialing: dial tcp {host}:{port}: '
        f'{reason}"'
    )
