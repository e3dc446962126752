"""Access-control faults of the emulated apid: each one lets through exactly what it names,
and the healthy node refuses it (server.py, tls.py, servicers/cosi.py)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable

import pytest
import yaml
from cryptography.x509.oid import ExtendedKeyUsageOID
from google.protobuf import duration_pb2, empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.v1alpha1 import resource_pb2 as r
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.pki import issue_client_cert
from pytest_talos.transport import certificate_roles

from .conftest import RawClient, tls_context, tls_from_talosconfig

M = "/machine.MachineService/"
STATE = "/cosi.resource.State/"

Setup = Callable[..., tuple[EmulatedCluster, RawClient, str]]


@pytest.fixture
def setup(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> Setup:
    def make(*faults: str) -> tuple[EmulatedCluster, RawClient, str]:
        cluster = make_cluster(faults=list(faults), workers=0)
        return cluster, client_for(cluster), cluster.nodes[-1].address

    return make


def _reader(cluster: EmulatedCluster) -> RawClient:
    return RawClient(tls_from_talosconfig(cluster.issue_client(["os:reader"]).talosconfig))


def _denied(call: Callable[[], object]) -> str:
    with pytest.raises(GRPCError) as caught:
        call()
    assert caught.value.status == Status.PERMISSION_DENIED
    return str(caught.value.message)


def _watch_mc(reader: RawClient, address: str) -> list[s.WatchResponse]:
    request = s.WatchRequest(namespace="config", type=T.MACHINE_CONFIGS, id="v1alpha1")
    return reader.collect(address, STATE + "Watch", request, until=lambda got: len(got) >= 2)


def test_reader_watches_secrets_only_watch_leaks(setup: Setup) -> None:
    cluster, _, address = setup("reader-watches-secrets")
    reader = _reader(cluster)
    try:
        get = s.GetRequest(namespace="config", type=T.MACHINE_CONFIGS, id="v1alpha1")
        assert _denied(lambda: reader.call(address, STATE + "Get", get)) == "not authorized"
        got = _watch_mc(reader, address)
        assert got[1].event[0].resource.metadata.id == "v1alpha1"
    finally:
        reader.close()


def test_healthy_node_refuses_a_reader_watch_of_machine_config(setup: Setup) -> None:
    cluster, _, address = setup()
    reader = _reader(cluster)
    try:
        assert _denied(lambda: _watch_mc(reader, address)) == "not authorized"
    finally:
        reader.close()


@pytest.mark.parametrize("fault", ["", "reader-gets-kubeconfig"])
def test_reader_gets_kubeconfig(setup: Setup, fault: str) -> None:
    cluster, _, address = setup(*([fault] if fault else []))
    reader = _reader(cluster)
    try:

        def call() -> object:
            return reader.call(address, M + "Kubeconfig", empty_pb2.Empty())

        if fault:
            assert call()
        else:
            assert _denied(call) == "not authorized"
    finally:
        reader.close()


@pytest.mark.parametrize("fault", ["", "reader-mints-admin"])
def test_reader_mints_admin(setup: Setup, fault: str) -> None:
    cluster, _, address = setup(*([fault] if fault else []))
    reader = _reader(cluster)
    request = m.GenerateClientConfigurationRequest(
        roles=["os:admin"], crt_ttl=duration_pb2.Duration(seconds=60)
    )
    try:

        def call() -> m.GenerateClientConfigurationResponse:
            reply: m.GenerateClientConfigurationResponse = reader.call(
                address, M + "GenerateClientConfiguration", request
            )
            return reply

        if fault:
            assert certificate_roles(call().messages[0].crt) == ("os:admin",)
        else:
            assert _denied(call) == "not authorized"
    finally:
        reader.close()


def test_reader_applies_for_real_but_not_dry_run(setup: Setup) -> None:
    cluster, _, address = setup("reader-applies-for-real")
    reader = _reader(cluster)
    config = cluster.node(address).run(lambda st: st.active_config)
    mode = m.ApplyConfigurationRequest.NO_REBOOT
    try:
        dry = m.ApplyConfigurationRequest(data=config, mode=mode, dry_run=True)
        assert _denied(lambda: reader.call(address, M + "ApplyConfiguration", dry))
        real = m.ApplyConfigurationRequest(data=config, mode=mode)
        reply = reader.call(address, M + "ApplyConfiguration", real)
        assert reply.messages[0].mode_details == "Applied configuration without a reboot"
    finally:
        reader.close()


def _version_with(cluster: EmulatedCluster, address: str, crt: bytes, key: bytes) -> object:
    client = RawClient(tls_context(cluster.ca.cert_pem, crt, key))
    try:
        return client.call(address, M + "Version", empty_pb2.Empty(), timeout=5)
    finally:
        client.close()


def _expired(cluster: EmulatedCluster) -> tuple[bytes, bytes]:
    now = dt.datetime.now(dt.UTC)
    cert = issue_client_cert(
        cluster.ca,
        roles=["os:reader"],
        not_before=now - dt.timedelta(hours=2),
        not_after=now - dt.timedelta(hours=1),
    )
    return cert.cert_pem, cert.key_pem


def _no_eku(cluster: EmulatedCluster) -> tuple[bytes, bytes]:
    cert = issue_client_cert(cluster.ca, roles=["os:reader"], ext_key_usage=())
    return cert.cert_pem, cert.key_pem


def _both_eku(cluster: EmulatedCluster) -> tuple[bytes, bytes]:
    usages = (ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH)
    cert = issue_client_cert(cluster.ca, roles=["os:reader"], ext_key_usage=usages)
    return cert.cert_pem, cert.key_pem


def _kube(cluster: EmulatedCluster) -> tuple[bytes, bytes]:
    cert = issue_client_cert(cluster.kube_ca, roles=["system:masters"], key_type="ecdsa")
    return cert.cert_pem, cert.key_pem


CERT_CASES = {
    "expired-certs-accepted": [_expired],
    "any-eku-accepted": [_no_eku, _both_eku],
    "kube-ca-trusted": [_kube],
}


@pytest.mark.parametrize("fault", sorted(CERT_CASES))
def test_certificate_faults(setup: Setup, fault: str) -> None:
    healthy, _, healthy_address = setup()
    for make in CERT_CASES[fault]:
        crt, key = make(healthy)
        with pytest.raises(Exception):  # noqa: B017 - TLS refusal, whatever layer reports it
            _version_with(healthy, healthy_address, crt, key)
    broken, _, address = setup(fault)
    for make in CERT_CASES[fault]:
        crt, key = make(broken)
        if fault == "kube-ca-trusted":  # TLS lets it in; system:masters is no Talos role
            with pytest.raises(GRPCError) as caught:
                _version_with(broken, address, crt, key)
            assert caught.value.status == Status.PERMISSION_DENIED
        else:
            assert _version_with(broken, address, crt, key)


def test_kube_ca_trusted_reads_the_ca_from_the_config(setup: Setup) -> None:
    cluster, _, address = setup("kube-ca-trusted")
    config = cluster.node(address).run(lambda st: st.active_config)
    main = next(doc for doc in yaml.safe_load_all(config) if doc and "cluster" in doc)
    assert base64.b64decode(main["cluster"]["ca"]["crt"]) == cluster.kube_ca.cert_pem


def test_cosi_create_lies(setup: Setup) -> None:
    _, client, address = setup("cosi-create-lies")
    resource = r.Resource(
        metadata=r.Metadata(
            namespace="runtime", type=T.VERSIONS, id="probe", version="1", phase="running"
        ),
        spec=r.Spec(yaml_spec="version: probe\n"),
    )
    denied = _denied(
        lambda: client.call(address, STATE + "Create", s.CreateRequest(resource=resource))
    )
    assert denied == "write access is not allowed"
    get = s.GetRequest(namespace="runtime", type=T.VERSIONS, id="probe")
    assert client.call(address, STATE + "Get", get).resource.metadata.id == "probe"
    destroy = s.DestroyRequest(namespace="runtime", type=T.VERSIONS, id="probe")
    assert _denied(lambda: client.call(address, STATE + "Destroy", destroy))
