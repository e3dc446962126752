"""apid of the emulator: mutual TLS, roles, node/nodes proxying (apid service.go, director.go,
machined.go)."""

from __future__ import annotations

import ssl
from collections.abc import Callable

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID
from google.protobuf import empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from pytest_talos import pki
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.apid.tls import ext_key_usage_acceptable

from .conftest import RawClient, tls_context, tls_from_talosconfig

VERSION = "/machine.MachineService/Version"
EMPTY = empty_pb2.Empty()


def _addresses(cluster: EmulatedCluster) -> list[str]:
    return [node.address for node in cluster.nodes]


def _handshake_refused(client: RawClient, address: str) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, StreamTerminatedError, OSError)):
        client.call(address, VERSION, EMPTY, timeout=5)


# ---- mutual TLS ---------------------------------------------------------------------------


def test_admin_certificate_is_accepted(admin: RawClient, shared_cluster: EmulatedCluster) -> None:
    reply = admin.call(shared_cluster.nodes[0].address, VERSION, EMPTY)
    assert reply.messages[0].version.tag == "v1.13.9"
    assert not reply.messages[0].HasField("metadata")  # reply.go: metadata unset locally


def test_client_without_certificate_is_refused(shared_cluster: EmulatedCluster) -> None:
    client = RawClient(tls_context(shared_cluster.ca.cert_pem, None, None))
    try:
        _handshake_refused(client, shared_cluster.nodes[0].address)
    finally:
        client.close()


def test_certificate_from_a_foreign_ca_is_refused(shared_cluster: EmulatedCluster) -> None:
    foreign = pki.CertificateAuthority.generate()
    cert = pki.issue_client_cert(foreign, roles=["os:admin"])
    client = RawClient(tls_context(shared_cluster.ca.cert_pem, cert.cert_pem, cert.key_pem))
    try:
        _handshake_refused(client, shared_cluster.nodes[0].address)
    finally:
        client.close()


@pytest.mark.parametrize(
    "usages",
    [
        [ExtendedKeyUsageOID.SERVER_AUTH],
        [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH],
        [],
    ],
    ids=["server-auth", "client-and-server-auth", "no-eku"],
)
def test_client_certificate_eku_must_be_exactly_client_auth(
    shared_cluster: EmulatedCluster, usages: list[x509.ObjectIdentifier]
) -> None:
    cert = pki.issue_client_cert(shared_cluster.ca, roles=["os:admin"], ext_key_usage=usages)
    assert not ext_key_usage_acceptable(cert.cert.public_bytes(Encoding.DER))
    client = RawClient(tls_context(shared_cluster.ca.cert_pem, cert.cert_pem, cert.key_pem))
    try:
        _handshake_refused(client, shared_cluster.nodes[0].address)
    finally:
        client.close()


def test_no_mtls_fault_accepts_clients_without_certificate(
    make_cluster: Callable[..., EmulatedCluster],
) -> None:
    cluster = make_cluster(faults=["no-mtls"], workers=0)
    client = RawClient(tls_context(cluster.ca.cert_pem, None, None))
    try:
        reply = client.call(cluster.nodes[0].address, VERSION, EMPTY)
        assert reply.messages[0].version.tag == "v1.13.9"
    finally:
        client.close()


def test_client_certs_unverified_fault_accepts_a_foreign_ca(
    make_cluster: Callable[..., EmulatedCluster],
) -> None:
    cluster = make_cluster(faults=["client-certs-unverified"], workers=0)
    foreign = pki.CertificateAuthority.generate(organization="talos")
    cert = pki.issue_client_cert(foreign, roles=["os:reader"])
    client = RawClient(tls_context(cluster.ca.cert_pem, cert.cert_pem, cert.key_pem))
    try:
        reply = client.call(cluster.nodes[0].address, VERSION, EMPTY)
        assert reply.messages[0].version.tag == "v1.13.9"
        # never asked for, the reader certificate is not seen: the caller counts as os:admin
        assert cluster.call_log[-1].roles == ("os:admin",)
    finally:
        client.close()


# ---- roles -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reader(shared_cluster: EmulatedCluster) -> RawClient:
    identity = shared_cluster.issue_client(["os:reader"])
    return RawClient(tls_from_talosconfig(identity.talosconfig))


@pytest.fixture(scope="module")
def operator(shared_cluster: EmulatedCluster) -> RawClient:
    identity = shared_cluster.issue_client(["os:operator"])
    return RawClient(tls_from_talosconfig(identity.talosconfig))


def test_reader_may_read_version(reader: RawClient, shared_cluster: EmulatedCluster) -> None:
    assert reader.call(shared_cluster.nodes[0].address, VERSION, EMPTY).messages


@pytest.mark.parametrize(
    ("path", "request_"),
    [
        ("/machine.MachineService/Read", m.ReadRequest(path="/etc/os-release")),
        ("/machine.MachineService/Kubeconfig", EMPTY),
        ("/machine.MachineService/ServiceRestart", m.ServiceRestartRequest(id="kubelet")),
        ("/machine.MachineService/ApplyConfiguration", m.ApplyConfigurationRequest(data=b"")),
        ("/machine.MachineService/Reboot", m.RebootRequest()),
    ],
)
def test_reader_is_not_authorized_for_admin_and_operator_methods(
    reader: RawClient, shared_cluster: EmulatedCluster, path: str, request_: object
) -> None:
    with pytest.raises(GRPCError) as caught:
        reader.call(shared_cluster.nodes[0].address, path, request_)
    assert caught.value.status == Status.PERMISSION_DENIED
    assert caught.value.message == "not authorized"


def test_operator_may_restart_kubelet_but_not_read_files(
    operator: RawClient, make_cluster: Callable[..., EmulatedCluster]
) -> None:
    cluster = make_cluster(workers=0)
    identity = cluster.issue_client(["os:operator"])
    client = RawClient(tls_from_talosconfig(identity.talosconfig))
    try:
        address = cluster.nodes[0].address
        reply = client.call(
            address, "/machine.MachineService/ServiceRestart", m.ServiceRestartRequest(id="kubelet")
        )
        assert reply.messages[0].resp == 'Service "kubelet" restarted'
        with pytest.raises(GRPCError) as caught:
            client.call(address, "/machine.MachineService/Read", m.ReadRequest(path="/etc/hosts"))
        assert caught.value.status == Status.PERMISSION_DENIED
    finally:
        client.close()


def test_reader_is_refused_the_sensitive_machine_config(
    reader: RawClient, shared_cluster: EmulatedCluster
) -> None:
    request = s.GetRequest(
        namespace="config", type="MachineConfigs.config.talos.dev", id="v1alpha1"
    )
    with pytest.raises(GRPCError) as caught:
        reader.call(shared_cluster.nodes[0].address, "/cosi.resource.State/Get", request)
    assert (caught.value.status, caught.value.message) == (
        Status.PERMISSION_DENIED,
        "not authorized",
    )


def test_call_log_records_method_roles_and_mutation(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster()
    client = client_for(cluster)
    address = cluster.nodes[0].address
    client.call(address, VERSION, EMPTY)
    client.call(
        address, "/machine.MachineService/ServiceRestart", m.ServiceRestartRequest(id="kubelet")
    )
    records = cluster.call_log
    assert [r.method for r in records] == [VERSION, "/machine.MachineService/ServiceRestart"]
    assert [r.mutating for r in records] == [False, True]
    assert records[0].roles == ("os:admin",)
    assert records[0].client_serial == cluster.admin_client_identity.serial


# ---- node / nodes routing (director.go) ------------------------------------------------------


def test_nodes_fans_out_with_per_node_metadata(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    targets = _addresses(shared_cluster)
    reply = admin.call(targets[0], VERSION, EMPTY, nodes=targets)
    assert sorted(msg.metadata.hostname for msg in reply.messages) == sorted(targets)
    assert all(msg.version.tag == "v1.13.9" for msg in reply.messages)


def test_node_is_proxied_one_to_one_verbatim(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    cp, worker = shared_cluster.nodes[0], shared_cluster.nodes[-1]
    reply = admin.call(cp.address, "/machine.MachineService/Hostname", EMPTY, node=worker.address)
    assert reply.messages[0].hostname == worker.hostname
    assert not reply.messages[0].HasField("metadata")
    forwarded = [r for r in shared_cluster.call_log if r.forwarded and r.node == worker.hostname]
    assert forwarded
    assert forwarded[-1].roles == ("os:admin",)  # re-sent as talos-role


def test_node_metadata_must_be_single_valued(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    targets = _addresses(shared_cluster)
    with pytest.raises(GRPCError) as caught:
        admin.call(
            targets[0], VERSION, EMPTY, metadata=[("node", targets[1]), ("node", targets[2])]
        )
    assert caught.value.status == Status.INVALID_ARGUMENT
    assert caught.value.message == "node metadata must be single-valued"


def test_cosi_refuses_one_to_many(admin: RawClient, shared_cluster: EmulatedCluster) -> None:
    targets = _addresses(shared_cluster)
    request = s.GetRequest(namespace="runtime", type="Versions.runtime.talos.dev", id="version")
    with pytest.raises(GRPCError) as caught:
        admin.call(targets[0], "/cosi.resource.State/Get", request, nodes=targets)
    assert caught.value.status == Status.INVALID_ARGUMENT
    assert caught.value.message == (
        "one-2-many proxying is not supported for method /cosi.resource.State/Get"
    )


def test_worker_refuses_to_forward(admin: RawClient, shared_cluster: EmulatedCluster) -> None:
    worker, cp = shared_cluster.nodes[-1], shared_cluster.nodes[0]
    with pytest.raises(GRPCError) as one:
        admin.call(worker.address, VERSION, EMPTY, node=cp.address)
    with pytest.raises(GRPCError) as many:
        admin.call(worker.address, VERSION, EMPTY, nodes=[cp.address, worker.address])
    for caught in (one, many):
        assert caught.value.status == Status.PERMISSION_DENIED
        assert caught.value.message == "no request forwarding"


def test_worker_serves_itself_as_a_target(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    worker = shared_cluster.nodes[-1]
    reply = admin.call(worker.address, VERSION, EMPTY, nodes=[worker.address])
    assert reply.messages[0].metadata.hostname == worker.address


def test_unreachable_node_becomes_a_per_node_error(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    cp = shared_cluster.nodes[0].address
    vacant = shared_cluster.vacant_address
    reply = admin.call(cp, VERSION, EMPTY, nodes=[cp, vacant])
    by_host = {msg.metadata.hostname: msg for msg in reply.messages}
    assert by_host[cp].version.tag == "v1.13.9"
    failed = by_host[vacant].metadata
    assert failed.status.code == Status.UNAVAILABLE.value
    assert failed.error.startswith("rpc error: code = Unavailable desc = connection error")


def test_per_node_permission_errors_arrive_in_metadata(
    reader: RawClient, shared_cluster: EmulatedCluster
) -> None:
    cp, worker = shared_cluster.nodes[0].address, shared_cluster.nodes[-1].address
    frames = reader.call(
        cp, "/machine.MachineService/Read", m.ReadRequest(path="/etc/hosts"), nodes=[cp, worker]
    )
    assert {f.metadata.hostname for f in frames} == {cp, worker}
    for frame in frames:
        assert frame.metadata.status.code == Status.PERMISSION_DENIED.value
        assert frame.metadata.error == "rpc error: code = PermissionDenied desc = not authorized"


def test_streaming_fan_out_tags_every_message(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    targets = _addresses(shared_cluster)[:2]
    frames = admin.call(
        targets[0],
        "/machine.MachineService/Read",
        m.ReadRequest(path="/etc/hostname"),
        nodes=targets,
    )
    contents = {f.metadata.hostname: f.bytes.decode().strip() for f in frames}
    assert contents == {node.address: node.hostname for node in shared_cluster.nodes[:2]}


def test_control_plane_only_method_fails_per_node_on_workers(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    cp, worker = shared_cluster.nodes[0].address, shared_cluster.nodes[-1].address
    reply = admin.call(
        cp, "/machine.MachineService/EtcdMemberList", m.EtcdMemberListRequest(), nodes=[cp, worker]
    )
    by_host = {msg.metadata.hostname: msg for msg in reply.messages}
    assert len(by_host[cp].members) == 2
    assert by_host[worker].metadata.status.code == Status.UNIMPLEMENTED.value
    assert by_host[worker].metadata.status.message == (
        "member list is only available on control plane nodes"
    )
