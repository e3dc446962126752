"""A per-node check that changes its node, run on every target node at once.

Some checks that change a node then mostly wait: a refused patch is watched for a settle
time, a try-mode change waits for the node's revert timer, a label for the Kubernetes Node.
Run one node after another, a fleet pays that window once per node. :class:`NodeRuns` starts
the check on every node still to be checked when the first of its tests runs, one thread per
node, and hands each per-node test its node's outcome: the check's result (or the
ConformanceFailure, skip or error it raised) and the evidence it gathered.

A parametrized check (``cases``: say the two fields of a no-reboot refusal) runs its cases
one after another on each node: never two changes on one node at once.

Safety is what it is for one test at a time, per node:

* each case's change goes through a guard of its own, registered with the run
  (``talos_guarded``): it locks and journals the node before the change and restores the
  exact original config when that case ends, from its thread;
* when the run stops early (Ctrl-C, SIGTERM, ``-x``, a failing fixture), :meth:`close` asks
  every check to stop (each wait asks at least once a second; :class:`WaitCancelled`), waits
  for the threads to restore their nodes, and leaves whatever is left to the run's fallback,
  which restores every registered guard;
* a node whose test will not run here (another pytest-xdist worker's, deselected, held
  back, unreachable) is not in the set and is never touched.

A disruptive check (one that takes a service down) is not run this way: on every node at
once it would take the whole cluster down.

A test whose node is not in the set (under pytest-xdist, where a worker does not know which
nodes it gets) runs the check itself, on its own guarded node, as it would without this.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pytest_talos.errors import WaitCancelled
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode
from pytest_talos.wait import Cancelled

__all__ = ["GuardFactory", "NodeCheck", "NodeRun", "NodeRuns"]

T = TypeVar("T")


def _never() -> bool:
    return False


@dataclass
class NodeRun:
    """What a check gets beside its node: the case it runs (``""`` for an unparametrized
    check), whether to stop (pass ``cancelled`` to every wait), where its evidence goes
    (handed to its test whatever the outcome), and its check id (from the test's marker)."""

    case: str = ""
    cancelled: Cancelled = _never
    evidence: dict[str, Any] = field(default_factory=dict)
    check_id: str = ""


# The check: the node (its changes go through the guard it carries) and its run.
NodeCheck = Callable[[TalosNode, NodeRun], T]
GuardFactory = Callable[[str], contextlib.AbstractContextManager[ConfigGuard]]


class NodeRuns(Generic[T]):
    """Runs ``check`` on every node of ``nodes`` at once (on the first :meth:`outcome`),
    each node's ``cases`` one after another."""

    def __init__(
        self,
        nodes: Sequence[TalosNode],
        check: NodeCheck[T],
        guarded: GuardFactory,
        *,
        label: str,
        check_id: str,
        cases: Sequence[str] = ("",),
        announce: Callable[[str], None] = lambda _text: None,
    ) -> None:
        self._nodes = {node.address: node for node in nodes}
        self._check = check
        self._guarded = guarded
        self._label = label
        self._check_id = check_id
        self._cases = tuple(cases)
        self._announce = announce
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._futures: dict[tuple[str, str], Future[T]] = {}
        self._runs: dict[tuple[str, str], NodeRun] = {}
        self._threads: list[threading.Thread] = []
        self._served: set[tuple[str, str]] = set()

    @property
    def nodes(self) -> list[str]:
        return [node.name for node in self._nodes.values()]

    @property
    def started(self) -> bool:
        return bool(self._futures)

    def outcome(self, node: TalosNode, evidence: dict[str, Any], case: str = "") -> T:
        """This node's (and case's) outcome: its result, or what its check raised (re-raised
        here); its evidence goes into ``evidence`` either way.

        The first call starts every node's check. A node not in the set, or a case asked
        for a second time, runs here, on ``node`` (the test's own guarded node)."""
        key = (node.address, case)
        if node.address not in self._nodes or key in self._served or case not in self._cases:
            return self._check(node, NodeRun(case, _never, evidence, self._check_id))
        self._start()
        self._served.add(key)
        future, run = self._futures.get(key), self._runs.get(key)
        if future is None or run is None:  # closed before the first test asked
            raise WaitCancelled(
                f"{self._label} was not started: the run is stopping", node=node.name
            )
        try:
            return future.result()
        finally:
            evidence.update(run.evidence)

    def _start(self) -> None:
        with self._lock:
            if self._futures or self._stop.is_set():
                return
            count = len(self._nodes)
            self._announce(
                f"conformance: {self._label} on {count} node{'' if count == 1 else 's'} at once"
            )
            for address, node in self._nodes.items():
                for case in self._cases:
                    future: Future[T] = Future()
                    future.set_running_or_notify_cancel()
                    self._futures[(address, case)] = future
                    self._runs[(address, case)] = NodeRun(
                        case, self._stop.is_set, check_id=self._check_id
                    )
                thread = threading.Thread(
                    target=self._run_cases,
                    args=(node,),
                    name=f"talos-check-{node.name}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()

    def _run_cases(self, node: TalosNode) -> None:
        for case in self._cases:
            key = (node.address, case)
            self._run(node, self._runs[key], self._futures[key])

    def _run(self, node: TalosNode, run: NodeRun, future: Future[T]) -> None:
        if self._stop.is_set():
            future.set_exception(
                WaitCancelled(f"{self._label}: the run is stopping", node=node.name)
            )
            return
        label = f"{self._label}[{node.name}{'-' + run.case if run.case else ''}]"
        try:
            with self._guarded(label) as guard:
                result = self._check(node.with_guard(guard), run)
        except BaseException as exc:  # handed to the node's test (a skip, a restore failure)
            future.set_exception(exc)
        else:
            future.set_result(result)

    def running(self) -> list[str]:
        """The nodes whose check still runs."""
        return [t.name.removeprefix("talos-check-") for t in self._threads if t.is_alive()]

    def close(self, timeout: float) -> list[str]:
        """Stop every check still running and wait up to ``timeout`` s for their threads
        (each restores its node on its way out); the names of the nodes still running."""
        self._stop.set()
        with self._lock:
            threads = list(self._threads)
        stopping = self.running()
        if stopping:
            self._announce(
                f"conformance: stopping {self._label} on {', '.join(stopping)}; "
                "restoring their original config"
            )
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = self.running()
        restored = [name for name in stopping if name not in left]
        if restored:
            self._announce(f"conformance: {', '.join(restored)}: original config restored")
        return left
