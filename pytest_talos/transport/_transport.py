"""The real transport: one endpoint, one HTTP/2 connection, unary and streaming calls."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message
from grpclib.const import Cardinality

from pytest_talos.errors import TransportError
from pytest_talos.talos_api import join_host_port
from pytest_talos.transport._call import NO_TARGET, Rpc, Target, check_positive
from pytest_talos.transport._channel import Session, TalosChannel
from pytest_talos.transport._errors import (
    DEFAULT_TIMEOUT,
    CallInfo,
    classify_error,
    idle_expired,
    with_context,
)
from pytest_talos.transport._tls import split_endpoint

__all__ = ["DEFAULT_STREAM_TIMEOUT", "Transport"]

DEFAULT_STREAM_TIMEOUT = 120.0  # seconds, total limit of finite streams (read, list, logs)
_CLOSE_GRACE = 0.5  # seconds the server gets to acknowledge a TLS close on client close
# Every RPC at DEBUG (pytest --log-cli-level=DEBUG): method, target, endpoint, duration.
_log = logging.getLogger("pytest_talos.transport")

ReqT = TypeVar("ReqT", bound=Message)
RepT = TypeVar("RepT", bound=Message)


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
        check_positive("timeout", timeout)
        check_positive("stream_timeout", stream_timeout)
        self.host, self.port = split_endpoint(endpoint)
        self.endpoint = join_host_port(self.host, self.port)
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
        check_positive("timeout", limit)
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
        check_positive("total_timeout", total)
        if idle_timeout is not None:
            check_positive("idle_timeout", idle_timeout)
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
