"""The Kubernetes Node beyond Ready: pressure conditions, cordon and a flapping Ready, as the
emulated kube-apiserver serves them and as the kubernetes checks read them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance._support.context import Timing
from conformance.kubernetes.ready_watch import ready_changes, ready_of, watch_ready
from pytest_talos.cluster import TalosCluster
from tests.integration.checks_support import TIME_SCALE, connected


@pytest.fixture(scope="module")
def faulty() -> Iterator[TalosCluster]:
    with connected(["node-memory-pressure", "node-cordoned", "ready-flapping"]) as (_, cluster):
        yield cluster


@pytest.fixture(scope="module")
def healthy() -> Iterator[TalosCluster]:
    with connected() as (_, cluster):
        yield cluster


def _conditions(node: object) -> dict[str, str]:
    return {c.type: c.status for c in node.status.conditions}  # type: ignore[attr-defined]


def test_a_healthy_node_is_schedulable_without_pressure(healthy: TalosCluster) -> None:
    for target in healthy.nodes:
        node = healthy.kubernetes.node(target.hostname)
        assert not node.spec.unschedulable
        conditions = _conditions(node)
        assert conditions == {
            "MemoryPressure": "False",
            "DiskPressure": "False",
            "PIDPressure": "False",
            "Ready": "True",
        }
        taints = {t.key for t in node.spec.taints or []}
        assert taints <= {"node-role.kubernetes.io/control-plane"}


def test_memory_pressure_and_cordon_show_on_the_last_node_only(faulty: TalosCluster) -> None:
    first, last = faulty.controlplane(), faulty.worker()
    node = faulty.kubernetes.node(last.hostname)
    assert _conditions(node)["MemoryPressure"] == "True"
    assert node.spec.unschedulable is True
    assert {t.key for t in node.spec.taints} == {
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/unschedulable",
    }
    other = faulty.kubernetes.node(first.hostname)
    assert _conditions(other)["MemoryPressure"] == "False"
    assert not other.spec.unschedulable


def test_a_steady_ready_shows_no_change(healthy: TalosCluster) -> None:
    timing = Timing(TIME_SCALE, "test")
    seen = watch_ready(healthy.kubernetes, healthy.worker().hostname, timing, 10.0)
    assert len(seen) >= 10
    assert ready_changes(seen) == []


def test_a_flapping_ready_is_seen_within_ten_node_seconds(faulty: TalosCluster) -> None:
    timing = Timing(TIME_SCALE, "test")
    seen = watch_ready(faulty.kubernetes, faulty.worker().hostname, timing, 10.0)
    changes = ready_changes(seen)
    assert changes
    assert any(change.startswith("Ready=False") for change in changes)
    assert (
        ready_changes(watch_ready(faulty.kubernetes, faulty.controlplane().hostname, timing, 10.0))
        == []
    )


def test_ready_changes_sees_a_flap_between_two_reads() -> None:
    steady = ("True", "2026-01-01 00:00:00+00:00", "KubeletReady")
    flipped = ("True", "2026-01-01 00:00:07+00:00", "KubeletReady")
    assert ready_changes([(0.0, steady), (1.0, steady)]) == []
    assert ready_changes([(0.0, steady), (1.0, flipped), (2.0, flipped)]) == [
        "Ready turned True again at 2026-01-01 00:00:07+00:00 (+1.0s)"
    ]


def test_ready_of_a_node_without_conditions() -> None:
    assert ready_of(object()) == ("missing", "", "")
