"""How AsyncTalosClient calls: which node(s) a call targets, the change gate, the envelope
checks of replies, and the unary / stream / fan-out plumbing over the connection (the
call policy over the transport, see ``_connection``)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import Message

from pytest_talos import models
from pytest_talos.client._calls import Converter
from pytest_talos.client._connection import Connection
from pytest_talos.client._gate import ChangeGate
from pytest_talos.client._streams import OpenedStream
from pytest_talos.errors import DeadlineExceeded, InvalidArgument, NodeError, TransportError
from pytest_talos.transport import NO_TARGET, Rpc, Target, node_error

__all__ = ["Caller", "Shared"]

T = TypeVar("T")


@dataclass
class Shared:
    """What every client derived with ``with_node`` shares: connection and type cache."""

    connection: Connection
    definitions: dict[str | None, list[models.ResourceDefinitionSpec]] = field(default_factory=dict)
    gate: ChangeGate | None = None  # None: every call is sent (see ChangeGate)


class Caller:
    """The calls of one client: its targets, over the connection it shares."""

    def __init__(self, shared: Shared, node: str | None, nodes: tuple[str, ...]) -> None:
        self.shared = shared
        self.connection = shared.connection
        self.node = node
        self.nodes = nodes
        # The target of single-node calls, worked out once (None: ambiguous, see target).
        self._single: Target | None = None
        if node is not None:
            self._single = Target(node=node)
        elif len(nodes) == 1:
            self._single = Target(node=nodes[0])
        elif not nodes:
            self._single = NO_TARGET

    # ------------------------------------------------------------------ targets

    def target(self, method: str) -> Target:
        if self._single is not None:
            return self._single
        raise InvalidArgument(
            f"this client targets {len(self.nodes)} nodes ({', '.join(self.nodes)}) and "
            "this call reaches one node: use client.with_node(<node>), or fanout() for "
            "calls that support several nodes",
            method=method,
        )

    def fanout_target(self, nodes: Sequence[str] | None) -> Target:
        chosen = tuple(nodes) if nodes else self.nodes or ((self.node,) if self.node else ())
        if not chosen:
            raise InvalidArgument(
                "fanout needs nodes: pass nodes=[...] or create the client with nodes"
            )
        return Target(nodes=chosen)

    def gate_check(self, rpc: Rpc[Any, Any], request: Message, target: Target) -> None:
        gate = self.shared.gate
        if gate is not None:
            gate.check(rpc.path, request, target.label or self.connection.host)

    def check(self, message: Any, rpc: Rpc[Any, Any], target: Target) -> None:
        """Raise the NodeError a reply element carries in its metadata, if any."""
        if message.HasField("metadata"):
            info = self.connection.call_info(rpc, target, self.connection.timeout)
            error = node_error(message.metadata, info, fallback_node=target.node)
            if error is not None:
                raise error

    # ------------------------------------------------------------------ calls

    async def unary(
        self,
        rpc: Rpc[Any, Any],
        request: Message,
        converter: Converter[T],
        *,
        timeout: float | None = None,
    ) -> T:
        """One node, one reply element, converted."""
        target = self.target(rpc.path)
        self.gate_check(rpc, request, target)
        reply = await self.connection.unary(rpc, request, target, timeout=timeout)
        if not reply.messages:
            info = self.connection.call_info(rpc, target, self.connection.timeout)
            raise TransportError("the reply holds no message", node=info.node, method=rpc.path)
        message = reply.messages[0]
        self.check(message, rpc, target)
        return converter(message, target.node)

    async def stream(
        self,
        rpc: Rpc[Any, Any],
        request: Message,
        *,
        target: Target | None = None,
        idle_timeout: float | None = None,
        total_timeout: float | None = None,
        enveloped: bool = True,
    ) -> AsyncGenerator[Any, None]:
        chosen = target if target is not None else self.target(rpc.path)
        self.gate_check(rpc, request, chosen)
        stream = self.connection.stream(
            rpc,
            request,
            chosen,
            idle_timeout=idle_timeout,
            total_timeout=total_timeout,
        )
        try:
            async for message in stream:
                if enveloped:
                    self.check(message, rpc, chosen)
                yield message
        finally:
            await stream.aclose()

    async def open(
        self,
        rpc: Rpc[Any, Any],
        request: Message,
        target: Target,
        convert_each: Callable[[Any], Iterable[T]],
        *,
        total_timeout: float,
        enveloped: bool = True,
    ) -> OpenedStream[T]:
        """Start a server stream and wait, within its deadline, for the server's first message.

        Errors of the set-up (refused, unauthorized, connection failures) are raised here.
        Only a deadline that passes on a working connection while the server stays silent
        is left to the first ``anext``: that is how such a stream would have ended anyway.
        """
        messages = self.stream(
            rpc, request, target=target, total_timeout=total_timeout, enveloped=enveloped
        )
        stream = OpenedStream(messages, convert_each)
        try:
            await stream.receive_first()
        except DeadlineExceeded as exc:
            if self.connection.call_info(rpc, target, total_timeout).phase != "ready":
                raise  # the connection itself was not made in time
            stream.fail_later(exc)
        return stream

    async def data(self, rpc: Rpc[Any, Any], request: Message) -> bytes:
        """Concatenate a finite common.Data stream (idle gap bounded by the unary timeout)."""
        idle = self.connection.timeout
        chunks = [message.bytes async for message in self.stream(rpc, request, idle_timeout=idle)]
        return b"".join(chunks)

    # ------------------------------------------------------------------ fan-out

    def per_node(
        self,
        messages: Sequence[Any],
        rpc: Rpc[Any, Any],
        target: Target,
        converter: Converter[Any],
    ) -> dict[str, Any]:
        """``{node: result | NodeError}`` of a fan-out reply (a silent node: NodeError)."""
        info = self.connection.call_info(rpc, target, self.connection.timeout)
        lone = target.nodes[0] if len(target.nodes) == 1 else self.connection.host
        results: dict[str, Any] = {}
        for message in messages:
            node = message.metadata.hostname or lone
            error = node_error(message.metadata, info, fallback_node=node)
            results[node] = error if error is not None else converter(message, node)
        for node in target.nodes:
            if node not in results:
                results[node] = NodeError(node, "no reply from this node", method=rpc.path)
        return results
