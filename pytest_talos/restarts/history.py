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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_talos import models

__all__ = [
    "NODE_EVENTS_KEPT",
    "SERVICE_EVENTS_KEPT",
    "XID_SLACK",
    "TimedServiceEvent",
    "clock_text",
    "events_before",
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
        oldest_at, oldest = min(timed, key=lambda item: item[0])
        if oldest_at > window_start + XID_SLACK and not _boot_start(oldest):
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
