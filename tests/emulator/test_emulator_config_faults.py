"""The config-semantics fault profiles that act late or beside the config.

late-apply-on-reject, dry-run-applies-late (their change shows only after 2 node seconds),
try-revert-keeps-label (the config comes back, the Kubernetes Node keeps the label) and
no-reboot-accepts-reboot-fields (machine.env and machine.files pass as immediate).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from google.protobuf import duration_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.patches import apply_patches

from .conftest import RawClient, wait_for

M = "/machine.MachineService/"
NO_REBOOT = m.ApplyConfigurationRequest.NO_REBOOT
TRY = m.ApplyConfigurationRequest.TRY
LABEL = "machine:\n  nodeLabels:\n    example.com/fault: 'yes'\n"
BAD_LABEL = "machine:\n  nodeLabels:\n    example.com/ok: 'yes'\n    bad label: 'x'\n"
ENV = "machine:\n  env:\n    PYTEST_TALOS_PROBE: '1'\n"
FILES = (
    "machine:\n  files:\n    - content: probe\n      permissions: 0o644\n"
    "      path: /var/pytest-talos-probe\n      op: create\n"
)
SCALE = 40.0  # try windows of 2 node seconds last 50 ms
# The late faults' first read must come before their 2 node seconds are up: at 2x that is a
# second of real time, which a loaded machine's reply and read stay well within.
LATE_SCALE = 2.0

Setup = Callable[..., tuple[EmulatedCluster, RawClient, str]]


@pytest.fixture
def setup(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> Setup:
    def make(*faults: str, time_scale: float = SCALE) -> tuple[EmulatedCluster, RawClient, str]:
        cluster = make_cluster(faults=list(faults), workers=0, time_scale=time_scale)
        return cluster, client_for(cluster), cluster.nodes[-1].address

    return make


def _active(cluster: EmulatedCluster, address: str) -> bytes:
    return cluster.node(address).run(lambda st: st.active_config)


def _labels(cluster: EmulatedCluster, address: str) -> dict[str, str]:
    return cluster.node(address).run(lambda st: st.kube_node().labels)


def _apply(
    client: RawClient,
    address: str,
    data: bytes,
    mode: m.ApplyConfigurationRequest.Mode,
    *,
    dry_run: bool = False,
    try_seconds: int = 0,
) -> m.ApplyConfiguration:
    request = m.ApplyConfigurationRequest(data=data, mode=mode, dry_run=dry_run)
    if try_seconds:
        request.try_mode_timeout.CopyFrom(duration_pb2.Duration(seconds=try_seconds))
    reply: m.ApplyConfigurationResponse = client.call(address, M + "ApplyConfiguration", request)
    return reply.messages[0]


def test_late_apply_on_reject_refuses_then_applies(setup: Setup) -> None:
    cluster, client, address = setup("late-apply-on-reject", time_scale=LATE_SCALE)
    original = _active(cluster, address)
    patched = apply_patches(original, [BAD_LABEL])
    with pytest.raises(GRPCError) as refused:
        _apply(client, address, patched, NO_REBOOT)
    assert refused.value.status is Status.INVALID_ARGUMENT
    assert _active(cluster, address) == original  # the first read is right
    wait_for(lambda: _active(cluster, address), lambda raw: raw == patched, what="late apply")


def test_late_apply_on_reject_leaves_reboot_refusals_alone(setup: Setup) -> None:
    cluster, client, address = setup("late-apply-on-reject", time_scale=LATE_SCALE)
    original = _active(cluster, address)
    with pytest.raises(GRPCError) as refused:
        _apply(client, address, apply_patches(original, [ENV]), NO_REBOOT)
    assert "can't be applied in immediate mode" in str(refused.value.message)
    time.sleep(3 / SCALE)  # past the 2 node-second delay
    assert _active(cluster, address) == original


def test_dry_run_applies_late(setup: Setup) -> None:
    cluster, client, address = setup("dry-run-applies-late", time_scale=LATE_SCALE)
    original = _active(cluster, address)
    patched = apply_patches(original, [LABEL])
    reply = _apply(client, address, patched, NO_REBOOT, dry_run=True)
    assert reply.mode_details.startswith("Dry run summary")
    assert _active(cluster, address) == original
    wait_for(lambda: _active(cluster, address), lambda raw: raw == patched, what="late dry run")


def test_try_revert_keeps_label_on_the_kubernetes_node(setup: Setup) -> None:
    cluster, client, address = setup("try-revert-keeps-label")
    original = _active(cluster, address)
    _apply(client, address, apply_patches(original, [LABEL]), TRY, try_seconds=2)
    assert _labels(cluster, address).get("example.com/fault") == "yes"
    wait_for(lambda: _active(cluster, address), lambda raw: raw == original, what="revert")
    assert _labels(cluster, address).get("example.com/fault") == "yes"


def test_try_revert_removes_the_label_on_a_healthy_node(setup: Setup) -> None:
    cluster, client, address = setup()
    original = _active(cluster, address)
    _apply(client, address, apply_patches(original, [LABEL]), TRY, try_seconds=2)
    wait_for(lambda: _active(cluster, address), lambda raw: raw == original, what="revert")
    assert "example.com/fault" not in _labels(cluster, address)


@pytest.mark.parametrize("patch", [ENV, FILES], ids=["env", "files"])
def test_reboot_fields_refused_in_no_reboot_mode_on_a_healthy_node(
    setup: Setup, patch: str
) -> None:
    cluster, client, address = setup()
    original = _active(cluster, address)
    with pytest.raises(GRPCError) as refused:
        _apply(client, address, apply_patches(original, [patch]), NO_REBOOT)
    assert refused.value.status is Status.INVALID_ARGUMENT
    assert str(refused.value.message).startswith(
        "this config change can't be applied in immediate mode\ndiff:\n"
    )
    assert _active(cluster, address) == original


@pytest.mark.parametrize("patch", [ENV, FILES], ids=["env", "files"])
def test_no_reboot_accepts_reboot_fields(setup: Setup, patch: str) -> None:
    cluster, client, address = setup("no-reboot-accepts-reboot-fields")
    patched = apply_patches(_active(cluster, address), [patch])
    reply = _apply(client, address, patched, NO_REBOOT)
    assert reply.mode_details == "Applied configuration without a reboot"
    assert _active(cluster, address) == patched
