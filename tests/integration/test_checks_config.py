"""The config-changing checks and ConfigGuard against emulated nodes (time sped up 20x)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_talos.checks import (
    ConfigGuard,
    ConfigRestoreError,
    assert_config_unchanged_after_rejection,
    assert_service_healthy_after_patch,
    assert_try_reverts,
)
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import ConformanceFailure, TalosError, Unavailable
from pytest_talos.guard.snapshot import persistent_config
from pytest_talos.node import ReadOnlyGuard, TalosNode
from tests.integration.checks_support import connected

BAD_LABEL = {"machine": {"nodeLabels": {"bad label": "x"}}}  # a space: invalid (facts B3)
GOOD_LABEL = {"machine": {"nodeLabels": {"checked-by": "pytest-talos"}}}
UNKNOWN_FLAG = {"machine": {"kubelet": {"extraArgs": {"no-such-flag": "1"}}}}  # facts B4
# 1 s at 20x = 20 emulated seconds: four crash-loop periods of 5 s.
STABLE_FOR = 1.0


@pytest.fixture(scope="module")
def healthy() -> Iterator[tuple[EmulatedCluster, TalosCluster]]:
    with connected() as pair:
        yield pair


@pytest.fixture
def worker(healthy: tuple[EmulatedCluster, TalosCluster]) -> Iterator[TalosNode]:
    """The healthy worker; every test must leave its config as it found it."""
    node = healthy[1].worker()
    before = node.machine_config.raw
    yield node
    assert node.machine_config.raw == before, "the test left the worker's config changed"


# --------------------------------------------------------------------------- rejection


def test_rejection_passes_when_the_node_refuses_and_keeps_its_config(worker: TalosNode) -> None:
    result = assert_config_unchanged_after_rejection(worker, BAD_LABEL)
    assert 'name "bad label" is invalid' in result.evidence["rejection"]


def test_rejection_fails_when_the_node_accepts_an_invalid_patch() -> None:
    with connected(["lenient-validation"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        before = node.machine_config.raw
        with pytest.raises(ConformanceFailure) as failure:
            assert_config_unchanged_after_rejection(node, BAD_LABEL)
        assert node.machine_config.raw == before  # restored
    assert str(failure.value) == (
        "config.invalid-patch-rejected on talos-default-controlplane-1: the node accepted "
        "an invalid patch (the original config was restored)\n"
        "  expected: InvalidArgument\n"
        "  observed: accepted (no-reboot): Applied configuration without a reboot"
    )


def test_rejection_fails_when_a_rejected_patch_bumps_the_version() -> None:
    with connected(["version-bump-on-reject"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        version = node.machine_config.version
        with pytest.raises(ConformanceFailure) as failure:
            assert_config_unchanged_after_rejection(node, BAD_LABEL)
    text = str(failure.value)
    assert text.startswith(
        "config.invalid-patch-rejected on talos-default-controlplane-1: the patch was "
        f"rejected, but the machine config changed anyway: version {version} -> {version + 1}\n"
    )
    assert "\n  rejection:\n    1 error occurred:\n" in text
    assert failure.value.observed.startswith(f"version {version + 1}, ")


# --------------------------------------------------------------------------- service health


def test_service_healthy_after_a_harmless_patch(worker: TalosNode) -> None:
    with ConfigGuard() as guard:
        result = assert_service_healthy_after_patch(
            worker, GOOD_LABEL, stable_for=STABLE_FOR, guard=guard
        )
        assert b"checked-by: pytest-talos" in worker.machine_config.raw
    assert result.evidence["apply"] == "Applied configuration without a reboot"
    assert result.evidence["state changes"].endswith("kubelet: running, healthy")


def test_service_unhealthy_after_an_unknown_kubelet_flag(worker: TalosNode) -> None:
    # Validation accepts the flag (it checks form, not kubelet's flags): kubelet crash-loops.
    with pytest.raises(ConformanceFailure) as failure:
        assert_service_healthy_after_patch(worker, UNKNOWN_FLAG, stable_for=STABLE_FOR)
    text = str(failure.value)
    assert text.startswith(
        "config.kubelet-flag-failure-detected on talos-default-worker-1: "
        "kubelet is not healthy after "
        "the patch: it keeps restarting (3 restarts in "
    )
    assert "  expected: kubelet running and healthy for 1s on end\n" in text
    assert "  apply: Applied configuration without a reboot\n" in text
    evidence = failure.value.evidence
    # The state is sampled: a restart shows as running (health unknown, or already unhealthy)
    # and not running again; which of the two running states a poll catches is timing.
    changes = evidence["state changes"]
    assert "kubelet: not running" in changes
    assert "kubelet: running, health unknown" in changes or "kubelet: running, unhealthy" in changes
    # runner/restart/restart.go: a crash is recorded as Waiting, never Failed
    assert (
        "[Waiting] Error running Containerd(kubelet), going to restart forever"
        in (evidence["last events"])
    )
    assert "unknown flag: --no-such-flag" in evidence["log tail"]


def test_service_unhealthy_on_the_crashloop_fault() -> None:
    with (
        connected(["kubelet-crashloop"], workers=0) as (_, cluster),
        pytest.raises(
            ConformanceFailure, match="kubelet is not healthy after the patch: it keeps restarting"
        ),
    ):
        assert_service_healthy_after_patch(
            cluster.controlplane(), GOOD_LABEL, stable_for=STABLE_FOR
        )


def test_service_unhealthy_on_the_flapping_fault() -> None:
    # containerd fails every 30 s (1.5 s here) for 5 s: a 40 s window (2 s) never completes.
    with (
        connected(["flapping-service"], workers=0) as (_, cluster),
        pytest.raises(
            ConformanceFailure,
            match="containerd is not healthy after the patch: it keeps restarting",
        ),
    ):
        assert_service_healthy_after_patch(
            cluster.controlplane(),
            GOOD_LABEL,
            "containerd",
            stable_for=2.0,
            max_restarts=2,
            timeout=10.0,
        )


def test_service_never_stable_within_the_timeout(worker: TalosNode) -> None:
    with pytest.raises(ConformanceFailure) as failure:
        assert_service_healthy_after_patch(
            worker, UNKNOWN_FLAG, stable_for=STABLE_FOR, timeout=1.5, max_restarts=None
        )
    assert "it was not running and healthy for 1s on end within " in str(failure.value)


# --------------------------------------------------------------------------- try mode


def test_try_reverts_on_a_healthy_node(worker: TalosNode) -> None:
    result = assert_try_reverts(worker, GOOD_LABEL, try_timeout=20.0, timeout=10.0)
    assert result.evidence["apply"] == (
        "Applied configuration without a reboot\n"
        "The config is applied in 'try' mode and will be automatically reverted back in 20s"
    )


def test_try_reverts_fails_when_nothing_reverts() -> None:
    with connected(["try-no-revert"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        before = node.machine_config.raw
        with pytest.raises(ConformanceFailure) as failure:
            assert_try_reverts(node, GOOD_LABEL, try_timeout=20.0, timeout=2.0)
        assert node.machine_config.raw == before  # the check restored it
    text = str(failure.value)
    assert text.startswith(
        "config.try-mode-reverts on talos-default-controlplane-1: "
        "the try-mode change was not reverted "
        "within 2s (the original config was restored)\n"
        "  expected: back to version "
    )
    assert failure.value.observed.startswith("version ")  # a summary, never the config


# --------------------------------------------------------------------------- ConfigGuard


def test_guard_restores_exact_bytes_and_skips_unchanged_nodes(
    healthy: tuple[EmulatedCluster, TalosCluster], worker: TalosNode
) -> None:
    emulator, cluster = healthy
    controlplane = cluster.controlplane()
    guard = ConfigGuard()
    worker.apply_patch(GOOD_LABEL, guard=guard)
    guard.protect(controlplane)  # protected, never changed
    assert sorted(guard.protected) == [controlplane.name, worker.name]
    before = len(emulator.call_log)
    assert guard.restore() == [worker.name]
    applies = [c for c in emulator.call_log[before:] if c.method.endswith("ApplyConfiguration")]
    assert {c.node for c in applies} <= {worker.name, controlplane.name}
    assert {c.targets for c in applies if not c.forwarded} == {(worker.address,)}
    assert guard.protected == []
    assert guard.restore() == []  # idempotent


def test_guard_puts_back_a_next_boot_config_a_node_that_kept_none_was_given() -> None:
    # An installed metal node boots from STATE and keeps no `persistent` config until an
    # apply (internal/app/machined/pkg/controllers/config/acquire.go). A staged change
    # leaves the active config alone but would boot next time: the guard must undo it.
    with connected(workers=0, variants=("metal",)) as (_emulator, cluster):
        node = cluster.controlplane()
        assert persistent_config(node.client) is None
        original = node.machine_config.raw
        guard = ConfigGuard(journal=False)
        node.apply_patch(GOOD_LABEL, mode="staged", guard=guard)
        assert node.machine_config.raw == original  # only the next boot's config changed
        assert persistent_config(node.client) not in (None, original)
        assert guard.restore() == [node.name]
        # The API cannot remove `persistent`: the original bytes are the next boot's now.
        assert persistent_config(node.client) == original
        assert node.machine_config.raw == original


def test_guard_failure_is_loud_and_retried_later(
    worker: TalosNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = ConfigGuard()
    worker.apply_patch(GOOD_LABEL, guard=guard)

    def refuse(*args: object, **kwargs: object) -> None:
        raise Unavailable("apid is restarting", node=worker.address)

    with monkeypatch.context() as patched:
        patched.setattr(worker.client, "apply_configuration", refuse)
        with pytest.raises(ConfigRestoreError) as failure:
            guard.restore()
    message = str(failure.value)
    journal = guard.journal_of(worker)
    assert journal is not None
    assert journal.stat().st_mode & 0o777 == 0o600
    assert message == (
        f"could not restore the original machine config of node {worker.name} "
        f"({worker.address}): the restore call failed: [node {worker.address}] UNAVAILABLE: "
        "apid is restarting. The node may still run a changed config. Its original config "
        f"stays in the journal {journal} (0600; it holds the cluster's secrets): "
        f"talos-recover --state-dir {guard.state_dir} retries the restore."
    )
    assert guard.protected == [worker.name]  # kept for a retry
    assert guard.restore() == [worker.name]


def test_changes_need_a_guard(worker: TalosNode) -> None:
    with pytest.raises(TalosError, match="this change needs a guard that can undo it"):
        worker.apply_patch(GOOD_LABEL)
    dry = worker.apply_patch(GOOD_LABEL, dry_run=True)  # a dry run changes nothing: no guard
    assert "Dry run summary" in dry.mode_details


def test_read_only_guard_refuses_before_any_snapshot(worker: TalosNode) -> None:
    guard = ConfigGuard()
    refusing = worker.with_guard(ReadOnlyGuard("read-only in this test"))
    with pytest.raises(TalosError, match=r"read-only in this test"):
        refusing.apply_patch(GOOD_LABEL, guard=guard)
    assert guard.protected == []
