"""apid's forwarding to other nodes (``internal/app/apid/pkg/director/director.go``,
``internal/app/apid/pkg/backend/apid.go``): the channels to them, the metadata a forwarded
call carries, and one-to-many proxying (``nodes`` metadata): every target's replies, each
marked with the target's hostname, and a failing target as one reply carrying the error
(siderolabs/grpc-proxy one-to-many mode). Routing and dialing stay in :mod:`.server`."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from grpclib.client import Channel
from grpclib.config import Configuration
from grpclib.exceptions import GRPCError

from pytest_talos.emulator.apid.status import as_grpc_error, collect, error_metadata

__all__ = [
    "ONE_TO_MANY_PREFIXES",
    "ChannelPool",
    "Replies",
    "combine_unary",
    "forward_metadata",
    "relay_streams",
]

# internal/app/apid/pkg/director/director.go: one-to-many proxying only for these services.
ONE_TO_MANY_PREFIXES = (
    "/machine.MachineService/",
    "/cluster.ClusterService/",
    "/inspect.InspectService/",
    "/storage.StorageService/",
    "/time.TimeService/",
)
# Metadata that is never forwarded (routing, roles, HTTP/2 and gRPC reserved keys).
_NOT_FORWARDED = frozenset(
    {"node", "nodes", "talos-role", "proxyfrom", "user-agent", "te", "content-type"}
)

Replies = Callable[[str], AsyncIterator[Any]]  # target -> that target's replies


Route = Callable[[str], str]  # a node's address -> the socket address that reaches it


def _same(address: str) -> str:
    return address


class ChannelPool:
    """One cached mTLS channel per (host, port) this node forwards to.

    ``route`` gives the socket address that reaches a node from this node: the node's own
    address, except for a node on a network only the cluster reaches (variant
    ``endpoint-only``), where the channel dials the private address and still verifies
    the certificate against the node's address.
    """

    def __init__(self, tls: ssl.SSLContext | None, route: Route = _same) -> None:
        self._tls = tls
        self._route = route
        self._channels: dict[tuple[str, int], Channel] = {}

    def get(self, host: str, port: int) -> Channel:
        key = (host, port)
        channel = self._channels.get(key)
        if channel is None:
            dial = self._route(host)
            config = None if dial == host else Configuration(ssl_target_name_override=host)
            channel = Channel(dial, port, ssl=self._tls, config=config)
            self._channels[key] = channel
        return channel

    def drop(self, host: str, port: int, channel: Channel) -> None:
        if self._channels.get((host, port)) is channel:
            del self._channels[(host, port)]
        channel.close()

    def forget(self, address: str) -> None:
        """Drop the cached channels to ``address`` (that node went down)."""
        for host, port in [key for key in self._channels if key[0] == address]:
            self.drop(host, port, self._channels[(host, port)])

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()


def forward_metadata(
    md: Mapping[str, list[str]], *, proxyfrom: str, roles: Iterable[str]
) -> list[tuple[str, str]]:
    """The caller's metadata, less what is never forwarded, plus ``proxyfrom`` and the
    caller's roles as ``talos-role`` (pkg/grpc/middleware/authz/injector.go)."""
    pairs = [
        (key, value)
        for key, values in md.items()
        for value in values
        if key not in _NOT_FORWARDED and not key.startswith(("grpc-", ":"))
    ]
    pairs.append(("proxyfrom", proxyfrom))
    pairs += [("talos-role", role) for role in sorted(roles)]
    return pairs


async def combine_unary(reply_type: Any, targets: Sequence[str], replies: Replies) -> Any:
    """One reply holding every target's messages (or its error), in target order."""
    results = await asyncio.gather(*(collect(replies(target)) for target in targets))
    combined = reply_type()
    for target, result in zip(targets, results, strict=True):
        if isinstance(result, GRPCError):
            error_metadata(combined.messages.add().metadata, target, result)
            continue
        for reply in result:
            for element in reply.messages:
                copied = combined.messages.add()
                copied.CopyFrom(element)  # replies may be cached: never modify them
                copied.metadata.hostname = target
    return combined


async def relay_streams(
    reply_type: Any,
    targets: Sequence[str],
    replies: Replies,
    send: Callable[[Any], Awaitable[None]],
) -> None:
    """Every target's stream, interleaved as the frames arrive."""
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)
    done = object()

    async def pump(target: str) -> None:
        try:
            async for reply in replies(target):
                reply.metadata.hostname = target
                await queue.put(reply)
        except Exception as exc:
            # backend/apid.go BuildError: a failing node sends one frame with
            # metadata.error and metadata.status.
            frame = reply_type()
            error_metadata(frame.metadata, target, as_grpc_error(exc))
            await queue.put(frame)
        finally:
            await queue.put(done)

    tasks = [asyncio.ensure_future(pump(target)) for target in targets]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is done:
                remaining -= 1
            else:
                await send(item)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
