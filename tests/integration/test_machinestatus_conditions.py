"""The emulated MachineStatus carries the conditions of internal/app/machined/pkg/controllers/
runtime/machine_status.go, with its reason texts: a node whose Kubernetes Node is not Ready is
not ready (nodeReady), a node with a failing health check lists it (services), and a flapping
Node makes the machine flap too. Read through the kit's client over real mTLS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_talos import models
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.emulator.faults.variants import variant_names
from pytest_talos.errors import DeadlineExceeded
from pytest_talos.node import TalosNode
from pytest_talos.wait import wait_until

MACHINE_STATUS = ("MachineStatuses.runtime.talos.dev", "machine", "runtime")
WORKER = "talos-default-worker-1"


def _connect(cluster: EmulatedCluster) -> TalosCluster:
    return TalosCluster.connect(cluster.talosconfig_path, endpoints=[cluster.endpoint], env={})


def _status(node: TalosNode) -> models.MachineStatusSpec:
    spec = node.resource(*MACHINE_STATUS).typed_spec
    assert isinstance(spec, models.MachineStatusSpec)
    return spec


def _unmet(spec: models.MachineStatusSpec) -> list[tuple[str, str]]:
    return [(c.name, c.reason) for c in spec.unmet_conditions]


@pytest.fixture
def not_ready() -> Iterator[TalosCluster]:
    with (
        EmulatedCluster(1, 1, faults=["node-not-ready"], time_scale=20) as cluster,
        _connect(cluster) as talos,
    ):
        yield talos


def test_a_node_whose_kubernetes_node_is_not_ready_is_not_ready(not_ready: TalosCluster) -> None:
    worker = not_ready.node(WORKER)
    spec = wait_until(
        lambda: _status(worker),
        lambda s: s.stage == "running",
        timeout=10,
        description="the worker to finish booting",
    )
    assert (spec.ready, _unmet(spec)) == (False, [("nodeReady", f'node "{WORKER}" is not ready')])
    control_plane = _status(not_ready.controlplane())
    assert (control_plane.stage, control_plane.ready, _unmet(control_plane)) == (
        "running",
        True,
        [],
    )


def test_a_flapping_node_makes_the_machine_flap() -> None:
    with (
        EmulatedCluster(1, 1, faults=["ready-flapping"], time_scale=20) as cluster,
        _connect(cluster) as talos,
    ):
        worker = talos.node(WORKER)
        seen: list[tuple[bool, list[tuple[str, str]]]] = []
        try:
            with worker.watch(*MACHINE_STATUS, timeout=1.5) as events:
                for event in events:
                    spec = event.resource.typed_spec if event.resource else None
                    if isinstance(spec, models.MachineStatusSpec):
                        seen.append((spec.ready, _unmet(spec)))
                    if len({ready for ready, _ in seen}) == 2:
                        break
        except DeadlineExceeded:
            pass
    assert (True, []) in seen
    assert (False, [("nodeReady", f'node "{WORKER}" is not ready')]) in seen


def test_a_failing_health_check_is_named_as_the_controller_names_it() -> None:
    with (
        EmulatedCluster(1, 0, faults=["machined-unhealthy"], time_scale=20) as cluster,
        _connect(cluster) as talos,
    ):
        node = talos.controlplane()
        spec = wait_until(
            lambda: _status(node),
            lambda s: ("services", "machined not healthy") in _unmet(s),
            timeout=20,
            description="machined's failing health check in the machine status",
        )
    assert spec.ready is False


def test_every_healthy_variant_reaches_running_and_ready() -> None:
    for variant in variant_names():
        with (
            EmulatedCluster(1, 1, variants=[variant], time_scale=20) as cluster,
            _connect(cluster) as talos,
        ):
            for node in talos.nodes:
                spec = wait_until(
                    lambda node=node: _status(node),  # type: ignore[misc]
                    lambda s: s.stage == "running" and s.ready,
                    timeout=10,
                    description=f"{node.name} ({variant}) running and ready",
                )
                assert _unmet(spec) == []


@pytest.mark.usefixtures("suite_markers")  # the suite's marks: its own plugin registers them
def test_nodes_running_points_at_time_sync_when_the_clock_is_what_is_waited_for() -> None:
    from conformance.upgrade.test_upgrade import TIME_SYNC_HINT, _with_hint

    unmet = "time: time is not synced; services: kubelet not running"
    message = _with_hint("the machine is not running and ready within 30s", unmet)
    assert message == f"the machine is not running and ready within 30s: {TIME_SYNC_HINT}"
    assert "machine.time.bootTimeout" in TIME_SYNC_HINT
    assert "NTP servers" in TIME_SYNC_HINT
    assert _with_hint("x", "services: kubelet not running") == "x"
