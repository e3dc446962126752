"""Fault profiles: each one shows the defect it names, and they compose.

Profiles whose effect belongs to a bigger area are tested there: no-mtls and
client-certs-unverified (apid),
lenient-validation, version-bump-on-reject, try-no-revert (apply), cosi-writable (cosi),
no-kubeconfig, node-not-ready, etcd-member-missing, ssh-open, extra-port (cluster).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml
from google.protobuf import duration_pb2, empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.emulator import FAULTS, EmulatedCluster, describe_faults
from pytest_talos.emulator.faults import resolve_faults
from pytest_talos.emulator.resources import T
from pytest_talos.errors import ConfigError
from pytest_talos.patches import apply_patches

from .conftest import RawClient, tls_from_talosconfig, wait_for

M = "/machine.MachineService/"
EMPTY = empty_pb2.Empty()

Setup = Callable[..., tuple[EmulatedCluster, RawClient, str]]


@pytest.fixture
def setup(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> Setup:
    def make(*faults: str, **kwargs: object) -> tuple[EmulatedCluster, RawClient, str]:
        kwargs.setdefault("workers", 0)
        cluster = make_cluster(faults=list(faults), **kwargs)
        return cluster, client_for(cluster), cluster.nodes[-1].address

    return make


def _services(client: RawClient, address: str) -> dict[str, m.ServiceInfo]:
    reply = client.call(address, M + "ServiceList", EMPTY)
    return {service.id: service for service in reply.messages[0].services}


def test_required_profiles_exist_with_descriptions() -> None:
    required = {
        "ssh-open",
        "shell-present",
        "extra-port",
        "lenient-validation",
        "version-bump-on-reject",
        "kubelet-crashloop",
        "flapping-service",
        "try-no-revert",
        "no-kubeconfig",
        "node-not-ready",
        "wrong-version",
        "no-mtls",
    }
    assert required <= set(FAULTS)
    lines = describe_faults().splitlines()
    assert len(lines) == len(FAULTS)
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_unknown_fault_is_a_clear_error() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_faults(["ssh-open", "no-such-fault"])
    assert "no-such-fault" in str(caught.value)
    assert "--list-faults" in str(caught.value)


def test_all_profiles_compose(setup: Setup) -> None:
    cluster, client, _ = setup(*FAULTS, workers=1)
    assert cluster.fault_set.names == tuple(FAULTS)
    assert client.call(cluster.nodes[0].address, M + "Hostname", EMPTY).messages


def test_shell_present(setup: Setup) -> None:
    _, client, address = setup("shell-present")
    data = client.call(address, M + "Read", m.ReadRequest(path="/bin/sh"))
    assert data[0].bytes.startswith(b"\x7fELF")


def test_rw_rootfs(setup: Setup) -> None:
    _, client, address = setup("rw-rootfs")
    text = b"".join(
        f.bytes for f in client.call(address, M + "Read", m.ReadRequest(path="/proc/mounts"))
    ).decode()
    root = next(line.split() for line in text.splitlines() if line.split()[1] == "/")
    assert root[3].startswith("rw")


def test_pid1_not_machined(setup: Setup) -> None:
    _, client, address = setup("pid1-not-machined")
    processes = client.call(address, M + "Processes", EMPTY).messages[0].processes
    assert next(p for p in processes if p.pid == 1).command == "systemd"


def test_ssh_open_shows_in_processes_and_netstat(setup: Setup) -> None:
    _, client, address = setup("ssh-open")
    commands = {
        p.command for p in client.call(address, M + "Processes", EMPTY).messages[0].processes
    }
    assert "sshd" in commands
    request = m.NetstatRequest(l4proto=m.NetstatRequest.L4proto(tcp=True, tcp6=True))
    ports = {
        r.localport for r in client.call(address, M + "Netstat", request).messages[0].connectrecord
    }
    assert 22 in ports


def test_wrong_version_only_on_the_last_node(setup: Setup) -> None:
    cluster, client, last = setup("wrong-version", workers=1)
    first = cluster.nodes[0].address
    assert client.call(first, M + "Version", EMPTY).messages[0].version.tag == "v1.13.9"
    assert client.call(last, M + "Version", EMPTY).messages[0].version.tag == "v1.12.6"
    resource = client.call(
        last,
        "/cosi.resource.State/Get",
        s.GetRequest(namespace="runtime", type="Versions.runtime.talos.dev", id="version"),
    ).resource
    assert yaml.safe_load(resource.spec.yaml_spec)["version"] == "v1.13.9"


def test_service_down(setup: Setup) -> None:
    _, client, address = setup("service-down")
    udevd = _services(client, address)["udevd"]
    assert udevd.state == "Failed"
    assert udevd.events.events[-1].state == "Failed"


def _failures(service: m.ServiceInfo) -> list[m.ServiceEvent]:
    return [event for event in service.events.events if event.state == "Failed"]


def test_kubelet_crashloop(setup: Setup) -> None:
    _, client, address = setup("kubelet-crashloop", time_scale=20)
    kubelet = wait_for(
        lambda: _services(client, address)["kubelet"],
        lambda k: len(_failures(k)) >= 2,
        what="two kubelet failures",
    )
    assert "going to restart forever" in _failures(kubelet)[0].msg


def test_flapping_service(setup: Setup) -> None:
    _, client, address = setup("flapping-service", time_scale=60)
    containerd = wait_for(
        lambda: _services(client, address)["containerd"],
        lambda c: c.state == "Running" and bool(_failures(c)),
        what="containerd to fail and come back",
    )
    assert containerd.events.events[0].state == "Preparing"


def test_services_resource_stale(setup: Setup) -> None:
    _, client, address = setup("services-resource-stale")
    client.call(address, M + "ServiceStop", m.ServiceStopRequest(id="kubelet"))
    assert _services(client, address)["kubelet"].state == "Finished"
    stale = client.call(
        address,
        "/cosi.resource.State/Get",
        s.GetRequest(namespace="runtime", type="Services.v1alpha1.talos.dev", id="kubelet"),
    )
    assert stale.resource.metadata.id == "kubelet"


def test_services_resource_goes_away_without_the_fault(setup: Setup) -> None:
    _, client, address = setup()
    client.call(address, M + "ServiceStop", m.ServiceStopRequest(id="kubelet"))
    with pytest.raises(GRPCError) as caught:
        client.call(
            address,
            "/cosi.resource.State/Get",
            s.GetRequest(namespace="runtime", type="Services.v1alpha1.talos.dev", id="kubelet"),
        )
    assert caught.value.status == Status.NOT_FOUND


def test_cidr_overlap(setup: Setup) -> None:
    cluster, _, address = setup("cidr-overlap")
    config = cluster.node(address).run(lambda st: st.active_config)
    subnets = yaml.safe_load(config.split(b"\n---\n")[0])["cluster"]["network"]["podSubnets"]
    assert subnets == ["127.0.0.0/8"]


def test_reader_can_apply(setup: Setup) -> None:
    cluster, _, address = setup("reader-can-apply")
    reader = RawClient(tls_from_talosconfig(cluster.issue_client(["os:reader"]).talosconfig))
    try:
        config = cluster.node(address).run(lambda st: st.active_config)
        reply = reader.call(
            address,
            M + "ApplyConfiguration",
            m.ApplyConfigurationRequest(data=config, mode=m.ApplyConfigurationRequest.NO_REBOOT),
        )
        assert reply.messages[0].mode_details == "Applied configuration without a reboot"
    finally:
        reader.close()


def test_events_no_hello(setup: Setup) -> None:
    _, client, address = setup("events-no-hello")
    events = client.collect(
        address, M + "Events", m.EventsRequest(tail_events=3), until=lambda got: len(got) >= 3
    )
    assert all(event.data.type_url for event in events)


def _active_config(cluster: EmulatedCluster, address: str) -> bytes:
    return cluster.node(address).run(lambda st: st.active_config)


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


_LABEL_PATCH = "machine:\n  nodeLabels:\n    example.com/fault: 'yes'\n"


def test_package_manager_present(setup: Setup) -> None:
    _, client, address = setup("package-manager-present")
    for path in ("/usr/bin/apk", "/sbin/apk"):
        data = client.call(address, M + "Read", m.ReadRequest(path=path))
        assert data[0].bytes.startswith(b"\x7fELF")


def test_labels_not_synced(setup: Setup) -> None:
    cluster, client, address = setup("labels-not-synced")
    patched = apply_patches(_active_config(cluster, address), [_LABEL_PATCH])
    _apply(client, address, patched, m.ApplyConfigurationRequest.NO_REBOOT)
    assert b"example.com/fault" in _active_config(cluster, address)
    labels = cluster.node(address).run(lambda st: st.kube_node().labels)
    assert "example.com/fault" not in labels


def test_dry_run_applies(setup: Setup) -> None:
    cluster, client, address = setup("dry-run-applies")
    patched = apply_patches(_active_config(cluster, address), [_LABEL_PATCH])
    reply = _apply(client, address, patched, m.ApplyConfigurationRequest.NO_REBOOT, dry_run=True)
    assert "Dry run summary" in reply.mode_details
    assert _active_config(cluster, address) == patched


def test_try_not_cancelled(setup: Setup) -> None:
    cluster, client, address = setup("try-not-cancelled")
    original = _active_config(cluster, address)
    tried = apply_patches(original, [_LABEL_PATCH])
    _apply(client, address, tried, m.ApplyConfigurationRequest.TRY, try_seconds=60)
    _apply(client, address, original, m.ApplyConfigurationRequest.NO_REBOOT)
    assert cluster.node(address).run(lambda st: st.try_pending)


def test_reader_reads_secrets(setup: Setup) -> None:
    cluster, _, address = setup("reader-reads-secrets")
    reader = RawClient(tls_from_talosconfig(cluster.issue_client(["os:reader"]).talosconfig))
    try:
        request = s.GetRequest(namespace="config", type=T.MACHINE_CONFIGS, id="v1alpha1")
        reply = reader.call(address, "/cosi.resource.State/Get", request)
        assert reply.resource.metadata.id == "v1alpha1"
    finally:
        reader.close()


def test_logs_broken(setup: Setup) -> None:
    _, client, address = setup("logs-broken")
    assert "udevd" in _services(client, address)
    request = m.LogsRequest(namespace="system", id="udevd", tail_lines=5)
    with pytest.raises(GRPCError) as caught:
        client.call(address, M + "Logs", request)
    assert caught.value.message == 'log "udevd" was not registered'


def test_resources_unlistable(setup: Setup) -> None:
    _, client, address = setup("resources-unlistable")
    request = s.ListRequest(namespace="network", type="HostnameStatuses.net.talos.dev")
    with pytest.raises(GRPCError) as caught:
        client.call(address, "/cosi.resource.State/List", request)
    assert caught.value.status == Status.INTERNAL


def _member_names(client: RawClient, address: str) -> set[str]:
    request = s.ListRequest(namespace="cluster", type="Members.cluster.talos.dev")
    return {reply.resource.metadata.id for reply in client.call(
        address, "/cosi.resource.State/List", request)}


def test_member_hidden_only_on_the_last_node(setup: Setup) -> None:
    cluster, client, last = setup("member-hidden", workers=1)
    first = cluster.nodes[0]
    assert first.hostname in _member_names(client, first.address)
    assert first.hostname not in _member_names(client, last)
    assert cluster.nodes[-1].hostname in _member_names(client, last)


def test_maintenance_version_only_on_the_last_node(setup: Setup) -> None:
    cluster, client, last = setup("maintenance-version", workers=1)
    first = cluster.nodes[0].address
    assert client.call(first, M + "Version", EMPTY).messages[0].features.rbac
    assert not client.call(last, M + "Version", EMPTY).messages[0].HasField("features")
