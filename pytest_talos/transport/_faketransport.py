"""FakeTransport itself: a :class:`Transport` whose calls go to a handler (see ``_fake``)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message

from pytest_talos.endpoint import Endpoint
from pytest_talos.errors import TransportError
from pytest_talos.talos_api import ADMIN
from pytest_talos.transport._base import EndpointTransport, Metadata, WireState
from pytest_talos.transport._call import Rpc
from pytest_talos.transport._fake import (
    FakeRequest,
    Handler,
    Reply,
    as_handler,
    each_reply,
    unary_reply,
)

__all__ = ["FakeTransport"]

RepT = TypeVar("RepT", bound=Message)

_CONNECTED = WireState(phase="ready", server_spoke=True)  # a fake is always connected


class FakeTransport(EndpointTransport):
    """A transport that answers from ``handler`` instead of a node: no socket, no TLS.

    ``handler`` takes a :class:`FakeRequest` and returns the reply message (unary calls),
    an iterable or async iterable of messages (server streams), or raises
    :class:`FakeStatus` (a gRPC status), a :class:`~pytest_talos.errors.TalosError` or
    ``TimeoutError``; or it is a mapping from method path or short name (``"Version"``)
    to such functions (an unknown method is Unimplemented). Use it with
    ``TalosClient.from_transport(FakeTransport(handler))``; ``requests`` records every call.
    ``client_roles`` are the roles of the identity it pretends to present (default admin).
    """

    def __init__(
        self,
        handler: Handler | Mapping[str, Handler],
        *,
        endpoint: Endpoint | str = "fake.invalid:50000",
        client_roles: Sequence[str] = (ADMIN,),
    ) -> None:
        super().__init__(endpoint, client_roles)
        self._handler = as_handler(handler)
        self.requests: list[FakeRequest] = []

    @property
    def peer_certificate(self) -> bytes | None:
        return None  # no TLS, no certificate

    def state(self) -> WireState:
        return _CONNECTED

    def _receive(
        self, rpc: Rpc[Any, Any], request: Message, metadata: Metadata, timeout: float
    ) -> Reply:
        if self._closed:
            raise TransportError(f"the client for {self._endpoint.address} is closed")
        fake = FakeRequest(
            method=rpc.path,
            message=rpc.request_type.FromString(request.SerializeToString()),
            node=next((value for key, value in metadata if key == "node"), None),
            nodes=tuple(value for key, value in metadata if key == "nodes"),
            metadata=tuple(metadata),
            timeout=timeout,
        )
        self.requests.append(fake)
        return self._handler(fake)

    async def unary(
        self, rpc: Rpc[Any, RepT], request: Message, *, metadata: Metadata, timeout: float
    ) -> RepT:
        return unary_reply(self._receive(rpc, request, metadata, timeout), rpc.reply_type, rpc.path)

    async def stream(
        self, rpc: Rpc[Any, RepT], request: Message, *, metadata: Metadata, timeout: float
    ) -> AsyncGenerator[RepT, None]:
        messages = each_reply(self._receive(rpc, request, metadata, timeout), rpc.path)
        try:
            async for message in messages:
                yield unary_reply(message, rpc.reply_type, rpc.path)
        finally:
            await messages.aclose()  # the handler's generator ends with the call

    def close(self) -> None:
        self._closed = True

    async def aclose(self) -> None:
        self._closed = True
