"""A per-node check that changes its node, run on every target node at once.

Some checks that change a node then mostly wait: a try-mode change waits for the node's
revert timer, an apply during the try window waits for a revert that must not come. Run one
node after another, a fleet pays that window once per node. :class:`NodeRuns` starts the
check on every node still to be checked when the first of its tests runs, one thread per
node, and hands each per-node test its node's outcome (its result, or the
ConformanceFailure or error it raised).

Safety is what it is for one test at a time, per node:

* each node's change goes through a guard of its own, registered with the run
  (``talos_guarded``): it locks and journals the node before the change and restores the
  exact original config when that node's check ends, from its thread;
* when the run stops early (Ctrl-C, SIGTERM, ``-x``, a failing fixture), :meth:`close` asks
  every check to stop (each wait asks at least once a second; :class:`WaitCancelled`), waits
  for the threads to restore their nodes, and leaves whatever is left to the run's fallback,
  which restores every registered guard;
* a node whose test will not run here (another pytest-xdist worker's, deselected, held
  back, unreachable) is not in the set and is never touched.

A test whose node is not in the set (under pytest-xdist, where a worker does not know which
nodes it gets) runs the check itself, on its own guarded node, as it would without this.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

from pytest_talos.errors import WaitCancelled
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode
from pytest_talos.wait import Cancelled

__all__ = ["GuardFactory", "NodeCheck", "NodeRuns"]

T = TypeVar("T")

# The check: the node (its changes go through the guard given) and whether to stop.
NodeCheck = Callable[[TalosNode, Cancelled], T]
GuardFactory = Callable[[str], contextlib.AbstractContextManager[ConfigGuard]]


def _never() -> bool:
    return False


class NodeRuns(Generic[T]):
    """Runs ``check`` on every node of ``nodes`` at once (on the first :meth:`outcome`)."""

    def __init__(
        self,
        nodes: Sequence[TalosNode],
        check: NodeCheck[T],
        guarded: GuardFactory,
        *,
        label: str,
        announce: Callable[[str], None] = lambda _text: None,
    ) -> None:
        self._nodes = {node.address: node for node in nodes}
        self._check = check
        self._guarded = guarded
        self._label = label
        self._announce = announce
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._futures: dict[str, Future[T]] = {}
        self._threads: list[threading.Thread] = []
        self._served: set[str] = set()

    @property
    def nodes(self) -> list[str]:
        return [node.name for node in self._nodes.values()]

    @property
    def started(self) -> bool:
        return bool(self._futures)

    def outcome(self, node: TalosNode) -> T:
        """This node's outcome: its result, or what its check raised (re-raised here).

        The first call starts every node's check. A node not in the set, or asked for a
        second time, runs the check here, on ``node`` (the test's own guarded node)."""
        if node.address not in self._nodes or node.address in self._served:
            return self._check(node, _never)
        self._start()
        self._served.add(node.address)
        future = self._futures.get(node.address)
        if future is None:  # closed before the first test asked
            raise WaitCancelled(
                f"{self._label} was not started: the run is stopping", node=node.name
            )
        return future.result()

    def _start(self) -> None:
        with self._lock:
            if self._futures or self._stop.is_set():
                return
            count = len(self._nodes)
            self._announce(
                f"conformance: {self._label} on {count} node{'' if count == 1 else 's'} at once"
            )
            for address, node in self._nodes.items():
                future: Future[T] = Future()
                future.set_running_or_notify_cancel()
                self._futures[address] = future
                thread = threading.Thread(
                    target=self._run,
                    args=(node, future),
                    name=f"talos-check-{node.name}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()

    def _run(self, node: TalosNode, future: Future[T]) -> None:
        try:
            with self._guarded(f"{self._label}[{node.name}]") as guard:
                result = self._check(node.with_guard(guard), self._stop.is_set)
        except BaseException as exc:  # handed to the node's test (a restore failure too)
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
