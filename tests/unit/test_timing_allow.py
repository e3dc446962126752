"""Timing.allow: a wait for what must happen gets its node-time allowance, and at least
LOAD_FLOOR real seconds when the emulator's clock runs fast; a real node's is unchanged."""

from __future__ import annotations

import pytest

from conformance._support.context import LOAD_FLOOR, Timing


@pytest.mark.parametrize("node_seconds", [0.5, 2.0, 10.0, 30.0, 300.0])
def test_a_real_node_waits_its_allowance_exactly(node_seconds: float) -> None:
    assert Timing().allow(node_seconds) == node_seconds


def test_a_fast_clock_waits_at_least_the_floor() -> None:
    fast = Timing(20.0, "test")
    assert fast.real(30.0) == 1.5
    assert fast.allow(30.0) == LOAD_FLOOR  # not 1.5 s of a busy machine
    assert fast.allow(1.0) == 1.0  # never more than the allowance itself
    assert fast.allow(600.0) == 30.0  # past the floor the clock rate holds
