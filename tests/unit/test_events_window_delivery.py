"""``services.events-cover-window`` at a fast emulated clock: a ServiceList event stamped in
the last real second before the stream closed may still have been on its way, and is not
required of the stream; one stamped earlier in the window still is."""

from __future__ import annotations

import datetime as dt
import importlib
import time
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from conformance._support.context import Timing
from conformance._support.observe import Observation
from pytest_talos import models
from pytest_talos.emulator.node.events import new_xid
from pytest_talos.errors import ConformanceFailure
from pytest_talos.plugin.conformance import SUITE_MARKERS

SCALE = 20.0  # node seconds per real second, as the project's tests run the emulator
NODE_NOW = 1_800_000_000.0


@pytest.fixture
def services_checks(pytestconfig: pytest.Config) -> ModuleType:
    """The suite's services module, imported as a suite run would (its checks' marker is the
    conformance plugin's, which this test session does not load)."""
    for line in SUITE_MARKERS:
        pytestconfig.addinivalue_line("markers", line)
    return importlib.import_module("conformance.services.test_services")


Judge = Callable[[float], dict[str, Any]]


@pytest.fixture
def judge(services_checks: ModuleType) -> Judge:
    return lambda age: _judge(services_checks, age)


def _judge(services_checks: ModuleType, event_age_real: float) -> dict[str, Any]:
    """The check on a node whose ServiceList has one event, ``event_age_real`` real seconds
    before the stream closed (now), that the stream never brought."""
    now = time.time()
    stamped = NODE_NOW - SCALE * event_age_real
    restarted = models.ServiceEvent(
        "Health check successful", "Running", dt.datetime.fromtimestamp(stamped, dt.UTC)
    )
    service = models.ServiceInfo("apid", "Running", True, True, "", events=(restarted,))
    status = models.MachineStatusEvent("RUNNING", True)
    observation = Observation(
        "n1",
        records=[models.Event(new_xid(NODE_NOW - 10 * SCALE), "", status)],
        began=now - 12,
        ended=now,
        opened=now - 11.9,
    )
    evidence: dict[str, Any] = {}
    services_checks.test_events_stream_covers_the_window(
        talos_node=SimpleNamespace(name="n1", services=[service]),
        talos_observations={"n1": observation},
        talos_suite=SimpleNamespace(restart_window=100000.0),
        talos_timing=Timing(SCALE, "test"),
        talos_emulator=SimpleNamespace(clock=SimpleNamespace(time=lambda: NODE_NOW)),
        talos_evidence=evidence,
        talos_check_spec=SimpleNamespace(id="services.events-cover-window"),
    )
    return evidence


def test_an_event_of_the_streams_last_real_second_is_not_required(judge: Judge) -> None:
    evidence = judge(0.5)  # 10 node seconds before the close, at 20x
    assert "may still have been on their way" in evidence["not required"]


def test_an_event_earlier_in_the_window_that_the_stream_lacks_fails(judge: Judge) -> None:
    with pytest.raises(ConformanceFailure, match="not in the stream"):
        judge(3.0)
