"""Where a call goes (``internal/app/apid/pkg/director/director.go``): this node, one other
node (one-to-one proxy, reply verbatim) or several (one-to-many, per-node ``metadata`` and
errors); and the dialing of other nodes' apid for forwarded calls.

Only control planes forward, over real mTLS with their own ``os:impersonator`` client
certificate (``internal/app/apid/pkg/backend/apid.go``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from pytest_talos.emulator.apid.dispatch import LocalDispatcher, MethodTable
from pytest_talos.emulator.apid.forwarding import (
    ONE_TO_MANY_PREFIXES,
    ChannelPool,
    Route,
    combine_unary,
    forward_metadata,
    relay_streams,
)
from pytest_talos.emulator.apid.gate import Identity
from pytest_talos.emulator.apid.inprocess import ForwardTarget, TargetLookup
from pytest_talos.emulator.apid.latency import Latency
from pytest_talos.emulator.apid.status import (
    CONNECTION_LOST,
    DEADLINE_TEXT,
    as_grpc_error,
    failure_reason,
    is_deadline,
)
from pytest_talos.talos_api import APID_PORT, split_host_port

__all__ = ["DEADLINE_GRACE", "FORWARD_TIMEOUT", "Directory", "Router", "host_of", "port_of"]

FORWARD_TIMEOUT = 30.0  # seconds, for forwarded unary calls without a client deadline
# A forwarded call gets the client's deadline plus this: the client's own deadline (which
# cancels the forwarded call with it) always ends the call first, never ours.
DEADLINE_GRACE = 1.0

Directory = Callable[[str], str | None]  # target as given -> node address (or None)
Targets = tuple[str, list[str]]  # ("one" | "many", the targets as given)


class Router:
    """The director of one node's apid: picks the targets, runs or forwards the call."""

    def __init__(
        self,
        local: LocalDispatcher,
        table: MethodTable,
        *,
        address: str,
        port: int,
        directory: Directory,
        forward_tls: ssl.SSLContext | None,
        forward_timeout: float,
        route: Route | None = None,
        forward_serial: str = "",
        targets: TargetLookup | None = None,
        latency: Latency | None = None,
    ) -> None:
        self._local = local
        self._forward_serial = forward_serial  # of this node's os:impersonator certificate
        self._in_process = targets  # the emulated nodes' apid, served in process (inprocess.py)
        self._latency = latency or Latency()
        self._connected: set[tuple[str, int]] = set()  # in-process targets "connected" to
        self._table = table
        self.address = address
        self.port = port
        self._directory = directory
        self._forward_tls = forward_tls
        self._channels = (
            ChannelPool(forward_tls) if route is None else ChannelPool(forward_tls, route)
        )
        self.forward_timeout = forward_timeout  # seconds, unary forwards without a deadline

    @property
    def can_forward(self) -> bool:
        return self._forward_tls is not None

    def forget(self, address: str) -> None:
        """Drop the cached channels to ``address`` (that node went down)."""
        self._channels.forget(address)
        self._connected = {key for key in self._connected if key[0] != address}

    def close(self) -> None:
        self._channels.close()
        self._connected.clear()

    # ---- targets --------------------------------------------------------------------------

    def is_self(self, target: str) -> bool:
        host = host_of(target)
        return host in (self.address, self._local.context.state.hostname)

    def targets(self, path: str, md: Mapping[str, list[str]], identity: Identity) -> Targets | None:
        """None: served here; else the proxy mode and its targets."""
        if identity.forwarded:
            return None  # director.go: a call with proxyfrom is never re-forwarded
        node, nodes = md.get("node", []), md.get("nodes", [])
        if node:
            if len(node) > 1:
                raise GRPCError(Status.INVALID_ARGUMENT, "node metadata must be single-valued")
            if self.is_self(node[0]):
                return None
            self._require_forwarding()
            return "one", node
        if nodes:
            if not path.startswith(ONE_TO_MANY_PREFIXES):
                raise GRPCError(
                    Status.INVALID_ARGUMENT,
                    f"one-2-many proxying is not supported for method {path}",
                )
            if any(not self.is_self(target) for target in nodes):
                self._require_forwarding()
            return "many", nodes
        return None

    def _require_forwarding(self) -> None:
        if not self.can_forward:  # backend/apid.go: workers have no client certificate
            raise GRPCError(Status.PERMISSION_DENIED, "no request forwarding")

    # ---- forwarding -----------------------------------------------------------------------

    async def _remote(
        self,
        path: str,
        target: str,
        request: Any,
        identity: Identity,
        md: Mapping[str, list[str]],
        timeout: float | None,
    ) -> AsyncIterator[Any]:
        address = self._directory(host_of(target))
        port = port_of(target)
        if address is None or not ipaddress.ip_address(address).is_loopback:
            raise GRPCError(Status.UNAVAILABLE, _dial_error(target, "no route to host"))
        pairs = forward_metadata(md, proxyfrom=f"{self.address}:{self.port}", roles=identity.roles)
        peer = self._in_process(address, port) if self._in_process is not None else None
        if peer is not None and peer.serving:
            replies = self._handed_over(peer, (address, port), path, request, pairs, timeout)
            try:
                async for reply in replies:
                    yield reply
            except (GRPCError, asyncio.CancelledError):
                raise  # the target's own status (relayed), or the client gave up
            except Exception as exc:
                self._connected.discard((address, port))  # a broken connection is redialled
                raise _forward_error(target, exc) from None
            return
        spec, _ = self._table[path]
        channel = self._channels.get(address, port)
        try:
            async with channel.request(
                path,
                spec.cardinality,
                spec.request_type,
                spec.reply_type,
                timeout=timeout,
                metadata=pairs,
            ) as remote:
                await remote.send_message(request, end=True)
                async for reply in remote:
                    yield reply
        except (GRPCError, asyncio.CancelledError):
            raise  # the target's own status (relayed), or the client gave up: cancel with it
        except Exception as exc:
            if not is_deadline(exc):  # never reuse a connection to a node that went down
                self._channels.drop(address, port, channel)
            raise _forward_error(target, exc) from None

    async def _handed_over(
        self,
        peer: ForwardTarget,
        key: tuple[str, int],
        path: str,
        request: Any,
        pairs: list[tuple[str, str]],
        timeout: float | None,
    ) -> AsyncIterator[Any]:
        """The call served by the target's apid in process (inprocess.py); the first one
        to a target pays a new connection's set-up round trips (the latency model)."""
        if key not in self._connected and self._latency:
            await asyncio.wait_for(asyncio.sleep(self._latency.setup), timeout)
        self._connected.add(key)
        replies = peer.serve_forwarded(path, request, self._forward_serial, pairs, timeout)
        async for reply in replies:
            yield reply

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
        if self.is_self(target):
            async for reply in self._local.serve(path, request, identity.roles, md):
                yield reply
        else:
            async for reply in self._remote(path, target, request, identity, md, timeout):
                yield reply

    async def one_to_one(
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

    async def one_to_many(
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

        def replies(target: str) -> AsyncIterator[Any]:
            return self._replies(path, target, request, identity, md, timeout)

        if streaming:
            await relay_streams(spec.reply_type, targets, replies, stream.send_message)
            return
        await stream.send_message(await combine_unary(spec.reply_type, targets, replies))


def host_of(target: str) -> str:
    """The host of a ``node`` / ``nodes`` target as apid reads it."""
    try:
        return split_host_port(target)[0]
    except ValueError:  # a malformed bracket: the text as given
        return target


def port_of(target: str) -> int:
    """The apid port of a target (default 50000)."""
    with contextlib.suppress(ValueError):
        port = split_host_port(target)[1]
        if port is not None:
            return int(port)
    return APID_PORT


def _forward_error(target: str, exc: Exception) -> GRPCError:
    """A failed forward as grpc-go reports it: its deadline, or an unreachable node."""
    if is_deadline(exc):
        return GRPCError(Status.DEADLINE_EXCEEDED, DEADLINE_TEXT)
    if isinstance(exc, OSError | CONNECTION_LOST):
        return GRPCError(Status.UNAVAILABLE, _dial_error(target, failure_reason(exc)))
    return as_grpc_error(exc)


def _dial_error(target: str, reason: str) -> str:
    # INFERRED: grpc-go's wording for a backend apid cannot reach.
    host, port = host_of(target), port_of(target)
    return (
        f'connection error: desc = "transport: Error while dialing: dial tcp {host}:{port}: '
        f'{reason}"'
    )
