"""The conformance suite's one watch window per run (conformance/_support/observe.py).

Every node is watched at once: each node's stream had begun before any node's ended, so a
fleet costs one window, not one per node. The faults the machine hold exists for still break
it. Ordering only, never a duration threshold: the timings are in benchmarks/suite.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from conformance._support.context import Timing
from conformance._support.observe import (
    READY_STABLE_FOR,
    MachineHold,
    MachineState,
    Observation,
    WatchWindow,
    observe_nodes,
)
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import WaitTimeout

SCALE = 20.0


@pytest.fixture
def targets(request: pytest.FixtureRequest) -> Iterator[TalosCluster]:
    (controlplanes, workers), faults = getattr(request, "param", ((1, 2), ()))
    with (
        EmulatedCluster(controlplanes, workers, faults=faults, time_scale=SCALE) as emulator,
        TalosCluster.connect(
            emulator.talosconfig_path, endpoints=[emulator.endpoint], env={}
        ) as cluster,
    ):
        yield cluster


def _window(cluster: TalosCluster, *, observe: float | None, hold: float | None) -> WatchWindow:
    window = WatchWindow(
        cluster.reachable, Timing(SCALE, "test"), history=600, observe=observe, hold=hold
    )
    assert window.start()
    return window


def _overlapping(spans: Sequence[Observation | MachineHold]) -> bool:
    return max(s.began for s in spans) < min(s.ended for s in spans)


def test_every_node_is_held_and_observed_in_one_shared_window(targets: TalosCluster) -> None:
    window = _window(targets, observe=10, hold=READY_STABLE_FOR)
    holds = [window.machine(node.name) for node in targets.reachable]
    observations = window.observations()
    assert len(holds) == len(observations) == 3
    assert all(h.lapse is None and h.reached.running_and_ready for h in holds)
    assert all(not o.troubles() and o.error is None for o in observations.values())
    assert _overlapping(holds), "a node's hold began after another's had ended"
    assert _overlapping(list(observations.values()))
    assert window.done()
    assert window.still_watched() == 0


def test_the_nodes_still_watched_are_counted_by_part(targets: TalosCluster) -> None:
    window = _window(targets, observe=10, hold=READY_STABLE_FOR)
    # The machine hold (36 node seconds) outlasts the restart watch (10): at the start both run.
    assert window.still_watched("machine") == window.still_watched() == 3
    window.observations()
    assert window.still_watched("restarts") == 0
    window.wait()
    assert window.still_watched("machine") == 0


def test_the_progress_line_names_nodes_node_time_and_the_rate(targets: TalosCluster) -> None:
    window = _window(targets, observe=10, hold=READY_STABLE_FOR)
    assert window.describe() == (
        "conformance: watching 3 nodes at once for 36s (machine running and ready 36s once "
        "booted, service restarts 10s); the node clock runs 20x (test), so 1.8s real"
    )
    window.wait()


def test_a_part_no_check_reads_is_not_watched(targets: TalosCluster) -> None:
    window = _window(targets, observe=10, hold=None)
    assert "machine" not in window.describe()
    with pytest.raises(Exception, match="the machine status was not watched"):
        window.machine(targets.reachable[0].name)
    assert set(window.observations()) == {n.name for n in targets.reachable}
    idle = WatchWindow(targets.reachable, Timing(), history=1, observe=None, hold=None)
    assert not idle.start()


def test_observe_nodes_still_watches_all_at_once(targets: TalosCluster) -> None:
    found = observe_nodes(targets.reachable, history=600, duration=0.5)
    assert _overlapping(list(found.values()))


def _failure(window: WatchWindow, node: str) -> MachineState | None:
    """What broke the node's hold: never running and ready, or the first lapse; None if held."""
    try:
        held = window.machine(node)
    except WaitTimeout as exc:
        seen = exc.last_observation
        return seen if isinstance(seen, MachineState) else MachineState(str(seen), False)
    return held.lapse


@pytest.mark.parametrize(
    ("targets", "broken", "cause"),
    [
        (((1, 1), ("flapping-service",)), {"controlplane", "worker"}, "containerd"),
        (((1, 1), ("kubelet-crashloop",)), {"controlplane", "worker"}, "kubelet"),
        (((1, 1), ("service-down",)), {"controlplane"}, "trustd"),  # trustd runs on CPs only
    ],
    indirect=["targets"],
    ids=["flapping-service", "kubelet-crashloop", "service-down"],
)
def test_a_failing_service_breaks_the_hold(
    targets: TalosCluster, broken: set[str], cause: str
) -> None:
    window = _window(targets, observe=None, hold=READY_STABLE_FOR)
    for node in targets.reachable:
        failure = _failure(window, node.name)
        if node.role not in broken:
            assert failure is None, f"{node.name}: {failure}"
            continue
        assert failure is not None, f"{node.name} held through a failing {cause}"
        assert not failure.running_and_ready
        # A crash-looping kubelet may be caught between runs, before its health turns bad.
        assert cause in failure.unmet or cause == "kubelet", failure
