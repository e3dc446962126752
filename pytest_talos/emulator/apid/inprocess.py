"""A forwarded call handed to the target node's apid in this process, not over a second
TLS + HTTP/2 connection on loopback.

A control plane's apid forwards a call to another node over its own mTLS connection with
its ``os:impersonator`` certificate (``internal/app/apid/pkg/backend/apid.go``), and the
target serves it as a call from a peer holding that certificate, with the caller's roles as
``talos-role`` and ``proxyfrom`` set (``pkg/grpc/middleware/authz/injector.go``). Every fault
the emulator has leaves that connection acceptable (the impersonator certificate is a
healthy client certificate of the Talos CA; the target's server certificate names its
address), so the connection only costs CPU here. What stays as on the wire:

* the target sees the metadata the wire would deliver (the forwarded pairs, keys in lower
  case), the impersonator's serial and the caller's roles, and logs the call as forwarded;
* the target's refusals and errors are its own ``GRPCError`` (relayed as they are);
* a deadline ends the call as grpc-go's does (a ``TimeoutError`` the router maps to
  ``DeadlineExceeded``);
* a target whose apid goes down ends its calls with a connection error (the router maps it
  to ``Unavailable`` with grpc-go's dial wording), as the broken connection did;
* the latency model's endpoint → node hop (the target's own hop), and a new connection's set-up
  round trips on the first call to a target (and again after it went down).

Replies are copied before they leave the target: a target's reply may be cached and the
forwarder marks each with the target's hostname.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from google.protobuf.message import Message

__all__ = ["ForwardTarget", "TargetLookup", "relay_until"]


class ForwardTarget(Protocol):
    """What the router needs of a target node's apid (``server.NodeServer``)."""

    @property
    def serving(self) -> bool: ...

    def serve_forwarded(
        self,
        path: str,
        request: Any,
        forwarder_serial: str,
        pairs: Sequence[tuple[str, str]],
        timeout: float | None,
    ) -> AsyncIterator[Any]: ...


TargetLookup = Callable[[str, int], ForwardTarget | None]  # (address, port) -> its apid


def copied(reply: Any) -> Any:
    """A copy of a reply message (a served reply may be cached)."""
    if isinstance(reply, Message):
        fresh = type(reply)()
        fresh.CopyFrom(reply)
        return fresh
    return reply


async def relay_until(
    replies: AsyncIterator[Any], down: asyncio.Event, timeout: float | None
) -> AsyncIterator[Any]:
    """``replies`` until they end, the target goes down (ConnectionResetError) or
    ``timeout`` seconds pass (TimeoutError, as grpclib's deadline)."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    iterator = aiter(replies)
    went_down = asyncio.ensure_future(down.wait())
    following: asyncio.Future[Any] | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(iterator))
            left = None if deadline is None else max(deadline - loop.time(), 0.0)
            done, _ = await asyncio.wait(
                {following, went_down}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            if following not in done:
                if went_down in done:
                    raise ConnectionResetError("the target's apid went down")
                raise TimeoutError()
            try:
                reply = following.result()
            except StopAsyncIteration:
                return
            yield copied(reply)
    finally:
        went_down.cancel()
        if following is not None:
            await _settled(following)
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            # an abandoned target stream: what its unwinding raises has no caller to reach
            with contextlib.suppress(Exception):
                await closer()


async def _settled(step: asyncio.Future[Any]) -> None:
    """Stop the target's pending step, and read its outcome either way: a step that ended
    (StopAsyncIteration, an error) in the loop step that cancelled the caller would else be
    logged by asyncio as "Task exception was never retrieved"."""
    if not step.done():
        step.cancel()
        await asyncio.gather(step, return_exceptions=True)
    elif not step.cancelled():
        step.exception()
