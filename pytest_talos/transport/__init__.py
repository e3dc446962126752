"""The wire: grpclib over a stdlib ``ssl`` context, node metadata, deadlines, error mapping.

Why grpclib and not grpcio: Talos signs its API certificates with Ed25519, which grpcio's
BoringSSL refuses while verifying a server; Python's ``ssl`` (OpenSSL 3) handles it.

This is the only module of the client side that touches grpclib, ``ssl`` errors and raw
sockets. Every wire failure (grpclib, h2, OS, TLS, timeouts) leaves as a
:class:`~pytest_talos.errors.TalosError` carrying ``.node`` and ``.method``; anything else
(a bug, ours or a library's) is re-raised as it is::

    DNS failure                     -> ConnectError        "cannot resolve ..."
    TCP refused / unreachable       -> ConnectError        "... refused: is apid listening on ...?"
    TCP or TLS handshake too slow   -> DeadlineExceeded    says which phase stalled
    server certificate rejected     -> AuthenticationError "wrong CA in talosconfig? SANs?"
    client certificate rejected     -> AuthenticationError "expired? another cluster's CA?"
    endpoint does not speak TLS     -> ConnectError        "not a TLS/Talos API endpoint"
    non-OK gRPC status              -> APIError subclass   PermissionDenied names the roles
    connection lost / stream reset  -> TransportError
    per-node error in fan-out reply -> NodeError           (see :func:`node_error`)

Node targeting works as with talosctl: ``node`` metadata proxies one-to-one through the
endpoint's apid, ``nodes`` fans out and apid tags every reply element with the node.

Layout: this module (TLS context, targets, :class:`Transport`, :class:`FakeTransport`),
``_channel`` (the phased connection), ``_errors`` (the classification above, pure
functions), ``_fake`` (what a FakeTransport handler receives and may raise).

The seam for tests: ``TalosClient.from_transport(transport)`` (and
``AsyncTalosClient.from_transport``) builds a client on any Transport; a
:class:`FakeTransport` answers from a Python function, with no socket at all.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message
from grpclib.const import Cardinality

from pytest_talos.errors import ConfigError, TransportError
from pytest_talos.talos_api import ADMIN, certificate_roles, roles_needed, split_host_port
from pytest_talos.talosconfig import SecretBytes, load_client_identity, normalize_endpoint
from pytest_talos.transport._channel import Session, TalosChannel
from pytest_talos.transport._errors import (
    DEFAULT_TIMEOUT,
    CallInfo,
    ConnectPhase,
    api_error,
    classify_error,
    connect_failure,
    endpoint_text,
    idle_expired,
    node_error,
    with_context,
)
from pytest_talos.transport._fake import (
    FakeRequest,
    FakeStatus,
    Handler,
    as_handler,
    each_reply,
    mapped,
    unary_reply,
    unused_tls_context,
)
from pytest_talos.transport._peer import read_peer_certificate

__all__ = [
    "DEFAULT_STREAM_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "NO_TARGET",
    "CallInfo",
    "ConnectPhase",
    "FakeRequest",
    "FakeStatus",
    "FakeTransport",
    "Handler",
    "Rpc",
    "Target",
    "Transport",
    "api_error",
    "build_ssl_context",
    "certificate_roles",
    "classify_error",
    "connect_failure",
    "node_error",
    "read_peer_certificate",
    "split_endpoint",
]

DEFAULT_STREAM_TIMEOUT = 120.0  # seconds, total limit of finite streams (read, list, logs)
_CLOSE_GRACE = 0.5  # seconds the server gets to acknowledge a TLS close on client close
# Every RPC at DEBUG (pytest --log-cli-level=DEBUG): method, target, endpoint, duration.
_log = logging.getLogger("pytest_talos.transport")

ReqT = TypeVar("ReqT", bound=Message)
RepT = TypeVar("RepT", bound=Message)


# --------------------------------------------------------------------------- call description


@dataclass(frozen=True)
class Rpc(Generic[ReqT, RepT]):
    """One gRPC method: its wire path, message types and the roles allowed to call it
    (by default those of the shared role table, :func:`~pytest_talos.talos_api.roles_needed`).
    """

    path: str
    request_type: type[ReqT]
    reply_type: type[RepT]
    roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.roles:
            object.__setattr__(self, "roles", roles_needed(self.path))


@dataclass(frozen=True)
class Target:
    """Which node(s) a call addresses through the endpoint (none: the endpoint itself)."""

    node: str | None = None
    nodes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.node is not None and self.nodes:
            raise ValueError("a call targets either one node or a list of nodes, not both")

    @property
    def label(self) -> str | None:
        return self.node if self.node is not None else (",".join(self.nodes) or None)

    def metadata(self) -> list[tuple[str, str]]:
        if self.node is not None:
            return [("node", self.node)]
        return [("nodes", node) for node in self.nodes]


NO_TARGET = Target()


# --------------------------------------------------------------------------- TLS


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host[:port]`` (default 50000, IPv6 in brackets) -> ``(host, port)``."""
    host, port = split_host_port(normalize_endpoint(endpoint))
    assert port is not None  # a normalized endpoint always carries its port
    return host, int(port)


def build_ssl_context(ca_pem: bytes, crt_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A client context as talosctl uses: TLS >= 1.2, ALPN h2, mTLS, hostname checked.

    The key may carry talosctl's ``ED25519 PRIVATE KEY`` label; it is loaded from memory.
    """
    key_pem = SecretBytes(key_pem)  # no plain key bytes in this frame, even from a caller
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED + check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")  # TLS 1.2 only; 1.3 suites are fixed
    ctx.set_alpn_protocols(["h2"])
    try:
        ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ConfigError(
            f"the CA certificate is not a usable PEM certificate ({type(exc).__name__}); "
            "check the ca of the talosconfig context"
        ) from None
    load_client_identity(ctx, crt_pem, key_pem)
    return ctx


# --------------------------------------------------------------------------- transport


class Transport:
    """One endpoint, one HTTP/2 connection, reused by every call and every target node.

    The connection is opened lazily by the first call, on that call's event loop; all
    later calls must run on the same loop (the sync client guarantees this).
    """

    def __init__(
        self,
        endpoint: str,
        ssl_context: ssl.SSLContext,
        *,
        server_hostname: str | None = None,
        cluster: str | None = None,
        client_roles: Sequence[str] = (),
        timeout: float = DEFAULT_TIMEOUT,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
    ) -> None:
        _check_positive("timeout", timeout)
        _check_positive("stream_timeout", stream_timeout)
        self.host, self.port = split_endpoint(endpoint)
        self.endpoint = endpoint_text(self.host, self.port)
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.client_roles = tuple(client_roles)
        self._ssl = ssl_context
        self._server_hostname = server_hostname
        self._base_metadata = [("runtime", "Talos")]
        if cluster:
            self._base_metadata.append(("context", cluster))
        self._metadata: dict[Target, list[tuple[str, str]]] = {}
        self._channel: TalosChannel | None = None
        self.closed = False

    def __repr__(self) -> str:
        return f"Transport({self.endpoint!r}, roles={self.client_roles!r})"

    # -- plumbing

    def channel(self) -> TalosChannel:
        if self.closed:
            raise TransportError(f"the client for {self.endpoint} is closed")
        if self._channel is None:
            self._channel = TalosChannel(self.host, self.port, self._ssl, self._server_hostname)
        return self._channel

    @property
    def peer_certificate(self) -> bytes | None:
        """DER of the certificate the endpoint presented in the TLS handshake of the open
        connection (None before the first call); it passed verification against the CA."""
        return self._channel.session.peer_certificate if self._channel is not None else None

    def metadata(self, target: Target) -> list[tuple[str, str]]:
        cached = self._metadata.get(target)
        if cached is None:
            cached = self._metadata[target] = [*self._base_metadata, *target.metadata()]
        return cached

    def call_info(
        self, rpc: Rpc[Any, Any], target: Target, timeout: float, *, streaming: bool = False
    ) -> CallInfo:
        channel = self._channel
        session = channel.session if channel is not None else Session(server_spoke=True)
        return CallInfo(
            method=rpc.path,
            endpoint=self.endpoint,
            node=target.label or self.host,
            timeout=timeout,
            phase=channel.phase if channel is not None else "idle",
            required_roles=rpc.roles,
            client_roles=self.client_roles,
            streaming=streaming,
            server_spoke=session.server_spoke,
            lost_error=session.lost_error,
        )

    # -- calls

    async def unary(
        self,
        rpc: Rpc[ReqT, RepT],
        request: ReqT,
        target: Target = NO_TARGET,
        *,
        timeout: float | None = None,
    ) -> RepT:
        """One request, one reply, within ``timeout`` seconds (connecting included)."""
        limit = timeout if timeout is not None else self.timeout
        _check_positive("timeout", limit)
        started = time.monotonic()
        try:
            async with self.channel().request(
                rpc.path,
                Cardinality.UNARY_UNARY,
                rpc.request_type,
                rpc.reply_type,
                timeout=limit,
                metadata=self.metadata(target),
            ) as call:
                await call.send_message(request, end=True)
                reply = await call.recv_message()
        except Exception as exc:
            error = classify_error(exc, self.call_info(rpc, target, limit))
            self._log_call(rpc, target, started, f"failed: {type(error or exc).__name__}")
            if error is None:
                raise  # not a wire failure: a bug, shown as it is
            raise error from None
        self._log_call(rpc, target, started, "ok")
        if reply is None:
            raise with_context(
                TransportError("the server ended the call without a reply"),
                self.call_info(rpc, target, limit),
            )
        return reply

    async def stream(
        self,
        rpc: Rpc[ReqT, RepT],
        request: ReqT,
        target: Target = NO_TARGET,
        *,
        idle_timeout: float | None = None,
        total_timeout: float | None = None,
    ) -> AsyncGenerator[RepT, None]:
        """Server-streaming call; errors surface while iterating, mapped like unary ones.

        ``idle_timeout`` bounds the gap between messages (None: no gap limit, for event
        streams); ``total_timeout`` bounds the whole call (default ``stream_timeout``).
        """
        total = total_timeout if total_timeout is not None else self.stream_timeout
        _check_positive("total_timeout", total)
        if idle_timeout is not None:
            _check_positive("idle_timeout", idle_timeout)
        idle: asyncio.Timeout | None = None
        started, received = time.monotonic(), 0
        try:
            async with self.channel().request(
                rpc.path,
                Cardinality.UNARY_STREAM,
                rpc.request_type,
                rpc.reply_type,
                timeout=total,
                metadata=self.metadata(target),
            ) as call:
                await call.send_message(request, end=True)
                while True:
                    async with asyncio.timeout(idle_timeout) as idle:
                        message = await call.recv_message()
                    if message is None:
                        self._log_call(rpc, target, started, f"stream ended, {received} messages")
                        return
                    received += 1
                    yield message
        except Exception as exc:
            self._log_call(
                rpc,
                target,
                started,
                f"stream stopped ({type(exc).__name__}) after {received} messages",
            )
            info = self.call_info(rpc, target, total, streaming=True)
            if idle is not None and idle.expired() and idle_timeout is not None:
                raise with_context(idle_expired(info, idle_timeout), info) from None
            error = classify_error(exc, info)
            if error is None:
                raise  # not a wire failure: a bug, shown as it is
            raise error from None

    def _log_call(self, rpc: Rpc[Any, Any], target: Target, started: float, how: str) -> None:
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug(
                "%s to %s via %s: %s in %.3fs",
                rpc.path,
                target.label or "the endpoint",
                self.endpoint,
                how,
                time.monotonic() - started,
            )

    def close(self) -> None:
        """Close the connection now, without waiting for the server's TLS goodbye.

        Idempotent; must run on the loop that used the transport. Prefer :meth:`aclose`,
        which lets the socket be released cleanly.
        """
        self.closed = True
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    async def aclose(self) -> None:
        """Close the connection (TLS close, then cut after a short grace); idempotent."""
        self.closed = True
        channel, self._channel = self._channel, None
        if channel is not None:
            session = channel.session
            channel.close()
            await session.wait_closed(_CLOSE_GRACE)


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")


class FakeTransport(Transport):
    """A transport that answers from ``handler`` instead of a node: no socket, no TLS.

    ``handler`` takes a :class:`FakeRequest` and returns the reply message (unary calls),
    an iterable or async iterable of messages (server streams), or raises
    :class:`FakeStatus` (a gRPC status), a :class:`~pytest_talos.errors.TalosError` or
    ``TimeoutError``; or it is a mapping from method path or short name (``"Version"``)
    to such functions (an unknown method is Unimplemented). Use it with
    ``TalosClient.from_transport(FakeTransport(handler))``; ``requests`` records every call.
    """

    def __init__(
        self,
        handler: Handler | Mapping[str, Handler],
        *,
        endpoint: str = "fake.invalid:50000",
        cluster: str | None = None,
        client_roles: Sequence[str] = (ADMIN,),
        timeout: float = DEFAULT_TIMEOUT,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
    ) -> None:
        super().__init__(
            endpoint,
            unused_tls_context(),
            cluster=cluster,
            client_roles=client_roles,
            timeout=timeout,
            stream_timeout=stream_timeout,
        )
        self._handler = as_handler(handler)
        self.requests: list[FakeRequest] = []

    def __repr__(self) -> str:
        return f"FakeTransport({self.endpoint!r}, roles={self.client_roles!r})"

    def channel(self) -> TalosChannel:
        raise AssertionError("a FakeTransport never opens a connection")

    def call_info(
        self, rpc: Rpc[Any, Any], target: Target, timeout: float, *, streaming: bool = False
    ) -> CallInfo:
        info = super().call_info(rpc, target, timeout, streaming=streaming)
        return replace(info, phase="ready", server_spoke=True)

    def _receive(self, rpc: Rpc[Any, Any], request: Message, target: Target, timeout: float) -> Any:
        if self.closed:
            raise TransportError(f"the client for {self.endpoint} is closed")
        fake = FakeRequest(
            method=rpc.path,
            message=rpc.request_type.FromString(request.SerializeToString()),
            node=target.node,
            nodes=target.nodes,
            metadata=tuple(self.metadata(target)),
            timeout=timeout,
        )
        self.requests.append(fake)
        return self._handler(fake)

    async def unary(
        self,
        rpc: Rpc[ReqT, RepT],
        request: ReqT,
        target: Target = NO_TARGET,
        *,
        timeout: float | None = None,
    ) -> RepT:
        limit = timeout if timeout is not None else self.timeout
        _check_positive("timeout", limit)
        try:
            return unary_reply(self._receive(rpc, request, target, limit), rpc.reply_type, rpc.path)
        except Exception as exc:
            error = mapped(exc, self.call_info(rpc, target, limit))
            if error is None:
                raise  # a bug in the handler (or in the client): shown as it is
            raise error from None

    async def stream(
        self,
        rpc: Rpc[ReqT, RepT],
        request: ReqT,
        target: Target = NO_TARGET,
        *,
        idle_timeout: float | None = None,
        total_timeout: float | None = None,
    ) -> AsyncGenerator[RepT, None]:
        total = total_timeout if total_timeout is not None else self.stream_timeout
        _check_positive("total_timeout", total)
        info = self.call_info(rpc, target, total, streaming=True)
        idle: asyncio.Timeout | None = None
        messages: AsyncGenerator[Message, None] | None = None
        try:
            messages = each_reply(self._receive(rpc, request, target, total), rpc.path)
            while True:
                async with asyncio.timeout(idle_timeout) as idle:
                    message = await anext(messages, None)
                if message is None:
                    return
                yield unary_reply(message, rpc.reply_type, rpc.path)
        except Exception as exc:
            if idle is not None and idle.expired() and idle_timeout is not None:
                raise with_context(idle_expired(info, idle_timeout), info) from None
            error = mapped(exc, info)
            if error is None:
                raise
            raise error from None
        finally:
            if messages is not None:
                await messages.aclose()  # the handler's generator ends with the call

    async def aclose(self) -> None:
        self.closed = True
