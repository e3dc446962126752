"""A refused or dry-run apply must not touch the ``persistent`` config either (the one the
next boot loads): the rejection helper and the dry-run check read it before and after, and a
node that writes it anyway fails them and is put back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_talos.checks import assert_config_unchanged_after_rejection
from pytest_talos.checks.config import PersistedConfig, persisted_changes, read_persisted_config
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.node.apply import ApplyRequest, ApplyResult, RPCFailure
from pytest_talos.errors import ConformanceFailure
from tests.conformance.suite_runner import SUITE, run_suite, target_args
from tests.integration.checks_support import connected

BAD_LABEL = {"machine": {"nodeLabels": {"bad label": "x"}}}
CONFIG = str(SUITE / "config")


def _stages_what_it_refuses(emulator: EmulatedCluster, hostname: str) -> None:
    """The defect: the node writes a refused or dry-run config to ``persistent`` all the
    same (Talos returns before SetPersistedConfig: v1alpha1_server.go ApplyConfiguration)."""
    configs = emulator.node(hostname).state.machine_config
    real: Callable[[ApplyRequest], ApplyResult] = configs.apply_configuration

    def apply(request: ApplyRequest) -> ApplyResult:
        try:
            result = real(request)
        except RPCFailure:
            configs._set_persisted(request.data)
            raise
        if request.dry_run:
            configs._set_persisted(request.data)
        return result

    emulator.on_loop(lambda: setattr(configs, "apply_configuration", apply))


def test_persisted_changes_name_what_happened_to_the_next_boots_config() -> None:
    one, two = PersistedConfig(3, b"a"), PersistedConfig(4, b"b")
    what = "the persistent config (loaded at the next boot)"
    assert persisted_changes(None, None) == []
    assert persisted_changes(one, PersistedConfig(3, b"a")) == []
    assert persisted_changes(one, two) == [f"{what}: version 3 -> 4", f"{what}: its bytes changed"]
    assert persisted_changes(None, one)[0].startswith(f"{what} appeared: version 3, 1 bytes, ")
    assert persisted_changes(one, None) == [f"{what} disappeared"]


def test_rejection_fails_when_the_refused_config_is_staged_for_the_next_boot() -> None:
    with connected(workers=0) as (emulator, cluster):
        node = cluster.controlplane()
        active, persisted = node.machine_config, read_persisted_config(node)
        assert persisted is not None  # a fresh container node keeps one
        _stages_what_it_refuses(emulator, node.hostname)
        with pytest.raises(ConformanceFailure) as failure:
            assert_config_unchanged_after_rejection(node, BAD_LABEL, settle=0.2)
        restored = read_persisted_config(node)
        assert node.machine_config.raw == active.raw
        assert restored is not None
        assert restored.raw == persisted.raw  # put back
    assert str(failure.value).startswith(
        "config.invalid-patch-rejected on talos-default-controlplane-1: the patch was "
        "rejected, but the machine config changed anyway (within 0.2s of the refusal; "
        f"restored): the persistent config (loaded at the next boot): version "
        f"{persisted.version} -> {persisted.version + 1}; the persistent config (loaded at "
        "the next boot): its bytes changed\n"
    )


@pytest.mark.slow
def test_dry_run_check_fails_when_the_dry_run_is_staged_for_the_next_boot(
    tmp_path: Path,
) -> None:
    with EmulatedCluster(1, 0, time_scale=20) as emulator:
        _stages_what_it_refuses(emulator, emulator.nodes[0].hostname)
        args = [*target_args(emulator), "--talos-allow", "mutating", "-k", "dry_run"]
        result = run_suite(args, tmp_path / "report", paths=[CONFIG])
    assert result.broken() == {"config.dry-run-changes-nothing": "failed"}, result.describe()
    assert "the persistent config (loaded at the next boot): its bytes changed" in result.output
