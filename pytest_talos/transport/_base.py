"""The seam under the client: the :class:`Transport` protocol (httpx's ``BaseTransport``).

A transport moves one call's bytes and nothing more: it sends the request with the
metadata and deadline it is given and hands back the reply (or the replies of a server
stream), raising whatever its wire raised. Deadlines, metadata, error mapping and logging
are the caller's policy (``pytest_talos.client.Connection``), written once for every
transport: :class:`~pytest_talos.transport.GrpcTransport` (grpclib over mTLS) and
:class:`~pytest_talos.transport.FakeTransport` (a Python function) are siblings.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from google.protobuf.message import Message

from pytest_talos.endpoint import Endpoint
from pytest_talos.transport._call import Rpc
from pytest_talos.transport._errors import ConnectPhase

__all__ = ["EndpointTransport", "Metadata", "Transport", "WireState"]

RepT = TypeVar("RepT", bound=Message)
Metadata = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class WireState:
    """How the transport's connection stands, for explaining a failure (see ``CallInfo``)."""

    phase: ConnectPhase = "ready"  # how far the last connection attempt got
    server_spoke: bool = True  # did the server send any byte on the last connection?
    lost_error: BaseException | None = field(default=None, compare=False)


@runtime_checkable
class Transport(Protocol):
    """What the client needs from the wire to one endpoint.

    ``unary`` and ``stream`` raise the wire's own exceptions (``TimeoutError`` when the
    deadline passes, a :class:`~pytest_talos.errors.TalosError` they already understand,
    grpclib's ``GRPCError`` or a :class:`~pytest_talos.transport.FakeStatus` for a gRPC
    status); the caller maps them with :func:`~pytest_talos.transport.classify_error`.
    """

    @property
    def endpoint(self) -> Endpoint:
        """Where the calls go (its host is the node named when no target is)."""
        ...

    @property
    def client_roles(self) -> tuple[str, ...]:
        """The roles of the identity it presents (named in a PermissionDenied hint)."""
        ...

    @property
    def closed(self) -> bool: ...

    @property
    def peer_certificate(self) -> bytes | None:
        """DER of the endpoint's TLS certificate once connected (None without one)."""
        ...

    def state(self) -> WireState:
        """How the connection stands now (read after a failure)."""
        ...

    async def unary(
        self, rpc: Rpc[Any, RepT], request: Message, *, metadata: Metadata, timeout: float
    ) -> RepT:
        """One request, one reply, within ``timeout`` seconds (connecting included)."""
        ...

    def stream(
        self, rpc: Rpc[Any, RepT], request: Message, *, metadata: Metadata, timeout: float
    ) -> AsyncGenerator[RepT, None]:
        """A server stream that ends within ``timeout`` seconds; closing it cancels the call."""
        ...

    def close(self) -> None:
        """Drop the connection now; idempotent."""
        ...

    async def aclose(self) -> None:
        """Close the connection cleanly; idempotent."""
        ...


class EndpointTransport:
    """What every transport holds besides its wire: the endpoint (text is parsed as
    :meth:`Endpoint.parse` does), the roles of the identity it presents, whether it is
    closed. The real and the fake transport extend it, so these are written once."""

    def __init__(self, endpoint: Endpoint | str, client_roles: Sequence[str]) -> None:
        self._endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint.parse(endpoint)
        self._roles = tuple(client_roles)
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._endpoint.address!r}, roles={self._roles!r})"

    @property
    def endpoint(self) -> Endpoint:
        return self._endpoint

    @property
    def client_roles(self) -> tuple[str, ...]:
        return self._roles

    @property
    def closed(self) -> bool:
        return self._closed
