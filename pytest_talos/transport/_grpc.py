"""The real transport: one endpoint, one HTTP/2 connection (grpclib over a stdlib TLS context)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncGenerator, Sequence
from typing import Any, TypeVar

from google.protobuf.message import Message
from grpclib.const import Cardinality

from pytest_talos.endpoint import Endpoint
from pytest_talos.errors import TransportError
from pytest_talos.transport._base import EndpointTransport, Metadata, WireState
from pytest_talos.transport._call import Rpc
from pytest_talos.transport._channel import TalosChannel

__all__ = ["GrpcTransport"]

_CLOSE_GRACE = 0.5  # seconds the server gets to acknowledge a TLS close on client close

RepT = TypeVar("RepT", bound=Message)


class GrpcTransport(EndpointTransport):
    """One endpoint, one HTTP/2 connection, reused by every call and every target node.

    The connection is opened lazily by the first call, on that call's event loop; all
    later calls must run on the same loop (the sync client guarantees this). Failures are
    raised as the wire raised them; the client's ``Connection`` explains them.
    ``endpoint`` may be text (parsed as :meth:`Endpoint.parse` does); its ``server_name``,
    if any, is the name the TLS handshake verifies.
    """

    def __init__(
        self,
        endpoint: Endpoint | str,
        ssl_context: ssl.SSLContext,
        *,
        client_roles: Sequence[str] = (),
    ) -> None:
        super().__init__(endpoint, client_roles)
        self._ssl = ssl_context
        self._channel: TalosChannel | None = None

    # -- plumbing

    def channel(self) -> TalosChannel:
        if self._closed:
            raise TransportError(f"the client for {self._endpoint.address} is closed")
        if self._channel is None:
            where = self._endpoint
            self._channel = TalosChannel(where.host, where.port, self._ssl, where.server_name)
        return self._channel

    @property
    def peer_certificate(self) -> bytes | None:
        """DER of the certificate the endpoint presented in the TLS handshake of the open
        connection (None before the first call); it passed verification against the CA."""
        return self._channel.session.peer_certificate if self._channel is not None else None

    def state(self) -> WireState:
        channel = self._channel
        if channel is None:
            return WireState(phase="idle")
        session = channel.session
        return WireState(channel.phase, session.server_spoke, session.lost_error)

    # -- calls

    async def unary(
        self, rpc: Rpc[Any, RepT], request: Message, *, metadata: Metadata, timeout: float
    ) -> RepT:
        async with self.channel().request(
            rpc.path,
            Cardinality.UNARY_UNARY,
            rpc.request_type,
            rpc.reply_type,
            timeout=timeout,
            metadata=list(metadata),
        ) as call:
            await call.send_message(request, end=True)
            reply = await call.recv_message()
        if reply is None:
            raise TransportError("the server ended the call without a reply")
        return reply

    async def stream(
        self, rpc: Rpc[Any, RepT], request: Message, *, metadata: Metadata, timeout: float
    ) -> AsyncGenerator[RepT, None]:
        async with self.channel().request(
            rpc.path,
            Cardinality.UNARY_STREAM,
            rpc.request_type,
            rpc.reply_type,
            timeout=timeout,
            metadata=list(metadata),
        ) as call:
            await call.send_message(request, end=True)
            while (message := await call.recv_message()) is not None:
                yield message

    def close(self) -> None:
        """Close the connection now, without waiting for the server's TLS goodbye.

        Idempotent; must run on the loop that used the transport. Prefer :meth:`aclose`,
        which lets the socket be released cleanly.
        """
        self._closed = True
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    async def aclose(self) -> None:
        """Close the connection (TLS close, then cut after a short grace); idempotent."""
        self._closed = True
        channel, self._channel = self._channel, None
        if channel is not None:
            session = channel.session
            channel.close()
            await session.wait_closed(_CLOSE_GRACE)
