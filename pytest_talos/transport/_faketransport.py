"""FakeTransport itself: a :class:`Transport` whose calls go to a handler (see ``_fake``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from google.protobuf.message import Message

from pytest_talos.errors import TransportError
from pytest_talos.talos_api import ADMIN
from pytest_talos.transport._call import NO_TARGET, Rpc, Target, check_positive
from pytest_talos.transport._channel import TalosChannel
from pytest_talos.transport._errors import DEFAULT_TIMEOUT, CallInfo, idle_expired, with_context
from pytest_talos.transport._fake import (
    FakeRequest,
    Handler,
    as_handler,
    each_reply,
    mapped,
    unary_reply,
    unused_tls_context,
)
from pytest_talos.transport._transport import DEFAULT_STREAM_TIMEOUT, Transport

__all__ = ["FakeTransport"]

ReqT = TypeVar("ReqT", bound=Message)
RepT = TypeVar("RepT", bound=Message)


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
        check_positive("timeout", limit)
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
        check_positive("total_timeout", total)
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
