"""The config helpers judge again after a settle time (emulated nodes, time sped up 20x)."""

from __future__ import annotations

import pytest

from pytest_talos.checks import assert_config_unchanged_after_rejection, assert_try_reverts
from pytest_talos.errors import ConformanceFailure
from tests.integration.checks_support import connected

BAD_LABEL = {"machine": {"nodeLabels": {"ok": "yes", "bad label": "x"}}}  # a space: invalid
ENV = {"machine": {"env": {"PYTEST_TALOS_PROBE": "1"}}}
IMMEDIATE = "this config change can't be applied in immediate mode"
GOOD_LABEL = {"machine": {"nodeLabels": {"checked-by": "pytest-talos"}}}
SETTLE = 0.5  # real seconds: 10 node seconds at 20x, the faults act after 2


def test_rejection_with_settle_passes_on_a_healthy_node() -> None:
    with connected(workers=0) as (_, cluster):
        node = cluster.controlplane()
        result = assert_config_unchanged_after_rejection(node, BAD_LABEL, settle=SETTLE)
        assert 'name "bad label" is invalid' in result.evidence["rejection"]
        result = assert_config_unchanged_after_rejection(
            node,
            ENV,
            settle=SETTLE,
            expect_rejection=IMMEDIATE,
            check_id="config.no-reboot-refuses-reboot-fields",
        )
        assert result.check == "config.no-reboot-refuses-reboot-fields"


def test_rejection_first_read_misses_a_late_apply_the_settle_sees() -> None:
    with connected(["late-apply-on-reject"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        before = node.machine_config
        with pytest.raises(ConformanceFailure) as failure:
            assert_config_unchanged_after_rejection(node, BAD_LABEL, settle=SETTLE)
        assert node.machine_config.raw == before.raw  # restored
    text = str(failure.value)
    assert text.startswith(
        "config.invalid-patch-rejected on talos-default-controlplane-1: the patch was "
        "rejected, but the machine config changed anyway (within 0.5s of the refusal; "
        f"restored): version {before.version} -> "
    )
    assert "the config bytes changed" in text


def test_rejection_for_another_reason_fails_when_a_reason_is_expected() -> None:
    with connected(workers=0) as (_, cluster), pytest.raises(ConformanceFailure) as failure:
        assert_config_unchanged_after_rejection(
            cluster.controlplane(), BAD_LABEL, expect_rejection=IMMEDIATE
        )
    assert "refused for another reason than expected" in str(failure.value)


def test_reboot_fields_accepted_without_reboot_fail_and_are_restored() -> None:
    with connected(["no-reboot-accepts-reboot-fields"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        before = node.machine_config.raw
        with pytest.raises(ConformanceFailure) as failure:
            assert_config_unchanged_after_rejection(
                node,
                ENV,
                expect_rejection=IMMEDIATE,
                check_id="config.no-reboot-refuses-reboot-fields",
            )
        assert node.machine_config.raw == before
    assert str(failure.value).startswith(
        "config.no-reboot-refuses-reboot-fields on talos-default-controlplane-1: the node "
        "accepted an invalid patch (the original config was restored)"
    )


def test_try_reverts_with_settle_passes_on_a_healthy_node() -> None:
    with connected(workers=0) as (_, cluster):
        node = cluster.controlplane()
        before = node.machine_config.raw
        assert_try_reverts(node, GOOD_LABEL, try_timeout=4.0, timeout=5.0, settle=SETTLE)
        assert node.machine_config.raw == before
