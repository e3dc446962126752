"""The Ready watch begun before its node is Ready (conformance/_support/early.py starts the
watches with the run): it first waits for Ready, as the check does, then watches; a Node
that never turns Ready is still reported."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from conformance._support.context import Timing
from conformance.kubernetes.ready_watch import ReadyWatches, ready_changes, watch_ready


class _Kube:
    """Answers Node reads from a script of Ready statuses (the last one repeats)."""

    def __init__(self, statuses: list[str]) -> None:
        self._statuses = statuses
        self.reads = 0

    def node(self, name: str) -> Any:
        status = self._statuses[min(self.reads, len(self._statuses) - 1)]
        self.reads += 1
        condition = SimpleNamespace(
            type="Ready", status=status, last_transition_time="t0", reason="", message=""
        )
        return SimpleNamespace(status=SimpleNamespace(conditions=[condition]))


FAST = Timing(1000.0, "test")  # 1 node second = 1 ms


def test_a_watch_with_settle_begins_once_the_node_is_ready() -> None:
    kube = _Kube(["False", "False", "True"])
    seen = watch_ready(kube, "n1", FAST, window=2.0, settle=10.0)  # type: ignore[arg-type]
    assert seen
    assert ready_changes(seen) == []
    assert kube.reads > len(seen)  # the reads before Ready are not part of the window


def test_without_settle_a_node_not_ready_yet_is_a_change() -> None:
    seen = watch_ready(_Kube(["False", "True"]), "n1", FAST, window=2.0)  # type: ignore[arg-type]
    assert ready_changes(seen)[0].startswith("Ready=False")


def test_a_node_that_never_turns_ready_is_still_reported() -> None:
    watches = ReadyWatches(_Kube(["False"]), FAST, window=2.0, settle=5.0)  # type: ignore[arg-type]
    try:
        watches.start(["n1"])
        assert ready_changes(watches.result("n1"))[0].startswith("Ready=False")
    finally:
        watches.close()
