"""Checks that watch nodes over time share one window per run, on every target node at once.

:class:`WatchWindow` opens, for every node together, the streams those checks need and hands
each per-node test its node's result:

* **service restarts** (``services.no-recent-restarts``): one Events stream per node, opened
  with ``tail_seconds`` (the node keeps the history and filters it by its own clock) and kept
  open for the observation time. A service that *left* the Running state (Failed, Finished,
  Stopping...) after having run, or that reported Failed at all, restarted or crashed.
* **machine hold** (``upgrade.nodes-running``): each node's ``MachineStatuses`` resource must
  reach stage running and ready; from that moment (the node has finished booting) a Watch of
  the resource must see it stay so for the hold time. The controller rewrites the resource on
  every change of stage or readiness (internal/app/machined/pkg/controllers/runtime/
  machine_status.go), so a Watch sees even a short dip.

Durations are node time; :class:`Timing` turns them into real seconds for the target's clock.
One thread per node and stream: a fleet of any size is watched in one window.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple, TypeVar

from conformance._support.context import Timing
from pytest_talos import models
from pytest_talos.errors import DeadlineExceeded, TalosError
from pytest_talos.node import TalosNode
from pytest_talos.wait import wait_until

__all__ = [
    "MACHINE_STATUS",
    "MIN_STREAM_REAL",
    "READY_STABLE_FOR",
    "STAGE_SETTLE",
    "MachineHold",
    "MachineState",
    "Observation",
    "ServiceTrouble",
    "WatchWindow",
    "hold_machine",
    "machine_state",
    "observe_nodes",
]

T = TypeVar("T")

_RUNNING = "RUNNING"
_FAILED = "FAILED"

MACHINE_STATUS = ("MachineStatuses.runtime.talos.dev", "machine", "runtime")
STAGE_SETTLE = 30.0  # node seconds a node may still need to finish booting
# Node seconds "running and ready" must then hold without a lapse. Long enough that a
# crash-looping kubelet (observed restarting about every 5 s) and a service that fails
# every 30 s cannot slip through between failures; a node fresh from an upgrade should be
# able to hold still for this long.
READY_STABLE_FOR = 36.0
# Real seconds an Events stream of the window stays open at least, plus a little per node
# watched: every node's stream delivers its whole backlog (hundreds of events) through
# this process at once, and a node clock run faster (time scale 20: a 10 s window is half a
# real second) must not close a stream before its backlog has arrived. Watching longer
# than asked only watches more.
MIN_STREAM_REAL = 2.0
STREAM_REAL_PER_NODE = 0.05


# --------------------------------------------------------------------------- service restarts


@dataclass
class ServiceTrouble:
    service: str
    restarts: int = 0  # times it left Running after running
    failures: int = 0  # Failed events
    timeline: list[str] = field(default_factory=list)  # "ACTION: message"

    @property
    def troubled(self) -> bool:
        return bool(self.restarts or self.failures)


@dataclass
class Observation:
    node: str
    events: list[models.ServiceStateEvent] = field(default_factory=list)
    error: str | None = None  # the stream failed; the check reports it as an error
    # every event seen, with its id (an rs/xid: the node's time of it) and machine status
    records: list[models.Event] = field(default_factory=list)
    began: float = 0.0  # Unix time (real) the watch began and ended
    ended: float = 0.0
    # Unix time (real) the first event arrived: the node had applied tail_seconds by then.
    # With many nodes watched at once the stream may open well after ``began``.
    opened: float = 0.0

    @property
    def open_by(self) -> float:
        """The latest the node can have taken the request (the window's start minus the
        history asked for is no later than this minus it)."""
        return self.opened or self.ended or self.began

    def troubles(self) -> dict[str, ServiceTrouble]:
        """Per service, the restarts and failures seen (only services with trouble)."""
        found: dict[str, ServiceTrouble] = {}
        running: dict[str, bool] = {}
        for event in self.events:
            trouble = found.setdefault(event.service, ServiceTrouble(event.service))
            trouble.timeline.append(f"{event.action}: {event.message}".rstrip(": "))
            if event.action == _FAILED:
                trouble.failures += 1
            if event.action == _RUNNING:
                running[event.service] = True
            elif running.get(event.service):
                trouble.restarts += 1
                running[event.service] = False
        return {name: t for name, t in found.items() if t.troubled}


def _observe(node: TalosNode, history: float, duration: float) -> Observation:
    observation = Observation(node.name, began=time.time())
    try:
        stream = node.events(tail_seconds=max(1, int(history)), timeout=duration)
    except TalosError as exc:
        observation.error = str(exc)
        observation.ended = time.time()
        return observation
    try:
        for event in stream:
            if not observation.records:
                observation.opened = time.time()
            observation.records.append(event)
            if isinstance(event.payload, models.ServiceStateEvent):
                observation.events.append(event.payload)
    except DeadlineExceeded:
        pass  # the window is over: that is how an event stream ends
    except TalosError as exc:
        observation.error = str(exc)
    finally:
        stream.close()
        observation.ended = time.time()
    return observation


# --------------------------------------------------------------------------- machine hold


class MachineState(NamedTuple):
    """What ``MachineStatuses/machine`` says: stage, readiness, unmet conditions."""

    stage: str
    ready: bool
    unmet: str = ""

    @property
    def running_and_ready(self) -> bool:
        return self.stage == "running" and self.ready


def _state_of(status: models.Resource) -> MachineState:
    spec = status.typed_spec
    if isinstance(spec, models.MachineStatusSpec):
        unmet = "; ".join(f"{c.name}: {c.reason}" for c in spec.unmet_conditions)
        return MachineState(spec.stage, spec.ready, unmet)
    data = status.spec or {}
    ready = bool((data.get("status") or {}).get("ready"))
    return MachineState(str(data.get("stage", "?")), ready)


def machine_state(node: TalosNode) -> MachineState:
    return _state_of(node.resource(*MACHINE_STATUS))


@dataclass(frozen=True)
class MachineHold:
    """One node's machine hold: the running-and-ready state reached, and the first lapse."""

    node: str
    reached: MachineState
    lapse: MachineState | None  # the first status that was not running and ready, if any
    hold: float  # node seconds watched after the node finished booting
    began: float  # Unix time (real) the hold watch began and ended
    ended: float


def _first_lapse(node: TalosNode, window: float) -> MachineState | None:
    """The first machine status that is not running and ready within ``window`` real
    seconds, watched (not polled) so a short dip is seen; None when it held throughout."""
    try:
        with node.watch(*MACHINE_STATUS, timeout=window) as events:
            for event in events:
                seen = _state_of(event.resource) if event.resource else MachineState("gone", False)
                if not seen.running_and_ready:
                    return seen
    except DeadlineExceeded:
        return None  # the window ended with the machine running and ready throughout
    return None


def hold_machine(node: TalosNode, timing: Timing, *, settle: float, hold: float) -> MachineHold:
    """Wait (up to ``settle`` node seconds) for running and ready, then watch it hold for
    ``hold`` node seconds. Raises WaitTimeout (with the last state) when it never got there."""
    reached = wait_until(
        lambda: machine_state(node),
        lambda s: s.running_and_ready,
        timeout=timing.real(settle),
        node=node.name,
        description="the machine to be running and ready",
    )
    began = time.time()
    lapse = _first_lapse(node, timing.real(hold))
    return MachineHold(node.name, reached, lapse, hold, began, time.time())


# --------------------------------------------------------------------------- the window


def _spawn(name: str, work: Callable[[], T]) -> Future[T]:
    """Run ``work`` on its own daemon thread (a watch must never keep the process alive)."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to the test that reads the result
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


class WatchWindow:
    """One window per run: every node watched at once, each per-node test reads its node's
    result (and waits only as long as that node's watch still runs).

    ``observe`` (node seconds of the service restart watch, ``history`` back) and ``hold``
    (node seconds of the machine hold, after up to ``settle`` to finish booting) are each
    left out (None) when no selected check needs them.
    """

    def __init__(
        self,
        nodes: Sequence[TalosNode],
        timing: Timing,
        *,
        history: float,
        observe: float | None,
        hold: float | None,
        settle: float = STAGE_SETTLE,
    ) -> None:
        self.nodes = list(nodes)
        self.timing = timing
        self.history, self.observe, self.hold, self.settle = history, observe, hold, settle
        self._restarts: dict[str, Future[Observation]] = {}
        self._holds: dict[str, Future[MachineHold]] = {}
        self._deadline: float | None = None

    @property
    def started(self) -> bool:
        return self._deadline is not None

    @property
    def length(self) -> float:
        """Node seconds the window lasts at most for a node that is already booted."""
        return max(self.observe or 0.0, self.hold or 0.0)

    def start(self) -> bool:
        """Open every stream at once (returns at once); False when there is nothing to watch."""
        if self.started:
            return True
        if not self.nodes or not (self.observe or self.hold):
            return False
        for node in self.nodes:
            if self.observe:
                self._restarts[node.name] = _spawn(
                    f"talos-watch-restarts-{node.name}",
                    partial(_observe, node, self.history, self._observe_real()),
                )
            if self.hold:
                self._holds[node.name] = _spawn(
                    f"talos-watch-machine-{node.name}",
                    partial(hold_machine, node, self.timing, settle=self.settle, hold=self.hold),
                )
        self._deadline = time.monotonic() + max(
            self._observe_real() if self.observe else 0.0,
            self.timing.real(self.settle + self.hold) if self.hold else 0.0,
        )
        return True

    def _observe_real(self) -> float:
        """Real seconds each restart stream stays open: the window, or the floor that lets
        every node's backlog arrive (see MIN_STREAM_REAL)."""
        floor = MIN_STREAM_REAL + STREAM_REAL_PER_NODE * len(self.nodes)
        return max(self.timing.real(self.observe or 0.0), floor)

    def describe(self) -> str:
        """The progress line: what is watched, for how long (node time, and real if other)."""
        parts = []
        if self.hold:
            parts.append(f"machine running and ready {self.hold:g}s once booted")
        if self.observe:
            parts.append(f"service restarts {self.observe:g}s")
        count = len(self.nodes)
        text = (
            f"conformance: watching {count} node{'' if count == 1 else 's'} at once for "
            f"{self.length:g}s ({', '.join(parts)})"
        )
        if self.timing.scale != 1:
            text += (
                f"; the node clock runs {self.timing.scale:g}x ({self.timing.source}), so "
                f"{self.timing.real(self.length):.3g}s real"
            )
        return text

    def still_watched(self, part: str | None = None) -> int:
        """How many nodes' watches still run: ``"restarts"``, ``"machine"`` or either."""
        watches: list[Mapping[str, Future[Any]]] = []
        if part in (None, "restarts"):
            watches.append(self._restarts)
        if part in (None, "machine"):
            watches.append(self._holds)
        running = {name for by_node in watches for name, f in by_node.items() if not f.done()}
        return len(running)

    def _futures(self) -> list[Future[Any]]:
        return [*self._restarts.values(), *self._holds.values()]

    def done(self) -> bool:
        return all(f.done() for f in self._futures())

    def wait(self) -> None:
        """Until every watch has ended (results and errors stay for the tests to read)."""
        for future in self._futures():
            future.exception()

    def observations(self) -> dict[str, Observation]:
        """The service restart watch of every node (waits for it to end)."""
        return {name: future.result() for name, future in self._restarts.items()}

    def machine(self, node: str) -> MachineHold:
        """This node's machine hold (waits for it); re-raises what ended the watch
        (WaitTimeout: never running and ready; TalosError: the node did not answer)."""
        if node not in self._holds:
            raise TalosError("the machine status was not watched on this node", node=node)
        return self._holds[node].result()


def observe_nodes(
    nodes: Sequence[TalosNode], *, history: float, duration: float
) -> dict[str, Observation]:
    """Watch every node at once for ``duration`` real seconds; ``history`` node seconds back."""
    window = WatchWindow(nodes, Timing(), history=history, observe=duration, hold=None)
    window.start()
    return window.observations()
