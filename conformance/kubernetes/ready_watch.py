"""Watching a Kubernetes Node's Ready condition over a window (no pytest: unit-tested alone).

kubelet posts Ready with a ``lastTransitionTime`` that moves only when the status changes
(kubernetes pkg/kubelet/nodestatus/setters.go ReadyCondition): a Ready that is True at every
read but whose transition time moved has flapped between two reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from conformance._support.context import Timing
from pytest_talos.cluster import KubernetesAccess

__all__ = [
    "READY_POLL",
    "READY_SETTLE",
    "ReadyWatches",
    "ready_changes",
    "ready_of",
    "watch_ready",
]

READY_POLL = 0.5  # node seconds between two reads of the Node while Ready is watched
READY_SETTLE = 10.0  # node seconds a node may take to report Ready


def ready_of(kube_node: Any) -> tuple[str, str, str]:
    """Ready's status, lastTransitionTime and reason (``missing`` when there is none)."""
    for condition in getattr(getattr(kube_node, "status", None), "conditions", None) or []:
        if condition.type == "Ready":
            return (
                str(condition.status),
                str(condition.last_transition_time),
                " ".join(filter(None, [condition.reason, condition.message])),
            )
    return "missing", "", ""


def _until_ready(kube: KubernetesAccess, name: str, timing: Timing, settle: float) -> None:
    """Wait up to ``settle`` node seconds for Ready=True (a watch started before the check
    waited for its node to be Ready watches from then on); errors are left to the watch."""
    deadline = time.monotonic() + timing.real(settle)
    while time.monotonic() < deadline:
        try:
            if ready_of(kube.node(name))[0] == "True":
                return
        except Exception:  # the watch's own first read reports what is wrong
            return
        time.sleep(timing.real(READY_POLL))


def watch_ready(
    kube: KubernetesAccess, name: str, timing: Timing, window: float, settle: float = 0.0
) -> list[tuple[float, tuple[str, str, str]]]:
    """The Node's Ready condition read every READY_POLL node seconds for ``window`` node
    seconds: ``[(node seconds since the start, (status, lastTransitionTime, reason))]``.
    With ``settle``, the window starts once the Node is Ready (or ``settle`` node seconds
    have passed)."""
    if settle > 0:
        _until_ready(kube, name, timing, settle)
    start = time.monotonic()
    deadline = start + timing.real(window)
    seen = []
    while True:
        now = time.monotonic()
        seen.append(((now - start) * timing.scale, ready_of(kube.node(name))))
        if now >= deadline:
            return seen
        time.sleep(min(timing.real(READY_POLL), max(deadline - now, 0.0)))


Seen = list[tuple[float, tuple[str, str, str]]]


class ReadyWatches:
    """One Ready watch per node, all started together the first time any node's is asked
    for: the window is spent once for the whole cluster, not once per node in turn."""

    def __init__(
        self, kube: KubernetesAccess, timing: Timing, window: float, settle: float = 0.0
    ) -> None:
        self._kube, self._timing, self.window = kube, timing, window
        self.settle = settle  # node seconds a watch first waits for Ready (watch_ready)
        self._lock = threading.Lock()
        self._watches: dict[str, Future[Seen]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def start(self, names: Iterable[str]) -> None:
        """Start the watches of ``names`` not watched yet (all at once)."""
        with self._lock:
            todo = [name for name in dict.fromkeys(names) if name not in self._watches]
            if not todo:
                return
            self._pool = self._pool or ThreadPoolExecutor(
                max_workers=64, thread_name_prefix="ready-watch"
            )
            for name in todo:
                self._watches[name] = self._pool.submit(
                    watch_ready, self._kube, name, self._timing, self.window, self.settle
                )

    def result(self, name: str) -> Seen:
        """What ``name``'s watch saw (started now, alone, if it was not started before)."""
        self.start([name])
        return self._watches[name].result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def ready_changes(seen: list[tuple[float, tuple[str, str, str]]]) -> list[str]:
    """What moved: a read that is not True, or a lastTransitionTime other than the first."""
    changes = []
    first_transition = seen[0][1][1] if seen else ""
    for at, (status, transition, reason) in seen:
        if status != "True":
            changes.append(f"Ready={status} at +{at:.1f}s" + (f" ({reason})" if reason else ""))
        elif transition != first_transition:
            changes.append(f"Ready turned True again at {transition} (+{at:.1f}s)")
            first_transition = transition
    return changes[:8]
