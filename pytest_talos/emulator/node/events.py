"""Runtime events of an emulated node: xid ids, payloads and the bounded event buffer.

Every event has an ``rs/xid`` id made when it is published (20 characters, sortable, its
first 4 bytes the node's Unix second: internal/app/machined/pkg/runtime/events.go), an
optional actor id and a payload whose ``type_url`` is ``talos/runtime/<proto full name>``
(internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Events). The payloads here
are plain dataclasses; the servicer turns them into ``machine.*Event`` messages.
"""

from __future__ import annotations

import base64
import itertools
import os
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "EVENTS_CAP",
    "EVENTS_GAP",
    "AddressPayload",
    "EventBuffer",
    "MachineStatusPayload",
    "Payload",
    "PhasePayload",
    "RuntimeEvent",
    "SequencePayload",
    "ServiceStatePayload",
    "TaskPayload",
    "new_xid",
]

EVENTS_CAP, EVENTS_GAP = 1000, 10  # runtime/v1alpha1/v1alpha1_controller.go NewEvents
_MACHINE = secrets.token_bytes(3)
_PID = (os.getpid() & 0xFFFF).to_bytes(2, "big")
_COUNTER = itertools.count(secrets.randbelow(1 << 23))


def new_xid(unix_seconds: float) -> str:
    """An ``rs/xid``: 4-byte time, 3-byte machine, 2-byte pid, 3-byte counter, base32hex."""
    raw = (
        int(unix_seconds).to_bytes(4, "big")
        + _MACHINE
        + _PID
        + (next(_COUNTER) & 0xFFFFFF).to_bytes(3, "big")
    )
    return base64.b32hexencode(raw).decode("ascii").lower().rstrip("=")


@dataclass(frozen=True)
class SequencePayload:
    sequence: str
    action: str  # NOOP, START, STOP
    error: str = ""


@dataclass(frozen=True)
class PhasePayload:
    phase: str
    action: str  # START, STOP


@dataclass(frozen=True)
class TaskPayload:
    task: str
    action: str  # START, STOP


@dataclass(frozen=True)
class ServiceStatePayload:
    service: str
    action: str  # the service state in upper case, e.g. RUNNING
    message: str
    healthy: bool = False
    unknown: bool = True
    last_message: str = ""


@dataclass(frozen=True)
class MachineStatusPayload:
    stage: str  # BOOTING, RUNNING, REBOOTING, ...
    ready: bool
    unmet: Sequence[tuple[str, str]] = ()


@dataclass(frozen=True)
class AddressPayload:
    hostname: str
    addresses: Sequence[str] = ()


Payload = (
    SequencePayload
    | PhasePayload
    | TaskPayload
    | ServiceStatePayload
    | MachineStatusPayload
    | AddressPayload
)


@dataclass(frozen=True)
class RuntimeEvent:
    id: str
    time: float  # emulated Unix seconds
    payload: Payload
    actor_id: str = ""


@dataclass
class EventBuffer:
    """The node's event ring buffer plus live subscribers (the Events streams).

    runtime/v1alpha1/v1alpha1_controller.go NewEvents(1000, 10): a ring of 1000 events with
    a safety gap of 10 between publisher and consumers; a watch starts at most cap-gap
    events back (runtime/v1alpha1/v1alpha1_events.go Watch: "Maximum available event
    history is (cap-gap)"), so ``capacity``, what is kept here, is 990.
    """

    capacity: int = EVENTS_CAP - EVENTS_GAP
    _events: deque[RuntimeEvent] = field(default_factory=deque)
    _subscribers: list[Callable[[RuntimeEvent], None]] = field(default_factory=list)

    def append(self, event: RuntimeEvent) -> None:
        self._events.append(event)
        while len(self._events) > self.capacity:
            self._events.popleft()
        for subscriber in list(self._subscribers):
            subscriber(event)

    def snapshot(self) -> list[RuntimeEvent]:
        return list(self._events)

    @property
    def subscriber_count(self) -> int:
        """How many Events streams are open on the node."""
        return len(self._subscribers)

    def clear(self) -> None:
        self._events.clear()

    def subscribe(self, subscriber: Callable[[RuntimeEvent], None]) -> Callable[[], None]:
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def backlog(
        self, *, tail_events: int, tail_id: str, tail_seconds: int, now: float
    ) -> list[RuntimeEvent]:
        """The buffered events an Events request asks for: the last N, those after an id,
        or those of the last seconds by the node's clock (v1alpha1_server.go Events).

        An id or a number of seconds is found as runtime/v1alpha1/v1alpha1_events.go Watch
        finds it: a binary search (Go's sort.Search) for the first event whose id is later,
        or whose id's time (whole seconds) is after ``now - tail_seconds``. That holds only
        while ids increase: after the node's clock stepped back, it may start anywhere
        the search lands (the whole buffer, often)."""
        events = self.snapshot()
        if tail_id:
            return events[_search(len(events), lambda i: events[i].id > tail_id) :]
        if tail_seconds > 0:
            since = now - tail_seconds
            return events[_search(len(events), lambda i: int(events[i].time) > since) :]
        if tail_events < 0:
            return events
        return events[-tail_events:] if tail_events > 0 else []


def _search(n: int, after: Callable[[int], bool]) -> int:
    """Go's sort.Search: the smallest index in [0, n) where ``after`` holds, assuming it
    holds for every index past that one (n when it never does)."""
    low, high = 0, n
    while low < high:
        middle = (low + high) // 2
        if after(middle):
            high = middle
        else:
            low = middle + 1
    return low
