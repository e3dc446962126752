"""The apply faults the config checks' other modes and the persistent config catch, next to
what a healthy node does (``v1alpha1_server.go`` ApplyConfiguration, ``v1alpha1_runtime.go``
RollbackToConfigAfter): try-reverts-early, try-persists-config, staged-skips-validation,
try-accepts-reboot-fields, staged-dry-run-applies, no-reboot-not-persisted and
apply-during-try-dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import duration_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.node.apply import EARLY_TRY_FRACTION
from pytest_talos.patches import apply_patches

from .conftest import RawClient, wait_for

M = "/machine.MachineService/"
NO_REBOOT = m.ApplyConfigurationRequest.NO_REBOOT
STAGED = m.ApplyConfigurationRequest.STAGED
TRY = m.ApplyConfigurationRequest.TRY
LABEL = "machine:\n  nodeLabels:\n    example.com/fault: 'yes'\n"
OTHER = "machine:\n  nodeLabels:\n    example.com/other: 'yes'\n"
BAD_LABEL = "machine:\n  nodeLabels:\n    example.com/ok: 'yes'\n    bad label: 'x'\n"
ENV = "machine:\n  env:\n    PYTEST_TALOS_PROBE: '1'\n"
IMMEDIATE = "this config change can't be applied in immediate mode"
SCALE = 20.0
TRY_SECONDS = 4  # node seconds: 0.2 s real

Node = tuple[EmulatedCluster, RawClient, str]
Setup = Callable[..., Node]


@pytest.fixture
def setup(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> Setup:
    def make(*faults: str) -> Node:
        cluster = make_cluster(faults=list(faults), workers=0, time_scale=SCALE)
        return cluster, client_for(cluster), cluster.nodes[-1].address

    return make


def _active(node: Node) -> bytes:
    cluster, _, address = node
    return cluster.node(address).run(lambda st: st.active_config)


def _persisted(node: Node) -> bytes:
    cluster, _, address = node
    return cluster.node(address).run(lambda st: st.machine_config.persisted_config)


def _apply(
    node: Node, patch: str, mode: m.ApplyConfigurationRequest.Mode, *, dry_run: bool = False
) -> str:
    _, client, address = node
    data = apply_patches(_active(node), [patch])
    request = m.ApplyConfigurationRequest(data=data, mode=mode, dry_run=dry_run)
    if mode == TRY:
        request.try_mode_timeout.CopyFrom(duration_pb2.Duration(seconds=TRY_SECONDS))
    reply: m.ApplyConfigurationResponse = client.call(address, M + "ApplyConfiguration", request)
    return str(reply.messages[0].mode_details)


def _revert_after(node: Node) -> float:
    """Node seconds from a try apply of LABEL until the config is back: a lower bound of the
    node's timer (sent before it is armed, seen after it fired)."""
    original = _active(node)
    sent = time.monotonic()
    _apply(node, LABEL, TRY)
    wait_for(lambda: _active(node), lambda raw: raw == original, what="the revert")
    return (time.monotonic() - sent) * SCALE


def _timer_left(node: Node) -> float:
    """Node seconds until the pending try revert fires (read on the emulator's loop); only
    ever less than what the timer was armed with."""
    cluster, _, address = node

    def left(st: Any) -> float:
        handle = st.machine_config._try_timer
        assert isinstance(handle, asyncio.TimerHandle)
        return (handle.when() - asyncio.get_running_loop().time()) * SCALE

    return float(cluster.node(address).run(lambda st: left(st)))


def test_a_healthy_try_sets_only_the_active_config_and_reverts_when_its_timer_ends(
    setup: Setup,
) -> None:
    node = setup()
    persisted = _persisted(node)
    assert _revert_after(node) >= TRY_SECONDS
    assert _persisted(node) == persisted


def test_try_reverts_early_arms_the_timer_for_half_its_timeout(setup: Setup) -> None:
    node = setup("try-reverts-early")
    original = _active(node)
    _apply(node, LABEL, TRY)
    assert _timer_left(node) <= TRY_SECONDS * EARLY_TRY_FRACTION
    wait_for(lambda: _active(node), lambda raw: raw == original, what="the revert")


def test_try_persists_config_writes_the_tried_config_for_the_next_boot(setup: Setup) -> None:
    node = setup("try-persists-config")
    original = _active(node)
    _apply(node, LABEL, TRY)
    tried = _active(node)
    assert _persisted(node) == tried
    wait_for(lambda: _active(node), lambda raw: raw == original, what="the revert")
    assert _persisted(node) == tried  # the revert sets only the active config


@pytest.mark.parametrize("mode", [NO_REBOOT, STAGED], ids=["no-reboot", "staged"])
def test_a_healthy_node_validates_in_every_mode(
    setup: Setup, mode: m.ApplyConfigurationRequest.Mode
) -> None:
    node = setup()
    active, persisted = _active(node), _persisted(node)
    with pytest.raises(GRPCError) as refused:
        _apply(node, BAD_LABEL, mode)
    assert refused.value.status is Status.INVALID_ARGUMENT
    assert (_active(node), _persisted(node)) == (active, persisted)


def test_staged_skips_validation_stages_an_invalid_config(setup: Setup) -> None:
    node = setup("staged-skips-validation")
    active = _active(node)
    with pytest.raises(GRPCError):  # no-reboot still validates
        _apply(node, BAD_LABEL, NO_REBOOT)
    details = _apply(node, BAD_LABEL, STAGED)
    assert details == "Staged configuration to be applied after the next reboot"
    assert b"bad label" in _persisted(node)
    assert _active(node) == active


def test_a_healthy_try_refuses_reboot_fields(setup: Setup) -> None:
    node = setup()
    with pytest.raises(GRPCError) as refused:
        _apply(node, ENV, TRY)
    assert str(refused.value.message).startswith(IMMEDIATE)


def test_try_accepts_reboot_fields_in_try_mode_only(setup: Setup) -> None:
    node = setup("try-accepts-reboot-fields")
    with pytest.raises(GRPCError) as refused:
        _apply(node, ENV, NO_REBOOT)
    assert str(refused.value.message).startswith(IMMEDIATE)
    details = _apply(node, ENV, TRY)
    assert details.startswith("Applied configuration without a reboot\n")
    assert b"PYTEST_TALOS_PROBE" in _active(node)


@pytest.mark.parametrize(
    ("fault", "staged"), [("", False), ("staged-dry-run-applies", True)], ids=["healthy", "fault"]
)
def test_a_staged_dry_run(setup: Setup, fault: str, staged: bool) -> None:
    node = setup(*([fault] if fault else []))
    persisted = _persisted(node)
    no_reboot = _apply(node, LABEL, NO_REBOOT, dry_run=True)
    assert _persisted(node) == persisted  # a no-reboot dry run changes nothing either way
    details = _apply(node, LABEL, STAGED, dry_run=True)
    assert no_reboot.startswith("Dry run summary:\nApplied configuration without a reboot")
    assert details.startswith(
        "Dry run summary:\nStaged configuration to be applied after the next reboot "
        "(skipped in dry-run).\n"
    )
    assert (b"example.com/fault" in _persisted(node)) is staged


@pytest.mark.parametrize(
    ("fault", "kept"), [("", True), ("no-reboot-not-persisted", False)], ids=["healthy", "fault"]
)
def test_a_no_reboot_apply_and_the_persistent_config(setup: Setup, fault: str, kept: bool) -> None:
    node = setup(*([fault] if fault else []))
    _apply(node, LABEL, NO_REBOOT)
    assert b"example.com/fault" in _active(node)
    assert (_persisted(node) == _active(node)) is kept


@pytest.mark.parametrize(
    ("fault", "landed"), [("", True), ("apply-during-try-dropped", False)], ids=["healthy", "fault"]
)
def test_a_regular_apply_in_a_try_window(setup: Setup, fault: str, landed: bool) -> None:
    node = setup(*([fault] if fault else []))
    _apply(node, LABEL, TRY)
    details = _apply(node, OTHER, NO_REBOOT)
    assert details == "Applied configuration without a reboot"
    assert (b"example.com/other" in _active(node)) is landed
    cluster, _, address = node
    assert not cluster.node(address).run(lambda st: st.machine_config.try_pending)  # cancelled
