"""FakeTransport: a Transport that calls a Python function instead of a node (no socket).

As httpx's ``MockTransport``: a handler receives each call as a :class:`FakeRequest` (the
method path, the typed protobuf request, the node targeting, the metadata) and returns the
reply message, an iterable of them for a server stream, or raises. A client built on it
(``TalosClient.from_transport(FakeTransport(handler))``) runs every line of its own code,
conversions, targeting, fan-out and error mapping included; only the wire is missing::

    def handler(request: FakeRequest) -> Message:
        if request.method == "/machine.MachineService/Hostname":
            return machine_pb2.HostnameResponse(messages=[machine_pb2.Hostname(hostname="n1")])
        raise FakeStatus(StatusCode.UNIMPLEMENTED, f"{request.method} is not faked")

Requests and replies go through protobuf encoding both ways, as on the wire, so a handler
can neither change the client's request nor hand back something a node could not send.
A handler raises :class:`FakeStatus` for a non-OK gRPC status, a
:class:`~pytest_talos.errors.TalosError` for a transport failure, or ``TimeoutError`` for a
deadline; the fake lets them through as a wire would, and the client's ``Connection`` maps
them exactly as it maps the real transport's (PermissionDenied role hint included): the
policy is not copied here. Anything else is a bug in the test and is re-raised unchanged.
Every call is kept in :attr:`FakeTransport.requests`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar, Union

from google.protobuf.message import Message

from pytest_talos.errors import StatusCode

__all__ = ["FakeRequest", "FakeStatus", "Handler"]

RepT = TypeVar("RepT", bound=Message)

# What a handler returns: one reply (unary), or the replies of a server stream.
Reply = Union[Message, Iterable[Message], AsyncIterable[Message]]  # noqa: UP007
Handler = Callable[["FakeRequest"], Reply]


class FakeStatus(Exception):
    """Raise in a handler to answer with a non-OK gRPC status, e.g.
    ``FakeStatus(StatusCode.NOT_FOUND, "...")`` (a code's name is taken too, in any case)."""

    def __init__(self, code: StatusCode | str, details: str = "") -> None:
        try:
            self.code = StatusCode(str(code).upper())
        except ValueError:
            raise ValueError(f"{code!r} is not a gRPC status code name") from None
        super().__init__(f"{self.code}: {details}")
        self.details = details


@dataclass(frozen=True)
class FakeRequest:
    """One call as the node would see it."""

    method: str  # the gRPC path, e.g. "/machine.MachineService/Version"
    message: Message  # the decoded request
    node: str | None  # the ``node`` metadata (one-to-one proxying), if any
    nodes: tuple[str, ...]  # the ``nodes`` metadata (fan-out), if any
    metadata: tuple[tuple[str, str], ...]  # everything sent, in order
    timeout: float  # the call's deadline in seconds

    @property
    def name(self) -> str:
        """The method's short name, e.g. ``Version``."""
        return self.method.rsplit("/", 1)[-1]


def as_handler(handler: Handler | Mapping[str, Handler]) -> Handler:
    """A handler; a mapping of routes is read at each call, so a test may add routes later."""
    if not isinstance(handler, Mapping):
        return handler
    routes = handler

    def route(request: FakeRequest) -> Reply:
        chosen = routes.get(request.method) or routes.get(request.name)
        if chosen is None:
            raise FakeStatus(StatusCode.UNIMPLEMENTED, f"unknown method {request.name}")
        return chosen(request)

    return route


def wire_copy(message: Message, expected: type[RepT], what: str) -> RepT:
    """``message`` encoded and decoded as ``expected``, as the wire would."""
    if not isinstance(message, expected):
        raise TypeError(
            f"the fake handler returned a {type(message).__name__} for {what}, "
            f"which replies with {expected.__name__}"
        )
    return expected.FromString(message.SerializeToString())


def unary_reply(reply: Reply, reply_type: type[RepT], method: str) -> RepT:
    if not isinstance(reply, Message):
        raise TypeError(
            f"the fake handler returned {type(reply).__name__} for {method}, a unary call: "
            "return one message"
        )
    return wire_copy(reply, reply_type, method)


async def each_reply(replies: Reply, method: str) -> AsyncGenerator[Message, None]:
    """The messages of a stream handler's result (an iterable or an async iterable)."""
    if isinstance(replies, Message):
        raise TypeError(
            f"the fake handler returned one message for {method}, a stream: "
            "return an iterable of messages"
        )
    if isinstance(replies, AsyncIterable):
        async for message in replies:
            yield message
        return
    for message in replies:
        yield message
