"""ApplyConfiguration on the emulator, as machined's handler runs it.

Handler: ``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go``
(ApplyConfiguration); config writes: ``runtime/v1alpha1/v1alpha1_runtime.go`` (SetConfig,
SetPersistedConfig, RollbackToConfigAfter); boot-time config: ``controllers/config/acquire.go``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from google.protobuf import duration_pb2, empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.errors import RPCFailure
from pytest_talos.emulator.machineconfig import NO_V1ALPHA1_MESSAGE
from pytest_talos.emulator.node.apply import ApplyRequest, ApplyResult
from pytest_talos.emulator.node.state import NodeState
from pytest_talos.patches import apply_patches

from .conftest import RawClient, wait_for

MC = "MachineConfigs.config.talos.dev"
APPLY = "/machine.MachineService/ApplyConfiguration"
Mode = m.ApplyConfigurationRequest
LABEL_PATCH = "machine:\n  nodeLabels:\n    example.com/team: storage\n"
BAD_LABEL_PATCH = "machine:\n  nodeLabels:\n    my label: x\n"
FLAG_PATCH = "machine:\n  kubelet:\n    extraArgs:\n      no-such-flag: 'true'\n"
TOKEN_PATCH = "machine:\n  token: abcdef.0123456789abcdef\n"  # needs a reboot
UNFLAG_PATCH = "machine:\n  kubelet:\n    extraArgs:\n      no-such-flag:\n        $patch: delete\n"


class Node:
    """One emulated node seen through the raw client."""

    def __init__(self, client: RawClient, cluster: EmulatedCluster, index: int = 0) -> None:
        self.client, self.cluster = client, cluster
        self.info = cluster.nodes[index]
        self.address = self.info.address

    def config(self, id_: str = "v1alpha1") -> tuple[bytes, int] | None:
        request = s.GetRequest(namespace="config", type=MC, id=id_)
        try:
            resource = self.client.call(self.address, "/cosi.resource.State/Get", request).resource
        except GRPCError as exc:
            if exc.status == Status.NOT_FOUND:
                return None
            raise
        spec = config_pb2.MachineConfigSpec.FromString(resource.spec.proto_spec)
        return spec.yaml_marshalled, int(resource.metadata.version)

    def version(self, id_: str = "v1alpha1") -> int:
        found = self.config(id_)
        assert found is not None
        return found[1]

    def versions(self) -> tuple[int | None, int | None]:
        """(v1alpha1, persistent) versions; None for a resource that does not exist."""
        active, persistent = self.config(), self.config("persistent")
        return (active and active[1]), (persistent and persistent[1])

    def patched(self, *patches: str) -> bytes:
        found = self.config()
        assert found is not None
        return apply_patches(found[0], list(patches))

    def apply(
        self,
        data: bytes,
        mode: m.ApplyConfigurationRequest.Mode = Mode.NO_REBOOT,
        *,
        dry_run: bool = False,
        try_seconds: float | None = None,
    ) -> m.ApplyConfiguration:
        request = Mode(data=data, mode=mode, dry_run=dry_run)
        if try_seconds is not None:
            request.try_mode_timeout.CopyFrom(
                duration_pb2.Duration(seconds=int(try_seconds), nanos=int(try_seconds % 1 * 1e9))
            )
        reply: m.ApplyConfigurationResponse = self.client.call(self.address, APPLY, request)
        return reply.messages[0]

    def labels(self) -> dict[str, str]:
        return self.cluster.node(self.address).run(lambda st: st.kube_node().labels)

    def kubelet(self) -> m.ServiceInfo:
        reply = self.client.call(
            self.address, "/machine.MachineService/ServiceList", empty_pb2.Empty()
        )
        found: m.ServiceInfo = next(s for s in reply.messages[0].services if s.id == "kubelet")
        return found


@pytest.fixture
def node_of(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> Callable[..., Node]:
    def make(**kwargs: object) -> Node:
        kwargs.setdefault("workers", 0)
        cluster = make_cluster(**kwargs)
        return Node(client_for(cluster), cluster)

    return make


def test_no_reboot_label_change(node_of: Callable[..., Node]) -> None:
    node = node_of()
    reply = node.apply(node.patched(LABEL_PATCH))
    assert reply.mode == Mode.NO_REBOOT
    assert reply.mode_details == "Applied configuration without a reboot"
    assert node.labels()["example.com/team"] == "storage"


def test_a_fresh_container_node_has_persistent(node_of: Callable[..., Node]) -> None:
    # acquire.go: the config came from the platform (USERDATA), not from STATE alone, so the
    # AcquireController set `persistent` too.
    node = node_of()
    assert node.versions() == (1, 1)
    assert node.config("persistent") == node.config()


def test_an_installed_metal_node_has_no_persistent_until_an_apply(
    node_of: Callable[..., Node],
) -> None:
    # acquire.go: an installed node boots from STATE only and does not re-persist.
    node = node_of(platform="metal")
    assert node.versions() == (1, None)
    node.apply(node.patched(LABEL_PATCH))
    assert node.versions() == (2, 1)  # SetPersistedConfig creates it


@pytest.mark.parametrize(
    ("platform", "mode", "before", "after"),
    [
        ("container", Mode.NO_REBOOT, (1, 1), (2, 2)),  # both bumped
        ("container", Mode.TRY, (1, 1), (2, 1)),  # only v1alpha1
        ("container", Mode.STAGED, (1, 1), (1, 2)),  # only persistent
        ("metal", Mode.STAGED, (1, None), (1, 1)),
        ("metal", Mode.TRY, (1, None), (2, None)),
    ],
)
def test_versions_per_apply_mode(
    node_of: Callable[..., Node],
    platform: str,
    mode: m.ApplyConfigurationRequest.Mode,
    before: tuple[int, int | None],
    after: tuple[int, int | None],
) -> None:
    node = node_of(platform=platform)
    assert node.versions() == before
    node.apply(node.patched(LABEL_PATCH), mode, try_seconds=600 if mode == Mode.TRY else None)
    assert node.versions() == after


def test_reboot_mode_sets_only_persistent_before_the_reboot(node_of: Callable[..., Node]) -> None:
    node = node_of(platform="metal")
    data = node.patched(LABEL_PATCH)

    def apply_and_look(state: NodeState) -> tuple[int | None, ...]:
        # In one loop callback: the reboot sequence has not started yet.
        state.apply_configuration(ApplyRequest(data=data, mode="REBOOT"))
        found = [state.store.get("config", MC, id_) for id_ in ("v1alpha1", "persistent")]
        return tuple(resource.version if resource else None for resource in found)

    assert node.cluster.node(node.address).run(apply_and_look) == (1, 1)


def test_staged_changes_only_persistent(node_of: Callable[..., Node]) -> None:
    node = node_of(platform="metal")
    data = node.patched(LABEL_PATCH)
    reply = node.apply(data, Mode.STAGED)
    assert reply.mode_details == "Staged configuration to be applied after the next reboot"
    assert node.config("persistent") == (data, 1)
    assert "example.com/team" not in node.labels()


def test_after_a_reboot_persistent_is_gone_until_the_next_apply(
    node_of: Callable[..., Node],
) -> None:
    # The reboot boots the staged config from STATE alone: `v1alpha1` holds it (version 1
    # again, a fresh resource store), and there is no `persistent`.
    node = node_of(platform="metal", time_scale=20)
    data = node.patched(LABEL_PATCH)
    node.apply(data, Mode.STAGED)
    node.cluster.node(node.address).run(lambda st: st.reboot())
    wait_for(lambda: _config_or_none(node), lambda c: c == (data, 1), what="node back")
    assert node.versions() == (1, None)
    node.apply(node.patched("machine:\n  nodeLabels:\n    next: 'yes'\n"))
    assert node.versions() == (2, 1)


def _config_or_none(node: Node) -> tuple[bytes, int] | None:
    try:
        return node.config()
    except (GRPCError, OSError, StreamTerminatedError):  # down while it reboots
        return None


def test_the_applied_bytes_are_kept_verbatim(node_of: Callable[..., Node]) -> None:
    node = node_of()
    data = node.patched(LABEL_PATCH) + b"# a trailing comment\n"
    node.apply(data)
    assert node.config() == (data, 2)


def test_invalid_label_is_rejected_and_nothing_changes(node_of: Callable[..., Node]) -> None:
    node = node_of()
    with pytest.raises(GRPCError) as caught:
        node.apply(node.patched(BAD_LABEL_PATCH))
    assert caught.value.status == Status.INVALID_ARGUMENT
    assert "my label" in str(caught.value.message)
    assert node.version() == 1


def test_version_bump_on_reject_fault(node_of: Callable[..., Node]) -> None:
    node = node_of(faults=["version-bump-on-reject"])
    with pytest.raises(GRPCError):
        node.apply(node.patched(BAD_LABEL_PATCH))
    assert node.version() == 2


def test_lenient_validation_fault_accepts_bad_labels(node_of: Callable[..., Node]) -> None:
    node = node_of(faults=["lenient-validation"])
    assert node.apply(node.patched(BAD_LABEL_PATCH)).mode == Mode.NO_REBOOT
    assert node.version() == 2


def test_config_without_v1alpha1_document(node_of: Callable[..., Node]) -> None:
    node = node_of()
    with pytest.raises(GRPCError) as caught:
        node.apply(b"apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\nauto: 'off'\n")
    assert (caught.value.status, caught.value.message) == (
        Status.INVALID_ARGUMENT,
        NO_V1ALPHA1_MESSAGE,
    )


def test_garbage_is_a_decode_error(node_of: Callable[..., Node]) -> None:
    node = node_of()
    with pytest.raises(GRPCError) as caught:
        node.apply(b"machine: [unclosed\n")
    assert caught.value.status == Status.INVALID_ARGUMENT
    assert str(caught.value.message).startswith("decode error")


def test_dry_run_shows_the_diff_and_changes_nothing(node_of: Callable[..., Node]) -> None:
    node = node_of()
    reply = node.apply(node.patched(LABEL_PATCH), dry_run=True)
    assert reply.mode == Mode.NO_REBOOT
    assert reply.mode_details.startswith(
        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\n"
        "Config diff:\n\n--- a\n+++ b\n"
    )
    assert "+    example.com/team: storage" in reply.mode_details
    assert not reply.warnings
    assert node.versions() == (1, 1)
    unchanged = node.apply(node.patched(), dry_run=True)
    assert unchanged.mode_details.endswith("No changes.")


def test_dry_run_of_try_has_no_try_sentence(node_of: Callable[..., Node]) -> None:
    node = node_of()
    reply = node.apply(node.patched(LABEL_PATCH), Mode.TRY, dry_run=True, try_seconds=30)
    assert reply.mode == Mode.TRY
    assert reply.mode_details.startswith(
        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\n"
        "Config diff:\n\n"
    )
    assert "'try' mode" not in reply.mode_details
    assert not node.cluster.node(node.address).run(lambda st: st.try_pending)


def test_reboot_required_change_fails_in_no_reboot_mode(node_of: Callable[..., Node]) -> None:
    node = node_of()
    with pytest.raises(GRPCError) as caught:
        node.apply(node.patched(TOKEN_PATCH))
    assert caught.value.status == Status.INVALID_ARGUMENT
    assert str(caught.value.message).startswith(
        "this config change can't be applied in immediate mode\ndiff:\n"
    )
    assert node.version() == 1


def test_auto_picks_no_reboot_or_reboot(node_of: Callable[..., Node]) -> None:
    node = node_of(platform="metal")
    assert node.apply(node.patched(LABEL_PATCH), Mode.AUTO).mode == Mode.NO_REBOOT
    dry = node.apply(node.patched(TOKEN_PATCH), Mode.AUTO, dry_run=True)
    assert dry.mode == Mode.REBOOT
    # The handler returns the dry run before it appends AUTO's `: <reason>`.
    assert dry.mode_details.startswith(
        "Dry run summary:\nApplied configuration with a reboot (skipped in dry-run).\n"
        "Config diff:\n\n--- a\n+++ b\n"
    )
    assert "can't be applied in immediate mode" not in dry.mode_details


def test_auto_resolved_to_reboot_appends_the_reason(node_of: Callable[..., Node]) -> None:
    node = node_of(platform="metal", time_scale=20)
    reply = node.apply(node.patched(TOKEN_PATCH), Mode.AUTO)
    assert reply.mode == Mode.REBOOT
    assert reply.mode_details.startswith(
        "Applied configuration with a reboot: this config change can't be applied in "
        "immediate mode\ndiff:\n"
    )


def test_reboot_mode_blocks_further_applies(node_of: Callable[..., Node]) -> None:
    node = node_of(platform="metal")
    data = node.patched(LABEL_PATCH)

    def apply_twice(state: NodeState) -> tuple[ApplyResult, str]:
        # Both in one loop callback: the second call arrives before the reboot starts.
        first = state.apply_configuration(ApplyRequest(data=data, mode="REBOOT"))
        try:
            state.apply_configuration(ApplyRequest(data=data, mode="NO_REBOOT"))
        except RPCFailure as exc:
            return first, f"{exc.code}: {exc.message}"
        return first, "accepted"

    first, second = node.cluster.node(node.address).run(apply_twice)
    assert first.mode_details == "Applied configuration with a reboot"
    assert second == (
        "FAILED_PRECONDITION: configuration was already applied and node is rebooting, "
        "cannot apply more configuration changes until next reboot"
    )


# ---- try mode --------------------------------------------------------------------------------


def test_try_mode_reverts_after_the_timeout(node_of: Callable[..., Node]) -> None:
    node = node_of(time_scale=20)
    original = node.config()
    reply = node.apply(node.patched(LABEL_PATCH), Mode.TRY, try_seconds=40)
    assert reply.mode == Mode.TRY
    assert reply.mode_details == (
        "Applied configuration without a reboot\nThe config is applied in 'try' mode and will "
        "be automatically reverted back in 40s"
    )
    assert node.version() == 2
    assert "example.com/team" in node.labels()
    reverted = wait_for(node.config, lambda c: c is not None and c[1] == 3, what="revert")
    assert reverted is not None
    assert original is not None
    assert reverted[0] == original[0]  # SetConfig of the old config: v1alpha1 +1 again
    assert "example.com/team" not in node.labels()


def test_default_try_timeout_is_a_minute(node_of: Callable[..., Node]) -> None:
    node = node_of()
    reply = node.apply(node.patched(LABEL_PATCH), Mode.TRY)
    assert reply.mode_details.endswith("reverted back in 1m0s")


def test_a_second_try_reverts_to_the_first_tried_config(node_of: Callable[..., Node]) -> None:
    # RollbackToConfigAfter captures the config active at *each* TRY call and stops the
    # earlier timer: the second TRY rolls back to the first tried config.
    node = node_of(time_scale=20)
    first = node.patched(LABEL_PATCH)
    node.apply(first, Mode.TRY, try_seconds=60)
    node.apply(
        node.patched("machine:\n  nodeLabels:\n    second: 'yes'\n"), Mode.TRY, try_seconds=20
    )
    reverted = wait_for(node.config, lambda c: c is not None and c[1] == 4, what="revert")
    assert reverted == (first, 4)
    assert node.versions() == (4, 1)  # TRY never touches `persistent`
    assert not node.cluster.node(node.address).run(lambda st: st.try_pending)


def test_a_zero_try_timeout_reverts_at_once(node_of: Callable[..., Node]) -> None:
    # A present try_mode_timeout is used as sent (`in.TryModeTimeout != nil`), even 0s.
    node = node_of()
    original = node.config()
    reply = node.apply(node.patched(LABEL_PATCH), Mode.TRY, try_seconds=0)
    assert reply.mode_details.endswith("will be automatically reverted back in 0s")
    reverted = wait_for(node.config, lambda c: c is not None and c[1] == 3, what="revert")
    assert original is not None
    assert reverted == (original[0], 3)


def test_a_non_try_apply_cancels_the_revert(node_of: Callable[..., Node]) -> None:
    # That nothing reverts later is checked on a manual clock in test_emulator_parts.
    node = node_of()
    state = node.cluster.node(node.address)
    node.apply(node.patched(LABEL_PATCH), Mode.TRY, try_seconds=300)
    assert state.run(lambda st: st.try_pending)
    node.apply(node.patched("machine:\n  nodeLabels:\n    kept: 'yes'\n"))
    assert state.run(lambda st: st.try_pending) is False
    assert node.version() == 3
    assert node.labels()["kept"] == "yes"


def test_try_no_revert_fault(node_of: Callable[..., Node]) -> None:
    node = node_of(time_scale=50, faults=["try-no-revert"])
    node.apply(node.patched(LABEL_PATCH), Mode.TRY, try_seconds=2)
    wait_for(
        lambda: not node.cluster.node(node.address).run(lambda st: st.try_pending),
        what="try window to end",
    )
    assert node.version() == 2
    assert "example.com/team" in node.labels()


# ---- an unknown kubelet flag: accepted, kubelet crash-loops, healed by removing it ----------


def _failures(kubelet: m.ServiceInfo) -> list[m.ServiceEvent]:
    # One event per crash of the restart runner, whose text says it restarts
    # (internal/app/machined/pkg/system/runner/restart/restart.go).
    return [event for event in kubelet.events.events if "going to restart forever" in event.msg]


def test_unknown_kubelet_flag_is_accepted_then_kubelet_crash_loops(
    node_of: Callable[..., Node],
) -> None:
    node = node_of(time_scale=10)
    reply = node.apply(node.patched(FLAG_PATCH))
    assert reply.mode_details == "Applied configuration without a reboot"  # accepted
    kubelet = wait_for(node.kubelet, lambda k: len(_failures(k)) >= 2, what="two failures")
    first, second = _failures(kubelet)[:2]
    period = second.ts.ToDatetime() - first.ts.ToDatetime()
    assert period >= dt.timedelta(seconds=5)  # emulated time; exact period: test_emulator_parts
    assert 'task "kubelet" failed' in second.msg
    log = b"".join(
        f.bytes
        for f in node.client.call(
            node.address,
            "/machine.MachineService/Logs",
            m.LogsRequest(namespace="system", id="kubelet", tail_lines=-1),
        )
    )
    assert b"unknown flag: --no-such-flag" in log


def test_removing_the_flag_heals_kubelet(node_of: Callable[..., Node]) -> None:
    # The "within about 3 s" timing is checked on a manual clock in test_emulator_parts.
    node = node_of(time_scale=10)
    node.apply(node.patched(FLAG_PATCH))
    wait_for(node.kubelet, lambda k: bool(_failures(k)), what="kubelet to fail")
    node.apply(node.patched(UNFLAG_PATCH))
    healed = wait_for(node.kubelet, lambda k: k.health.healthy, what="kubelet heals")
    assert healed.state == "Running"
    assert healed.events.events[-1].msg == "Health check successful"
