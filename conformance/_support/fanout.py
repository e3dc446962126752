"""Per-node reads fetched for every node at once, instead of one node after another.

A per-node check runs once per node, in turn. When what it reads takes a fixed time per
node (a stream that has no end of its backlog and is read until its deadline), a run over
many nodes pays that time once per node. :class:`FanOut` reads every node still to be
checked at once, on a bounded pool of threads (each read carries its own deadline), and
hands each per-node test its node's result, as long as that result is fresh enough:

* a result is used only within ``max_age`` real seconds of the read's end; later, the
  nodes not yet served are read again at once (the state may have changed): as many as
  the tests used in time from the round before, and one more, starting with the node
  asked for. The tests come at their own pace; reading more nodes than they take within
  ``max_age`` only makes reads that go stale unused (30 nodes' recent events at 20 ms:
  113 reads in 7 rounds where 30 were used);
* a result is used only once; a node asked for a second time is read again;
* ``usable`` may refuse a result (say, the node was not settled when it was read); the
  test then reads its node itself, as it would without the fan-out.

The reads go through the synchronous client, whose calls run on its one background event
loop: the threads only wait, the calls share that loop and each node's channel.

A read-only per-node check runs whole this way (:func:`run_checked`): its body, on a node
that refuses changes, with the evidence it gathers and what it raised (a
ConformanceFailure, a skip, an API error) handed to its node's test, which re-raises it.
The body is the same, read in the same order on the same node; only the moment differs,
bounded by ``max_age``, and a read made before a change of the run's is not used.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial, wraps
from typing import Any, Generic, TypeVar

from pytest_talos.client import ChangeGate
from pytest_talos.node import ReadOnlyGuard, TalosNode

__all__ = [
    "MAX_READERS",
    "READ_MAX_AGE",
    "CheckedRead",
    "FanOut",
    "Fetched",
    "Gated",
    "changes_made",
    "checked_fanout",
    "gated_fanout",
    "run_checked",
]

T = TypeVar("T")

MAX_READERS = 32  # threads reading at once: each mostly waits for its node's deadline
# real seconds a read-only check's run stays fresh for its node's test: a fleet's tests of
# one check follow each other at once, judging what was read
READ_MAX_AGE = 20.0
_READ_ONLY = ReadOnlyGuard(
    "a read-only check run on every node at once refuses changes (it only reads its node)"
)


@dataclass(frozen=True)
class Fetched(Generic[T]):
    """One node's read: the value, and the real (monotonic) times it began and ended."""

    value: T
    began: float
    ended: float


class FanOut(Generic[T]):
    """Read ``read(node)`` for many nodes at once; :meth:`get` serves one node's result."""

    def __init__(
        self,
        nodes: Sequence[TalosNode],
        read: Callable[[TalosNode], T],
        *,
        max_age: float,
        usable: Callable[[T], bool] = lambda _value: True,
        readers: int = MAX_READERS,
    ) -> None:
        self._nodes = {node.address: node for node in nodes}
        self._read = read
        self._max_age = max_age
        self._usable = usable
        self._readers = max(1, readers)
        self._lock = threading.Lock()
        self._pending: dict[str, Future[Fetched[T]]] = {}
        self._served: set[str] = set()
        self._used_in_time = 0  # results of the latest round its tests used while fresh
        self.round_sizes: list[int] = []  # nodes read by each fan-out (benchmarks, tests)

    @property
    def rounds(self) -> int:
        """Fan-outs made so far."""
        return len(self.round_sizes)

    def get(self, node: TalosNode) -> T:
        """This node's result: from the last fan-out when still fresh and usable, else a
        new fan-out over the nodes not yet served (this one included), or, for a node
        not in the set or served already, a read of its own."""
        if node.address not in self._nodes or node.address in self._served:
            return self._read(node)
        future = self._take(node)
        self._served.add(node.address)
        fetched = future.result()  # re-raises the node's error
        if time.monotonic() - fetched.ended > self._max_age or not self._usable(fetched.value):
            return self._read(node)
        with self._lock:
            self._used_in_time += 1
        return fetched.value

    def _take(self, node: TalosNode) -> Future[Fetched[T]]:
        with self._lock:
            future = self._pending.pop(node.address, None)
            if future is None or self._stale(future):
                self._fan_out(node.address)
                future = self._pending.pop(node.address)
            return future

    def _stale(self, future: Future[Fetched[T]]) -> bool:
        if not future.done() or future.exception() is not None:
            return False
        return time.monotonic() - future.result().ended > self._max_age

    def _fan_out(self, first: str) -> None:
        """Read the nodes not yet served at once, from ``first`` on: all of them the first
        time, after that as many as the round before had used in time, and one more
        (replacing older reads of them)."""
        order = list(self._nodes)
        start = order.index(first)
        waiting = [a for a in order[start:] + order[:start] if a not in self._served]
        if self.rounds:
            waiting = waiting[: self._used_in_time + 1]
        self.round_sizes.append(len(waiting))
        self._used_in_time = 0
        pool = ThreadPoolExecutor(
            min(self._readers, len(waiting)), thread_name_prefix="talos-fanout"
        )
        try:
            self._pending.update({a: pool.submit(self._timed, self._nodes[a]) for a in waiting})
        finally:
            pool.shutdown(wait=False)  # the threads end with their reads

    def _timed(self, node: TalosNode) -> Fetched[T]:
        began = time.monotonic()
        value = self._read(node)
        return Fetched(value, began, time.monotonic())


def changes_made(gate: ChangeGate | None) -> int:
    """Changes let through the gate (and announced to it) so far; 0 without a gate: a read
    begun at a lower count may have seen the node before a change."""
    return 0 if gate is None else gate.changes


@dataclass(frozen=True)
class Gated(Generic[T]):
    """One node's read, and how many changes the run had made when it began."""

    value: T
    changes: int


def gated_fanout(
    nodes: Sequence[TalosNode],
    read: Callable[[TalosNode], T],
    gate: ChangeGate | None,
    *,
    max_age: float = READ_MAX_AGE,
) -> FanOut[Gated[T]]:
    """``read`` of every one of ``nodes`` at once, for a test that judges what was read
    itself; a node's read is served within ``max_age`` and only if no change went through
    ``gate`` since it began."""

    @wraps(read)  # named as the read it stamps (in tracebacks, and for the tests)
    def stamped(node: TalosNode) -> Gated[T]:
        began = changes_made(gate)
        return Gated(read(node), began)

    return FanOut(
        nodes, stamped, max_age=max_age, usable=lambda found: found.changes == changes_made(gate)
    )


# A read-only check's body: its node, the evidence it fills in and its check id; it returns
# nothing and raises what its test would raise.
ReadCheck = Callable[[TalosNode, dict[str, Any], str], None]


@dataclass(frozen=True)
class CheckedRead:
    """A read-only check's run on one node: the evidence it gathered, what it raised (or
    None), and how many changes the run had made when it began."""

    evidence: dict[str, Any]
    raised: BaseException | None
    changes: int

    def deliver(self, evidence: dict[str, Any]) -> None:
        """Hand the run to its node's test: the evidence, then what the check raised."""
        evidence.update(self.evidence)
        if self.raised is not None:
            raise self.raised


def run_checked(
    check: ReadCheck, check_id: str, gate: ChangeGate | None, node: TalosNode
) -> CheckedRead:
    """``check`` on ``node`` (guarded read-only), its outcome kept rather than raised."""
    began = changes_made(gate)
    evidence: dict[str, Any] = {}
    try:
        check(node.with_guard(_READ_ONLY), evidence, check_id)
    except BaseException as exc:  # handed to the node's test (a failure, a skip, an error)
        return CheckedRead(evidence, exc, began)
    return CheckedRead(evidence, None, began)


def checked_fanout(
    nodes: Sequence[TalosNode],
    check: ReadCheck,
    check_id: str,
    gate: ChangeGate | None,
    *,
    max_age: float = READ_MAX_AGE,
) -> FanOut[CheckedRead]:
    """``check`` run on every one of ``nodes`` at once; a node's run is served to its test
    within ``max_age`` and only if no change went through ``gate`` since it began."""
    return FanOut(
        nodes,
        partial(run_checked, check, check_id, gate),
        max_age=max_age,
        usable=lambda read: read.changes == changes_made(gate),
    )
