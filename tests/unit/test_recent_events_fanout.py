"""``services.expected-running-healthy``'s recent events: the fan-out's read of a settled
node is used whether or not the node's clock is known here (an emulated clock reached from
outside is not), cut to the test's window only when it is; a node that was not settled when
read, or whose read failed, is read again by its own test."""

from __future__ import annotations

import importlib
from types import ModuleType, SimpleNamespace
from typing import Any, cast

import pytest

from conformance._support.context import Timing
from pytest_talos import models
from pytest_talos.emulator.node.events import new_xid
from pytest_talos.errors import TalosError
from pytest_talos.plugin.conformance import SUITE_MARKERS

NODE_NOW = 1_800_000_000.0


@pytest.fixture
def services_checks(pytestconfig: pytest.Config) -> ModuleType:
    for line in SUITE_MARKERS:
        pytestconfig.addinivalue_line("markers", line)
    return importlib.import_module("conformance.services.test_services")


def _event(at: float) -> models.Event:
    return cast(models.Event, SimpleNamespace(id=new_xid(at)))


class _Fanned:
    def __init__(self, read: Any) -> None:
        self.read = read
        self.asked: list[str] = []

    def get(self, node: Any) -> Any:
        self.asked.append(node.name)
        if isinstance(self.read, Exception):
            raise self.read
        return self.read


def _own_read(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[str]:
    """Replace the node's own events read; the names of the nodes it read."""
    own: list[str] = []

    def read(node: Any, timing: Timing) -> list[models.Event]:
        own.append(node.name)
        return [_event(NODE_NOW - 1)]

    monkeypatch.setattr(module, "_recent_events", read)
    return own


NODE = SimpleNamespace(name="talos-default-worker-1")


def test_an_unknown_clock_uses_the_settled_read_uncut(
    services_checks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = _own_read(monkeypatch, services_checks)
    old, recent = _event(NODE_NOW - 100), _event(NODE_NOW - 10)
    fanned = _Fanned((True, [old, recent]))

    events = services_checks._recent_or_fanned_out(NODE, Timing(20.0, "test"), fanned, None)

    assert events == [old, recent]  # nothing to cut by: the read's own window
    assert fanned.asked == [NODE.name]
    assert own == []


def test_a_known_clock_cuts_the_settled_read_to_the_tests_window(
    services_checks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = _own_read(monkeypatch, services_checks)
    old, recent = _event(NODE_NOW - 100), _event(NODE_NOW - 10)
    fanned = _Fanned((True, [old, recent]))

    events = services_checks._recent_or_fanned_out(NODE, Timing(), fanned, NODE_NOW)

    assert events == [recent]  # RECENT (60 s) back from the node's clock
    assert own == []


@pytest.mark.parametrize("lower", [None, NODE_NOW])
@pytest.mark.parametrize("read", [(False, []), TalosError("the stream broke")])
def test_an_unsettled_or_failed_read_is_read_again_by_the_test(
    services_checks: ModuleType, monkeypatch: pytest.MonkeyPatch, read: Any, lower: Any
) -> None:
    own = _own_read(monkeypatch, services_checks)

    events = services_checks._recent_or_fanned_out(NODE, Timing(20.0, "test"), _Fanned(read), lower)

    assert own == [NODE.name]
    assert len(events) == 1
