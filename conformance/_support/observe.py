"""Crash-loop detection from the Events API.

One Events stream per node, opened with ``tail_seconds`` (the node keeps the history and
filters it by its own clock) and kept open for the observation window: every
``ServiceStateEvent`` in the recent history and during the window is kept. A service that
*left* the Running state (Failed, Finished, Stopping...) after having run, or that reported
Failed at all, restarted or crashed within the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pytest_talos import models
from pytest_talos.errors import DeadlineExceeded, TalosError
from pytest_talos.node import TalosNode

__all__ = ["Observation", "ServiceTrouble", "observe_nodes"]

_RUNNING = "RUNNING"
_FAILED = "FAILED"


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
    observation = Observation(node.name)
    try:
        stream = node.events(tail_seconds=max(1, int(history)), timeout=duration)
    except TalosError as exc:
        observation.error = str(exc)
        return observation
    try:
        for event in stream:
            observation.records.append(event)
            if isinstance(event.payload, models.ServiceStateEvent):
                observation.events.append(event.payload)
    except DeadlineExceeded:
        pass  # the window is over: that is how an event stream ends
    except TalosError as exc:
        observation.error = str(exc)
    finally:
        stream.close()
    return observation


def observe_nodes(
    nodes: Sequence[TalosNode], *, history: float, duration: float
) -> dict[str, Observation]:
    """Watch every node at once for ``duration`` real seconds; ``history`` node seconds back."""
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
        results = pool.map(lambda n: _observe(n, history, duration), nodes)
        return {obs.node: obs for obs in results}
