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
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.faults import resolve_faults
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
    request = m.NetstatRequest(
        l4proto=m.NetstatRequest.L4proto(tcp=True, tcp6=True),
        netns=m.NetstatRequest.NetNS(hostnetwork=True),  # host sockets only when asked
    )
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
    _, client, address = setup("service-down", time_scale=20)  # one control plane
    trustd = wait_for(
        lambda: _services(client, address)["trustd"],
        lambda t: t.state == "Finished",
        what="trustd to stop",
    )
    # the containerd runner's stop, then system.go's end of the run; never started again
    assert [e.msg for e in trustd.events.events][-2:] == [
        f"Sending SIGTERM to task trustd (PID {_pid(trustd)}, container trustd)",
        "Service finished successfully",
    ]
    assert not trustd.health.healthy


def _pid(service: m.ServiceInfo) -> str:
    started = [e.msg for e in service.events.events if e.msg.startswith("Started task")]
    return started[-1].split("(PID ")[1].split(")")[0]


def _crashes(service: m.ServiceInfo) -> list[m.ServiceEvent]:
    return [e for e in service.events.events if e.state == "Waiting" and "restart" in e.msg]


def test_kubelet_crashloop(setup: Setup) -> None:
    cluster, client, address = setup("kubelet-crashloop", time_scale=20)
    kubelet = wait_for(
        lambda: _services(client, address)["kubelet"],
        lambda k: len(_crashes(k)) >= 2,
        what="two kubelet crashes",
    )
    # restart.go: Waiting, never Failed; containerd.go: the task's exit code and last log
    assert not [e for e in kubelet.events.events if e.state == "Failed"]
    assert _crashes(kubelet)[0].msg.startswith(
        'Error running Containerd(kubelet), going to restart forever: task "kubelet" failed: '
        'exit code 1 (last log "'
    )
    assert "CRI v1 runtime API is not implemented" in _crashes(kubelet)[0].msg
    # StartAllServices never sees kubelet up: the node stays in the booting stage
    assert cluster.node(address).run(lambda st: st.stage) == "booting"


def test_flapping_service(setup: Setup) -> None:
    _, client, address = setup("flapping-service", time_scale=60)
    containerd = wait_for(
        lambda: _services(client, address)["containerd"],
        lambda c: c.state == "Running" and bool(_crashes(c)) and c.health.healthy,
        what="containerd to be killed and come back healthy",
    )
    crash = _crashes(containerd)[0].msg
    assert crash.startswith('Error running Process(["/bin/containerd" "--address" ')
    assert ", going to restart forever: signal: killed (last log " in crash
    after = [e.msg for e in containerd.events.events][-2:]
    assert after[0].startswith('Process Process(["/bin/containerd"')  # no pre-start events
    assert after[1] == "Health check successful"


def test_machined_unhealthy(setup: Setup) -> None:
    cluster, client, address = setup("machined-unhealthy", time_scale=20)
    machined = wait_for(
        lambda: _services(client, address)["machined"],
        lambda m: not m.health.healthy and not m.health.unknown,
        what="machined's health check to fail",
    )
    assert machined.state == "Running"
    assert machined.events.events[-1].msg == (
        "Health check failed: dial unix /system/run/machined/machine.sock: connect: resource "
        "temporarily unavailable"
    )
    # the boot had ended; the machine is not ready any more (machine_status.go servicesCheck)
    stage, unhealthy = cluster.node(address).run(lambda st: (st.stage, st.unhealthy_services()))
    assert (stage, unhealthy) == ("running", ["machined"])


def test_services_resource_stale(setup: Setup) -> None:
    _, client, address = setup("services-resource-stale", "service-down", time_scale=20)
    wait_for(
        lambda: _services(client, address)["trustd"],
        lambda t: t.state == "Finished",
        what="trustd to stop",
    )
    stale = client.call(
        address,
        "/cosi.resource.State/Get",
        s.GetRequest(namespace="runtime", type="Services.v1alpha1.talos.dev", id="trustd"),
    )
    assert stale.resource.metadata.id == "trustd"


def test_services_resource_goes_away_without_the_fault(setup: Setup) -> None:
    cluster, client, address = setup()
    cluster.node(address).run(lambda st: st.services.stop(st.services.services["trustd"]))
    assert _services(client, address)["trustd"].state == "Finished"
    with pytest.raises(GRPCError) as caught:
        client.call(
            address,
            "/cosi.resource.State/Get",
            s.GetRequest(namespace="runtime", type="Services.v1alpha1.talos.dev", id="trustd"),
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
    assert _services(client, address)["containerd"].state == "Running"
    request = m.LogsRequest(namespace="system", id="containerd", tail_lines=5)
    with pytest.raises(GRPCError) as caught:
        client.call(address, M + "Logs", request)
    assert caught.value.message == 'log "containerd" was not registered'


def test_resources_unlistable(setup: Setup) -> None:
    _, client, address = setup("resources-unlistable")
    request = s.ListRequest(namespace="network", type="HostnameStatuses.net.talos.dev")
    with pytest.raises(GRPCError) as caught:
        client.call(address, "/cosi.resource.State/List", request)
    assert caught.value.status == Status.INTERNAL


def _member_names(client: RawClient, address: str) -> set[str]:
    request = s.ListRequest(namespace="cluster", type="Members.cluster.talos.dev")
    return {
        reply.resource.metadata.id
        for reply in client.call(address, "/cosi.resource.State/List", request)
    }


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
