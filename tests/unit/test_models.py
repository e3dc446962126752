"""Models, and the conversion of protobuf replies into them (no sockets)."""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import gzip
import io
import tarfile
from pathlib import Path

import pytest
from google.protobuf import any_pb2, timestamp_pb2
from google.protobuf.message import Message

import pytest_talos.models as models_module
from pytest_talos import models
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.resource.definitions.cluster import cluster_pb2
from pytest_talos._proto.resource.definitions.enums import enums_pb2
from pytest_talos._proto.resource.definitions.runtime import runtime_pb2
from pytest_talos._proto.v1alpha1 import meta_pb2, resource_pb2, state_pb2
from pytest_talos.client import _convert as convert
from pytest_talos.client import _resources as res
from pytest_talos.client._calls import untar_kubeconfig
from pytest_talos.errors import InvalidArgument, NotFound, TalosError

MOMENT = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


def _ts() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(MOMENT)
    return stamp


def _any(payload: Message, prefix: str = "talos/runtime/") -> any_pb2.Any:
    return any_pb2.Any(
        type_url=prefix + payload.DESCRIPTOR.full_name, value=payload.SerializeToString()
    )


# --------------------------------------------------------------------------- the models module


def test_models_import_no_protobuf_and_nothing_from_the_package() -> None:
    package = Path(models_module.__file__).parent  # the models package: every module of it
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for source in package.glob("*.py")
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }

    assert len(list(package.glob("*.py"))) > 1
    assert not {name for name in imported if name and name.split(".")[0] in ("google", "grpclib")}
    from_package = {name for name in imported if name and name.startswith("pytest_talos")}
    assert from_package == {
        "pytest_talos.models.events",
        "pytest_talos.models.machine",
        "pytest_talos.models.resources",
    }


def test_models_are_frozen_and_hashable() -> None:
    version = models.Version("v1", "s", "go", "linux", "amd64", "metal", "metal", True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        version.tag = "v2"  # type: ignore[misc]
    resource = models.Resource(
        metadata=models.ResourceMetadata("ns", "T", "id", 1, labels={"a": "b"}), spec={"x": 1}
    )

    assert len({version, version}) == 1
    assert hash(resource) == hash(dataclasses.replace(resource))
    assert (resource.id, resource.type, resource.namespace, resource.version) == (
        "id",
        "T",
        "ns",
        1,
    )


def test_secrets_are_not_in_reprs() -> None:
    generated = models.ClientConfiguration(b"CA", b"CRT", b"SECRET-KEY", b"SECRET-CONFIG")
    config = models.MachineConfig(raw=b"token: SECRET", documents=[{"token": "SECRET"}], version=3)
    spec = models.MachineConfigSpec(yaml=b"token: SECRET")

    for value in (generated, config, spec):
        assert "SECRET" not in repr(value)


def test_file_info_mode_helpers() -> None:
    directory = models.FileInfo("/etc", 0, (1 << 31) | 0o755, None, True)
    link = models.FileInfo("/l", 0, (1 << 27) | 0o777, None, False, link="/t")
    regular = models.FileInfo("/f", 1, 0o640, None, False)

    assert (directory.is_regular, directory.permissions) == (False, 0o755)
    assert (link.is_symlink, link.is_regular) == (True, False)
    assert (regular.is_regular, regular.permissions) == (True, 0o640)


def test_small_helpers() -> None:
    udp = models.ConnectRecord("udp", "0.0.0.0", 53, "0.0.0.0", 0, "CLOSE")
    assert udp.listening
    assert models.HostnameStatusSpec("n1", "").fqdn == "n1"
    assert models.ServiceStateEvent("kubelet", "FAILED", "boom").state == "Failed"
    config = models.MachineConfig(
        raw=b"", documents=[{"version": "v1alpha1"}, {"kind": "HostnameConfig"}], version=1
    )
    assert config.kinds == ("v1alpha1", "HostnameConfig")


# --------------------------------------------------------------------------- machine API


def test_version_conversion() -> None:
    message = m.Version(
        metadata=common_pb2.Metadata(hostname="10.5.0.3"),
        version=m.VersionInfo(
            tag="v1.13.9", sha="3ebd10a", go_version="go1.24", os="linux", arch="amd64"
        ),
        platform=m.PlatformInfo(name="container", mode="container"),
    )

    version = convert.version(message, "ignored")

    assert version == models.Version(
        tag="v1.13.9",
        sha="3ebd10a",
        go_version="go1.24",
        os="linux",
        arch="amd64",
        platform="container",
        platform_mode="container",
        rbac=None,
        node="10.5.0.3",
    )
    assert version.in_container
    message.features.rbac = True
    assert convert.version(message, None).rbac is True


def test_service_conversion() -> None:
    info = m.ServiceInfo(
        id="kubelet",
        state="Failed",
        events=m.ServiceEvents(events=[m.ServiceEvent(msg="boom", state="Failed", ts=_ts())]),
    )

    service = convert.service(info, "n1")

    assert service.health_unknown  # no health reported at all
    assert not service.healthy
    assert not service.running
    assert service.last_event == models.ServiceEvent("boom", "Failed", MOMENT)
    assert service.node == "n1"


def test_apply_result_conversion() -> None:
    reply = m.ApplyConfiguration(
        mode=m.ApplyConfigurationRequest.STAGED, mode_details="Staged", warnings=["w1"]
    )

    assert convert.apply_result(reply, None) == models.ApplyResult("staged", "Staged", ("w1",))
    assert set(convert.APPLY_MODES) == {"reboot", "auto", "no-reboot", "staged", "try"}


def test_file_info_and_netstat_conversion() -> None:
    entry = convert.file_info(m.FileInfo(name="/f", size=3, mode=0o600, modified=0), None)
    assert entry.modified is None

    record = convert.connect_record(
        m.ConnectRecord(
            l4proto="tcp",
            localip="0.0.0.0",
            localport=22,
            state=m.ConnectRecord.LISTEN,
            process=m.ConnectRecord.Process(pid=7, name="x"),
        ),
        "n1",
    )
    assert (record.state, record.pid, record.process_name, record.node) == ("LISTEN", 7, "x", "n1")
    newer = m.ConnectRecord.FromString(b"\x30\x63")  # state = 99, unknown to our proto
    bare = convert.connect_record(newer, None)
    assert (bare.state, bare.pid) == ("99", None)  # an enum value newer than our proto


def test_memory_and_duration() -> None:
    memory = convert.memory(
        m.Memory(meminfo=m.MemInfo(memtotal=10, memfree=2, memavailable=5, swaptotal=1)), None
    )
    assert (memory.total_kb, memory.free_kb, memory.available_kb, memory.swap_total_kb) == (
        10,
        2,
        5,
        1,
    )
    assert convert.seconds_to_duration(1.5).ToNanoseconds() == 1_500_000_000
    assert convert.seconds_to_duration(dt.timedelta(minutes=1)).seconds == 60


# --------------------------------------------------------------------------- events


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (
            m.SequenceEvent(
                sequence="boot",
                action=m.SequenceEvent.STOP,
                error=common_pb2.Error(code=common_pb2.LOCKED, message="busy"),
            ),
            models.SequenceEvent("boot", "STOP", "busy", "LOCKED"),
        ),
        (m.PhaseEvent(phase="p", action=m.PhaseEvent.START), models.PhaseEvent("p", "START")),
        (m.TaskEvent(task="t", action=m.TaskEvent.STOP), models.TaskEvent("t", "STOP")),
        (
            m.ServiceStateEvent(
                service="etcd",
                action=m.ServiceStateEvent.RUNNING,
                message="ok",
                health=m.ServiceHealth(healthy=True, last_message="fine"),
            ),
            models.ServiceStateEvent("etcd", "RUNNING", "ok", True, False, "fine"),
        ),
        (m.RestartEvent(cmd=1), models.RestartEvent(1)),
        (m.ConfigLoadErrorEvent(error="e"), models.ConfigLoadErrorEvent("e")),
        (m.ConfigValidationErrorEvent(error="v"), models.ConfigValidationErrorEvent("v")),
        (
            m.AddressEvent(hostname="h", addresses=["10.5.0.2"]),
            models.AddressEvent("h", ("10.5.0.2",)),
        ),
        (
            m.MachineStatusEvent(
                stage=m.MachineStatusEvent.RUNNING,
                status=m.MachineStatusEvent.MachineStatus(
                    ready=False,
                    unmet_conditions=[
                        m.MachineStatusEvent.MachineStatus.UnmetCondition(
                            name="nodeReady", reason="not yet"
                        )
                    ],
                ),
            ),
            models.MachineStatusEvent(
                "RUNNING", False, (models.UnmetCondition("nodeReady", "not yet"),)
            ),
        ),
    ],
)
def test_all_nine_event_payloads(payload: Message, expected: models.EventPayload) -> None:
    event = convert.event(m.Event(data=_any(payload), id="x" * 20, actor_id="a"), "n1")

    assert event == models.Event("x" * 20, "a", expected, "n1")


def test_hello_unknown_and_broken_events_are_dropped() -> None:
    hello = m.Event(data=any_pb2.Any(), id="h" * 20)
    unknown = m.Event(data=any_pb2.Any(type_url="talos/runtime/machine.NewEvent", value=b"\x08"))
    google_prefix = m.Event(data=_any(m.RestartEvent(cmd=1), "type.googleapis.com/"))
    broken = m.Event(
        data=any_pb2.Any(type_url="talos/runtime/machine.RestartEvent", value=b"\xff\xff")
    )

    for message in (hello, unknown, google_prefix, broken):
        assert convert.event(message, None) is None
    assert len(convert.EVENT_DECODERS) == 9


# --------------------------------------------------------------------------- resources


def _resource(
    rtype: str,
    spec: Message | None,
    yaml_spec: str = "",
    version: str = "7",
) -> resource_pb2.Resource:
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(
            namespace="ns",
            type=rtype,
            id="id",
            version=version,
            owner="ctl",
            phase="running",
            created=_ts(),
            labels={"k": "v"},
            finalizers=["f"],
        ),
        spec=resource_pb2.Spec(
            proto_spec=spec.SerializeToString() if spec is not None else b"", yaml_spec=yaml_spec
        ),
    )


def test_resource_conversion() -> None:
    found = res.resource(_resource("Unknowns.x.dev", None, "a: 1\nb: [x]\n"), "n1")

    assert found.metadata == models.ResourceMetadata(
        namespace="ns",
        type="Unknowns.x.dev",
        id="id",
        version=7,
        owner="ctl",
        phase="running",
        created=MOMENT,
        updated=None,
        labels={"k": "v"},
        finalizers=("f",),
    )
    assert found.spec == {"a": 1, "b": ["x"]}
    assert found.typed_spec is None
    assert found.node == "n1"


def test_typed_spec_decoding() -> None:
    member = cluster_pb2.MemberSpec(
        node_id="n",
        addresses=[
            common_pb2.NetIP(ip=bytes([10, 5, 0, 2])),
            common_pb2.NetIP(ip=bytes(15) + b"\x01"),
        ],
        hostname="cp1",
        machine_type=enums_pb2.TYPE_WORKER,
    )
    decoded = res.typed_spec("Members.cluster.talos.dev", member.SerializeToString())
    assert decoded == models.MemberSpec("n", ("10.5.0.2", "::1"), "cp1", "worker", "", None)

    status = runtime_pb2.MachineStatusSpec(stage=enums_pb2.MACHINE_STAGE_BOOTING)
    assert res.typed_spec("MachineStatuses.runtime.talos.dev", status.SerializeToString()) == (
        models.MachineStatusSpec("booting", False)
    )
    machine_type = config_pb2.MachineTypeSpec(machine_type=config_pb2.CONTROL_PLANE)
    assert res.typed_spec("MachineTypes.config.talos.dev", machine_type.SerializeToString()) == (
        models.MachineTypeSpec("controlplane")
    )
    assert res.typed_spec("Members.cluster.talos.dev", b"\xff\xff\xff") is None
    assert res.typed_spec("Members.cluster.talos.dev", b"") is None


def test_resource_event_conversion() -> None:
    event = state_pb2.Event(
        event_type=state_pb2.UPDATED,
        resource=_resource("T", None, version="2"),
        old=_resource("T", None, version="1"),
    )

    converted = res.resource_event(event, "n1")

    assert converted.type == "updated"
    assert converted.resource is not None
    assert converted.resource.version == 2
    assert converted.old is not None
    assert converted.old.version == 1
    assert res.resource_event(state_pb2.Event(event_type=state_pb2.BOOTSTRAPPED), None) == (
        models.ResourceEvent("bootstrapped", None)
    )
    errored = res.resource_event(state_pb2.Event(event_type=state_pb2.ERRORED, error="gone"), None)
    assert errored.error == "gone"


def test_machine_config_from_proto_and_from_yaml() -> None:
    raw = b"# comment\nversion: v1alpha1\n---\napiVersion: v1alpha1\nkind: HostnameConfig\n"
    spec = config_pb2.MachineConfigSpec(yaml_marshalled=raw)
    from_proto = res.machine_config(
        res.resource(_resource(res.MACHINE_CONFIG_TYPE, spec, version="4"), None)
    )
    assert (from_proto.raw, from_proto.version) == (raw, 4)
    assert from_proto.kinds == ("v1alpha1", "HostnameConfig")

    as_yaml_string = "|\n  version: v1alpha1\n  machine: {type: worker}\n"
    from_yaml = res.machine_config(
        res.resource(_resource(res.MACHINE_CONFIG_TYPE, None, as_yaml_string), None)
    )
    assert from_yaml.documents == [{"version": "v1alpha1", "machine": {"type": "worker"}}]


def _definition(rtype: str, namespace: str, *aliases: str) -> models.ResourceDefinitionSpec:
    return models.ResourceDefinitionSpec(rtype, rtype.split(".")[0], namespace, all_aliases=aliases)


DEFINITIONS = [
    _definition("Services.v1alpha1.talos.dev", "runtime", "svc", "service", "services"),
    _definition("MachineConfigs.config.talos.dev", "config", "mc", "machineconfig"),
    _definition("Statuses.a.dev", "a", "status"),
    _definition("Statuses.b.dev", "b", "status"),
]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("svc", "Services.v1alpha1.talos.dev"),
        ("SERVICES", "Services.v1alpha1.talos.dev"),
        ("machineconfigs.config.talos.dev", "MachineConfigs.config.talos.dev"),
        ("Mc", "MachineConfigs.config.talos.dev"),
    ],
)
def test_resolve(name: str, expected: str) -> None:
    assert res.resolve(name, DEFINITIONS).resource_type == expected


def test_resolve_failures() -> None:
    with pytest.raises(NotFound, match='resource "members" is not registered'):
        res.resolve("members", DEFINITIONS, node="n1")
    with pytest.raises(InvalidArgument, match=r"matches Statuses\.a\.dev, Statuses\.b\.dev"):
        res.resolve("status", DEFINITIONS)


def test_definition_from_proto_or_yaml() -> None:
    spec = meta_pb2.ResourceDefinitionSpec(
        resource_type="Members.cluster.talos.dev",
        default_namespace="cluster",
        all_aliases=["members"],
        sensitivity=meta_pb2.ResourceDefinitionSpec.SENSITIVE,
        print_columns=[
            meta_pb2.ResourceDefinitionSpec.PrintColumn(name="Host", json_path="{.hostname}")
        ],
    )
    from_proto = res.definition_of(res.resource(_resource(res.RD_TYPE, spec), None))
    assert from_proto is not None
    assert from_proto.sensitive
    assert from_proto.print_columns == (models.PrintColumn("Host", "{.hostname}"),)

    yaml_only = "type: Members.cluster.talos.dev\ndefaultNamespace: cluster\nallAliases: [m]\n"
    from_yaml = res.definition_of(res.resource(_resource(res.RD_TYPE, None, yaml_only), None))
    assert from_yaml is not None
    assert (from_yaml.default_namespace, from_yaml.all_aliases) == ("cluster", ("m",))


# --------------------------------------------------------------------------- kubeconfig


def _tar(*members: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _unfinished_tar(name: str, data: bytes) -> bytes:
    """As machined sends it (v1alpha1_server.go Kubeconfig): the gzip writer is closed, the
    tar writer never is, so the file's bytes end the stream (no padding, no end blocks)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o600
    return gzip.compress(info.tobuf(tarfile.USTAR_FORMAT) + data)


def test_untar_kubeconfig() -> None:
    assert untar_kubeconfig(_tar(("kubeconfig", b"apiVersion: v1\n"))) == b"apiVersion: v1\n"
    assert untar_kubeconfig(_tar(("./kubeconfig", b"x"))) == b"x"


def test_untar_kubeconfig_reads_the_unfinished_archive_machined_sends() -> None:
    kubeconfig = b"apiVersion: v1\nkind: Config\n" * 40  # not a multiple of 512 bytes
    assert untar_kubeconfig(_unfinished_tar("kubeconfig", kubeconfig)) == kubeconfig
    unfinished = io.BytesIO(_unfinished_tar("kubeconfig", kubeconfig))
    with tarfile.open(fileobj=unfinished) as tar, pytest.raises(tarfile.ReadError):
        tar.getmembers()  # what reading the whole archive meets


def test_untar_kubeconfig_refuses_a_cut_short_file() -> None:
    data = _unfinished_tar("kubeconfig", b"x" * 1000)
    raw = gzip.decompress(data)[:-10]
    with pytest.raises(TalosError, match=r"cut short|not a valid"):
        untar_kubeconfig(gzip.compress(raw))


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (
            _tar(("passwd", b"a"), ("kubeconfig", b"b")),
            "one file named kubeconfig, it holds 'passwd'",
        ),
        (_tar(("passwd", b"a")), "one file named kubeconfig, it holds 'passwd'"),
        (_tar(), "it holds nothing"),
        (b"not a tarball", "not a valid .tar.gz"),
    ],
    # gzip headers carry a timestamp: stable ids keep pytest-xdist workers in agreement
    ids=["other-file-first", "wrong-name", "empty", "not-gzip"],
)
def test_untar_kubeconfig_rejects_anything_else(data: bytes, text: str) -> None:
    with pytest.raises(TalosError, match=text):
        untar_kubeconfig(data)
