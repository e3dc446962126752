"""TalosClient's machine API against the emulated cluster: version and targeting, services,
apply, logs and events, files and system calls, lifecycle (see ``emulator_support``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import itertools
import uuid
from collections.abc import Callable

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519

from pytest_talos._proto.machine import machine_pb2
from pytest_talos.client import Connection, TalosClient
from pytest_talos.emulator import EmulatedCluster, NodeInfo
from pytest_talos.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NodeError,
    NotFound,
    PermissionDenied,
    Unavailable,
    Unimplemented,
    Unknown,
)
from pytest_talos.models import (
    AddressEvent,
    ApplyResult,
    EtcdMember,
    Event,
    HostnameStatusSpec,
    MachineConfig,
    MachineConfigSpec,
    MachineStatusEvent,
    PhaseEvent,
    SequenceEvent,
    ServiceSpec,
    ServiceStateEvent,
    TaskEvent,
    Version,
    VersionSpec,
)
from pytest_talos.patches import apply_patches
from pytest_talos.talos_api import EMULATOR_BUILT
from pytest_talos.talosconfig import load_talosconfig
from pytest_talos.transport import Rpc, Target
from tests.integration import emulator_support as support
from tests.integration.conftest import EMULATOR_TIME_SCALE
from tests.integration.emulator_support import (
    WAIT,
    changes_until_healthy,
    items_until,
    poll,
    spec_of,
    wait_until_ready,
    with_transport,
)

# The shared fixtures, bound in this module so that pytest finds them.
cp_node, worker_node, talos, cp, worker = (
    support.cp_node,
    support.worker_node,
    support.talos,
    support.cp,
    support.worker,
)
restore_worker_config = support.restore_worker_config

TALOS_TAG = "v1.13.9"
TALOS_COMMIT = "3ebd10a7c1bd0f81742bdcd0c3fe56d727db7401"
TRY_SECONDS = 4  # emulated; 0.2 s of real time at 20x
LABEL_PATCH = b"machine:\n  nodeLabels:\n    pytest-talos/checked: client-test\n"
BAD_LABEL_PATCH = b"machine:\n  nodeLabels:\n    bad label: x\n"  # a space: invalid (B3)
TYPE_PATCH = b"machine:\n  type: controlplane\n"  # needs a reboot (ApplyConfiguration)
CONTAINER_REFUSAL = "method is not supported in container mode"  # mode.go
# integration/api, `talosctl health` conditions in order.
HEALTH_CONDITIONS = [
    "etcd to be healthy",
    "etcd members to be consistent across nodes",
    "etcd members to be control plane nodes",
    "apid to be ready",
    "all nodes memory sizes",
    "all nodes disk sizes",
    "no diagnostics",
    "kubelet to be healthy",
    "all nodes to finish boot sequence",
    "all k8s nodes to report",
    "all control plane static pods to be running",
    "all control plane components to be ready",
    "all k8s nodes to report ready",
    "kube-proxy to report ready",
    "coredns to report ready",
    "all k8s nodes to report schedulable",
]
# The raw RPC, for the hello event the client hides.
EVENTS_RPC = Rpc("/machine.MachineService/Events", machine_pb2.EventsRequest, machine_pb2.Event)


# --------------------------------------------------------------------------- helpers


def _is_unreachable(reply: Version | NodeError) -> bool:
    return isinstance(reply, NodeError) and isinstance(reply.cause, Unavailable)


def _versions_resource(node: TalosClient) -> Callable[[], str]:
    def tag() -> str:
        spec = node.get("version", "version").typed_spec
        return spec.version if isinstance(spec, VersionSpec) else ""

    return tag


def _is_kubelet(event: Event, action: str, *, healthy: bool | None = None) -> bool:
    payload = event.payload
    return (
        isinstance(payload, ServiceStateEvent)
        and payload.service == "kubelet"
        and payload.action == action
        and healthy in (None, payload.healthy)
    )


def _kubelet_actions(events: list[Event]) -> list[str]:
    return [
        e.payload.action
        for e in events
        if isinstance(e.payload, ServiceStateEvent) and e.payload.service == "kubelet"
    ]


def _truth_events(cluster: EmulatedCluster, address: str) -> list[str]:
    """The ids of the events the emulated node has buffered (its own truth)."""
    return cluster.node(address).run(lambda state: [e.id for e in state.events.snapshot()])


def _event_subscribers(cluster: EmulatedCluster, address: str) -> list[object]:
    """The node's live Events streams (the emulator's own record, read on its loop)."""
    return cluster.node(address).run(lambda state: list(state.events._subscribers))


# --------------------------------------------------------------------------- version, targeting


def test_version_of_each_node_through_the_control_plane(
    emulated_cluster: EmulatedCluster, cp: TalosClient, worker: TalosClient, worker_node: NodeInfo
) -> None:
    calls_before = len(emulated_cluster.call_log)

    for node in (cp, worker):
        version = node.version()
        assert version == Version(
            tag=TALOS_TAG,
            sha=version.sha,
            go_version=version.go_version,
            os="linux",
            arch="amd64",
            platform="container",
            platform_mode="container",
            rbac=True,
            node=node.node,
            # real builds leave it empty; the emulator names itself (never taken for real)
            built=EMULATOR_BUILT,
        )
        assert version.go_version.startswith("go")
        assert len(version.sha) >= 7
        assert TALOS_COMMIT.startswith(version.sha)  # v1.13.9: the v1.13.9 commit
        # integration/api version.go: the API tag is the Versions resource's tag.
        assert node.get("version", "version").typed_spec == VersionSpec(TALOS_TAG, "Talos")

    forwarded = [
        call
        for call in emulated_cluster.call_log[calls_before:]
        if call.method == "/machine.MachineService/Version" and call.forwarded
    ]
    assert [call.address for call in forwarded] == [worker_node.address]


def test_the_talosconfig_carries_an_ed25519_admin_identity(
    emulated_cluster: EmulatedCluster, talos: TalosClient
) -> None:
    context = load_talosconfig(emulated_cluster.talosconfig_path, env={}).context
    for pem in (context.ca_pem, context.crt_pem):  # apid service.go: Talos's default key type
        key = x509.load_pem_x509_certificate(pem).public_key()
        assert isinstance(key, ed25519.Ed25519PublicKey)
    assert talos.roles == ("os:admin",)
    assert len(talos.nodes) == 2  # the talosconfig names both nodes: single calls need with_node
    with pytest.raises(InvalidArgument, match=r"use client\.with_node"):
        talos.version()


def test_version_fanout_returns_one_reply_per_node(
    emulated_cluster: EmulatedCluster, talos: TalosClient, cp_node: NodeInfo, worker_node: NodeInfo
) -> None:
    calls_before = len(emulated_cluster.call_log)

    replies = talos.fanout_version()

    assert set(replies) == {cp_node.address, worker_node.address}
    for address, reply in replies.items():
        assert isinstance(reply, Version)
        assert (reply.tag, reply.node) == (TALOS_TAG, address)
    calls = [c for c in emulated_cluster.call_log[calls_before:] if c.method.endswith("/Version")]
    entry = next(c for c in calls if not c.forwarded)
    assert (entry.address, set(entry.targets)) == (
        cp_node.address,
        {cp_node.address, worker_node.address},
    )
    assert [c.address for c in calls if c.forwarded] == [worker_node.address]


def test_fanout_keeps_a_nodes_error_beside_the_other_replies(
    talos: TalosClient, cp_node: NodeInfo, worker_node: NodeInfo
) -> None:
    replies = talos.fanout("etcd_members")

    members = replies[cp_node.address]
    assert [m.hostname for m in members] == [cp_node.hostname]
    failed = replies[worker_node.address]
    assert isinstance(failed, NodeError)
    assert failed.node == worker_node.address
    assert isinstance(failed.cause, Unimplemented)
    assert "member list is only available on control plane nodes" in str(failed)


def test_hostname(
    talos: TalosClient,
    cp: TalosClient,
    worker: TalosClient,
    cp_node: NodeInfo,
    worker_node: NodeInfo,
) -> None:
    assert cp.hostname() == cp_node.hostname
    assert worker.hostname() == worker_node.hostname
    assert talos.fanout("hostname") == {
        cp_node.address: cp_node.hostname,
        worker_node.address: worker_node.hostname,
    }
    status = worker.get("hostname", "hostname").typed_spec
    assert isinstance(status, HostnameStatusSpec)
    assert status.hostname == worker_node.hostname


# --------------------------------------------------------------------------- services


def test_services_per_role(cp: TalosClient, worker: TalosClient) -> None:
    on_cp = {info.id: info for info in cp.services()}
    on_worker = {info.id: info for info in worker.services()}

    # v1alpha1_sequencer.go: etcd and trustd (which hands workers their certificates) run on control
    # planes only.
    assert {"apid", "containerd", "cri", "etcd", "kubelet", "machined", "trustd"} <= set(on_cp)
    assert {"apid", "containerd", "cri", "kubelet", "machined"} <= set(on_worker)
    assert not {"etcd", "trustd"} & set(on_worker)
    for info in (*on_cp.values(), *on_worker.values()):
        assert info.state == "Running", info
        assert info.events, info
        assert info.events[-1].ts is not None
        assert info.events[-1].ts.tzinfo is dt.UTC
    for info in (on_cp["apid"], on_cp["etcd"], on_worker["kubelet"]):
        assert (info.healthy, info.health_unknown) == (True, False)
        assert info.last_event is not None
        assert info.last_event.msg == "Health check successful"


def test_service_lookup(worker: TalosClient, worker_node: NodeInfo) -> None:
    kubelet = worker.service("kubelet")
    assert (kubelet.id, kubelet.node) == ("kubelet", worker_node.address)
    with pytest.raises(NotFound, match='service "etcd" not defined'):
        worker.service("etcd")


def test_service_restart_of_kubelet(worker: TalosClient) -> None:
    with worker.watch("svc", "kubelet", timeout=WAIT) as watch:
        current = next(watch)
        assert (current.type, spec_of(current)) == ("created", ServiceSpec(True, True, False))

        assert worker.service_restart("kubelet") == 'Service "kubelet" restarted'
        changes = changes_until_healthy(watch)

    # v1alpha2_state.go: the Services resource exists only while the service runs.
    assert [e.type for e in changes] == ["destroyed", "created", "updated"]
    assert spec_of(changes[1]) == ServiceSpec(running=True, healthy=False, unknown=True)
    # The talosctl CLI test's expectation: `EVENTS [Running]: Health check successful`.
    last = worker.service("kubelet").last_event
    assert last is not None
    assert (last.state, last.msg) == ("Running", "Health check successful")


def test_an_event_stream_opened_before_a_restart_sees_all_of_it(worker: TalosClient) -> None:
    # events() returns once the node's hello event has arrived (machine.proto): the stream is
    # subscribed, so even with tail_events=0 nothing the restart causes is lost.
    with worker.events(tail_events=0, timeout=WAIT) as stream:
        assert worker.service_restart("kubelet") == 'Service "kubelet" restarted'
        events = items_until(
            stream, lambda e: _is_kubelet(e, "RUNNING", healthy=True), "a healthy kubelet"
        )

    actions = _kubelet_actions(events)
    assert actions[:2] == ["STOPPING", "FINISHED"]
    assert actions[-1] == "RUNNING"


def test_kubelet_cannot_be_stopped_and_starting_it_is_a_no_op(worker: TalosClient) -> None:
    # services/kubelet.go allows start and restart via the API, not stop (system.go APIStop)
    with pytest.raises(Unknown) as caught:
        worker.service_stop("kubelet")
    assert caught.value.details == 'service "kubelet" doesn\'t support stop operation via API'
    before = worker.service("kubelet").events
    assert worker.service_start("kubelet") == 'Service "kubelet" started'  # running: a no-op
    assert worker.service("kubelet").events == before
    assert worker.service("kubelet").state == "Running"


def test_service_actions_refused_as_talos_refuses_them(worker: TalosClient) -> None:
    with pytest.raises(Unknown) as caught:
        worker.service_restart("apid")
    assert caught.value.details == 'service "apid" doesn\'t support restart operation via API'

    with pytest.raises(Unknown) as missing:
        worker.service_start("nosuch")
    assert missing.value.details == 'service "nosuch" not defined'


# --------------------------------------------------------------------------- apply


def test_apply_no_reboot_label_patch_bumps_the_version(
    worker: TalosClient, worker_node: NodeInfo, restore_worker_config: MachineConfig
) -> None:
    before = restore_worker_config
    patched = apply_patches(before.raw, [LABEL_PATCH])

    result = worker.apply_configuration(patched, mode="no-reboot")

    assert result == ApplyResult(
        mode="no-reboot",
        mode_details="Applied configuration without a reboot",
        warnings=(),
        node=worker_node.address,
    )
    after = worker.machine_config()
    assert after.version == before.version + 1  # v1alpha2_state.go: NO_REBOOT bumps v1alpha1
    assert after.raw == patched
    assert after.documents[0]["machine"]["nodeLabels"] == {"pytest-talos/checked": "client-test"}
    # A fresh container node has `persistent` (controllers/config/acquire.go); NO_REBOOT
    # sets it too (SetPersistedConfig), so it now holds the applied config.
    persistent = worker.get("mc", "persistent").typed_spec
    assert isinstance(persistent, MachineConfigSpec)
    assert persistent.yaml == patched


def test_apply_auto_resolves_to_no_reboot_for_a_label(
    worker: TalosClient, restore_worker_config: MachineConfig
) -> None:
    patched = apply_patches(restore_worker_config.raw, [LABEL_PATCH])

    result = worker.apply_configuration(patched, mode="auto")

    assert (result.mode, result.mode_details) == (
        "no-reboot",
        "Applied configuration without a reboot",
    )
    assert worker.machine_config().raw == patched


def test_apply_of_an_invalid_label_is_refused_and_changes_nothing(
    worker: TalosClient, restore_worker_config: MachineConfig
) -> None:
    before = restore_worker_config
    invalid = apply_patches(before.raw, [BAD_LABEL_PATCH])

    with pytest.raises(InvalidArgument) as caught:
        worker.apply_configuration(invalid, mode="no-reboot")

    assert 'name "bad label" is invalid' in (caught.value.details or "")
    after = worker.machine_config()
    assert (after.version, after.raw) == (before.version, before.raw)  # facts B3


def test_apply_without_a_v1alpha1_document_is_refused(
    worker: TalosClient, worker_node: NodeInfo, restore_worker_config: MachineConfig
) -> None:
    hostname_only = (
        f"apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: {worker_node.hostname}\n"
        "auto: 'off'\n"
    )

    with pytest.raises(InvalidArgument) as caught:
        worker.apply_configuration(hostname_only)

    assert caught.value.details == (  # ApplyConfiguration step 6
        "the applied machine configuration doesn't contain v1alpha1 config, "
        "did you mean to patch the machine config instead?"
    )
    assert worker.machine_config().version == restore_worker_config.version


def test_apply_of_a_change_that_needs_a_reboot_in_no_reboot_mode_is_refused(
    worker: TalosClient, restore_worker_config: MachineConfig
) -> None:
    before = restore_worker_config
    retyped = apply_patches(before.raw, [TYPE_PATCH])

    with pytest.raises(InvalidArgument) as caught:
        worker.apply_configuration(retyped, mode="no-reboot")

    details = caught.value.details or ""
    assert details.startswith("this config change can't be applied in immediate mode\ndiff:\n")
    assert "\n-  type: worker\n+  type: controlplane\n" in details
    assert worker.machine_config().version == before.version

    dry = worker.apply_configuration(retyped, mode="auto", dry_run=True)
    assert dry.mode == "reboot"  # AUTO turns into REBOOT; a dry run leaves the reason out
    assert dry.mode_details.startswith(
        "Dry run summary:\nApplied configuration with a reboot (skipped in dry-run).\n"
    )


def test_apply_dry_run_shows_the_diff_and_changes_nothing(
    worker: TalosClient, restore_worker_config: MachineConfig
) -> None:
    before = restore_worker_config
    patched = apply_patches(before.raw, [LABEL_PATCH])

    dry = worker.apply_configuration(patched, mode="no-reboot", dry_run=True)

    assert dry.mode == "no-reboot"
    assert dry.warnings == ()  # ApplyConfiguration: warnings are not returned in dry run
    assert dry.mode_details.startswith(
        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\n"
        "Config diff:\n\n--- a\n+++ b\n"
    )
    assert "\n+    pytest-talos/checked: client-test\n" in dry.mode_details
    after = worker.machine_config()
    assert (after.version, after.raw) == (before.version, before.raw)

    same = worker.apply_configuration(before.raw, mode="staged", dry_run=True)
    assert same.mode == "staged"
    assert same.mode_details == (
        "Dry run summary:\nStaged configuration to be applied after the next reboot "
        "(skipped in dry-run).\nConfig diff:\n\nNo changes."
    )


def test_apply_staged_leaves_the_active_config_alone_in_container_mode(
    worker: TalosClient, restore_worker_config: MachineConfig
) -> None:
    before = restore_worker_config
    patched = apply_patches(before.raw, [LABEL_PATCH])

    result = worker.apply_configuration(patched, mode="staged")

    assert (result.mode, result.mode_details) == (
        "staged",
        "Staged configuration to be applied after the next reboot",
    )
    # STAGED sets only `persistent` (SetPersistedConfig); the active config stays.
    after = worker.machine_config()
    assert (after.version, after.raw) == (before.version, before.raw)


def test_apply_try_reverts_when_its_window_ends(
    worker: TalosClient, restore_worker_config: MachineConfig
) -> None:
    before = restore_worker_config
    patched = apply_patches(before.raw, [LABEL_PATCH])

    with worker.watch("mc", "v1alpha1", timeout=WAIT) as watch:
        current = next(watch)
        assert current.type == "created"
        assert current.resource is not None
        assert current.resource.version == before.version

        result = worker.apply_configuration(patched, mode="try", try_timeout=TRY_SECONDS)
        assert result.mode == "try"
        assert result.mode_details == (
            "Applied configuration without a reboot\nThe config is applied in 'try' mode and "
            f"will be automatically reverted back in {TRY_SECONDS}s"
        )
        tried, reverted = next(watch), next(watch)  # facts B6: back after the window

    assert tried.type == reverted.type == "updated"
    assert isinstance(spec_of(tried), MachineConfigSpec)
    assert spec_of(tried).yaml == patched
    assert tried.resource is not None
    assert tried.resource.version == before.version + 1  # v1alpha2_state.go: TRY bumps v1alpha1 ...
    assert reverted.resource is not None
    assert reverted.resource.version == before.version + 2  # ... and the revert again
    assert spec_of(reverted).yaml == before.raw
    assert worker.machine_config().raw == before.raw


def test_apply_in_reboot_mode_restarts_the_node_with_the_new_config() -> None:
    with (
        EmulatedCluster(controlplanes=1, workers=1, time_scale=EMULATOR_TIME_SCALE) as cluster,
        TalosClient.from_talosconfig(cluster.talosconfig_path, timeout=2.0, env={}) as talos,
    ):
        address = next(n.address for n in cluster.nodes if n.role == "worker")
        worker = talos.with_node(address)
        patched = apply_patches(worker.machine_config().raw, [LABEL_PATCH])

        result = worker.apply_configuration(patched, mode="reboot")

        assert result == ApplyResult(
            "reboot", "Applied configuration with a reboot", (), node=address
        )
        after = poll(
            worker.machine_config, lambda c: c.raw == patched, "rebooted node with the new config"
        )
        assert after.documents[0]["machine"]["nodeLabels"] == {
            "pytest-talos/checked": "client-test"
        }


# --------------------------------------------------------------------------- logs and events


def test_logs(
    emulated_cluster: EmulatedCluster, worker: TalosClient, worker_node: NodeInfo
) -> None:
    node = emulated_cluster.node(worker_node.address)
    lines = node.run(lambda state: state.service_log("kubelet"))

    text = worker.logs("kubelet")

    assert text == "".join(f"{line}\n" for line in lines)
    assert "kubelet" in text
    assert worker.logs("kubelet", tail=1) == f"{lines[-1]}\n"
    assert worker.logs("kubelet", tail=0) == ""
    assert worker.logs_bytes("kubelet") == text.encode()
    with pytest.raises(Unknown) as caught:
        worker.logs("nosuchservice")
    assert caught.value.details == 'log "nosuchservice" was not registered'


def test_logs_containers_are_the_service_ids(cp: TalosClient, worker: TalosClient) -> None:
    for node in (cp, worker):
        assert sorted(node.logs_containers()) == sorted(info.id for info in node.services())


def test_events_replay_the_buffer_with_typed_payloads(
    emulated_cluster: EmulatedCluster, worker: TalosClient, worker_node: NodeInfo
) -> None:
    truth = _truth_events(emulated_cluster, worker_node.address)

    with worker.events(tail_events=-1, timeout=WAIT) as stream:
        events = list(itertools.islice(stream, len(truth)))

    assert [e.id for e in events] == truth
    assert all(len(e.id) == 20 and e.node == worker_node.address for e in events)
    kinds = {type(e.payload) for e in events}
    assert {
        SequenceEvent,
        PhaseEvent,
        TaskEvent,
        ServiceStateEvent,
        MachineStatusEvent,
        AddressEvent,
    } <= kinds
    address = next(e.payload for e in events if isinstance(e.payload, AddressEvent))
    assert address.hostname == worker_node.hostname
    assert worker_node.address in address.addresses
    boot = [e.payload for e in events if isinstance(e.payload, SequenceEvent)]
    assert ("boot", "START") in [(s.sequence, s.action) for s in boot]


def test_events_hello_is_skipped(
    emulated_cluster: EmulatedCluster, worker: TalosClient, worker_node: NodeInfo
) -> None:
    async def first_two(transport: Connection) -> list[machine_pb2.Event]:
        request = machine_pb2.EventsRequest(tail_events=-1)
        target = Target(node=worker_node.address)
        stream = transport.stream(EVENTS_RPC, request, target, total_timeout=WAIT)
        try:
            return [await stream.__anext__(), await stream.__anext__()]
        finally:
            await stream.aclose()

    hello, first_real = asyncio.run(with_transport(emulated_cluster.talosconfig_path, first_two))

    # machine.proto: an empty event opens the stream, then payloads typed talos/runtime/...
    assert (hello.data.type_url, hello.data.value) == ("", b"")
    assert len(hello.id) == 20
    assert first_real.data.type_url.startswith("talos/runtime/machine.")
    with worker.events(tail_events=-1, timeout=WAIT) as stream:
        assert next(stream).id == first_real.id


def test_events_tail_options(
    emulated_cluster: EmulatedCluster, worker: TalosClient, worker_node: NodeInfo
) -> None:
    truth = _truth_events(emulated_cluster, worker_node.address)

    with worker.events(tail_events=5, timeout=WAIT) as stream:
        assert [e.id for e in itertools.islice(stream, 5)] == truth[-5:]
    with worker.events(tail_id=truth[-4], timeout=WAIT) as stream:
        assert [e.id for e in itertools.islice(stream, 3)] == truth[-3:]
    with worker.events(tail_seconds=24 * 3600, timeout=WAIT) as stream:
        assert [e.id for e in itertools.islice(stream, len(truth))] == truth
    with pytest.raises(InvalidArgument):  # refused by the call itself, not at the first next()
        worker.events(tail_events=5, tail_id=truth[0], timeout=WAIT)


def test_events_from_a_node_that_sends_no_hello_lose_nothing() -> None:
    # Fault `events-no-hello`: the stream counts as set up by its first message, which is
    # then a real event and is kept; a silent stream still ends with DeadlineExceeded at
    # the first next(), as any event stream does when its time is up.
    with (
        EmulatedCluster(
            controlplanes=1, workers=1, time_scale=EMULATOR_TIME_SCALE, faults=["events-no-hello"]
        ) as cluster,
        TalosClient.from_talosconfig(cluster.talosconfig_path, env={}) as talos,
    ):
        address = next(n.address for n in cluster.nodes if n.role == "worker")
        worker = talos.with_node(address)
        wait_until_ready(worker)  # the boot's events are all in the buffer
        truth = _truth_events(cluster, address)

        with worker.events(tail_events=3, timeout=WAIT) as stream:
            assert [e.id for e in itertools.islice(stream, 3)] == truth[-3:]
        silent = worker.events(actor_id="no-such-actor", timeout=0.3)  # nothing matches
        with pytest.raises(DeadlineExceeded, match=r"did not finish within 0\.3s"):
            next(silent)


@pytest.mark.parametrize("ending", ["close", "garbage collection"])
def test_ending_an_event_stream_ends_it_on_the_node(
    emulated_cluster: EmulatedCluster, worker: TalosClient, worker_node: NodeInfo, ending: str
) -> None:
    def subscribers() -> list[object]:
        return _event_subscribers(emulated_cluster, worker_node.address)

    before = subscribers()
    stream = worker.events(timeout=WAIT)

    # Subscribed by the time the call returned: the node holds exactly one more stream.
    (ours,) = [s for s in subscribers() if s not in before]
    if ending == "close":
        stream.close()
    else:
        del stream
        gc.collect()
    poll(subscribers, lambda now: ours not in now, "the end of the Events stream on the node")


# --------------------------------------------------------------------------- files and system


def test_list_and_read_a_talos_root_filesystem(worker: TalosClient, worker_node: NodeInfo) -> None:
    entries = {entry.name: entry for entry in worker.list("/etc")}

    assert entries["/etc"].is_dir
    assert entries["/etc"].relative_name == "."
    release = entries["/etc/os-release"]
    assert release.is_regular
    assert release.node == worker_node.address
    content = worker.read("/etc/os-release")
    assert release.size == len(content)
    assert "ID=talos" in content.decode().splitlines()
    regular = worker.list("/etc", types=["regular"])
    assert regular
    assert all(entry.is_regular for entry in regular)
    with pytest.raises(Unknown, match="path must be a regular file"):  # v1alpha1_server.go Read
        worker.read("/etc")


def test_there_is_no_shell(worker: TalosClient) -> None:
    # No shell, no busybox, no sshd in the image (docker exec sh has been seen to exit 127).
    for path in ("/bin/sh", "/bin/bash"):
        with pytest.raises(NotFound, match="no such file or directory"):
            worker.read(path)
    names = {entry.name for entry in worker.list("/", recurse=True)}
    assert "/etc/os-release" in names
    assert not {n for n in names if n.rsplit("/", 1)[-1] in ("sh", "bash", "busybox", "sshd")}


def test_kubeconfig_on_the_control_plane_only(
    cp: TalosClient, worker: TalosClient, cp_node: NodeInfo
) -> None:
    kubeconfig = yaml.safe_load(cp.kubeconfig())

    assert kubeconfig["kind"] == "Config"
    (cluster,) = kubeconfig["clusters"]
    assert cluster["cluster"]["server"] == f"https://{cp_node.address}:6443"
    assert cluster["cluster"]["certificate-authority-data"]
    with pytest.raises(Unimplemented) as caught:
        worker.kubeconfig()
    assert caught.value.details == "kubeconfig is only available on control plane nodes"


def test_netstat_lists_what_each_role_listens_on(cp: TalosClient, worker: TalosClient) -> None:
    def listeners(node: TalosClient) -> dict[int, str]:
        records = node.netstat()  # the client asks for the host network namespace
        assert all(r.listening for r in records)
        tcp = [r for r in records if r.l4proto.startswith("tcp")]
        assert all(r.state == "LISTEN" for r in tcp)
        return {r.local_port: r.process_name for r in tcp}

    on_cp, on_worker = listeners(cp), listeners(worker)

    assert on_cp[50000] == on_worker[50000] == "apid"  # CLI test: `:::50000 … LISTEN … /apid`
    assert on_cp[50001] == "trustd"
    assert on_cp[2379] == "etcd"
    assert on_worker[10250] == "kubelet"
    assert on_worker[10256] == "kube-proxy"
    assert not {50001, 6443, 2379} & set(on_worker)
    apid = next(r for r in worker.netstat() if r.local_port == 50000)
    assert (apid.l4proto, apid.local_ip, apid.pid is not None) == ("tcp6", "::", True)
    everything = worker.netstat(listening=False)
    assert {(r.l4proto, r.local_port) for r in worker.netstat()} <= {
        (r.l4proto, r.local_port) for r in everything
    }


def test_processes(worker: TalosClient) -> None:
    processes = {p.pid: p for p in worker.processes()}

    init = processes[1]
    # machined is PID 1: /usr/bin/init in the usr-merged root, started as /sbin/init
    assert (init.ppid, init.command, init.executable, init.args) == (
        0,
        "init",
        "/usr/bin/init",
        "/sbin/init",
    )
    commands = {p.command for p in processes.values()}
    assert {"apid", "containerd", "kubelet"} <= commands
    assert not {"sh", "bash", "sshd"} & commands


def test_memory_in_kilobytes(worker: TalosClient, worker_node: NodeInfo) -> None:
    memory = worker.memory()

    assert memory.node == worker_node.address
    assert 0 < memory.available_kb <= memory.total_kb
    assert 0 < memory.free_kb <= memory.total_kb
    assert 1 << 20 < memory.total_kb < 1 << 30  # between 1 GiB and 1 TiB when read as kB


def test_mounts_agree_with_proc_mounts(worker: TalosClient) -> None:
    mounts = {m.mounted_on: m for m in worker.mounts()}
    proc_mounts = worker.read("/proc/mounts").decode().splitlines()

    assert set(mounts) == {line.split()[1] for line in proc_mounts}
    root = mounts["/"]
    # a container node's root is Docker's read-only overlay (providers/docker/node.go)
    assert any(
        line.split()[:3] == [root.filesystem, "/", "overlay"] and line.split()[3].startswith("ro,")
        for line in proc_mounts
    )


def test_etcd_members_are_the_control_planes(
    cp: TalosClient, worker: TalosClient, cp_node: NodeInfo
) -> None:
    (member,) = cp.etcd_members()

    assert member == EtcdMember(
        id=member.id,
        hostname=cp_node.hostname,
        peer_urls=(f"https://{cp_node.address}:2380",),
        client_urls=(f"https://{cp_node.address}:2379",),
        is_learner=False,
    )
    assert member.id != 0
    with pytest.raises(Unimplemented) as caught:
        worker.etcd_members()
    assert caught.value.details == "member list is only available on control plane nodes"


def test_generate_client_configuration(
    emulated_cluster: EmulatedCluster, cp: TalosClient, worker: TalosClient, cp_node: NodeInfo
) -> None:
    generated = cp.generate_client_configuration(["os:reader"], dt.timedelta(minutes=10))

    cert = x509.load_pem_x509_certificate(generated.crt_pem)
    assert cert.not_valid_after_utc - cert.not_valid_before_utc <= dt.timedelta(minutes=11)
    assert "PRIVATE KEY" not in repr(generated)
    talosconfig = yaml.safe_load(generated.talosconfig)
    assert talosconfig["context"] == f"reader@{emulated_cluster.name}"  # machine.proto
    assert talosconfig["contexts"][talosconfig["context"]]["endpoints"] == []
    with TalosClient(
        emulated_cluster.endpoint, generated.ca_pem, generated.crt_pem, generated.key_pem
    ) as reader:
        assert reader.roles == ("os:reader",)
        assert reader.hostname() == cp_node.hostname
        with pytest.raises(PermissionDenied):
            reader.read("/etc/os-release")

    with pytest.raises(InvalidArgument) as caught:
        cp.generate_client_configuration(["os:reader"], 0)
    assert caught.value.details == "crt_ttl should be positive"
    with pytest.raises(Unimplemented):
        worker.generate_client_configuration(["os:reader"], 600)


def test_health_check_walks_the_talosctl_conditions(cp: TalosClient, worker: TalosClient) -> None:
    found = [progress.message for progress in cp.health_check(wait_timeout=WAIT)]
    assert found[0].startswith("discovered nodes: [")  # v1alpha1_cluster.go HealthCheck
    lines = found[1:]
    conditions = list(
        dict.fromkeys(line.removeprefix("waiting for ").rsplit(": ", 1)[0] for line in lines)
    )
    assert conditions == HEALTH_CONDITIONS
    assert {f"waiting for {c}: OK" for c in HEALTH_CONDITIONS} <= set(lines)
    with pytest.raises(Unimplemented):  # by the call itself: the stream opens eagerly
        worker.health_check(wait_timeout=WAIT)


# --------------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda node: node.reboot(), id="reboot"),
        pytest.param(lambda node: node.shutdown(), id="shutdown"),
        pytest.param(
            lambda node: node.upgrade(f"ghcr.io/siderolabs/installer:{TALOS_TAG}"), id="upgrade"
        ),
        pytest.param(lambda node: node.rollback(), id="rollback"),
    ],
)
def test_lifecycle_calls_are_refused_on_container_nodes(
    worker: TalosClient, call: Callable[[TalosClient], object]
) -> None:
    assert worker.version().in_container

    with pytest.raises(FailedPrecondition) as caught:
        call(worker)

    assert caught.value.details == CONTAINER_REFUSAL


def test_reset_takes_a_container_node_away_and_fanout_reports_it() -> None:
    with (
        EmulatedCluster(controlplanes=1, workers=1, time_scale=EMULATOR_TIME_SCALE) as cluster,
        TalosClient.from_talosconfig(cluster.talosconfig_path, timeout=2.0, env={}) as talos,
    ):
        cp_address, worker_address = (n.address for n in cluster.nodes)

        actor = talos.with_node(worker_address).reset()

        assert str(uuid.UUID(actor)) == actor
        replies = poll(
            talos.fanout_version,
            lambda r: _is_unreachable(r[worker_address]),
            "fan-out reply marking the reset worker unreachable",
        )
        assert isinstance(replies[cp_address], Version)
        assert worker_address in str(replies[worker_address])


def test_reboot_upgrade_and_rollback_on_metal_nodes() -> None:
    with (
        EmulatedCluster(
            controlplanes=1, workers=1, time_scale=EMULATOR_TIME_SCALE, platform="metal"
        ) as cluster,
        TalosClient.from_talosconfig(cluster.talosconfig_path, timeout=2.0, env={}) as talos,
    ):
        worker = talos.with_node(next(n.address for n in cluster.nodes if n.role == "worker"))
        original = worker.machine_config()
        staged = apply_patches(original.raw, [LABEL_PATCH])
        assert worker.apply_configuration(staged, mode="staged").mode == "staged"
        # STAGED changes only `persistent`: SetPersistedConfig creates it on an installed
        # metal node, which boots without one (controllers/config/acquire.go).
        assert worker.machine_config().raw == original.raw
        persistent = worker.get("mc", "persistent").typed_spec
        assert isinstance(persistent, MachineConfigSpec)
        assert persistent.yaml == staged

        actor = worker.reboot()

        assert str(uuid.UUID(actor)) == actor
        # A reboot boots the persisted config: the staged one becomes active (ApplyConfiguration).
        poll(worker.machine_config, lambda c: c.raw == staged, "staged config after reboot")

        upgrade = worker.upgrade("ghcr.io/siderolabs/installer:v1.13.10")
        assert upgrade.ack == "Upgrade request received"
        assert str(uuid.UUID(upgrade.actor_id)) == upgrade.actor_id
        # Wait on the Versions resource: a booting node publishes it afresh, whereas the
        # Version API already tells the new tag while the node is on its way down.
        poll(_versions_resource(worker), lambda tag: tag == "v1.13.10", "upgraded node")
        assert worker.version().tag == "v1.13.10"

        assert worker.rollback() is None
        poll(_versions_resource(worker), lambda tag: tag == TALOS_TAG, "rolled-back node")
        assert worker.version().tag == TALOS_TAG
