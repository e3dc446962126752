"""Cluster-level behaviour of the emulator: Kubernetes API and kubeconfig, etcd members,
client configuration, health checks, listeners and addresses (machine.proto, integration/api)."""

from __future__ import annotations

import base64
import gzip
import io
import socket
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from google.protobuf import duration_pb2, empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from pytest_talos._proto.cluster import cluster_pb2 as c
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.patches import apply_patches

from .conftest import RawClient, tls_from_talosconfig, wait_for

M = "/machine.MachineService/"
EMPTY = empty_pb2.Empty()
CP_PORTS = {50000, 50001, 6443, 2379, 2380, 10250}
WORKER_PORTS = {50000, 10250}


def _kubeconfig_archive(client: RawClient, address: str) -> bytes:
    return b"".join(f.bytes for f in client.call(address, M + "Kubeconfig", EMPTY))


def _first_member(archive: bytes) -> tuple[tarfile.TarInfo | None, bytes]:
    """The first file of the archive and its bytes, read as talosctl's extractor reads the
    reply (machined leaves the tar unfinished: nothing follows the file's bytes)."""
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        member = tar.next()
        if member is None:
            return None, b""
        extracted = tar.extractfile(member)
        assert extracted is not None
        return member, extracted.read()


def _kubeconfig(archive: bytes) -> bytes:
    member, data = _first_member(archive)
    assert member is not None
    assert member.name == "kubeconfig"
    return data


def _name(obj: Any) -> str:
    return str(obj.metadata.name)


def _ready(node: Any) -> str:
    return str(next(cond.status for cond in node.status.conditions if cond.type == "Ready"))


def _core_api(kubeconfig: bytes, tmp_path: Path) -> k8s.CoreV1Api:
    path = tmp_path / "kubeconfig"
    path.write_bytes(kubeconfig)
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path), client_configuration=configuration
    )
    configuration.retries = urllib3.Retry(total=0)
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


# ---- kubeconfig and the Kubernetes API ------------------------------------------------------


def test_kubeconfig_is_a_tar_gz_with_one_private_file(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    cp = shared_cluster.nodes[0].address
    archive = _kubeconfig_archive(admin, cp)
    member, data = _first_member(archive)
    assert member is not None
    assert member.name == "kubeconfig"
    assert member.isreg()
    assert member.mode == 0o600
    # v1alpha1_server.go Kubeconfig closes the gzip writer only: the tar ends with the bytes
    raw = gzip.decompress(archive)
    assert raw.endswith(data)
    assert len(raw) == tarfile.BLOCKSIZE + len(data)
    document = yaml.safe_load(data)
    assert document["clusters"][0]["cluster"]["server"] == f"https://{cp}:6443"
    ca = base64.b64decode(document["clusters"][0]["cluster"]["certificate-authority-data"])
    assert b"BEGIN CERTIFICATE" in ca


def test_kubeconfig_only_on_control_planes(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    with pytest.raises(GRPCError) as caught:
        admin.call(shared_cluster.nodes[-1].address, M + "Kubeconfig", EMPTY)
    assert (caught.value.status, caught.value.message) == (
        Status.UNIMPLEMENTED,
        "kubeconfig is only available on control plane nodes",
    )


def test_kubernetes_client_lists_ready_nodes(
    admin: RawClient, shared_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    api = _core_api(
        _kubeconfig(_kubeconfig_archive(admin, shared_cluster.nodes[0].address)), tmp_path
    )
    nodes: list[Any] = api.list_node(_request_timeout=10).items
    assert sorted(map(_name, nodes)) == sorted(x.hostname for x in shared_cluster.nodes)
    assert {_ready(node) for node in nodes} == {"True"}
    pods: list[Any] = api.list_namespaced_pod("kube-system", _request_timeout=10).items
    assert any(_name(pod).startswith("kube-apiserver-") for pod in pods)


def test_node_labels_from_the_config_reach_the_node_object(
    make_cluster: Callable[..., EmulatedCluster],
    client_for: Callable[..., RawClient],
    tmp_path: Path,
) -> None:
    cluster = make_cluster(workers=0)
    client, address = client_for(cluster), cluster.nodes[0].address
    api = _core_api(_kubeconfig(_kubeconfig_archive(client, address)), tmp_path)
    config = cluster.node(address).run(lambda st: st.active_config)
    patched = apply_patches(config, ["machine:\n  nodeLabels:\n    example.com/team: db\n"])
    client.call(
        address,
        M + "ApplyConfiguration",
        m.ApplyConfigurationRequest(data=patched, mode=m.ApplyConfigurationRequest.NO_REBOOT),
    )
    node: Any = api.read_node(cluster.nodes[0].hostname, _request_timeout=10)
    assert node.metadata.labels["example.com/team"] == "db"


def test_node_not_ready_fault(
    make_cluster: Callable[..., EmulatedCluster],
    client_for: Callable[..., RawClient],
    tmp_path: Path,
) -> None:
    cluster = make_cluster(faults=["node-not-ready"])
    client = client_for(cluster)
    api = _core_api(_kubeconfig(_kubeconfig_archive(client, cluster.nodes[0].address)), tmp_path)
    nodes: list[Any] = api.list_node(_request_timeout=10).items
    ready = {_name(node): _ready(node) for node in nodes}
    assert ready == {cluster.nodes[0].hostname: "True", cluster.nodes[1].hostname: "False"}


def test_no_kubeconfig_fault(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, faults=["no-kubeconfig"])
    archive = _kubeconfig_archive(client_for(cluster), cluster.nodes[0].address)
    assert _first_member(archive) == (None, b"")


# ---- etcd, bootstrap, client configuration -----------------------------------------------------


def test_etcd_members_are_the_control_planes(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    reply = admin.call(
        shared_cluster.nodes[0].address, M + "EtcdMemberList", m.EtcdMemberListRequest()
    )
    members = reply.messages[0].members
    controlplanes = [n for n in shared_cluster.nodes if n.role == "controlplane"]
    assert sorted(x.hostname for x in members) == sorted(n.hostname for n in controlplanes)
    assert all(x.peer_urls[0].endswith(":2380") and not x.is_learner for x in members)


def test_etcd_member_missing_fault(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(controlplanes=2, workers=0, faults=["etcd-member-missing"])
    reply = client_for(cluster).call(
        cluster.nodes[0].address, M + "EtcdMemberList", m.EtcdMemberListRequest()
    )
    assert [x.hostname for x in reply.messages[0].members] == [cluster.nodes[0].hostname]
    # Talos's own health check only asks for the members to agree and to be among the control
    # planes (pkg/cluster/check/etcd.go): a missing member passes it.
    progress = client_for(cluster).call(
        cluster.nodes[0].address,
        "/cluster.ClusterService/HealthCheck",
        c.HealthCheckRequest(wait_timeout=duration_pb2.Duration(seconds=30)),
    )
    messages = [p.message for p in progress]
    assert "waiting for etcd members to be consistent across nodes: OK" in messages
    assert "waiting for etcd members to be control plane nodes: OK" in messages


def test_bootstrap_of_a_running_cluster(admin: RawClient, shared_cluster: EmulatedCluster) -> None:
    with pytest.raises(GRPCError) as caught:
        admin.call(shared_cluster.nodes[0].address, M + "Bootstrap", m.BootstrapRequest())
    assert (caught.value.status, caught.value.message) == (
        Status.ALREADY_EXISTS,
        "etcd data directory is not empty",
    )
    with pytest.raises(GRPCError) as worker:
        admin.call(shared_cluster.nodes[-1].address, M + "Bootstrap", m.BootstrapRequest())
    assert worker.value.message == "bootstrap is only available on control plane nodes"


def test_generate_client_configuration(admin: RawClient, shared_cluster: EmulatedCluster) -> None:
    cp = shared_cluster.nodes[0].address
    request = m.GenerateClientConfigurationRequest(
        roles=["os:reader"], crt_ttl=duration_pb2.Duration(seconds=3600)
    )
    generated = admin.call(cp, M + "GenerateClientConfiguration", request).messages[0]
    document = yaml.safe_load(generated.talosconfig)
    assert document["context"] == f"reader@{shared_cluster.name}"
    assert document["contexts"][document["context"]]["endpoints"] == []
    reader = RawClient(tls_from_talosconfig(generated.talosconfig))
    try:
        assert reader.call(cp, M + "Version", EMPTY).messages
        with pytest.raises(GRPCError) as caught:
            reader.call(cp, M + "Kubeconfig", EMPTY)
        assert caught.value.status == Status.PERMISSION_DENIED
    finally:
        reader.close()
    with pytest.raises(GRPCError) as bad_ttl:
        admin.call(
            cp,
            M + "GenerateClientConfiguration",
            m.GenerateClientConfigurationRequest(roles=["os:reader"]),
        )
    assert (bad_ttl.value.status, bad_ttl.value.message) == (
        Status.INVALID_ARGUMENT,
        "crt_ttl should be positive",
    )


# ---- health check ---------------------------------------------------------------------------


def test_health_check_walks_every_condition(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    progress = admin.call(
        shared_cluster.nodes[0].address,
        "/cluster.ClusterService/HealthCheck",
        c.HealthCheckRequest(wait_timeout=duration_pb2.Duration(seconds=30)),
    )
    messages = [p.message for p in progress]
    addresses = [node.address for node in shared_cluster.nodes]
    assert messages[0] == "discovered nodes: [" + " ".join(f'"{a}"' for a in addresses) + "]"
    assert messages[1] == "waiting for etcd to be healthy: ..."
    assert messages[2] == "waiting for etcd to be healthy: OK"
    assert "waiting for all k8s nodes to report ready: OK" in messages
    assert len([text for text in messages if text.endswith(": OK")]) == 16


def test_health_check_fails_on_an_unhealthy_cluster(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(faults=["node-not-ready"], time_scale=20)
    client = client_for(cluster)
    request = c.HealthCheckRequest(wait_timeout=duration_pb2.Duration(seconds=10))
    with pytest.raises(GRPCError) as caught:
        client.call(cluster.nodes[0].address, "/cluster.ClusterService/HealthCheck", request)
    assert str(caught.value.message).startswith("all k8s nodes to report ready: ")
    assert cluster.nodes[1].hostname in str(caught.value.message)


# ---- listeners and addresses -----------------------------------------------------------------


def _open_ports(address: str, ports: set[int]) -> set[int]:
    found = set()
    for port in ports:
        with socket.socket() as probe:
            probe.settimeout(2)
            if probe.connect_ex((address, port)) == 0:
                found.add(port)
    return found


def test_each_node_listens_exactly_where_a_real_one_does(
    shared_cluster: EmulatedCluster,
) -> None:
    probe = CP_PORTS | {22, 8080, 50002}
    cp, worker = shared_cluster.nodes[0], shared_cluster.nodes[-1]
    assert _open_ports(cp.address, probe) == CP_PORTS
    assert _open_ports(worker.address, probe) == WORKER_PORTS
    assert _open_ports(shared_cluster.vacant_address, probe) == set()


def test_ssh_open_and_extra_port_faults(make_cluster: Callable[..., EmulatedCluster]) -> None:
    cluster = make_cluster(workers=0, faults=["ssh-open", "extra-port"])
    address = cluster.nodes[0].address
    assert _open_ports(address, {22, 8080}) == {22, 8080}
    with socket.create_connection((address, 22), timeout=5) as ssh:
        assert ssh.recv(64).startswith(b"SSH-2.0-")


def test_nodes_sit_in_one_slash_24_starting_at_dot_2(shared_cluster: EmulatedCluster) -> None:
    addresses = [node.address for node in shared_cluster.nodes]
    assert addresses[0].endswith(".2")
    assert len({a.rsplit(".", 1)[0] for a in [*addresses, shared_cluster.vacant_address]}) == 1
    assert shared_cluster.vacant_address not in addresses
    assert [n.hostname for n in shared_cluster.nodes] == [
        "talos-default-controlplane-1",
        "talos-default-controlplane-2",
        "talos-default-worker-1",
    ]


def test_two_clusters_run_side_by_side(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    first, second = make_cluster(workers=0), make_cluster(workers=0)
    assert first.nodes[0].address != second.nodes[0].address
    for cluster in (first, second):
        reply = client_for(cluster).call(cluster.nodes[0].address, M + "Hostname", EMPTY)
        assert reply.messages[0].hostname == cluster.nodes[0].hostname


def test_fifty_nodes_all_answer(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(controlplanes=3, workers=47)
    targets = [node.address for node in cluster.nodes]
    reply = client_for(cluster).call(targets[0], M + "Version", EMPTY, nodes=targets, timeout=30)
    assert sorted(msg.metadata.hostname for msg in reply.messages) == sorted(targets)
    assert not [msg for msg in reply.messages if msg.metadata.error]


def test_talosconfig_file(shared_cluster: EmulatedCluster) -> None:
    path = shared_cluster.talosconfig_path
    assert path.stat().st_mode & 0o777 == 0o600
    document = yaml.safe_load(path.read_bytes())
    context = document["contexts"][document["context"]]
    assert context["endpoints"] == [
        n.address for n in shared_cluster.nodes if n.role == "controlplane"
    ]
    assert context["nodes"] == [n.address for n in shared_cluster.nodes]
    assert b"ED25519 PRIVATE KEY" in base64.b64decode(context["key"])
    assert shared_cluster.endpoint == f"{shared_cluster.nodes[0].address}:50000"


# ---- lifecycle (mode.go) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "request_"),
    [
        ("Reboot", m.RebootRequest()),
        ("Shutdown", m.ShutdownRequest()),
        ("Upgrade", m.UpgradeRequest(image="ghcr.io/siderolabs/installer:v1.13.10")),
        ("Rollback", m.RollbackRequest()),
    ],
)
def test_lifecycle_is_not_supported_in_container_mode(
    admin: RawClient, shared_cluster: EmulatedCluster, path: str, request_: object
) -> None:
    with pytest.raises(GRPCError) as caught:
        admin.call(shared_cluster.nodes[-1].address, M + path, request_)
    assert (caught.value.status, caught.value.message) == (
        Status.FAILED_PRECONDITION,
        "method is not supported in container mode",
    )


def _version(client: RawClient, address: str) -> str | None:
    try:
        return str(client.call(address, M + "Version", EMPTY, timeout=2).messages[0].version.tag)
    except (GRPCError, OSError, ConnectionError, Exception):
        return None


def test_metal_reboot_takes_the_api_down_and_applies_the_staged_config(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, platform="metal", time_scale=5)
    client, address = client_for(cluster), cluster.nodes[0].address
    node = cluster.node(address)
    staged = apply_patches(
        node.run(lambda st: st.active_config), ["machine:\n  nodeLabels:\n    staged: 'yes'\n"]
    )
    client.call(
        address,
        M + "ApplyConfiguration",
        m.ApplyConfigurationRequest(data=staged, mode=m.ApplyConfigurationRequest.STAGED),
    )
    tried = apply_patches(staged, ["machine:\n  nodeLabels:\n    tried: 'yes'\n"])
    client.call(
        address,
        M + "ApplyConfiguration",
        m.ApplyConfigurationRequest(data=tried, mode=m.ApplyConfigurationRequest.TRY),
    )
    reply = client.call(address, M + "Reboot", m.RebootRequest())
    assert len(reply.messages[0].actor_id) == 36
    wait_for(lambda: not node.serving, what="the API to go down")
    assert _open_ports(address, {50000}) == set()
    wait_for(lambda: node.serving, what="the API to come back")
    fresh = client_for(cluster)
    assert wait_for(lambda: _version(fresh, address), what="Version after reboot") == "v1.13.9"
    labels = node.run(lambda st: st.kube_node().labels)
    assert labels.get("staged") == "yes"  # the staged config is active
    assert "tried" not in labels  # the try config was dropped


def test_metal_upgrade_changes_the_version(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, platform="metal", time_scale=5)
    client, address = client_for(cluster), cluster.nodes[0].address
    reply = client.call(
        address, M + "Upgrade", m.UpgradeRequest(image="ghcr.io/siderolabs/installer:v1.13.10")
    )
    assert reply.messages[0].ack == "Upgrade request received"
    node = cluster.node(address)
    wait_for(lambda: not node.serving, what="the API to go down")
    fresh = client_for(cluster)
    assert wait_for(
        lambda: _version(fresh, address) == "v1.13.10", what="the new version", timeout=15
    )


def test_reset_in_container_mode_shuts_the_node_down(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0)
    client, address = client_for(cluster), cluster.nodes[0].address
    reply = client.call(address, M + "Reset", m.ResetRequest(graceful=True))
    assert reply.messages[0].actor_id
    node = cluster.node(address)
    wait_for(lambda: not node.serving, what="the node to shut down")
    services = node.run(lambda st: {s.id: s.state for s in st.services.services.values()})
    assert set(services.values()) == {"Finished"}
