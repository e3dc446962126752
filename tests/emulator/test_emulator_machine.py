"""MachineService read APIs of the emulator: version, system data, files, services, logs,
events (machine.proto, mode.go, field report)."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable

import pytest
from google.protobuf import empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.node.host.system import MODE_DIR
from pytest_talos.talos_api import EMULATOR_BUILT

from .conftest import RawClient, wait_for

EMPTY = empty_pb2.Empty()
M = "/machine.MachineService/"


@pytest.fixture(scope="module")
def cp(shared_cluster: EmulatedCluster) -> str:
    return shared_cluster.nodes[0].address


@pytest.fixture(scope="module")
def worker(shared_cluster: EmulatedCluster) -> str:
    return shared_cluster.nodes[-1].address


# ---- version and system data ----------------------------------------------------------------


def test_version_reports_container_platform(admin: RawClient, cp: str) -> None:
    version = admin.call(cp, M + "Version", EMPTY).messages[0]
    assert (version.version.tag, version.version.os, version.version.arch) == (
        "v1.13.9",
        "linux",
        "amd64",
    )
    assert version.version.built == EMULATOR_BUILT  # real builds leave it empty
    assert (version.platform.name, version.platform.mode) == ("container", "container")
    assert version.features.rbac


def test_metal_platform_profile(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(platform="metal", workers=0)
    version = client_for(cluster).call(cluster.nodes[0].address, M + "Version", EMPTY)
    assert version.messages[0].platform.mode == "metal"


def test_hostname(admin: RawClient, shared_cluster: EmulatedCluster, worker: str) -> None:
    reply = admin.call(worker, M + "Hostname", EMPTY)
    assert reply.messages[0].hostname == shared_cluster.nodes[-1].hostname


def test_memory_is_in_kilobytes(admin: RawClient, cp: str) -> None:
    meminfo = admin.call(cp, M + "Memory", EMPTY).messages[0].meminfo
    assert 0 < meminfo.memfree < meminfo.memtotal < 64 * 1024 * 1024


# ---- files (the system model, List and Read errors: test_emulator_system.py) ---------------


def test_list_etc_contains_os_release(admin: RawClient, cp: str) -> None:
    infos = admin.call(cp, M + "List", m.ListRequest(root="/etc"))
    names = {info.relative_name for info in infos}
    assert {".", "os-release", "hostname"} <= names
    root = next(info for info in infos if info.relative_name == ".")
    assert root.is_dir
    assert root.mode & MODE_DIR


def test_read_os_release_says_talos(admin: RawClient, cp: str) -> None:
    data = b"".join(
        f.bytes for f in admin.call(cp, M + "Read", m.ReadRequest(path="/etc/os-release"))
    )
    assert "ID=talos" in data.decode().splitlines()


def test_copy_is_a_tar_gz(admin: RawClient, cp: str) -> None:
    data = b"".join(f.bytes for f in admin.call(cp, M + "Copy", m.CopyRequest(root_path="/etc")))
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as archive:
        assert "etc/os-release" in archive.getnames()


# ---- services -----------------------------------------------------------------------------


def test_services_per_role(admin: RawClient, cp: str, worker: str) -> None:
    def ids(address: str) -> list[str]:
        reply = admin.call(address, M + "ServiceList", EMPTY)
        return [service.id for service in reply.messages[0].services]

    # v1alpha1_sequencer.go: a container-mode node runs no udevd, auditd, syslogd, dashboard
    common = ["apid", "containerd", "cri", "kubelet", "machined"]
    assert ids(cp) == sorted([*common, "etcd", "trustd"])
    assert ids(worker) == common


def test_services_are_running_and_healthy(admin: RawClient, cp: str) -> None:
    services = admin.call(cp, M + "ServiceList", EMPTY).messages[0].services
    for service in services:
        assert service.state == "Running", service.id
        assert service.health.healthy, service.id  # every container-mode service is checked
    kubelet = next(s for s in services if s.id == "kubelet")
    # service_runner.go Run: the events of one start
    assert [(e.state, e.msg.split(" (")[0]) for e in kubelet.events.events] == [
        ("Starting", "Starting service"),
        ("Waiting", kubelet.events.events[1].msg.split(" (")[0]),
        ("Preparing", "Running pre state"),
        ("Preparing", "Creating service runner"),
        ("Running", "Started task kubelet"),
        ("Running", "Health check successful"),
    ]
    assert kubelet.events.events[1].msg.startswith("Waiting for volumes /var/lib, ")
    assert kubelet.events.events[1].msg.endswith(
        ' to be mounted, service "cri" to be "up", time sync, network'
    )
    machined = next(s for s in services if s.id == "machined")
    assert machined.events.events[3].msg == "Service started as goroutine"
    containerd = next(s for s in services if s.id == "containerd")
    assert containerd.events.events[3].msg.startswith(
        'Process Process(["/bin/containerd" "--address" "/system/run/containerd/containerd.sock"'
    )


@pytest.mark.parametrize(
    ("path", "service", "message"),
    [
        ("ServiceRestart", "apid", 'service "apid" doesn\'t support restart operation via API'),
        ("ServiceStop", "etcd", 'service "etcd" doesn\'t support stop operation via API'),
        ("ServiceStop", "kubelet", 'service "kubelet" doesn\'t support stop operation via API'),
        ("ServiceStart", "nope", 'service "nope" not defined'),
    ],
)
def test_service_api_rules(
    admin: RawClient, cp: str, path: str, service: str, message: str
) -> None:
    request_type = getattr(m, f"{path}Request")
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, M + path, request_type(id=service))
    assert (caught.value.status, caught.value.message) == (Status.UNKNOWN, message)


def test_starting_a_running_service_is_a_no_op(admin: RawClient, cp: str) -> None:
    # system.go APIStart: a running service is skipped before the permission check
    start = admin.call(cp, M + "ServiceStart", m.ServiceStartRequest(id="apid"))
    assert start.messages[0].resp == 'Service "apid" started'


def test_kubelet_start_restart(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, time_scale=10)
    client, address = client_for(cluster), cluster.nodes[0].address

    def kubelet() -> m.ServiceInfo:
        services = client.call(address, M + "ServiceList", EMPTY).messages[0].services
        found: m.ServiceInfo = next(s for s in services if s.id == "kubelet")
        return found

    start = client.call(address, M + "ServiceStart", m.ServiceStartRequest(id="kubelet"))
    assert start.messages[0].resp == 'Service "kubelet" started'  # running: a no-op
    restart = client.call(address, M + "ServiceRestart", m.ServiceRestartRequest(id="kubelet"))
    assert restart.messages[0].resp == 'Service "kubelet" restarted'
    healthy = wait_for(kubelet, lambda k: k.health.healthy, what="kubelet healthy")
    messages = [e.msg for e in healthy.events.events]
    assert messages[-1] == "Health check successful"
    # the containerd runner's stop, the end of that run, then a whole new start
    stop = messages.index("Service finished successfully")
    assert messages[stop - 1].startswith("Sending SIGTERM to task kubelet (PID ")
    assert messages[stop + 1] == "Starting service"


# ---- logs -----------------------------------------------------------------------------------


# Services whose daemon writes nothing of its own at start
# (pytest_talos.emulator.node.services.runner start_lines: a goroutine runner writes nothing
# itself; trustd logs only CSRs).
QUIET = {"auditd", "dashboard", "syslogd", "trustd", "udevd"}


def test_every_service_that_logs_at_start_has_logs(admin: RawClient, cp: str) -> None:
    ids = admin.call(cp, M + "LogsContainers", EMPTY).messages[0].ids
    assert "kubelet" in ids
    logged = set()
    for service in ids:
        frames = admin.call(
            cp, M + "Logs", m.LogsRequest(namespace="system", id=service, tail_lines=-1)
        )
        if b"".join(f.bytes for f in frames):
            logged.add(service)
    assert logged == set(ids) - QUIET


def test_logs_tail_lines(admin: RawClient, cp: str) -> None:
    frames = admin.call(cp, M + "Logs", m.LogsRequest(namespace="system", id="apid", tail_lines=1))
    assert b"".join(f.bytes for f in frames).count(b"\n") == 1


def test_unknown_log_is_not_registered(admin: RawClient, cp: str) -> None:
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, M + "Logs", m.LogsRequest(namespace="system", id="nosuchservice"))
    assert caught.value.message == 'log "nosuchservice" was not registered'
    frames = admin.call(
        cp, M + "Logs", m.LogsRequest(namespace="system", id="nosuchservice"), nodes=[cp]
    )
    assert frames[0].metadata.error.endswith('log "nosuchservice" was not registered')


def test_logs_follow_delivers_new_lines(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, time_scale=10)
    client, address = client_for(cluster), cluster.nodes[0].address
    request = m.LogsRequest(namespace="system", id="kubelet", follow=True, tail_lines=0)

    restart_requested = False

    def restarted(frames: list[common_pb2.Data]) -> bool:
        # First asked once the stream is open: restart kubelet when the node follows its
        # log (a restart before that is not "new lines" for tail_lines=0).
        nonlocal restart_requested
        if not restart_requested:
            node = cluster.node(address)
            wait_for(lambda: node.run(lambda st: st.logs.subscriber_count), what="a log follower")
            node.run(lambda st: st.services.restart_if_running("kubelet"))
            restart_requested = True
        text = b"".join(f.bytes for f in frames)
        return b"received stop signal" in text and b'"Kubelet version"' in text

    text = b"".join(f.bytes for f in client.collect(address, M + "Logs", request, until=restarted))
    # tail_lines=0: no backlog, only what was logged while following, in order.
    assert text.index(b"received stop signal") < text.index(b'"Kubelet version"')


# ---- events -----------------------------------------------------------------------------------


def test_events_start_with_hello_then_backlog(admin: RawClient, cp: str) -> None:
    events = admin.collect(
        cp, M + "Events", m.EventsRequest(tail_events=-1), until=lambda got: len(got) > 60
    )
    hello = events[0]
    assert hello.data.type_url == ""
    assert len(hello.id) == 20
    assert all(e.data.type_url.startswith("talos/runtime/machine.") for e in events[1:])
    assert "talos/runtime/machine.ServiceStateEvent" in {e.data.type_url for e in events}
    ids = [e.id for e in events[1:]]
    assert ids == sorted(ids)


def _at_least(count: int) -> Callable[[list[m.Event]], bool]:
    def enough(got: list[m.Event]) -> bool:
        return len(got) >= count

    return enough


def test_events_tail_counts(admin: RawClient, cp: str) -> None:
    for count in (5, 20):
        events = admin.collect(
            cp,
            M + "Events",
            m.EventsRequest(tail_events=count),
            until=_at_least(count + 1),
        )
        assert len(events) == count + 1
        assert events[0].data.type_url == ""


def test_events_tail_zero_sends_only_hello(admin: RawClient, cp: str) -> None:
    events = admin.collect_for(cp, M + "Events", m.EventsRequest(tail_events=0), seconds=0.5)
    assert [e.data.type_url for e in events] == [""]


def test_events_tail_id_returns_newer_events(admin: RawClient, cp: str) -> None:
    everything = admin.collect(
        cp, M + "Events", m.EventsRequest(tail_events=-1), until=lambda got: len(got) > 40
    )[1:]
    pivot = everything[10].id
    newer = admin.collect(
        cp, M + "Events", m.EventsRequest(tail_id=pivot), until=lambda got: len(got) > 14
    )[1:]
    assert newer[0].id == everything[11].id
    assert all(event.id > pivot for event in newer)


def test_events_reject_two_tail_options(admin: RawClient, cp: str) -> None:
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, M + "Events", m.EventsRequest(tail_events=3, tail_seconds=5))
    assert caught.value.status == Status.INVALID_ARGUMENT


def test_events_actor_filter_and_service_state_payload(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0)
    client, address = client_for(cluster), cluster.nodes[0].address
    events = client.collect(
        address,
        M + "Events",
        m.EventsRequest(tail_events=-1, with_actor_id="no-such-actor"),
        until=lambda got: len(got) >= 1,
    )
    assert events[0].actor_id == "no-such-actor"
    everything = client.collect(
        address, M + "Events", m.EventsRequest(tail_events=-1), until=lambda got: len(got) > 30
    )
    state_events = [
        e for e in everything if e.data.type_url == "talos/runtime/machine.ServiceStateEvent"
    ]
    payload = m.ServiceStateEvent.FromString(state_events[-1].data.value)
    assert payload.service
    assert payload.action in (m.ServiceStateEvent.RUNNING, m.ServiceStateEvent.PREPARING)


def test_extension_services_may_be_controlled(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, extension_services=["tailscale"])
    client, address = client_for(cluster), cluster.nodes[0].address
    reply = client.call(address, M + "ServiceStop", m.ServiceStopRequest(id="ext-tailscale"))
    assert reply.messages[0].resp == 'Service "ext-tailscale" stopped'
    services = client.call(address, M + "ServiceList", EMPTY).messages[0].services
    assert next(s for s in services if s.id == "ext-tailscale").state == "Finished"


def test_events_fan_out_over_nodes(admin: RawClient, shared_cluster: EmulatedCluster) -> None:
    cp, worker = shared_cluster.nodes[0].address, shared_cluster.nodes[-1].address
    events = admin.collect(
        cp,
        M + "Events",
        m.EventsRequest(tail_events=2),
        nodes=[cp, worker],
        until=lambda got: len(got) >= 6,
    )
    by_node: dict[str, list[m.Event]] = {}
    for event in events:
        by_node.setdefault(event.metadata.hostname, []).append(event)
    assert set(by_node) == {cp, worker}
    for received in by_node.values():
        assert received[0].data.type_url == ""  # each node's hello comes first
        assert len(received) == 3
