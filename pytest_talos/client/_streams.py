"""Server streams of AsyncTalosClient: confirmed on open, and the methods built over them."""

from __future__ import annotations

import functools
import inspect
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from pytest_talos.errors import TalosError

if TYPE_CHECKING:
    from pytest_talos.client._async import AsyncTalosClient

__all__ = ["OpenedStream", "StreamOpener", "iterated", "present_as"]

T = TypeVar("T")
P = ParamSpec("P")


class OpenedStream(AsyncIterator[T]):
    """A server stream the server has confirmed by sending its first message.

    Talos answers a subscription with a message first (Events: the empty hello event;
    COSI Watch: an empty reply; HealthCheck: its first progress line), so once that has
    arrived nothing that happens later can be missed. Whatever the first message carried
    is handed out first; the hello and the empty reply carry nothing.
    """

    def __init__(
        self, messages: AsyncGenerator[Any, None], convert: Callable[[Any], Iterable[T]]
    ) -> None:
        self._messages = messages
        self._convert = convert
        self._ready: deque[T] = deque()
        self._deferred: TalosError | None = None

    async def receive_first(self) -> None:
        """Send the request and wait for the server's first message (or the stream's end)."""
        try:
            first = await anext(self._messages)
        except StopAsyncIteration:
            return
        self._ready.extend(self._convert(first))

    def fail_later(self, error: TalosError) -> None:
        """Raise ``error`` on the next ``__anext__`` instead of now."""
        self._deferred = error

    async def __anext__(self) -> T:
        while not self._ready:
            if self._deferred is not None:
                error, self._deferred = self._deferred, None
                raise error
            self._ready.extend(self._convert(await anext(self._messages)))
        return self._ready.popleft()

    async def aclose(self) -> None:
        """End the call: the server's stream is reset (cancelled); idempotent."""
        self._deferred = None
        self._ready.clear()
        await self._messages.aclose()


# An ``_open_<name>`` method: sets a stream up and returns it once the server confirmed it.
StreamOpener = Callable[Concatenate["AsyncTalosClient", P], Coroutine[Any, Any, OpenedStream[T]]]


def present_as(
    wrapper: Callable[..., Any], opener: Callable[..., Any], owner: str, returns: str
) -> None:
    """Name ``wrapper`` after the public method an opener stands behind (``_open_events``
    -> ``owner.events``); its signature is the opener's, returning ``returns``."""
    wrapper.__name__ = opener.__name__.removeprefix("_open_")
    wrapper.__qualname__ = f"{owner}.{wrapper.__name__}"
    signature = inspect.signature(opener)
    item = str(signature.return_annotation).removeprefix("OpenedStream[").removesuffix("]")
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=returns.format(item)
    )


def iterated(
    opener: StreamOpener[P, T],
) -> Callable[Concatenate[AsyncTalosClient, P], AsyncGenerator[T, None]]:
    """The async-generator method over an opener: the stream opens at the first ``anext``.

    (The sync client calls the opener itself, so its streams are open when the call returns.)
    """

    @functools.wraps(opener)
    async def iterate(
        self: AsyncTalosClient, /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncGenerator[T, None]:
        stream = await opener(self, *args, **kwargs)
        try:
            async for item in stream:
                yield item
        finally:
            await stream.aclose()

    present_as(iterate, opener, "AsyncTalosClient", "AsyncGenerator[{}, None]")
    return iterate
