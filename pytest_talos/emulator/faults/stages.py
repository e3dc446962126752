"""Timed faults as data: declared transitions of a node's services on the emulated clock.

A fault that is a matter of time (a service killed every 30 s, a health check that fails for
5 s of every 20, a service that stops or sticks a little after boot) is written as stages, in
the manner of kwok's stages: each :class:`Stage` says which service, what happens to it
(:class:`Act`), after how long in the stage before it (``delay`` emulated seconds, plus up to
``jitter``), and which stage comes next. The first stage of a profile starts at each boot; a
stage without ``then`` is the last. One engine
(:class:`~pytest_talos.emulator.node.services.faults.ServiceFaults`) applies every profile's
stages through the services runner, as it would a real failure; no seam names a fault.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Act", "Stage"]


class Act(enum.StrEnum):
    """What a stage does to its service."""

    KILL = "kill"  # the process dies (with ``message``); the restart runner runs it again
    HEALTH_FAIL = "health-fail"  # its health check fails with ``message``; it keeps running
    HEALTH_PASS = "health-pass"  # its health check is its own again
    STOP = "stop"  # it stops, and nothing starts it again
    STICK = "stick"  # it is restarted and its pre-start step never returns


@dataclass(frozen=True)
class Stage:
    """One transition: ``delay`` (+ up to ``jitter``) emulated seconds after the previous
    stage (the first: after boot), ``act`` on ``service``; then stage ``then`` (an index into
    the profile's stages), or nothing more.

    ``with_run``: the stage belongs to the service's current run, so a restart of the
    service before it fires forgets it (the runner's own timer carries it); otherwise it
    belongs to the node and stops only when the node goes down.
    """

    service: str
    act: Act
    delay: float
    message: str = ""
    then: int | None = None
    with_run: bool = False
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.delay < 0 or self.jitter < 0:
            raise ValueError(f"a stage's delay and jitter are never negative: {self!r}")
        if self.act in (Act.KILL, Act.HEALTH_FAIL) and not self.message:
            raise ValueError(f"a {self.act} stage says what the service shows: {self!r}")
