"""The node's record of service state changes, on the node's clock.

Two records hold the same state changes (service_runner.go UpdateState pushes to the
service's history and publishes the event): the Events stream, whose ``rs/xid`` event ids
carry the node's clock (:func:`xid_time`; internal/app/machined/pkg/runtime/events.go), and
each service's own history in ServiceList, with timestamps. Both are finite: ServiceList
keeps a service's last 64 events (system/events/events.go MaxEventsToKeep), the Events
stream's backlog the node's last 990 (runtime/v1alpha1/v1alpha1_controller.go
NewEvents(1000, 10); v1alpha1_events.go Watch starts no earlier than cap-gap back).

:func:`timed_service_events` and :func:`service_history` read them as
:class:`TimedServiceEvent` s, :func:`merge_histories` joins them, :func:`history_gaps` says
where neither reaches back far enough, and :func:`events_before` and :func:`stream_misses`
say where a stream does not hold what it should.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pytest_talos import models

__all__ = [
    "NODE_EVENTS_KEPT",
    "SERVICE_EVENTS_KEPT",
    "STAMPED_AHEAD",
    "STEPPED_BOOT",
    "XID_SLACK",
    "BootPlaces",
    "ClockStep",
    "TimedServiceEvent",
    "boot_places",
    "clock_step",
    "clock_text",
    "events_before",
    "excuse_clock_steps",
    "history_gaps",
    "merge_histories",
    "service_history",
    "stream_misses",
    "timed_service_events",
    "unix_seconds",
    "xid_time",
]

# system/events/events.go MaxEventsToKeep: ServiceList holds a service's last 64 events
SERVICE_EVENTS_KEPT = 64
# runtime/v1alpha1/v1alpha1_controller.go NewEvents(1000, 10): a watch starts at most
# cap-gap = 990 events back (runtime/v1alpha1/v1alpha1_events.go Watch, "Maximum available
# event history is (cap-gap)"), so that is the Events stream's history
NODE_EVENTS_KEPT = 990
# Node seconds of slack when comparing node times: event ids carry whole seconds only.
XID_SLACK = 2.0


def xid_time(xid: str) -> float | None:
    """The Unix second an ``rs/xid`` was made in (its first 4 bytes); None if not an xid."""
    if len(xid) != 20:
        return None
    try:
        raw = base64.b32hexdecode(xid.upper() + "====")
    except (binascii.Error, ValueError):
        return None
    return float(int.from_bytes(raw[:4], "big"))


def unix_seconds(moment: dt.datetime | None) -> float | None:
    """A timestamp as Unix seconds (None stays None)."""
    return moment.timestamp() if moment is not None else None


def clock_text(seconds: float | None) -> str:
    """A node time as a failure shows it (``HH:MM:SSZ``; ``?`` when unknown)."""
    if seconds is None:
        return "?"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%H:%M:%SZ")


@dataclass(frozen=True)
class TimedServiceEvent:
    """One service state change and the node's time of it (None when unknown)."""

    at: float | None
    service: str
    action: str  # RUNNING, WAITING, ... (ServiceStateEvent actions)
    message: str


def timed_service_events(
    events: Iterable[models.Event],
) -> tuple[list[TimedServiceEvent], float | None]:
    """The service state events of an Events stream with their node times, and the node
    time the machine reached the running stage after booting in these events (None when
    they do not show a boot ending: it ended before them, or it has not yet)."""
    found: list[TimedServiceEvent] = []
    running_at: float | None = None
    stage: str | None = None  # the last stage reported in these events
    for event in events:
        payload = event.payload
        if isinstance(payload, models.ServiceStateEvent):
            found.append(
                TimedServiceEvent(
                    xid_time(event.id), payload.service, payload.action, payload.message
                )
            )
        elif isinstance(payload, models.MachineStatusEvent):
            # a MachineStatusEvent comes with every change of readiness too: only the
            # change from another stage (booting) to running is the end of a boot
            if payload.stage == "RUNNING" and stage not in (None, "RUNNING"):
                running_at = running_at or xid_time(event.id)
            stage = payload.stage
    return found, running_at


@dataclass(frozen=True)
class ClockStep:
    """Where an Events stream's times go back: the node's clock was set back (its first
    time sync, internal/app/machined/pkg/controllers/time/sync.go, steps a clock that ran
    ahead). ``index`` is the first event after the step."""

    index: int
    before: float  # the latest event time before the step
    after: float  # the event time right after it

    def describe(self) -> str:
        return (
            f"the node's clock stepped back from {clock_text(self.before)} to "
            f"{clock_text(self.after)}"
        )


def clock_step(records: Sequence[models.Event]) -> ClockStep | None:
    """The first place the stream's event times go back by more than :data:`XID_SLACK`
    (None: they never do). Each event id is made when the event is published (an
    ``rs/xid``, internal/app/machined/pkg/runtime/events.go), in publishing order, so on a
    clock that only moves forward the times never go back."""
    latest: float | None = None
    for index, event in enumerate(records):
        at = xid_time(event.id)
        if at is None:
            continue
        if latest is not None and at < latest - XID_SLACK:
            return ClockStep(index, latest, at)
        latest = at if latest is None else max(latest, at)
    return None


@dataclass(frozen=True)
class BootPlaces:
    """What an Events stream's order says of the boot where its times cannot.

    ``running_at``: the boot's end (as :func:`timed_service_events`) when its time can be
    compared with others, None when the clock stepped back after it. ``boot``: the
    service events the stream places before the boot's end whose time is later than it
    (stamped before a step back): ``(service, time, message)``, as often as seen."""

    running_at: float | None
    boot: Counter[tuple[str, float | None, str]]


def boot_places(records: Sequence[models.Event]) -> BootPlaces:
    """The boot's end and the boot's service events by their place in the stream."""
    events = list(records)
    _, running_at = timed_service_events(events)
    end = _boot_end_index(events)
    step = clock_step(events)
    if end is None or running_at is None:
        return BootPlaces(running_at, Counter())
    reliable = step is None or step.index <= end
    before, _ = timed_service_events(events[:end])
    boot = Counter(
        (e.service, e.at, e.message)
        for e in before
        if not reliable or (e.at is not None and e.at > running_at + XID_SLACK)
    )
    return BootPlaces(running_at if reliable else None, boot)


# A node whose clock ran ahead (a real-time clock kept in local time, or simply wrong) until
# its first time sync steps it back (controllers/time/sync.go) stamps what it recorded
# before later than what came after. Only etcd, kubelet, trustd and extension services wait
# for the sync (system/services/etcd.go, kubelet.go, trustd.go, extension.go): the boot's
# first part is stamped on the unsynced clock. (The text begins as episodes.BOOT does.)
STEPPED_BOOT = (
    "before the machine first reached the running stage (the boot), placed there by the "
    "Events stream's order (the node's clock stepped back at its time sync: this time is "
    "later than the boot's end)"
)
STAMPED_AHEAD = (
    "stamped later than the node's clock can be now: recorded before the node's clock "
    "stepped back at its time sync, in the boot"
)


class Excusable(Protocol):
    """What :func:`excuse_clock_steps` reads and sets of an episode."""

    service: str
    at: float | None
    message: str
    excuse: str


def excuse_clock_steps(
    episodes: Iterable[Excusable], places: BootPlaces, *, upper: float | None, booted: bool
) -> None:
    """On a machine that booted, excuse the (counted) episodes the stream places in the boot
    where their time cannot say so, and those stamped later than the node's clock can be
    now (``upper``: the latest it can be; None: unknown)."""
    if not booted:
        return
    boot = Counter(places.boot)
    for episode in episodes:
        key = (episode.service, episode.at, episode.message)
        if boot[key] > 0:
            boot[key] -= 1
            episode.excuse = STEPPED_BOOT
        elif upper is not None and episode.at is not None and episode.at > upper + XID_SLACK:
            episode.excuse = STAMPED_AHEAD


def _boot_end_index(events: Sequence[models.Event]) -> int | None:
    """The place of the event that ends the boot (see :func:`timed_service_events`)."""
    stage: str | None = None
    for index, event in enumerate(events):
        payload = event.payload
        if isinstance(payload, models.MachineStatusEvent):
            if payload.stage == "RUNNING" and stage not in (None, "RUNNING"):
                return index
            stage = payload.stage
    return None


def service_history(service: models.ServiceInfo) -> list[TimedServiceEvent]:
    """A service's own history (ServiceList) as timed events."""
    return [
        TimedServiceEvent(unix_seconds(e.ts), service.id, e.state.upper(), e.msg)
        for e in service.events
    ]


def merge_histories(
    stream: Sequence[TimedServiceEvent],
    services: Iterable[models.ServiceInfo],
    since: float | None = None,
) -> list[TimedServiceEvent]:
    """The Events stream's service events, with what only ServiceList still shows added in
    front: a service's ServiceList events older than its first event in the stream (all of
    them when the stream has none), from ``since`` on (node time; None: all of them)."""
    merged = list(stream)
    first: dict[str, float] = {}
    for event in stream:
        if event.at is not None:
            first[event.service] = min(first.get(event.service, event.at), event.at)
    for service in services:
        # an xid carries whole seconds: a ServiceList event within a second of the stream's
        # first event of that service may be the same one
        until = first.get(service.id)
        for event in service_history(service):
            if event.at is None or (since is not None and event.at < since - XID_SLACK):
                continue
            if until is None or event.at < until - 1.0:
                merged.append(event)
    return sorted(merged, key=lambda e: e.at if e.at is not None else float("-inf"))


def _boot_start(event: models.Event) -> bool:
    payload = event.payload
    return (
        isinstance(payload, models.SequenceEvent)
        and payload.sequence == "initialize"
        and payload.action == "START"
    )


def history_gaps(
    records: Sequence[models.Event],
    services: Iterable[models.ServiceInfo],
    window_start: float | None,
) -> tuple[list[str], bool]:
    """Where the node's history does not reach back to ``window_start`` (node time), and
    whether the Events stream's does: ``(notes, events_cover)``. The Events history covers
    the window when its oldest event is older than the start, or is the boot's first event
    (nothing older can be missed); an empty stream covers nothing. A ServiceList history of
    64 events that starts after the window start has dropped events of the window."""
    if window_start is None:
        return [], True
    notes: list[str] = []
    events_cover = True
    timed: list[tuple[float, models.Event]] = []
    for event in records:
        at = xid_time(event.id)
        if at is not None:
            timed.append((at, event))
    if not timed:
        events_cover = False  # nothing shows what happened before, nor when the boot ended
        notes.append("the Events stream brought no event of the window")
    else:
        # the boot's first event covers all, wherever a stepped clock put its time
        oldest_at = min(at for at, _ in timed)
        if oldest_at > window_start + XID_SLACK and not _boot_start(timed[0][1]):
            events_cover = False
            notes.append(
                f"the Events history starts at {clock_text(oldest_at)}, after the window start "
                f"{clock_text(window_start)} (the node keeps its last {NODE_EVENTS_KEPT} events)"
            )
    for service in services:
        kept = [e.ts.timestamp() for e in service.events if e.ts is not None]
        if len(service.events) >= SERVICE_EVENTS_KEPT and kept and min(kept) > window_start:
            notes.append(
                f"{service.id}: its ServiceList history ({SERVICE_EVENTS_KEPT} events, all "
                f"Talos keeps) starts at {clock_text(min(kept))}, after the window start"
            )
    return notes, events_cover


def events_before(records: Sequence[models.Event], start: float) -> list[models.Event]:
    """The events of a stream opened with ``tail_seconds`` that are older than the window
    it asked for (``start``, node time): a node that honours the option sends none."""
    return [e for e in records if (at := xid_time(e.id)) is not None and at < start - XID_SLACK]


def stream_misses(
    records: Sequence[models.Event],
    services: Iterable[models.ServiceInfo],
    start: float,
    end: float,
) -> list[TimedServiceEvent]:
    """ServiceList events from ``start`` to ``end`` (node time) that an Events stream, opened
    with ``tail_seconds`` to reach back to ``start`` and kept open until ``end``, does not
    hold. Both record the same state changes (service_runner.go UpdateState pushes to the
    service's history and publishes the event). When the stream brought as many events as
    the node keeps (:data:`NODE_EVENTS_KEPT`, 990), those older than its oldest may have
    left the buffer: they do not count."""
    stream, _ = timed_service_events(records)
    known = [at for at in (xid_time(e.id) for e in records) if at is not None]
    oldest = min(known) if known and len(records) >= NODE_EVENTS_KEPT else None
    seen: dict[tuple[str, str, str], list[float]] = {}
    for event in stream:
        if event.at is not None:
            seen.setdefault((event.service, event.action, event.message), []).append(event.at)
    missing = []
    for service in services:
        for event in service_history(service):
            at = event.at
            if at is None or not start + XID_SLACK <= at <= end - XID_SLACK:
                continue
            if oldest is not None and at < oldest + 1.0:
                continue
            times = seen.get((event.service, event.action, event.message), [])
            # an xid holds the whole second the event was published in
            if not any(-XID_SLACK <= at - other <= XID_SLACK for other in times):
                missing.append(event)
    return missing
