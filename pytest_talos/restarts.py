"""Service restarts and crash loops, told apart from the ones this kit caused itself.

A Talos node records every service state change as a ``ServiceStateEvent`` (Events API;
each event id is an ``rs/xid`` that carries the node's clock, internal/app/machined/pkg/
runtime/events.go) and in each service's history (ServiceList, with timestamps). From those
:func:`restart_episodes` finds each time a service stopped running after it had run:

* a **crash**: the restart runner records ``Waiting`` "Error running <runner>, going to
  restart forever: ..." and runs it again 5 s later (internal/app/machined/pkg/system/
  runner/restart/restart.go) — a crash-looping service is never ``Failed``;
* a **stop**: ``Stopping``/``Finished`` (a controller or the API stopped it, e.g. kubelet
  restarted by controllers/k8s/kubelet_service.go when its spec changes);
* a **failure**: ``Failed`` (a runner without restarts, or an error before the runner);
* an **unhealthy** spell: the service stays ``Running`` but its health check fails; the
  service runner records a ``Running`` event "Health check failed: ..." on each change of
  health (internal/app/machined/pkg/system/service_runner.go healthUpdate), so a service
  whose health flaps never leaves ``Running``.

The history is finite: ServiceList keeps a service's last 64 events (system/events/events.go
MaxEventsToKeep) and the Events stream the node's last 1000 (runtime/v1alpha1/
v1alpha1_controller.go NewEvents). :func:`merge_histories` joins both (the Events stream
first, ServiceList for what it no longer holds) and :func:`history_gaps` says when neither
reaches back to the start of the window asked for.

Some of those are not the node's fault, and :func:`judge` says which and why:

* before the machine first reached the ``running`` stage (the boot: services wait for each
  other, kubelet is restarted as its spec settles);
* while a machine config change **this kit** made was in effect, and for
  :data:`KIT_SETTLE` seconds after it was undone. The config guard records each change it
  lets through (:func:`record_kit_change`) with the node's own time of it: the
  ``updated`` timestamp of the MachineConfig resource right after the apply.

The kit's changes are kept in memory (:data:`KIT_CHANGES`) and, where the guard journals,
appended to ``changes.jsonl`` in its state directory, so that the next run (or another
pytest-xdist worker) knows them too. That file holds no config content.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import json
import os
import threading
import uuid
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from pytest_talos import models

__all__ = [
    "BOOT",
    "KIT_CHANGES",
    "KIT_SETTLE",
    "NODE_EVENTS_KEPT",
    "SERVICE_EVENTS_KEPT",
    "ChangeLog",
    "Episode",
    "KitChange",
    "TimedServiceEvent",
    "Verdict",
    "events_before",
    "history_gaps",
    "is_health_failure",
    "is_restart_message",
    "judge",
    "merge_histories",
    "note_guarded_change",
    "record_kit_change",
    "restart_episodes",
    "service_history",
    "stream_misses",
    "timed_service_events",
    "xid_time",
]

# Node seconds after the kit undid its change (or a try-mode change reverted itself) during
# which a restart is still put down to it: the controllers react within a second or two, and
# a crash-looping kubelet is stopped and started again at once (kubelet_service.go).
KIT_SETTLE = 30.0
# Node seconds of slack before a kit change: event ids carry whole seconds only.
_SLACK = 2.0
CHANGES_FILE = "changes.jsonl"
_KEEP_FILE_ENTRIES = 86400.0  # node seconds: older kit changes are dropped from the file
_MAX_FILE_BYTES = 1 << 20
_MACHINE_CONFIG = ("MachineConfigs.config.talos.dev", "v1alpha1", "config")
BOOT = "before the machine first reached the running stage (the boot)"

EpisodeKind = Literal["crash", "stop", "failure", "unhealthy"]
# system/events/events.go MaxEventsToKeep: ServiceList holds a service's last 64 events
SERVICE_EVENTS_KEPT = 64
# runtime/v1alpha1/v1alpha1_controller.go NewEvents(1000, 10): the Events stream's history
NODE_EVENTS_KEPT = 1000
# service_runner.go healthUpdate: the Running event recorded when a health check starts failing
_HEALTH_FAILED = "Health check failed"

# restart.go: what the restart runner says when it will run the service again
_RESTART_MARKS = (
    "going to restart forever",
    "going to restart until it succeeds",
    "exited without error, going to restart it",
)


def is_restart_message(message: str) -> bool:
    """Whether a ``Waiting`` event's text is the restart runner's (a crash, not a start)."""
    return any(mark in message for mark in _RESTART_MARKS)


def is_health_failure(message: str) -> bool:
    """Whether a ``Running`` event's text is a health check turning failed."""
    return message.startswith(_HEALTH_FAILED)


# --------------------------------------------------------------------------- node time


def xid_time(xid: str) -> float | None:
    """The Unix second an ``rs/xid`` was made in (its first 4 bytes); None if not an xid."""
    if len(xid) != 20:
        return None
    try:
        raw = base64.b32hexdecode(xid.upper() + "====")
    except (binascii.Error, ValueError):
        return None
    return float(int.from_bytes(raw[:4], "big"))


def _seconds(moment: dt.datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _iso(seconds: float | None) -> str:
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
        TimedServiceEvent(_seconds(e.ts), service.id, e.state.upper(), e.msg)
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
            if event.at is None or (since is not None and event.at < since - _SLACK):
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
        if oldest_at > window_start + _SLACK and not _boot_start(oldest):
            events_cover = False
            notes.append(
                f"the Events history starts at {_iso(oldest_at)}, after the window start "
                f"{_iso(window_start)} (the node keeps its last {NODE_EVENTS_KEPT} events)"
            )
    for service in services:
        kept = [e.ts.timestamp() for e in service.events if e.ts is not None]
        if len(service.events) >= SERVICE_EVENTS_KEPT and kept and min(kept) > window_start:
            notes.append(
                f"{service.id}: its ServiceList history ({SERVICE_EVENTS_KEPT} events, all "
                f"Talos keeps) starts at {_iso(min(kept))}, after the window start"
            )
    return notes, events_cover


def events_before(records: Sequence[models.Event], start: float) -> list[models.Event]:
    """The events of a stream opened with ``tail_seconds`` that are older than the window
    it asked for (``start``, node time): a node that honours the option sends none."""
    return [e for e in records if (at := xid_time(e.id)) is not None and at < start - _SLACK]


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
    the node keeps (1000), those older than its oldest may have left the buffer: they do
    not count."""
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
            if at is None or not start + _SLACK <= at <= end - _SLACK:
                continue
            if oldest is not None and at < oldest + 1.0:
                continue
            times = seen.get((event.service, event.action, event.message), [])
            # an xid holds the whole second the event was published in
            if not any(-_SLACK <= at - other <= _SLACK for other in times):
                missing.append(event)
    return missing


# --------------------------------------------------------------------------- episodes


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
            "failure": "failed",
            "unhealthy": "turned unhealthy while Running",
        }[self.kind]
        text = f"{self.service} {what} at {_iso(self.at)} (node time): {self.message}"
        return f"{text} — {self.excuse}" if self.excuse else text


def restart_episodes(events: Iterable[TimedServiceEvent]) -> list[Episode]:
    """Every crash, stop-after-running, failure and unhealthy spell in ``events`` (in
    order)."""
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
            episodes.append(Episode(name, "stop", event.at, event.message))
            ran[name] = False
    return episodes


# --------------------------------------------------------------------------- kit changes


@dataclass(frozen=True)
class KitChange:
    """One machine config change this kit made (no config content)."""

    node: str  # the address the kit reached the node at
    hostname: str
    at: float  # node time (Unix seconds): MachineConfig `updated` right after the apply
    version: int  # the MachineConfig v1alpha1 version it produced
    mode: str
    session: str  # the guarded change it belongs to (from the first change to the restore)
    try_timeout: float | None = None
    restore: bool = False  # the guard putting the original config back

    @property
    def ends(self) -> float:
        """When the node stops being changed by it (a try-mode change reverts by itself)."""
        if self.mode == "try":
            return self.at + (self.try_timeout if self.try_timeout is not None else 60.0)
        return self.at

    def describe(self) -> str:
        what = "restore of the original config" if self.restore else f"{self.mode} change"
        return f"the kit's {what} (MachineConfig version {self.version}) at {_iso(self.at)}"


class ChangeLog:
    """The kit's config changes: in memory, and appended to a JSON-lines file when given."""

    def __init__(self) -> None:
        self._changes: list[KitChange] = []
        self._lock = threading.Lock()

    def add(self, change: KitChange, state_dir: Path | None = None) -> None:
        with self._lock:
            self._changes.append(change)
        if state_dir is not None:
            with contextlib.suppress(OSError):
                _append(state_dir / CHANGES_FILE, change)

    def clear(self) -> None:
        with self._lock:
            self._changes.clear()

    def for_node(self, node: str, state_dir: Path | None = None) -> list[KitChange]:
        """Every change known for ``node`` (this process's and the state directory's)."""
        with self._lock:
            found = {c for c in self._changes if c.node == node}
        if state_dir is not None:
            found |= {c for c in _read(state_dir / CHANGES_FILE) if c.node == node}
        return sorted(found, key=lambda c: (c.at, c.version))


KIT_CHANGES = ChangeLog()


def _append(path: Path, change: KitChange) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists() and path.stat().st_size > _MAX_FILE_BYTES:
        _prune(path, change.at)
    line = json.dumps(asdict(change), sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> list[KitChange]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        with contextlib.suppress(ValueError, TypeError):
            found.append(KitChange(**json.loads(line)))
    return found


def _prune(path: Path, now: float) -> None:
    kept = [c for c in _read(path) if now - c.at < _KEEP_FILE_ENTRIES]
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text("".join(json.dumps(asdict(c), sort_keys=True) + "\n" for c in kept))
    os.replace(temporary, path)


class _ResourceReader(Protocol):
    def get(self, kind: str, ident: str, namespace: str | None = None) -> models.Resource: ...


def record_kit_change(
    client: _ResourceReader,
    *,
    node: str,
    hostname: str,
    mode: str,
    session: str,
    try_timeout: float | None = None,
    restore: bool = False,
    state_dir: Path | None = None,
    log: ChangeLog = KIT_CHANGES,
) -> KitChange | None:
    """Note a config change the kit just applied, timed by the node's own clock.

    Reads the MachineConfig resource (its ``updated`` time and version). Never raises: a
    change it cannot time is not recorded (its restarts then count as the node's).
    """
    kind, ident, namespace = _MACHINE_CONFIG
    try:
        resource = client.get(kind, ident, namespace)
    except Exception:  # an observer: whatever goes wrong, the change itself stands
        return None
    at = _seconds(resource.metadata.updated)
    if at is None:
        return None
    change = KitChange(node, hostname, at, resource.version, mode, session, try_timeout, restore)
    log.add(change, state_dir)
    return change


_SESSIONS: dict[int, tuple[weakref.ref[object], str]] = {}
_SESSIONS_LOCK = threading.Lock()


def _session_of(snapshot: object) -> str:
    """A token for one guarded change of one node (one guard snapshot), unique per run."""
    with _SESSIONS_LOCK:
        for key in [k for k, (ref, _) in _SESSIONS.items() if ref() is None]:
            del _SESSIONS[key]
        known = _SESSIONS.get(id(snapshot))
        if known is not None and known[0]() is snapshot:
            return known[1]
        token = uuid.uuid4().hex
        _SESSIONS[id(snapshot)] = (weakref.ref(snapshot), token)
        return token


def note_guarded_change(
    client: _ResourceReader,
    snapshot: object,
    *,
    mode: str,
    try_timeout: float | None = None,
    restore: bool = False,
) -> None:
    """What the config guard calls after each apply it made (``snapshot``: its record of
    the node: ``.node``, and ``.claim.state_dir`` when it journals)."""
    node = getattr(snapshot, "node", None)
    claim = getattr(snapshot, "claim", None)
    journaled = claim is not None and getattr(claim, "record", None) is not None
    record_kit_change(
        client,
        node=str(getattr(node, "address", "")),
        hostname=str(getattr(node, "name", "")),
        mode=mode,
        session=_session_of(snapshot),
        try_timeout=try_timeout,
        restore=restore,
        state_dir=Path(claim.state_dir) if journaled and claim is not None else None,
    )


def kit_windows(changes: Sequence[KitChange]) -> list[tuple[float, float, KitChange, KitChange]]:
    """Per guarded change: from its first apply to the end of its last one (+ settle)."""
    sessions: dict[str, list[KitChange]] = {}
    for change in changes:
        sessions.setdefault(change.session, []).append(change)
    windows = []
    for members in sessions.values():
        first = min(members, key=lambda c: c.at)
        last = max(members, key=lambda c: c.ends)
        windows.append((first.at - _SLACK, last.ends + KIT_SETTLE, first, last))
    return windows


# --------------------------------------------------------------------------- the verdict


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
