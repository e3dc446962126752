"""The api, certs and cluster checks' helpers after the audit: a probe that never reached
apid tested nothing (an error, never a pass), IPv6 node addresses in brackets,
kube-apiserver probed on the node's local API server port, the freshly minted kubeconfig
certificate shown but not judged, and HealthCheck's cluster info from the Kubernetes Nodes."""

from __future__ import annotations

import base64
import datetime as dt
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.serialization import Encoding

from conformance._support import probes
from conformance.cluster.clusterinfo import (
    CONTROL_PLANE_LABEL,
    OWN_DISCOVERY,
    cluster_info,
    health_cluster_info,
)
from pytest_talos.certs import (
    ExpiryPolicy,
    apid_certificate,
    kubernetes_certificates,
    local_api_server_port,
    readers,
)
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import ConnectError, NotFound, PermissionDenied, StatusCode
from pytest_talos.pki import (
    CertificateAuthority,
    issue_client_cert,
    issue_kube_apiserver_cert,
)
from pytest_talos.talos_api import APID_PORT

# Addresses nothing answers on: a loopback address no emulator uses (connection refused),
# and TEST-NET-1 (RFC 5737), unroutable (no route, or no TCP answer at all).
CLOSED_HOST = "127.254.253.252"
BLACKHOLE = "192.0.2.13"
NOT_TESTED = "nothing was tested: this machine could not reach apid on "


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(controlplanes=1, workers=0, time_scale=20) as emulated:
        yield emulated


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------- finding 4


@pytest.mark.parametrize("host", [CLOSED_HOST, BLACKHOLE])
def test_a_certificate_probe_that_reaches_no_apid_tested_nothing(host: str) -> None:
    ca = CertificateAuthority.generate()
    with pytest.raises(ConnectError) as caught:
        probes.foreign_ca_attempt(host, ca.cert_pem, 0.5)
    assert caught.value.message.startswith(f"{NOT_TESTED}{host}:{APID_PORT} directly (")
    assert caught.value.message.endswith(
        f"); the probe needs its own TLS connection to port {APID_PORT} of the node"
    )


@pytest.mark.parametrize("host", [CLOSED_HOST, BLACKHOLE])
def test_a_connection_without_certificate_that_reaches_no_apid_tested_nothing(
    host: str,
) -> None:
    ca = CertificateAuthority.generate()
    with pytest.raises(ConnectError) as caught:
        probes.connect_without_certificate(host, ca.cert_pem, 0.5)
    assert caught.value.message.startswith(f"{NOT_TESTED}{host}:{APID_PORT} directly (")


def test_a_connect_timeout_is_reported_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    def timed_out(*args: Any, **kwargs: Any) -> socket.socket:
        raise TimeoutError

    monkeypatch.setattr(socket, "create_connection", timed_out)
    ca = CertificateAuthority.generate()
    with pytest.raises(ConnectError) as caught:
        probes.connect_without_certificate(CLOSED_HOST, ca.cert_pem, 0.5)
    assert caught.value.message == (
        f"{NOT_TESTED}{CLOSED_HOST}:{APID_PORT} directly (no TCP connection within 0.5s); "
        f"the probe needs its own TLS connection to port {APID_PORT} of the node"
    )


def test_a_node_certificate_the_probe_rejects_tested_nothing(cluster: EmulatedCluster) -> None:
    """The talosconfig's CA does not sign the node's certificate: the client refused the
    node, the node refused nothing."""
    wrong_ca = CertificateAuthority.generate()
    with pytest.raises(ConnectError) as caught:
        probes.foreign_ca_attempt(cluster.nodes[0].address, wrong_ca.cert_pem, 5.0)
    assert caught.value.message.startswith(f"{NOT_TESTED}{cluster.nodes[0].address}:")
    assert "the server certificate of " in caught.value.message


def test_a_real_tls_refusal_still_counts_as_refused(cluster: EmulatedCluster) -> None:
    attempt = probes.foreign_ca_attempt(cluster.nodes[0].address, cluster.ca.cert_pem, 5.0)
    assert not attempt.accepted
    assert attempt.detail.startswith("refused: ")
    assert "rejected the client certificate" in attempt.detail


def test_a_certificate_the_node_takes_is_accepted(cluster: EmulatedCluster) -> None:
    cert = issue_client_cert(cluster.ca, roles=["os:reader"])
    attempt = probes.certificate_attempt(
        cluster.nodes[0].address, cluster.ca.cert_pem, cert.cert_pem, cert.key_pem, 5.0, "x"
    )
    assert attempt.accepted
    assert attempt.detail.startswith("answered: Talos v")


# --------------------------------------------------------------------------- finding 5


def test_an_ipv6_node_address_is_bracketed_for_the_probes() -> None:
    ca = CertificateAuthority.generate()
    with pytest.raises(ConnectError) as caught:
        probes.foreign_ca_attempt("::1", ca.cert_pem, 0.5)
    assert caught.value.message.startswith(f"{NOT_TESTED}[::1]:{APID_PORT} directly (")


def test_an_ipv6_node_address_is_bracketed_for_the_apid_certificate() -> None:
    ca = CertificateAuthority.generate()
    client = issue_client_cert(ca, roles=["os:reader"])
    context = SimpleNamespace(ca_pem=ca.cert_pem, crt_pem=client.cert_pem, key_pem=client.key_pem)
    node = SimpleNamespace(host="::1", name="v6", hostname="v6")
    # Nothing listens on [::1]:50000: the unverified read finds no certificate either.
    # Before, the endpoint "::1:50000" was refused as "not a valid endpoint" (a ConfigError).
    with pytest.raises(ConnectError) as caught:
        apid_certificate(node, context, timeout=0.5)  # type: ignore[arg-type]
    assert str(caught.value).startswith("[node ::1] cannot read the TLS certificate of ::1:")


# --------------------------------------------------------------------------- findings 6, 7


def _kubeconfig(server: str, ca_pem: bytes, client_pem: bytes) -> bytes:
    doc = {
        "clusters": [
            {"name": "c", "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}
        ],
        "users": [{"name": "admin@c", "user": {"client-certificate-data": _b64(client_pem)}}],
        "contexts": [{"name": "admin@c", "context": {"cluster": "c", "user": "admin@c"}}],
        "current-context": "admin@c",
    }
    return yaml.safe_dump(doc).encode()


@dataclass
class Handshakes:
    """The kube-apiserver TLS handshakes kubernetes_certificates made; each is answered
    with one certificate of ``ca`` naming the load balancer and the node."""

    ca: CertificateAuthority
    seen: list[tuple[str, int]] = field(default_factory=list)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Handshakes:
    kube_ca = CertificateAuthority.generate(organization="kubernetes", key_type="ecdsa")
    cert = issue_kube_apiserver_cert(  # as kubernetes_cert_sans.go names it
        kube_ca, hostname="cp", fqdn="cp", ips=["10.5.0.2"], endpoint_host="lb.example"
    )
    handshakes = Handshakes(kube_ca)

    def handshake(host: str, port: int, timeout: float) -> bytes:
        handshakes.seen.append((host, port))
        return cert.cert.public_bytes(Encoding.DER)

    monkeypatch.setattr(readers, "_served", handshake)
    return handshakes


class _Node:
    """What the certificate readers use of a TalosNode; ``config`` None: os:reader."""

    host, name, hostname = "10.5.0.2", "cp", "cp"

    def __init__(self, config: dict[str, Any] | None) -> None:
        self._config = config

    @property
    def machine_config(self) -> Any:
        if self._config is None:
            raise PermissionDenied("not authorized", code=StatusCode.PERMISSION_DENIED)
        return SimpleNamespace(documents=[self._config])

    def resource(self, *args: str) -> Any:  # NodeAddresses, HostnameStatuses: none here
        raise NotFound("resource not found", code=StatusCode.NOT_FOUND)


def _node(config: dict[str, Any] | None) -> Any:
    return _Node(config)


def test_the_local_api_server_port_comes_from_the_machine_config() -> None:
    custom = {"version": "v1alpha1", "cluster": {"controlPlane": {"localAPIServerPort": 7443}}}
    assert local_api_server_port(_node(custom)) == (
        7443,
        "cluster.controlPlane.localAPIServerPort",
    )
    assert local_api_server_port(_node({"version": "v1alpha1"})) == (
        6443,
        "the default (no cluster.controlPlane.localAPIServerPort)",
    )
    port, source = local_api_server_port(_node(None))
    assert port == 6443
    assert source.startswith("the default (the machine config is unreadable: ")


def test_the_node_is_probed_on_its_local_port_not_the_endpoints(
    served: Handshakes,
) -> None:
    kube_ca = served.ca
    client = issue_client_cert(kube_ca, roles=["system:masters"], key_type="ecdsa")
    kubeconfig = _kubeconfig("https://lb.example:443", kube_ca.cert_pem, client.cert_pem)
    reports = kubernetes_certificates(
        _node({}), kubeconfig, ExpiryPolicy(), timeout=1.0, node_port=6443
    )
    assert served.seen == [("lb.example", 443), ("10.5.0.2", 6443)]
    assert [r.what for r in reports[:2]] == [
        "kube-apiserver's certificate at lb.example:443",
        "kube-apiserver's certificate at 10.5.0.2:6443",
    ]
    assert [r.failures for r in reports] == [[], [], []]


def test_the_minted_kubeconfig_certificate_is_shown_not_judged(
    served: Handshakes,
) -> None:
    kube_ca = served.ca
    now = dt.datetime.now(dt.UTC)
    short = issue_client_cert(  # adminKubeconfig.certLifetime of a day: a valid config
        kube_ca,
        roles=["system:masters"],
        key_type="ecdsa",
        not_before=now,
        not_after=now + dt.timedelta(days=1),
    )
    kubeconfig = _kubeconfig("https://10.5.0.2:6443", kube_ca.cert_pem, short.cert_pem)
    reports = kubernetes_certificates(_node({}), kubeconfig, ExpiryPolicy(), timeout=1.0)
    assert served.seen == [("10.5.0.2", 6443)]  # the endpoint is the node: one handshake
    minted = reports[-1]
    assert minted.what == (
        "the kubeconfig client certificate (minted by this Kubeconfig call; shown, not judged)"
    )
    assert minted.findings == []
    assert minted.to_json()["read"] == "client-certificate-data of the kubeconfig"


# --------------------------------------------------------------------------- finding 1


def _kube_node(name: str, ip: str | None, *, controlplane: bool) -> Any:
    addresses = [SimpleNamespace(type="Hostname", address=name)]
    if ip is not None:
        addresses.append(SimpleNamespace(type="InternalIP", address=ip))
    labels = {CONTROL_PLANE_LABEL: ""} if controlplane else {"kubernetes.io/hostname": name}
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, labels=labels),
        status=SimpleNamespace(addresses=addresses),
    )


def test_cluster_info_names_every_kubernetes_node_by_role() -> None:
    info = cluster_info(
        [
            _kube_node("cp-1", "10.5.0.2", controlplane=True),
            _kube_node("w-1", "10.5.0.3", controlplane=False),
            _kube_node("w-2", "fd00::4", controlplane=False),
        ]
    )
    assert (info.control_planes, info.workers) == (["10.5.0.2"], ["10.5.0.3", "fd00::4"])
    assert info.source == "the Kubernetes Node list (InternalIPs, control-plane label)"


def test_without_an_internal_ip_the_node_discovers_the_cluster_itself() -> None:
    info = cluster_info(
        [
            _kube_node("cp-1", "10.5.0.2", controlplane=True),
            _kube_node("w-1", None, controlplane=False),
        ]
    )
    assert (info.control_planes, info.workers) == ([], [])
    assert info.source == "the node's own discovery (Node w-1 has no InternalIP)"


def test_members_that_cover_every_node_let_the_node_discover_the_cluster() -> None:
    kube = [
        _kube_node("cp-1", "10.5.0.2", controlplane=True),
        _kube_node("w-1", "10.5.0.3", controlplane=False),
    ]
    members = [{"10.5.0.2", "192.168.1.2"}, {"10.5.0.3"}]
    info = health_cluster_info(kube, members)
    assert (info.control_planes, info.workers, info.source) == ([], [], OWN_DISCOVERY)


def test_members_that_miss_a_node_mean_the_kubernetes_list_is_sent() -> None:
    kube = [
        _kube_node("cp-1", "10.5.0.2", controlplane=True),
        _kube_node("w-1", "10.5.0.3", controlplane=False),
    ]
    for members in ([{"10.5.0.2"}], [], [{"10.5.0.2"}, {"10.9.9.9"}]):
        info = health_cluster_info(kube, members)
        assert (info.control_planes, info.workers) == (["10.5.0.2"], ["10.5.0.3"]), members
