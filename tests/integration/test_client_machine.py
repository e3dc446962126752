"""MachineService and ClusterService calls of the client against the minimal apid."""

from __future__ import annotations

import datetime as dt

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.errors import InvalidArgument, NotFound, TalosError, Unknown
from pytest_talos.models import (
    ApplyResult,
    ClientConfiguration,
    PhaseEvent,
    ServiceStateEvent,
)
from tests.integration.conftest import APID_HOST, OTHER_NODE
from tests.integration.minimal_server import MinimalApid, _kubeconfig_tar

CONFIG = b"version: v1alpha1\nmachine:\n  type: controlplane\n"


def test_hostname_and_services(client: TalosClient) -> None:
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


def test_service_lookup(client: TalosClient) -> None:
    assert client.service("kubelet").id == "kubelet"
    with pytest.raises(NotFound, match='service "nope" not defined'):
        client.service("nope")


def test_service_actions(client: TalosClient) -> None:
    assert client.service_restart("kubelet") == 'Service "kubelet" restarted'
    assert client.service_stop("kubelet") == 'Service "kubelet" stopped'
    assert client.service_start("kubelet") == 'Service "kubelet" started'
    with pytest.raises(Unknown, match="doesn't support restart operation via API"):
        client.service_restart("apid")


def test_apply_configuration_modes(client: TalosClient) -> None:
    applied = client.apply_configuration(CONFIG)
    assert applied == ApplyResult(
        mode="no-reboot",
        mode_details="Applied configuration without a reboot",
        warnings=("a harmless warning",),
    )

    tried = client.apply_configuration(CONFIG.decode(), mode="try", try_timeout=90)
    assert tried.mode == "try"
    assert tried.mode_details.endswith("automatically reverted back in 90s")

    dry = client.apply_configuration(CONFIG, mode="auto", dry_run=True)
    assert dry.mode_details.startswith("Dry run summary:")
    assert dry.warnings == ()

    assert client.apply_configuration(CONFIG, mode="staged").mode == "staged"


def test_apply_configuration_rejections(client: TalosClient) -> None:
    with pytest.raises(InvalidArgument, match="doesn't contain v1alpha1 config"):
        client.apply_configuration(b"apiVersion: v1alpha1\nkind: HostnameConfig\n")
    with pytest.raises(ValueError, match="unknown apply mode 'sometimes'"):
        client.apply_configuration(CONFIG, mode="sometimes")  # type: ignore[arg-type]


def test_logs(client: TalosClient) -> None:
    assert client.logs("apid") == "apid line 1\napid line 2\napid line 3\n"
    assert client.logs("apid", tail=1) == "apid line 3\n"
    assert client.logs_bytes("kubelet") == b"kubelet started\n"
    assert client.logs_containers() == ["apid", "kubelet"]


def test_events_skip_hello_and_unknown_types(client: TalosClient) -> None:
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


def test_events_tail(client: TalosClient) -> None:
    stream = client.events(tail_events=3)  # kubelet, boot phase, a type we do not know
    first, second = next(stream), next(stream)
    stream.close()

    assert isinstance(first.payload, ServiceStateEvent)
    assert first.payload.service == "kubelet"
    assert isinstance(second.payload, PhaseEvent)
    with pytest.raises(StopIteration):
        next(stream)


def test_list_and_read(client: TalosClient) -> None:
    entries = {entry.name: entry for entry in client.list("/etc")}

    assert entries["/etc"].is_dir
    release = entries["/etc/os-release"]
    assert release.is_regular
    assert release.permissions == 0o644
    assert release.modified == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert b"ID=talos" in client.read("/etc/os-release")


def test_read_missing_file(client: TalosClient) -> None:
    with pytest.raises(NotFound, match="no such file"):
        client.read("/etc/nope")


def test_kubeconfig_is_untarred(client: TalosClient) -> None:
    assert client.kubeconfig() == b"apiVersion: v1\nkind: Config\n"


def test_kubeconfig_with_unexpected_content_is_rejected(
    client: TalosClient, apid: MinimalApid
) -> None:
    node = apid.nodes[OTHER_NODE]
    bad = _kubeconfig_tar([("kubeconfig", b"a"), ("../../etc/passwd", b"b")])
    apid.call(lambda: setattr(node, "kubeconfig", bad))

    with pytest.raises(TalosError, match="exactly one file named kubeconfig"):
        client.with_node(OTHER_NODE).kubeconfig()


def test_netstat(client: TalosClient) -> None:
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


def test_system_information(client: TalosClient) -> None:
    memory = client.memory()
    assert (memory.total_kb, memory.available_kb) == (4_000_000, 3_000_000)
    assert client.mounts()[0].mounted_on == "/"
    assert client.processes()[0].command == "machined"


def test_lifecycle_calls(client: TalosClient) -> None:
    target = client.with_node(OTHER_NODE)

    assert len(target.reboot()) == 36
    assert len(target.reset(graceful=False, system_partitions_to_wipe=["EPHEMERAL"])) == 36
    upgrade = target.upgrade("ghcr.io/siderolabs/installer:v1.13.9")
    assert upgrade.ack == "Upgrade request received"
    assert target.rollback() is None
    with pytest.raises(ValueError, match="unknown reboot mode"):
        target.reboot(mode="gently")  # type: ignore[arg-type]


def test_etcd_members(client: TalosClient) -> None:
    (member,) = client.etcd_members()

    assert member.hostname == "node-1"
    assert member.client_urls == (f"https://{APID_HOST}:2379",)


def test_generate_client_configuration(client: TalosClient) -> None:
    generated = client.generate_client_configuration(["os:reader"], dt.timedelta(hours=1))

    assert isinstance(generated, ClientConfiguration)
    assert generated.crt_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert b"PRIVATE KEY" in generated.key_pem
    assert "PRIVATE KEY" not in repr(generated)
    with pytest.raises(InvalidArgument, match="crt_ttl should be positive"):
        client.generate_client_configuration(["os:reader"], 0)


def test_generated_credentials_connect_with_their_role(
    client: TalosClient, apid: MinimalApid
) -> None:
    generated = client.generate_client_configuration(["os:reader"], 600)

    with TalosClient(
        apid.endpoint, generated.ca_pem, generated.crt_pem, generated.key_pem
    ) as reader:
        assert reader.roles == ("os:reader",)
        assert reader.hostname() == "node-1"


def test_health_check_progress(client: TalosClient) -> None:
    lines = [progress.message for progress in client.health_check(wait_timeout=5)]

    assert lines == [
        "waiting for etcd to be healthy: OK",
        "waiting for apid to be ready: OK",
        "waiting for kubelet to be healthy: OK",
    ]
