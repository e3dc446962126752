"""The emulator's clock: emulated time that can run faster than real time.

Everything time-driven in the emulator (the try-mode rollback window, the kubelet crash loop,
a flapping service, a reboot) is scheduled through one :class:`Clock` per cluster. With
``time_scale = X`` an emulated delay of ``d`` seconds fires after ``d / X`` real seconds, and
the emulated wall clock (event and resource timestamps) advances ``X`` times faster than the
real one, so a 60 s try window or a 5 s crash-loop period look right in timestamps while
tests run quickly. Nothing sleeps in logic: callbacks are scheduled on the event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Cancellable", "Clock"]


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
        """Emulated Unix time in seconds."""
        return self._wall_start + self.monotonic()

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
