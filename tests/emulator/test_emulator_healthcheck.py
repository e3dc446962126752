"""The emulated HealthCheck takes its cluster as machined's buildClusterInfo does
(internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go): an explicit list of
IPs is the whole cluster, checked against the Kubernetes Nodes both ways (pkg/cluster
NodesMatch), and the Kubernetes conditions run with the caller's roles."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from google.protobuf import duration_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.cluster import cluster_pb2 as c
from pytest_talos.emulator import EmulatedCluster

from .conftest import RawClient, tls_from_talosconfig

HEALTH = "/cluster.ClusterService/HealthCheck"


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(controlplanes=1, workers=1, time_scale=20) as emulated:
        yield emulated


@pytest.fixture(scope="module")
def admin_client(cluster: EmulatedCluster) -> Iterator[RawClient]:
    client = RawClient(tls_from_talosconfig(cluster.talosconfig_bytes))
    yield client
    client.close()


@pytest.fixture(scope="module")
def reader_client(cluster: EmulatedCluster) -> Iterator[RawClient]:
    client = RawClient(tls_from_talosconfig(cluster.issue_client(["os:reader"]).talosconfig))
    yield client
    client.close()


def _health(
    client: RawClient,
    cluster: EmulatedCluster,
    controlplanes: Sequence[str] = (),
    workers: Sequence[str] = (),
) -> list[str]:
    request = c.HealthCheckRequest(
        wait_timeout=duration_pb2.Duration(seconds=5),
        cluster_info=c.ClusterInfo(control_plane_nodes=controlplanes, worker_nodes=workers),
    )
    return [p.message for p in client.call(cluster.nodes[0].address, HEALTH, request)]


def _failure(
    client: RawClient,
    cluster: EmulatedCluster,
    controlplanes: Sequence[str] = (),
    workers: Sequence[str] = (),
) -> GRPCError:
    with pytest.raises(GRPCError) as caught:
        _health(client, cluster, controlplanes, workers)
    return caught.value


def test_the_whole_cluster_by_ip_passes(admin_client: RawClient, cluster: EmulatedCluster) -> None:
    cp, worker = cluster.nodes[0].address, cluster.nodes[1].address
    messages = _health(admin_client, cluster, [cp], [worker])
    assert "waiting for all k8s nodes to report: OK" in messages
    assert "waiting for all k8s nodes to report schedulable: OK" in messages


def test_a_list_naming_part_of_the_cluster_meets_unexpected_nodes(
    admin_client: RawClient, cluster: EmulatedCluster
) -> None:
    worker = cluster.nodes[1].address
    error = _failure(admin_client, cluster, [cluster.nodes[0].address])
    assert error.message == f'all k8s nodes to report: unexpected nodes with IPs ["{worker}"]'


def test_a_control_plane_listed_as_a_worker_fails_the_etcd_condition(
    admin_client: RawClient, cluster: EmulatedCluster
) -> None:
    # pkg/cluster/check/etcd.go EtcdControlPlaneNodesAssertion: the serving node's etcd
    # members must be among the control planes listed, and none is.
    cp, worker = cluster.nodes[0].address, cluster.nodes[1].address
    error = _failure(admin_client, cluster, [], [cp, worker])
    assert error.message == (
        f'etcd members to be control plane nodes: etcd member ips ["{cp}"] are not subset '
        "of control plane node ips []"
    )


def test_a_host_name_in_the_list_fails_the_request(
    admin_client: RawClient, cluster: EmulatedCluster
) -> None:
    name = cluster.nodes[0].hostname
    error = _failure(admin_client, cluster, [name])
    assert error.status == Status.UNKNOWN
    assert error.message == f'ParseAddr("{name}"): unable to parse IP'


def test_a_reader_cannot_pass_the_kubernetes_conditions(
    reader_client: RawClient, cluster: EmulatedCluster
) -> None:
    cp, worker = cluster.nodes[0].address, cluster.nodes[1].address
    error = _failure(reader_client, cluster, [cp], [worker])
    assert error.message == (
        "all k8s nodes to report: rpc error: code = PermissionDenied desc = not authorized"
    )


def test_an_empty_list_takes_the_discovered_members(
    admin_client: RawClient, cluster: EmulatedCluster
) -> None:
    messages = _health(admin_client, cluster)
    assert "waiting for all k8s nodes to report: OK" in messages
