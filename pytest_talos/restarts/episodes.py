"""Restart episodes and the verdict on them.

From a service's timed state changes (:mod:`pytest_talos.restarts.history`),
:func:`restart_episodes` finds each time a service stopped running after it had run: a
crash (the restart runner's ``Waiting`` "going to restart", internal/app/machined/pkg/
system/runner/restart/restart.go), a stop, a start over without a stop (a pre-start state
after ``Running``), a failure, or an unhealthy spell (a ``Running``
event "Health check failed", service_runner.go healthUpdate). :func:`judge` then excuses
what the boot or the kit's own config changes (:mod:`pytest_talos.restarts.kit_changes`)
explain; the rest is the node's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pytest_talos.restarts.history import TimedServiceEvent, clock_text
from pytest_talos.restarts.kit_changes import KIT_SETTLE, KitChange, kit_windows

__all__ = [
    "BOOT",
    "Episode",
    "EpisodeKind",
    "Verdict",
    "is_health_failure",
    "is_one_shot_success",
    "is_restart_message",
    "judge",
    "restart_episodes",
]

BOOT = "before the machine first reached the running stage (the boot)"

EpisodeKind = Literal["crash", "stop", "restart", "failure", "unhealthy"]
# service_runner.go healthUpdate: the Running event recorded when a health check starts failing
_HEALTH_FAILED = "Health check failed"
# system/system.go Start: what a service whose run returned no error ends with
_FINISHED_OK = "Service finished successfully"

# service_runner.go Start: the states a run passes through before Running (Waiting "Waiting
# for ..." on its conditions, Preparing, Starting). After Running, a healthy service records
# only Running (health changes), Stopping and Finished, Failed, or the restart runner's
# Waiting: the pre-start steps are not repeated when the restart runner runs it again
# (runner/restart/restart.go). One of them after Running is a start over without a stop.
_START_OVER = ("WAITING", "PREPARING", "STARTING", "INITIALIZED")
# restart.go: what the restart runner says when it will run the service again
_RESTART_MARKS = (
    "going to restart forever",
    "going to restart until it succeeds",
    "exited without error, going to restart it",
)


def is_restart_message(message: str) -> bool:
    """Whether a ``Waiting`` event's text is the restart runner's (a crash, not a start)."""
    return any(mark in message for mark in _RESTART_MARKS)


def is_one_shot_success(service: str, action: str, message: str) -> bool:
    """Whether a ``FINISHED`` right after ``Running`` is an extension service that ran once
    and exited 0: ``restart: never`` or ``untilSuccess`` (restart.Once, restart.UntilSuccess:
    internal/app/machined/pkg/system/services/extension.go) ends it ``Finished`` "Service
    finished successfully" (system/system.go), with no ``Stopping`` before it (a stop
    through the API or a shutdown shows one, and counts)."""
    return service.startswith("ext-") and action == "FINISHED" and message == _FINISHED_OK


def is_health_failure(message: str) -> bool:
    """Whether a ``Running`` event's text is a health check turning failed."""
    return message.startswith(_HEALTH_FAILED)


@dataclass
class Episode:
    """One time a service stopped running after it had run (or failed)."""

    service: str
    kind: EpisodeKind
    at: float | None  # node time
    message: str
    excuse: str = ""  # why it is not the node's fault ("" when it is)

    def describe(self) -> str:
        what = {
            "crash": "crashed",
            "stop": "stopped",
            "restart": "started over without a stop",
            "failure": "failed",
            "unhealthy": "turned unhealthy while Running",
        }[self.kind]
        text = f"{self.service} {what} at {clock_text(self.at)} (node time): {self.message}"
        return f"{text} — {self.excuse}" if self.excuse else text


def restart_episodes(events: Iterable[TimedServiceEvent]) -> list[Episode]:
    """Every crash, stop-after-running, start over without a stop, failure and unhealthy
    spell in ``events`` (in order)."""
    episodes: list[Episode] = []
    ran: dict[str, bool] = {}
    for event in events:
        name, action = event.service, event.action
        if action == "RUNNING":
            if is_health_failure(event.message):
                episodes.append(Episode(name, "unhealthy", event.at, event.message))
            ran[name] = True
        elif action == "FAILED":
            episodes.append(Episode(name, "failure", event.at, event.message))
            ran[name] = False
        elif action == "WAITING" and is_restart_message(event.message):
            episodes.append(Episode(name, "crash", event.at, event.message))
            ran[name] = False
        elif action in ("STOPPING", "FINISHED") and ran.get(name):
            if not is_one_shot_success(name, action, event.message):
                episodes.append(Episode(name, "stop", event.at, event.message))
            ran[name] = False
        elif action in _START_OVER and ran.get(name):
            text = f"{action.capitalize()} {event.message}".rstrip()
            episodes.append(Episode(name, "restart", event.at, text))
            ran[name] = False
    return episodes


@dataclass
class Verdict:
    """The episodes found, split into the node's own and the excused ones."""

    episodes: list[Episode] = field(default_factory=list)
    booted: bool = True  # the machine reached the running stage (in or before the events)

    @property
    def counted(self) -> list[Episode]:
        return [e for e in self.episodes if not e.excuse]

    @property
    def excused(self) -> list[Episode]:
        return [e for e in self.episodes if e.excuse]

    def by_service(self) -> dict[str, list[Episode]]:
        found: dict[str, list[Episode]] = {}
        for episode in self.counted:
            found.setdefault(episode.service, []).append(episode)
        return found


def judge(
    episodes: Iterable[Episode],
    *,
    running_at: float | None,
    booted: bool,
    kit_changes: Sequence[KitChange] = (),
) -> Verdict:
    """Excuse what the boot or the kit's own changes explain; the rest is the node's.

    ``running_at``: the node time the machine first reported the running stage in the
    events looked at (None: not in them); ``booted``: whether it has reached it at all (it
    is running now, or it did in the events). A machine that never finished booting gets
    no boot excuse: its restarts are the reason it does not.
    """
    windows = kit_windows(kit_changes)
    verdict = Verdict(booted=booted)
    for episode in episodes:
        at = episode.at
        if booted and running_at is not None and at is not None and at < running_at:
            episode.excuse = BOOT
        elif at is not None:
            for start, end, first, last in windows:
                if start <= at <= end:
                    episode.excuse = (
                        f"during or within {KIT_SETTLE:g}s after {first.describe()}"
                        + (f" until {last.describe()}" if last is not first else "")
                    )
                    break
        verdict.episodes.append(episode)
    return verdict
