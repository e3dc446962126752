"""assert_try_reverts against emulated nodes over mTLS: a revert that fires before its timer
and a try that also writes the persistent config (the next boot's) fail; a healthy node,
container or metal (no persistent config until an apply), passes."""

from __future__ import annotations

import pytest

from pytest_talos.checks import ConfigGuard, assert_try_reverts
from pytest_talos.checks.config import EARLY_REVERT_FRACTION, read_persisted_config
from pytest_talos.errors import ConformanceFailure
from tests.integration.checks_support import TIME_SCALE, connected

LABEL = {"machine": {"nodeLabels": {"tried-by": "pytest-talos"}}}
WINDOW = 10.0  # node seconds: half a real second at 20x
WAIT = 10.0  # real seconds for the revert to be seen


@pytest.mark.parametrize("variants", [(), ("metal",)], ids=["container", "metal"])
def test_a_healthy_revert_passes_and_leaves_the_persistent_config_alone(
    variants: tuple[str, ...],
) -> None:
    with connected(workers=0, variants=variants) as (_, cluster):
        node = cluster.controlplane()
        before, persisted = node.machine_config.raw, read_persisted_config(node)
        guard = ConfigGuard(journal=False)
        result = assert_try_reverts(
            node,
            LABEL,
            try_timeout=WINDOW,
            timeout=WAIT,
            settle=0.2,
            guard=guard,
            time_scale=TIME_SCALE,
        )
        after = read_persisted_config(node)  # before the guard's restore
        guard.restore()
        assert node.machine_config.raw == before
    assert (persisted is None) == (variants == ("metal",))
    assert after == persisted  # not even its version moved
    seen_after = float(result.evidence["reverted after"].removesuffix(" node seconds"))
    assert seen_after >= WINDOW  # sent before the timer was armed, seen after it fired


def test_a_revert_before_the_timer_ends_fails() -> None:
    with connected(["try-reverts-early"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        before = node.machine_config.raw
        # Unjudged without the clock rate, as before.
        assert_try_reverts(node, LABEL, try_timeout=WINDOW, timeout=WAIT)
        with pytest.raises(ConformanceFailure) as failure:
            assert_try_reverts(node, LABEL, try_timeout=WINDOW, timeout=WAIT, time_scale=TIME_SCALE)
        assert node.machine_config.raw == before  # reverted (early) by the node itself
    text = str(failure.value)
    assert text.startswith(
        "config.try-mode-reverts on talos-default-controlplane-1: the try-mode change was "
        "reverted early: "
    )
    assert "node seconds after the apply was sent, before its 10s timer could end\n" in text
    assert (
        f"  expected: the revert 10 node seconds after the apply (not sooner than "
        f"{WINDOW * EARLY_REVERT_FRACTION:g})\n  observed: reverted after "
    ) in text


def test_a_try_that_writes_the_next_boots_config_fails_and_is_put_back() -> None:
    with connected(["try-persists-config"], workers=0) as (_, cluster):
        node = cluster.controlplane()
        before, persisted = node.machine_config.raw, read_persisted_config(node)
        assert persisted is not None
        with pytest.raises(ConformanceFailure) as failure:
            assert_try_reverts(node, LABEL, try_timeout=WINDOW, timeout=WAIT, time_scale=TIME_SCALE)
        restored = read_persisted_config(node)
        assert node.machine_config.raw == before
        assert restored is not None
        assert restored.raw == persisted.raw
    what = "the persistent config (loaded at the next boot)"
    assert str(failure.value).startswith(
        "config.try-mode-reverts on talos-default-controlplane-1: the try-mode apply changed "
        "the config the next boot loads (during the try window; the original config was "
        "restored): a reboot would keep the tried change\n"
        "  expected: the persistent config unchanged (try mode sets only the active config)\n"
        f"  observed: {what}: version {persisted.version} -> {persisted.version + 1}; "
        f"{what}: its bytes changed\n  apply:\n    Applied configuration without a reboot\n"
    )
