"""The services checks, run as a user runs them against a real cluster (the emulated one,
through its talosconfig, in a subprocess): restarts the kit's own config changes caused are
not counted against the node — also when an earlier run made them, through the state
directory the runs share — and the evidence says what they were; a restart nothing explains
still fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode
from pytest_talos.restarts import KIT_SETTLE
from pytest_talos.wait import wait_until
from tests.conformance.suite_runner import SUITE, SuiteRun, run_suite, target_args

SERVICES = str(SUITE / "services")
SCALE = 10.0
FLAG = "machine:\n  kubelet:\n    extraArgs:\n      no-such-flag: 'x'\n"
RESTARTS = "services.no-recent-restarts"
HEALTHY = "services.expected-running-healthy"


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 1, time_scale=SCALE) as emulated:
        yield emulated


def _worker(talos: TalosCluster) -> TalosNode:
    return next(node for node in talos.nodes if node.role == "worker")


def _crashes(node: TalosNode) -> int:
    return sum("going to restart forever" in e.msg for e in node.service("kubelet").events)


def _kit_crash_loop(cluster: EmulatedCluster, state_dir: Path) -> str:
    """What the config checks do: a guarded patch makes kubelet crash-loop, the guard puts
    the original config back (and kubelet heals)."""
    with TalosCluster.connect(
        cluster.talosconfig_path, endpoints=[cluster.endpoint], env={}
    ) as talos:
        guard = ConfigGuard(state_dir=state_dir)
        worker = _worker(talos).with_guard(guard)
        worker.apply_patch(FLAG, mode="no-reboot")
        wait_until(
            lambda: _crashes(worker),
            lambda n: n >= 2,
            timeout=20,
            description="two kubelet crashes",
        )
        guard.restore()
        wait_until(
            lambda: worker.service("kubelet"),
            lambda k: k.healthy,
            timeout=20,
            description="kubelet healthy again",
        )
        return worker.name


def _services(cluster: EmulatedCluster, tmp_path: Path, name: str, state_dir: Path) -> SuiteRun:
    return run_suite(
        [
            *target_args(cluster),
            "--talos-state-dir",
            str(state_dir),
            "--talos-restart-window",
            "100000",
            "--talos-observe",
            "5",
        ],
        tmp_path / name,
        paths=[SERVICES],
    )


def _check(run: SuiteRun, check: str, node: str) -> dict[str, Any]:
    found = [c for c in run.checks if c["id"] == check and c["node"] == node]
    assert found, run.describe()
    return found[0]


def test_the_kits_own_restarts_are_not_the_nodes_fault(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    worker = _kit_crash_loop(cluster, state)
    assert (state / "changes.jsonl").exists()  # no config content in it: times and versions
    assert "no-such-flag" not in (state / "changes.jsonl").read_text()

    after = _services(cluster, tmp_path, "after-the-kit", state)
    assert after.broken() == {}, after.describe()
    excused = _check(after, RESTARTS, worker)["evidence"]["restarts not counted"]
    assert any(
        line.startswith("kubelet crashed at ")
        and "the kit's no-reboot change" in line
        and "until the kit's restore of the original config" in line
        for line in excused
    ), excused
    assert any(line.startswith("kubelet stopped at ") for line in excused), excused

    # The same node history, without knowing the kit made those changes: they count.
    unknown = _services(cluster, tmp_path, "kit-unknown", tmp_path / "other-state")
    # (a crash in the last 60 s would fail services.expected-running-healthy too: how long
    # ago the crashes were in node time depends on how fast this machine runs the suite)
    assert unknown.broken().get(RESTARTS) == "failed", unknown.describe()
    assert set(unknown.broken()) <= {RESTARTS, HEALTHY}, unknown.describe()
    failed = _check(unknown, RESTARTS, worker)
    assert "kubelet" in failed["message"], failed


def test_a_restart_the_kit_did_not_cause_still_fails(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    worker = _kit_crash_loop(cluster, state)
    time.sleep((KIT_SETTLE + 2) / SCALE)  # past the settle time of the kit's restore
    address = next(n.address for n in cluster.nodes if n.hostname == worker)
    cluster.node(address).run(
        lambda st: st.services.fail(st.services.services["containerd"], "signal: killed")
    )

    run = _services(cluster, tmp_path, "real-crash", state)
    assert run.broken().get(RESTARTS) == "failed", run.describe()
    assert set(run.broken()) <= {RESTARTS, HEALTHY}, run.describe()
    if HEALTHY in run.broken():  # the suite started within 60 s (node time) of the crash
        crashed = _check(run, HEALTHY, worker)
        ending = "crashed or unhealthy in the last 60s (node time): containerd"
        assert crashed["message"].endswith(ending), crashed
    failed = _check(run, RESTARTS, worker)
    assert "containerd" in failed["message"], failed
    assert "kubelet" not in failed["message"], failed
    assert "containerd: 1 crash(es)" in failed["evidence"]["observed"], failed
    assert any(
        line.startswith("kubelet crashed") for line in failed["evidence"]["restarts not counted"]
    ), failed


def _storm(st: Any, flips: int) -> None:
    """Health changes of containerd at once (what a health check flapping hard records)."""
    service = st.services.services["containerd"]
    for index in range(flips):
        healthy = index % 2 == 1
        st.services._health_result(service, healthy, "" if healthy else "connection error")


def test_a_crash_pushed_out_of_both_event_buffers_is_said(tmp_path: Path) -> None:
    """A crash followed by more events than the node keeps (1000 buffered, 64 per service):
    the crash itself is gone from every history, which a check of crashes alone passes; the
    storm's failed health checks fail the check, and the evidence says the history does not
    reach back to the window's start."""
    with EmulatedCluster(1, 0, time_scale=1.0) as emulated:
        address = emulated.nodes[0].address
        hostname = emulated.nodes[0].hostname
        node = emulated.node(address)
        wait_until(
            lambda: node.run(lambda st: st.stage),
            lambda stage: stage == "running",
            timeout=30,
            description="the boot to end",
        )
        node.run(lambda st: st.services.fail(st.services.services["containerd"], "signal: killed"))
        wait_until(
            lambda: node.run(lambda st: st.services.services["containerd"].running),
            lambda running: running,
            timeout=20,
            description="containerd to run again",
        )
        node.run(lambda st: _storm(st, 1200))
        run = _services(emulated, tmp_path, "overflow", tmp_path / "state")
    failed = _check(run, RESTARTS, hostname)
    assert failed["outcome"] == "failed", run.describe()
    text = str(failed)
    assert "failed health check(s) while Running" in text, failed
    assert "crash" not in failed["message"], failed  # the crash left every history
    assert "after the window start" in text, failed
    assert "its ServiceList history (64 events" in text, failed
