"""assert_try_reverts against emulated nodes over mTLS: a revert that fires before its timer
and a try that also writes the persistent config (the next boot's) fail; a healthy node,
container or metal (no persistent config until an apply), passes; a link too slow to read the
node inside the timer widens it, and then gives no verdict (NotObserved)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from pytest_talos.checks import ConfigGuard, assert_try_reverts
from pytest_talos.checks.config import EARLY_REVERT_FRACTION, read_persisted_config
from pytest_talos.errors import ConformanceFailure, NotObserved
from pytest_talos.node import TalosNode
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


@contextlib.contextmanager
def _slow_link(latency: float, time_scale: float) -> Iterator[TalosNode]:
    """The control plane of an emulated cluster ``latency`` seconds of round trip away."""
    with connected(workers=0, time_scale=time_scale, latency=latency) as (_, cluster):
        yield cluster.controlplane()


def test_a_timer_that_runs_out_before_the_read_is_widened_not_failed() -> None:
    # 0.3 s per round trip: the apply and the read take 0.6 s, past a 10 s timer at 20x
    # (0.5 s), where an unchanged config could already be the revert. Twice as long fits.
    with _slow_link(0.3, TIME_SCALE) as node:
        before = node.machine_config.raw
        result = assert_try_reverts(
            node, LABEL, try_timeout=WINDOW, timeout=WAIT, time_scale=TIME_SCALE
        )
        assert node.machine_config.raw == before
    missed = result.evidence["10s timer"]
    assert missed.startswith("not judged: read ")
    assert missed.endswith(" node seconds after the apply, when it may have reverted already")
    assert "20s timer" not in result.evidence  # judged on the second timer
    seen_after = float(result.evidence["reverted after"].removesuffix(" node seconds"))
    assert seen_after >= 2 * WINDOW


def test_no_timer_long_enough_for_the_link_is_not_observed_not_failed() -> None:
    # 0.25 s per round trip at 200x: each apply and read take longer than every timer
    # (10, 20 and 40 node seconds are 0.05, 0.1 and 0.2 s): no verdict either way.
    with _slow_link(0.25, 200.0) as node:
        before, persisted = node.machine_config.raw, read_persisted_config(node)
        with pytest.raises(NotObserved) as missed:
            assert_try_reverts(node, LABEL, try_timeout=WINDOW, timeout=WAIT, time_scale=200.0)
        assert node.machine_config.raw == before
        restored = read_persisted_config(node)  # the guard put the config back, bytes and all
    assert persisted is not None
    assert restored is not None
    assert restored.raw == persisted.raw
    assert missed.value.window == 4 * WINDOW
    assert missed.value.seen_after >= 4 * WINDOW
    assert str(missed.value).startswith(
        "[node talos-default-controlplane-1] the try-mode revert: after each try-mode apply"
        " (timers of 10, 20, 40 node seconds) the node was read too late, when "
        "the revert may already have happened (last read "
    )
    assert str(missed.value).endswith("Run on a less busy machine, or nearer the node.")


def test_attempts_must_be_at_least_one() -> None:
    with connected(workers=0) as (_, cluster), pytest.raises(ValueError, match="at least 1"):
        assert_try_reverts(cluster.controlplane(), LABEL, attempts=0)
