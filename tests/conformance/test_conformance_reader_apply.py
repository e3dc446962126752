"""The reader-apply checks wait out a node busy with another apply (machined takes its apply
lock before it looks at the caller's roles: v1alpha1_server.go ApplyConfiguration), and
say "not measured" when it stays busy, never "refused for another reason"."""

from __future__ import annotations

from typing import Any, cast

import pytest

from conformance._support import probes
from pytest_talos import models
from pytest_talos.client import TalosClient
from pytest_talos.errors import FailedPrecondition, PermissionDenied, TalosError
from pytest_talos.node import TalosNode


class BusyThenReader:
    """A reader client whose node is busy ``busy`` times, then refuses it as a reader."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.calls = 0

    def apply_configuration(self, *args: Any, **kwargs: Any) -> models.ApplyResult:
        self.calls += 1
        if self.calls <= self.busy:
            raise FailedPrecondition(probes.APPLY_BUSY)
        raise PermissionDenied("not authorized")


NODE = cast(TalosNode, type("Node", (), {"name": "worker-1"})())


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("conformance._support.probes.time.sleep", lambda _seconds: None)


def test_a_busy_node_is_asked_again_until_it_answers_for_the_reader() -> None:
    reader = BusyThenReader(busy=2)
    with pytest.raises(PermissionDenied):
        probes.reader_apply(NODE, cast(TalosClient, reader), b"x", dry_run=True)
    assert reader.calls == 3


def test_a_node_that_stays_busy_is_not_measured() -> None:
    reader = BusyThenReader(busy=100)
    with pytest.raises(TalosError) as caught:
        probes.reader_apply(NODE, cast(TalosClient, reader), b"x", dry_run=False)
    assert reader.calls == probes.BUSY_TRIES
    assert str(caught.value) == (
        "[node worker-1] not measured: the node answered 'another apply configuration is "
        "already in progress' to every one of 6 tries (its apply lock is taken before the "
        "caller's roles are looked at); run the check again when nothing else changes the node"
    )


def test_another_precondition_is_not_retried() -> None:
    class Rebooting(BusyThenReader):
        def apply_configuration(self, *args: Any, **kwargs: Any) -> models.ApplyResult:
            self.calls += 1
            raise FailedPrecondition("configuration was already applied and node is rebooting")

    reader = Rebooting(busy=0)
    with pytest.raises(FailedPrecondition, match="node is rebooting"):
        probes.reader_apply(NODE, cast(TalosClient, reader), b"x", dry_run=True)
    assert reader.calls == 1
