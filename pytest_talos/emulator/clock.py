"""The emulator's clock: emulated time that can run faster than real time.

Everything time-driven in the emulator (the try-mode rollback window, the kubelet crash loop,
a flapping service, a reboot) is scheduled through one :class:`Clock` per cluster. With
``time_scale = X`` an emulated delay of ``d`` seconds fires after ``d / X`` real seconds, and
the emulated wall clock (event and resource timestamps) advances ``X`` times faster than the
real one, so a 60 s try window or a 5 s crash-loop period look right in timestamps while
tests run quickly. Nothing sleeps in logic: callbacks are scheduled on the event loop.

A node whose clock runs ahead until its first time sync (variant ``clock-stepped``) reads
the emulated time plus an offset while :meth:`Clock.running_ahead` is in effect: only on the
thread that entered it (the loop's, booting that node), so other nodes and readers of the
cluster's time are not affected. When the block ends the clock steps back (the sync).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Cancellable", "Clock", "ManualClock"]


class Cancellable(Protocol):
    """What :meth:`Clock.call_later` returns (an ``asyncio.TimerHandle``)."""

    def cancel(self) -> None: ...


class Clock:
    """Emulated time, ``time_scale`` times faster than real time, bound to one event loop."""

    def __init__(self, time_scale: float = 1.0) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be a positive number, not {time_scale!r}")
        self.time_scale = float(time_scale)
        self._wall_start = time.time()
        self._mono_start = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ahead = 0.0  # seconds the clock reads ahead, on _ahead_thread only
        self._ahead_thread: int | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule callbacks on ``loop`` from now on (the cluster's loop)."""
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def monotonic(self) -> float:
        """Emulated seconds since the clock was created."""
        return (time.monotonic() - self._mono_start) * self.time_scale

    def time(self) -> float:
        """Emulated Unix time in seconds (ahead while :meth:`running_ahead`)."""
        return self._wall_start + self.monotonic() + self._offset()

    def _offset(self) -> float:
        return self._ahead if self._ahead_thread == threading.get_ident() else 0.0

    @property
    def synced(self) -> bool:
        """Whether the clock reads the right time (not ahead, as before a time sync)."""
        return self._offset() == 0.0

    @contextlib.contextmanager
    def running_ahead(self, seconds: float) -> Iterator[None]:
        """Read ``seconds`` ahead (on this thread) until the block ends, then step back:
        a node's clock set from a real-time clock that is ahead, until its first time sync
        steps it (internal/app/machined/pkg/controllers/time/sync.go)."""
        if seconds <= 0:
            yield
            return
        self._ahead, self._ahead_thread = float(seconds), threading.get_ident()
        try:
            yield
        finally:
            self._ahead, self._ahead_thread = 0.0, None

    def now(self) -> dt.datetime:
        """Emulated wall-clock time (UTC)."""
        return dt.datetime.fromtimestamp(self.time(), dt.UTC)

    def real_seconds(self, emulated_seconds: float) -> float:
        """How many real seconds an emulated delay takes."""
        return max(0.0, emulated_seconds) / self.time_scale

    def call_later(self, emulated_seconds: float, callback: Callable[[], None]) -> Cancellable:
        """Run ``callback`` on the loop after an emulated delay (call from the loop thread)."""
        return self.loop.call_later(self.real_seconds(emulated_seconds), callback)

    async def sleep(self, emulated_seconds: float) -> None:
        """Wait an emulated delay (for servicers polling state; never used in state logic)."""
        await asyncio.sleep(self.real_seconds(emulated_seconds))


@dataclass(order=True)
class _Timer:
    due: float
    order: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock(Clock):
    """Emulated time that moves only when :meth:`advance` is called: timers run in the order
    they fall due, each at its own time, with no real time passing. For tests of timed
    behaviour and for reproducible dumps (``scripts/dump_emulated_state.py``); assign it to
    a cluster's ``clock`` before the cluster starts, or give it to a ``NodeState``."""

    def __init__(self, time_scale: float = 1.0, *, start: float = 1_780_000_000.0) -> None:
        super().__init__(time_scale)
        self._start = start
        self._now = 0.0
        self._timers: list[_Timer] = []
        self._order = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._start + self._now + self._offset()

    def call_later(self, emulated_seconds: float, callback: Callable[[], None]) -> Cancellable:
        timer = _Timer(self._now + max(0.0, emulated_seconds), next(self._order), callback)
        heapq.heappush(self._timers, timer)
        return timer

    async def sleep(self, emulated_seconds: float) -> None:
        await asyncio.sleep(0)  # a poll yields to the loop; the time moves in advance()

    def advance(self, seconds: float) -> None:
        """Run every timer due within ``seconds``, at its due time (those the callbacks
        schedule too), then stand at the end of the span."""
        until = self._now + seconds
        while self._timers and self._timers[0].due <= until:
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self._now = timer.due
                timer.callback()
        self._now = until
