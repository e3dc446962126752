"""MachineService and ClusterService calls of the client over a FakeTransport (no socket).

Each test fakes only the replies it needs, shaped as apid sends them (one envelope
element per node, ``common.Data`` chunks for file streams), and checks both what the
client sent and what it made of the answer. How the same calls behave against a full
emulated node over real mTLS is ``tests/integration/test_client_emulator_machine.py``.
"""

from __future__ import annotations

import datetime as dt
import io
import tarfile
from collections.abc import Iterable, Iterator

import pytest
from google.protobuf import any_pb2, timestamp_pb2
from google.protobuf.message import Message

from pytest_talos._proto.cluster import cluster_pb2
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.client import TalosClient
from pytest_talos.errors import InvalidArgument, NotFound, TalosError, Unknown
from pytest_talos.models import (
    ApplyResult,
    ClientConfiguration,
    PhaseEvent,
    ServiceStateEvent,
)
from pytest_talos.transport import FakeRequest, FakeStatus, FakeTransport, Handler

NODE = "10.5.0.2"
CONFIG = b"version: v1alpha1\nmachine:\n  type: controlplane\n"
_PRIVATE = "PRIVATE" + " KEY"  # split: no key block literal in the sources


@pytest.fixture
def fake() -> dict[str, Handler]:
    """The routes of the client below (method short name -> handler); tests add theirs."""
    return {}


@pytest.fixture
def client(fake: dict[str, Handler]) -> Iterator[TalosClient]:
    with TalosClient.from_transport(FakeTransport(fake)) as talos:
        yield talos


def _ts(moment: dt.datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _chunks(data: bytes, size: int = 100) -> list[common_pb2.Data]:
    return [common_pb2.Data(bytes=data[i : i + size]) for i in range(0, len(data), size)]


def _event(payload: Message, event_id: str = "e" * 20) -> m.Event:
    data = any_pb2.Any(
        type_url="talos/runtime/" + payload.DESCRIPTOR.full_name, value=payload.SerializeToString()
    )
    return m.Event(data=data, id=event_id)


def _service(service_id: str, state: str = "Running", healthy: bool = True) -> m.ServiceInfo:
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    message = "Health check successful"
    return m.ServiceInfo(
        id=service_id,
        state=state,
        events=m.ServiceEvents(
            events=[
                m.ServiceEvent(msg="Starting service", state="Starting", ts=_ts(now)),
                m.ServiceEvent(msg=message, state=state, ts=_ts(now)),
            ]
        ),
        health=m.ServiceHealth(healthy=healthy, last_message=message, last_change=_ts(now)),
    )


def _services(_: FakeRequest) -> m.ServiceListResponse:
    listed = [_service("apid"), _service("etcd"), _service("kubelet")]
    return m.ServiceListResponse(messages=[m.ServiceList(services=listed)])


# --------------------------------------------------------------------------- services


def test_hostname_and_services(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["Hostname"] = lambda _: m.HostnameResponse(messages=[m.Hostname(hostname="node-1")])
    fake["ServiceList"] = _services

    assert client.hostname() == "node-1"
    services = {info.id: info for info in client.services()}

    assert set(services) == {"apid", "etcd", "kubelet"}
    apid = services["apid"]
    assert apid.running
    assert apid.healthy
    assert not apid.health_unknown
    assert apid.last_message == "Health check successful"
    assert apid.last_event is not None
    assert apid.last_event.state == "Running"
    assert apid.events[0].ts is not None
    assert apid.events[0].ts.tzinfo is dt.UTC


def test_service_lookup(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["ServiceList"] = _services

    assert client.service("kubelet").id == "kubelet"
    with pytest.raises(NotFound, match='service "nope" not defined'):
        client.service("nope")


def test_service_actions(client: TalosClient, fake: dict[str, Handler]) -> None:
    def action(verb: str, reply: type[Message], item: type[Message]) -> Handler:
        def answer(request: FakeRequest) -> Message:
            service = request.message.id  # type: ignore[attr-defined]
            if service != "kubelet":
                raise FakeStatus(
                    "UNKNOWN", f'service "{service}" doesn\'t support {verb} operation via API'
                )
            return reply(messages=[item(resp=f'Service "{service}" {verb}')])

        return answer

    fake["ServiceRestart"] = action("restarted", m.ServiceRestartResponse, m.ServiceRestart)
    fake["ServiceStop"] = action("stopped", m.ServiceStopResponse, m.ServiceStop)
    fake["ServiceStart"] = action("started", m.ServiceStartResponse, m.ServiceStart)

    assert client.service_restart("kubelet") == 'Service "kubelet" restarted'
    assert client.service_stop("kubelet") == 'Service "kubelet" stopped'
    assert client.service_start("kubelet") == 'Service "kubelet" started'
    with pytest.raises(Unknown, match="doesn't support restarted operation via API"):
        client.service_restart("apid")


# --------------------------------------------------------------------------- apply


def _apply_echo(request: FakeRequest) -> m.ApplyConfigurationResponse:
    sent = request.message
    assert isinstance(sent, m.ApplyConfigurationRequest)
    if sent.dry_run:
        details = "Dry run summary:\nNo changes."
    else:
        details = {
            m.ApplyConfigurationRequest.NO_REBOOT: "Applied configuration without a reboot",
            m.ApplyConfigurationRequest.STAGED: "Staged configuration",
            m.ApplyConfigurationRequest.TRY: (
                "Applied configuration without a reboot\nThe config is applied in 'try' mode "
                "and will be automatically reverted back in "
                f"{int(sent.try_mode_timeout.ToTimedelta().total_seconds())}s"
            ),
        }[sent.mode]
    warnings = [] if sent.dry_run else ["a harmless warning"]
    applied = m.ApplyConfiguration(mode=sent.mode, mode_details=details, warnings=warnings)
    return m.ApplyConfigurationResponse(messages=[applied])


def test_apply_configuration_modes(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["ApplyConfiguration"] = _apply_echo
    transport = client.async_client._transport
    assert isinstance(transport, FakeTransport)

    applied = client.apply_configuration(CONFIG)
    assert applied == ApplyResult(
        mode="no-reboot",
        mode_details="Applied configuration without a reboot",
        warnings=("a harmless warning",),
    )
    assert transport.requests[-1].message.data == CONFIG  # type: ignore[attr-defined]

    tried = client.apply_configuration(CONFIG.decode(), mode="try", try_timeout=90)
    assert tried.mode == "try"
    assert tried.mode_details.endswith("automatically reverted back in 90s")
    assert transport.requests[-1].message.data == CONFIG  # type: ignore[attr-defined]

    dry = client.apply_configuration(CONFIG, mode="auto", dry_run=True)
    assert dry.mode_details.startswith("Dry run summary:")
    assert dry.warnings == ()

    assert client.apply_configuration(CONFIG, mode="staged").mode == "staged"


def test_apply_configuration_rejections(client: TalosClient, fake: dict[str, Handler]) -> None:
    def refuse(_: FakeRequest) -> Message:
        raise FakeStatus(
            "INVALID_ARGUMENT",
            "the applied machine configuration doesn't contain v1alpha1 config, did you mean "
            "to patch the machine config instead?",
        )

    fake["ApplyConfiguration"] = refuse
    transport = client.async_client._transport
    assert isinstance(transport, FakeTransport)

    with pytest.raises(InvalidArgument, match="doesn't contain v1alpha1 config"):
        client.apply_configuration(b"apiVersion: v1alpha1\nkind: HostnameConfig\n")
    sent = len(transport.requests)
    with pytest.raises(ValueError, match="unknown apply mode 'sometimes'"):
        client.apply_configuration(CONFIG, mode="sometimes")  # type: ignore[arg-type]
    assert len(transport.requests) == sent  # refused before anything was sent


# --------------------------------------------------------------------------- logs, events


LOGS = {"apid": b"apid line 1\napid line 2\napid line 3\n", "kubelet": b"kubelet started\n"}


def _logs(request: FakeRequest) -> list[common_pb2.Data]:
    sent = request.message
    assert isinstance(sent, m.LogsRequest)
    assert (sent.namespace, sent.follow) == ("system", False)
    if sent.id not in LOGS:  # as machined: the error rides in the first message's metadata
        error = f'log "{sent.id}" was not registered'
        return [common_pb2.Data(metadata=common_pb2.Metadata(hostname=NODE, error=error))]
    lines = LOGS[sent.id].splitlines(keepends=True)
    if sent.tail_lines >= 0:
        lines = lines[-sent.tail_lines :] if sent.tail_lines else []
    return [common_pb2.Data(bytes=line) for line in lines]


def test_logs(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["Logs"] = _logs
    fake["LogsContainers"] = lambda _: m.LogsContainersResponse(
        messages=[m.LogsContainer(ids=sorted(LOGS))]
    )

    assert client.logs("apid") == "apid line 1\napid line 2\napid line 3\n"
    assert client.logs("apid", tail=1) == "apid line 3\n"
    assert client.logs_bytes("kubelet") == b"kubelet started\n"
    assert client.logs_containers() == ["apid", "kubelet"]


def test_a_node_error_in_a_streams_metadata_is_raised(
    client: TalosClient, fake: dict[str, Handler]
) -> None:
    from pytest_talos.errors import NodeError

    fake["Logs"] = _logs

    with pytest.raises(NodeError, match='log "nosuchservice" was not registered') as caught:
        client.logs("nosuchservice")
    assert caught.value.node == NODE


def _event_buffer() -> list[m.Event]:
    running = m.ServiceStateEvent.RUNNING
    buffered = [
        _event(m.ServiceStateEvent(service=name, action=running), f"{index:020d}")
        for index, name in enumerate(("apid", "etcd", "kubelet"))
    ]
    buffered.append(_event(m.PhaseEvent(phase="boot", action=m.PhaseEvent.STOP), "3" * 20))
    # A payload type the client does not know: dropped, not a failure.
    unknown = any_pb2.Any(type_url="talos/runtime/machine.FutureEvent", value=b"\x08\x01")
    buffered.append(m.Event(data=unknown, id="4" * 20))
    return buffered


def _events(request: FakeRequest) -> Iterable[m.Event]:
    sent = request.message
    assert isinstance(sent, m.EventsRequest)
    yield m.Event(data=any_pb2.Any(), id="0" * 20)  # the hello: subscribed
    buffered = _event_buffer()
    if sent.tail_events > 0:
        buffered = buffered[-sent.tail_events :]
    elif sent.tail_events == 0:
        buffered = []
    yield from buffered


def test_events_skip_hello_and_unknown_types(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["Events"] = _events
    seen = []
    with client.events(tail_events=-1) as stream:
        for event in stream:
            seen.append(event)
            if isinstance(event.payload, PhaseEvent):
                break

    assert [type(e.payload) for e in seen] == [ServiceStateEvent] * 3 + [PhaseEvent]
    first = seen[0].payload
    assert isinstance(first, ServiceStateEvent)
    assert (first.service, first.action, first.state) == ("apid", "RUNNING", "Running")
    assert all(len(e.id) == 20 for e in seen)


def test_events_tail(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["Events"] = _events
    stream = client.events(tail_events=3)  # kubelet, boot phase, a type we do not know
    first, second = next(stream), next(stream)

    assert isinstance(first.payload, ServiceStateEvent)
    assert first.payload.service == "kubelet"
    assert isinstance(second.payload, PhaseEvent)
    with pytest.raises(StopIteration):
        next(stream)  # the unknown type is skipped and the fake's stream ends
    stream.close()


# --------------------------------------------------------------------------- files


FILES = {
    "/etc/os-release": b'NAME="Talos"\nID=talos\nVERSION_ID=v1.13.9\n',
    "/etc/hostname": b"node-1\n",
}
MODIFIED = 1_700_000_000


def _list(request: FakeRequest) -> Iterable[m.FileInfo]:
    root = request.message.root  # type: ignore[attr-defined]
    yield m.FileInfo(
        name=root, is_dir=True, mode=(1 << 31) | 0o755, modified=MODIFIED, relative_name="."
    )
    for path, data in sorted(FILES.items()):
        if path.startswith(root.rstrip("/") + "/"):
            name = path.rpartition("/")[2]
            yield m.FileInfo(
                name=path, size=len(data), mode=0o644, modified=MODIFIED, relative_name=name
            )


def _read(request: FakeRequest) -> Iterable[common_pb2.Data]:
    path = request.message.path  # type: ignore[attr-defined]
    if path not in FILES:
        raise FakeStatus("NOT_FOUND", f"stat {path}: no such file or directory")
    return _chunks(FILES[path], 8)


def test_list_and_read(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["List"] = _list
    fake["Read"] = _read

    entries = {entry.name: entry for entry in client.list("/etc")}

    assert entries["/etc"].is_dir
    release = entries["/etc/os-release"]
    assert release.is_regular
    assert release.permissions == 0o644
    assert release.modified == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert client.read("/etc/os-release") == FILES["/etc/os-release"]  # chunks joined


def test_read_missing_file(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["Read"] = _read

    with pytest.raises(NotFound, match="no such file") as caught:
        client.read("/etc/nope")
    assert caught.value.method == "/machine.MachineService/Read"


def test_a_stream_error_after_some_chunks_surfaces_mapped(
    client: TalosClient, fake: dict[str, Handler]
) -> None:
    from pytest_talos.errors import Internal

    def fail_midway(_: FakeRequest) -> Iterator[common_pb2.Data]:
        yield common_pb2.Data(bytes=b"first chunk")
        raise FakeStatus("INTERNAL", "read /fail-midway: input/output error")

    fake["Read"] = fail_midway

    with pytest.raises(Internal, match="input/output error") as caught:
        client.read("/fail-midway")
    assert caught.value.method == "/machine.MachineService/Read"


def _tar(members: Iterable[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o600
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_kubeconfig_is_untarred(client: TalosClient, fake: dict[str, Handler]) -> None:
    kubeconfig = b"apiVersion: v1\nkind: Config\n"
    fake["Kubeconfig"] = lambda _: _chunks(_tar([("kubeconfig", kubeconfig)]))

    assert client.kubeconfig() == kubeconfig


def test_kubeconfig_with_unexpected_content_is_rejected(
    client: TalosClient, fake: dict[str, Handler]
) -> None:
    bad = _tar([("../../etc/passwd", b"b"), ("kubeconfig", b"a")])
    fake["Kubeconfig"] = lambda _: _chunks(bad)

    with pytest.raises(TalosError, match=r"one file named kubeconfig, it holds '\.\./"):
        client.kubeconfig()


# --------------------------------------------------------------------------- system


def _netstat(request: FakeRequest) -> m.NetstatResponse:
    sent = request.message
    assert isinstance(sent, m.NetstatRequest)
    assert sent.netns.hostnetwork  # without it Talos returns no host sockets
    assert sent.feature.pid
    records = [
        m.ConnectRecord(
            l4proto="tcp6",
            localip="::",
            localport=50000,
            remoteip="::",
            state=m.ConnectRecord.LISTEN,
            process=m.ConnectRecord.Process(pid=1234, name="apid"),
        ),
        m.ConnectRecord(
            l4proto="tcp",
            localip=NODE,
            localport=50000,
            remoteip="127.0.0.1",
            remoteport=41000,
            state=m.ConnectRecord.ESTABLISHED,
        ),
    ]
    if sent.filter == m.NetstatRequest.LISTENING:
        records = [r for r in records if r.state == m.ConnectRecord.LISTEN]
    return m.NetstatResponse(messages=[m.Netstat(connectrecord=records)])


def test_netstat(client: TalosClient, fake: dict[str, Handler]) -> None:
    fake["Netstat"] = _netstat
    listening = client.netstat()
    everything = client.netstat(listening=False)

    assert [(r.l4proto, r.local_port, r.state, r.pid, r.process_name) for r in listening] == [
        ("tcp6", 50000, "LISTEN", 1234, "apid")
    ]
    assert listening[0].listening
    assert len(everything) == 2
    established = everything[1]
    assert established.state == "ESTABLISHED"
    assert established.pid is None


def test_system_information(client: TalosClient, fake: dict[str, Handler]) -> None:
    meminfo = m.MemInfo(memtotal=4_000_000, memfree=1_000_000, memavailable=3_000_000)
    fake["Memory"] = lambda _: m.MemoryResponse(messages=[m.Memory(meminfo=meminfo)])
    mount = m.MountStat(filesystem="overlay", size=10 << 30, available=5 << 30, mounted_on="/")
    fake["Mounts"] = lambda _: m.MountsResponse(messages=[m.Mounts(stats=[mount])])
    process = m.ProcessInfo(pid=1, state="S", command="machined", executable="/sbin/init")
    fake["Processes"] = lambda _: m.ProcessesResponse(messages=[m.Process(processes=[process])])

    memory = client.memory()
    assert (memory.total_kb, memory.available_kb) == (4_000_000, 3_000_000)
    assert client.mounts()[0].mounted_on == "/"
    assert client.processes()[0].command == "machined"


def test_lifecycle_calls(client: TalosClient, fake: dict[str, Handler]) -> None:
    actor = "0f2b5c1e-3a4d-4e5f-8a9b-0c1d2e3f4a5b"
    fake["Reboot"] = lambda _: m.RebootResponse(messages=[m.Reboot(actor_id=actor)])
    fake["Reset"] = lambda _: m.ResetResponse(messages=[m.Reset(actor_id=actor)])
    fake["Upgrade"] = lambda _: m.UpgradeResponse(
        messages=[m.Upgrade(ack="Upgrade request received", actor_id=actor)]
    )
    fake["Rollback"] = lambda _: m.RollbackResponse(messages=[m.Rollback()])
    target = client.with_node("10.5.0.3")
    transport = client.async_client._transport
    assert isinstance(transport, FakeTransport)

    assert target.reboot() == actor
    assert target.reset(graceful=False, system_partitions_to_wipe=["EPHEMERAL"]) == actor
    reset = transport.requests[-1].message
    assert isinstance(reset, m.ResetRequest)
    assert not reset.graceful
    assert [(p.label, p.wipe) for p in reset.system_partitions_to_wipe] == [("EPHEMERAL", True)]
    upgrade = target.upgrade("ghcr.io/siderolabs/installer:v1.13.9")
    assert upgrade.ack == "Upgrade request received"
    assert target.rollback() is None
    assert {r.node for r in transport.requests} == {"10.5.0.3"}
    sent = len(transport.requests)
    with pytest.raises(ValueError, match="unknown reboot mode"):
        target.reboot(mode="gently")  # type: ignore[arg-type]
    assert len(transport.requests) == sent


def test_etcd_members(client: TalosClient, fake: dict[str, Handler]) -> None:
    member = m.EtcdMember(
        id=42,
        hostname="node-1",
        peer_urls=[f"https://{NODE}:2380"],
        client_urls=[f"https://{NODE}:2379"],
    )
    fake["EtcdMemberList"] = lambda _: m.EtcdMemberListResponse(
        messages=[m.EtcdMembers(members=[member])]
    )

    (found,) = client.etcd_members()

    assert found.hostname == "node-1"
    assert found.client_urls == (f"https://{NODE}:2379",)


def test_generate_client_configuration(client: TalosClient, fake: dict[str, Handler]) -> None:
    from pytest_talos.pki import CertificateAuthority, issue_client_cert

    ca = CertificateAuthority.generate()

    def generate(request: FakeRequest) -> m.GenerateClientConfigurationResponse:
        sent = request.message
        assert isinstance(sent, m.GenerateClientConfigurationRequest)
        ttl = sent.crt_ttl.ToTimedelta()
        if ttl <= dt.timedelta(0):
            raise FakeStatus("INVALID_ARGUMENT", "crt_ttl should be positive")
        issued = issue_client_cert(ca, roles=list(sent.roles), validity=ttl)
        generated = m.GenerateClientConfiguration(
            ca=ca.cert_pem, crt=issued.cert_pem, key=issued.key_pem_talos, talosconfig=b"x"
        )
        return m.GenerateClientConfigurationResponse(messages=[generated])

    fake["GenerateClientConfiguration"] = generate

    generated = client.generate_client_configuration(["os:reader"], dt.timedelta(hours=1))

    assert isinstance(generated, ClientConfiguration)
    assert generated.crt_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert _PRIVATE.encode() in generated.key_pem
    assert _PRIVATE not in repr(generated)
    with pytest.raises(InvalidArgument, match="crt_ttl should be positive"):
        client.generate_client_configuration(["os:reader"], 0)


def test_health_check_progress(client: TalosClient, fake: dict[str, Handler]) -> None:
    checks = ("etcd to be healthy", "apid to be ready", "kubelet to be healthy")
    fake["HealthCheck"] = lambda _: [
        cluster_pb2.HealthCheckProgress(message=f"waiting for {check}: OK") for check in checks
    ]

    lines = [progress.message for progress in client.health_check(wait_timeout=5)]

    assert lines == [f"waiting for {check}: OK" for check in checks]
