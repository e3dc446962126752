"""Connection: the call policy over a :class:`~pytest_talos.transport.Transport`, written once.

Whatever the transport (the real :class:`~pytest_talos.transport.GrpcTransport` or a
:class:`~pytest_talos.transport.FakeTransport`), every call goes through here: the default
deadline and its check, the metadata talosctl sends (``runtime``, the ``context`` name and
the ``node``/``nodes`` targeting), the idle limit of finite streams, the mapping of what the
transport raised into the :mod:`pytest_talos.errors` tree (``classify_error``), and one
DEBUG line per call on the ``pytest_talos.transport`` logger (method, target, endpoint,
outcome, duration).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

from pytest_talos.transport import (
    DEFAULT_STREAM_TIMEOUT,
    DEFAULT_TIMEOUT,
    NO_TARGET,
    CallInfo,
    Rpc,
    Target,
    Transport,
    check_positive,
    classify_error,
    idle_expired,
    with_context,
)

__all__ = ["Connection"]

# The logger keeps the name it had when the transport logged (docs and filters name it).
_log = logging.getLogger("pytest_talos.transport")

RepT = TypeVar("RepT", bound=Message)


class Connection:
    """Calls to one endpoint over ``transport``, with the client's policy.

    ``cluster`` is sent as the ``context`` metadata (as talosctl does); ``timeout`` is the
    default deadline of unary calls and the idle gap of finite streams, ``stream_timeout``
    the default total limit of streams; ``roles`` (default: the transport's) are named in
    a PermissionDenied hint.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        cluster: str | None = None,
        roles: Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
    ) -> None:
        check_positive("timeout", timeout)
        check_positive("stream_timeout", stream_timeout)
        self.transport = transport
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.client_roles = tuple(roles) if roles is not None else transport.client_roles
        self._base_metadata = [("runtime", "Talos")]
        if cluster:
            self._base_metadata.append(("context", cluster))
        self._metadata: dict[Target, list[tuple[str, str]]] = {}

    def __repr__(self) -> str:
        return f"Connection({self.transport!r})"

    @property
    def endpoint(self) -> str:
        """``host:port`` of the endpoint (IPv6 in brackets)."""
        return self.transport.endpoint.address

    @property
    def host(self) -> str:
        """The endpoint's host: the node named for calls without a target."""
        return self.transport.endpoint.host

    @property
    def peer_certificate(self) -> bytes | None:
        return self.transport.peer_certificate

    @property
    def closed(self) -> bool:
        return self.transport.closed

    def metadata(self, target: Target) -> list[tuple[str, str]]:
        cached = self._metadata.get(target)
        if cached is None:
            cached = self._metadata[target] = [*self._base_metadata, *target.metadata()]
        return cached

    def call_info(
        self, rpc: Rpc[Any, Any], target: Target, timeout: float, *, streaming: bool = False
    ) -> CallInfo:
        """What the error mapping needs to know about this call, and the wire's state now."""
        state = self.transport.state()
        return CallInfo(
            method=rpc.path,
            endpoint=self.endpoint,
            node=target.label or self.host,
            timeout=timeout,
            phase=state.phase,
            required_roles=rpc.roles,
            client_roles=self.client_roles,
            streaming=streaming,
            server_spoke=state.server_spoke,
            lost_error=state.lost_error,
        )

    # -- calls

    async def unary(
        self,
        rpc: Rpc[Any, RepT],
        request: Message,
        target: Target = NO_TARGET,
        *,
        timeout: float | None = None,
    ) -> RepT:
        """One request, one reply, within ``timeout`` seconds (connecting included)."""
        limit = timeout if timeout is not None else self.timeout
        check_positive("timeout", limit)
        started = time.monotonic()
        try:
            reply = await self.transport.unary(
                rpc, request, metadata=self.metadata(target), timeout=limit
            )
        except Exception as exc:
            error = classify_error(exc, self.call_info(rpc, target, limit))
            self._log_call(rpc, target, started, f"failed: {type(error or exc).__name__}")
            if error is None:
                raise  # not a wire failure: a bug, shown as it is
            raise error from None
        self._log_call(rpc, target, started, "ok")
        return reply

    async def stream(
        self,
        rpc: Rpc[Any, RepT],
        request: Message,
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
        messages = self.transport.stream(
            rpc, request, metadata=self.metadata(target), timeout=total
        )
        idle: asyncio.Timeout | None = None
        started, received = time.monotonic(), 0
        try:
            while True:
                async with asyncio.timeout(idle_timeout) as idle:
                    message = await anext(messages, None)
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
        finally:
            await messages.aclose()  # ends the call on the wire if it is still open

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
        """Close the transport now (see :meth:`GrpcTransport.close`); idempotent."""
        self.transport.close()

    async def aclose(self) -> None:
        """Close the transport cleanly; idempotent."""
        await self.transport.aclose()
