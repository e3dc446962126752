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
import base64
import contextlib
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import h2.exceptions
import yaml
from grpclib.client import Channel
from grpclib.const import Handler, Status
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from grpclib.protocol import H2Protocol
from grpclib.server import Server, Stream

from pytest_talos._proto.cluster import cluster_grpc
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_grpc
from pytest_talos._proto.v1alpha1 import state_grpc
from pytest_talos.emulator.calllog import CallLog, CallRecord
from pytest_talos.emulator.errors import ConfigRejected, NodeFailure, RPCFailure, ServiceRefused
from pytest_talos.emulator.faults import Fault
from pytest_talos.emulator.servicers import (
    MUTATING_METHODS,
    Call,
    NodeContext,
    allowed_roles,
)
from pytest_talos.emulator.servicers.cluster import ClusterServicer
from pytest_talos.emulator.servicers.cosi import StateServicer
from pytest_talos.emulator.servicers.machine import MachineServicer
from pytest_talos.emulator.tls import (
    ext_key_usage_acceptable,
    ignore_validity_period,
    trust_also,
)
from pytest_talos.talos_api import change_level

__all__ = ["APID_PORT", "NodeServer", "method_table"]

APID_PORT = 50000
IMPERSONATOR = "os:impersonator"
ADMIN = "os:admin"
FORWARD_TIMEOUT = 30.0  # seconds, for forwarded unary calls without a client deadline
# A forwarded call gets the client's deadline plus this: the client's own deadline (which
# cancels the forwarded call with it) always ends the call first, never ours.
DEADLINE_GRACE = 1.0
DEADLINE_TEXT = "context deadline exceeded"  # grpc-go's context.DeadlineExceeded
# The connection to the target broke (it went down): grpclib, h2 and stream-level errors.
_CONNECTION_LOST = StreamTerminatedError | ProtocolError | h2.exceptions.ProtocolError | EOFError
# internal/app/apid/pkg/director/director.go: one-to-many proxying only for these services.
ONE_TO_MANY_PREFIXES = (
    "/machine.MachineService/",
    "/cluster.ClusterService/",
    "/inspect.InspectService/",
    "/storage.StorageService/",
    "/time.TimeService/",
)
# Metadata that is never forwarded (routing, roles, HTTP/2 and gRPC reserved keys).
_NOT_FORWARDED = frozenset(
    {"node", "nodes", "talos-role", "proxyfrom", "user-agent", "te", "content-type"}
)
_GO_CODE_NAMES = {
    Status.CANCELLED: "Canceled",
    Status.UNKNOWN: "Unknown",
    Status.INVALID_ARGUMENT: "InvalidArgument",
    Status.DEADLINE_EXCEEDED: "DeadlineExceeded",
    Status.NOT_FOUND: "NotFound",
    Status.ALREADY_EXISTS: "AlreadyExists",
    Status.PERMISSION_DENIED: "PermissionDenied",
    Status.RESOURCE_EXHAUSTED: "ResourceExhausted",
    Status.FAILED_PRECONDITION: "FailedPrecondition",
    Status.ABORTED: "Aborted",
    Status.OUT_OF_RANGE: "OutOfRange",
    Status.UNIMPLEMENTED: "Unimplemented",
    Status.INTERNAL: "Internal",
    Status.UNAVAILABLE: "Unavailable",
    Status.DATA_LOSS: "DataLoss",
    Status.UNAUTHENTICATED: "Unauthenticated",
}


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


@dataclass(frozen=True)
class Identity:
    roles: frozenset[str]
    serial: str
    forwarded: bool


def _metadata(stream: Stream[Any, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for key, value in (stream.metadata or {}).items():
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        found.setdefault(key.lower(), []).append(text)
    return found


def _normal_serial(text: str) -> str:
    """Lower-case hex without leading zeros (``getpeercert`` pads to whole bytes)."""
    try:
        return format(int(text, 16), "x")
    except ValueError:
        return text.lower()


def _go_error_text(status: Status, message: str) -> str:
    return f"rpc error: code = {_GO_CODE_NAMES.get(status, status.name)} desc = {message}"


def _as_grpc_error(exc: Exception) -> GRPCError:
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, RPCFailure | NodeFailure | ConfigRejected):
        return GRPCError(Status[exc.code], str(exc.message))
    if isinstance(exc, ServiceRefused):
        return GRPCError(Status.UNKNOWN, str(exc))  # v1alpha1_server.go: plain errors, code Unknown
    return GRPCError(Status.INTERNAL, f"emulator error: {type(exc).__name__}: {exc}")


_M = "/machine.MachineService/"
# Faults that hand os:reader a method its rule (servicers.ROLE_RULES) keeps for os:admin.
_READER_GRANTS = {
    Fault.READER_GETS_KUBECONFIG: _M + "Kubeconfig",
    Fault.READER_MINTS_ADMIN: _M + "GenerateClientConfiguration",
}
READER = "os:reader"


def _kubernetes_ca_pem(config: bytes) -> bytes | None:
    """``cluster.ca.crt`` of a machine config (base64 PEM), for fault kube-ca-trusted."""
    for doc in yaml.safe_load_all(config):
        cluster = doc.get("cluster") if isinstance(doc, dict) else None
        ca = cluster.get("ca") if isinstance(cluster, dict) else None
        crt = ca.get("crt") if isinstance(ca, dict) else None
        if isinstance(crt, str) and crt:
            with contextlib.suppress(ValueError):
                return base64.b64decode(crt)
    return None


def _certificate_identity(cert: Mapping[str, Any] | None) -> Identity:
    """Roles (Organization values) and serial of a verified client certificate."""
    if not cert:  # only possible with fault no-mtls
        return Identity(frozenset({"os:admin"}), "", False)
    roles = frozenset(
        value
        for rdn in cert.get("subject", ())
        for key, value in rdn
        if key == "organizationName" and value
    )
    return Identity(roles, _normal_serial(str(cert.get("serialNumber", ""))), False)


class _CheckedProtocol(H2Protocol):
    """grpclib's HTTP/2 protocol, refusing clients whose certificate EKU apid rejects.

    It also reads the client certificate once per connection (roles, serial) and files it
    under the peer address, where :meth:`NodeServer._identify` finds it for each call.
    """

    owner: NodeServer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        state = self.owner.context.state  # fault any-eku-accepted skips apid's EKU rule
        lax = state.fault(Fault.ANY_EKU_ACCEPTED)
        if not lax and not ext_key_usage_acceptable(der):
            self._refused = True
            transport.abort()
            return
        self._refused = False
        self._transport = transport
        self._peer = transport.get_extra_info("peername")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        self.owner._transports.add(transport)
        self.owner._peers[self._peer] = _certificate_identity(cert)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not getattr(self, "_refused", True):
            super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if getattr(self, "_refused", True):
            return
        self.owner._transports.discard(self._transport)
        self.owner._peers.pop(self._peer, None)
        super().connection_lost(exc)


class _Server(Server):
    def __init__(self, owner: NodeServer, mapping: Mapping[str, Handler]) -> None:
        self._owner = owner
        routes = _Routes(dict(mapping))
        super().__init__([routes])

    def _protocol_factory(self) -> H2Protocol:
        base = super()._protocol_factory()
        protocol = _CheckedProtocol(base.handler, base.config, base.h2_config)
        protocol.owner = self._owner
        return protocol


class _Routes:
    def __init__(self, mapping: dict[str, Handler]) -> None:
        self._mapping = mapping

    def __mapping__(self) -> dict[str, Handler]:
        return self._mapping


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
        self._server: _Server | None = None
        self._transports: set[asyncio.Transport] = set()
        self._peers: dict[Any, Identity] = {}
        self._channels: dict[tuple[str, int], Channel] = {}
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
        self._tls_faults()
        server = _Server(self, mapping)
        await server.start(self.address, self.port, ssl=self._tls, reuse_address=True)
        self._server = server

    def _tls_faults(self) -> None:
        """Faults of apid's client-certificate verification (healthy apid: Go crypto/tls with
        the Talos OS CA as the only client CA, internal/app/apid/pkg/provider/provider.go)."""
        state = self.context.state
        if state.fault(Fault.EXPIRED_CERTS_ACCEPTED):
            ignore_validity_period(self._tls)
        if state.fault(Fault.KUBE_CA_TRUSTED):
            kube_ca = _kubernetes_ca_pem(state.active_config)
            if kube_ca is not None:
                trust_also(self._tls, kube_ca)

    async def stop(self) -> None:
        """Close the listener and every open connection (a reboot takes the API down)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()
        self._peers.clear()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
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
                raise _as_grpc_error(exc) from None

        return entry

    def _identify(self, stream: Stream[Any, Any], md: Mapping[str, list[str]]) -> Identity:
        identity = self._peers.get(stream.peer.addr())
        if identity is None:  # not filed (cannot happen with our protocol): read it now
            identity = _certificate_identity(stream.peer.cert())
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
        except (RPCFailure, NodeFailure, ConfigRejected, ServiceRefused) as exc:
            raise _as_grpc_error(exc) from None

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

    def _channel(self, host: str, port: int) -> Channel:
        key = (host, port)
        channel = self._channels.get(key)
        if channel is None:
            channel = Channel(host, port, ssl=self._forward_tls)
            self._channels[key] = channel
        return channel

    def _drop_channel(self, host: str, port: int, channel: Channel) -> None:
        if self._channels.get((host, port)) is channel:
            del self._channels[(host, port)]
        channel.close()

    def forget(self, address: str) -> None:
        """Drop the cached channels to ``address`` (that node went down)."""
        for host, port in [key for key in self._channels if key[0] == address]:
            self._drop_channel(host, port, self._channels[(host, port)])

    def _forward_metadata(
        self, identity: Identity, md: Mapping[str, list[str]]
    ) -> list[tuple[str, str]]:
        pairs = [
            (key, value)
            for key, values in md.items()
            for value in values
            if key not in _NOT_FORWARDED and not key.startswith(("grpc-", ":"))
        ]
        pairs.append(("proxyfrom", f"{self.address}:{self.port}"))
        pairs += [("talos-role", role) for role in sorted(identity.roles)]
        return pairs

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
        channel = self._channel(address, port)
        try:
            async with channel.request(
                path,
                spec.cardinality,
                spec.request_type,
                spec.reply_type,
                timeout=timeout,
                metadata=self._forward_metadata(identity, md),
            ) as remote:
                await remote.send_message(request, end=True)
                async for reply in remote:
                    yield reply
        except (GRPCError, asyncio.CancelledError):
            raise  # the target's own status (relayed), or the client gave up: cancel with it
        except Exception as exc:
            if not _is_deadline(exc):  # never reuse a connection to a node that went down
                self._drop_channel(address, port, channel)
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
        if streaming:
            await self._many_streaming(path, targets, request, identity, md, stream, timeout)
            return
        results = await asyncio.gather(
            *(_collect(self._replies(path, t, request, identity, md, timeout)) for t in targets)
        )
        combined = spec.reply_type()
        for target, result in zip(targets, results, strict=True):
            if isinstance(result, GRPCError):
                _error_metadata(combined.messages.add().metadata, target, result)
                continue
            for reply in result:
                for element in reply.messages:
                    copied = combined.messages.add()
                    copied.CopyFrom(element)  # replies may be cached: never modify them
                    copied.metadata.hostname = target
        await stream.send_message(combined)

    async def _many_streaming(
        self,
        path: str,
        targets: Sequence[str],
        request: Any,
        identity: Identity,
        md: Mapping[str, list[str]],
        stream: Stream[Any, Any],
        timeout: float | None,
    ) -> None:
        spec, _ = self._table[path]
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)
        done = object()

        async def pump(target: str) -> None:
            try:
                async for reply in self._replies(path, target, request, identity, md, timeout):
                    reply.metadata.hostname = target
                    await queue.put(reply)
            except Exception as exc:
                # backend/apid.go BuildError: a failing node sends one frame with
                # metadata.error and metadata.status.
                frame = spec.reply_type()
                _error_metadata(frame.metadata, target, _as_grpc_error(exc))
                await queue.put(frame)
            finally:
                await queue.put(done)

        tasks = [asyncio.ensure_future(pump(target)) for target in targets]
        try:
            remaining = len(tasks)
            while remaining:
                item = await queue.get()
                if item is done:
                    remaining -= 1
                else:
                    await stream.send_message(item)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _collect(replies: AsyncIterator[Any]) -> list[Any] | GRPCError:
    try:
        return [reply async for reply in replies]
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _as_grpc_error(exc)


def _error_metadata(metadata: common_pb2.Metadata, target: str, error: GRPCError) -> None:
    message = str(error.message or "")
    metadata.hostname = target
    metadata.error = _go_error_text(error.status, message)
    metadata.status.code = error.status.value
    metadata.status.message = message


def _host_of(target: str) -> str:
    if target.startswith("["):
        return target[1:].split("]", 1)[0]
    if target.count(":") == 1:
        return target.split(":", 1)[0]
    return target


def _port_of(target: str) -> int:
    if target.startswith("[") and "]:" in target:
        return int(target.rsplit(":", 1)[1])
    if target.count(":") == 1:
        with contextlib.suppress(ValueError):
            return int(target.split(":", 1)[1])
    return APID_PORT


def _is_deadline(exc: BaseException) -> bool:
    """grpclib's (asyncio's) deadline error; an OS-level ETIMEDOUT carries an errno."""
    return isinstance(exc, TimeoutError) and exc.errno is None


def _forward_error(target: str, exc: Exception) -> GRPCError:
    """A failed forward as grpc-go reports it: its deadline, or an unreachable node."""
    if _is_deadline(exc):
        return GRPCError(Status.DEADLINE_EXCEEDED, DEADLINE_TEXT)
    if isinstance(exc, OSError | _CONNECTION_LOST):
        return GRPCError(Status.UNAVAILABLE, _dial_error(target, _reason(exc)))
    return _as_grpc_error(exc)


def _reason(exc: BaseException) -> str:
    # INFERRED: a connection that broke means the node went down; the redial grpc-go makes
    # then is refused, and that is what it reports (as for a node already down).
    if isinstance(exc, ConnectionRefusedError | ConnectionResetError | _CONNECTION_LOST):
        return "connect: connection refused"
    if isinstance(exc, ssl.SSLError):
        return f"tls: {exc.reason or exc}"
    return str(exc) or type(exc).__name__


def _dial_error(target: str, reason: str) -> str:
    # INFERRED: grpc-go's wording for a backend apid cannot reach.
    host, port = _host_of(target), _port_of(target)
    return (
        f'connection error: desc = "transport: Error while dialing: dial tcp {host}:{port}: '
        f'{reason}"'
    )
