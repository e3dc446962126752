"""Emulator certificates start when they are issued, as Talos's do (siderolabs/crypto x509
NewDefaultOptions NotBefore time.Now(); pkg/machinery/config/generate/secrets/ca.go
NotBefore(currentTime)); only the kubeconfig's client certificate is backdated, by
pkg/kubeconfig/generate.go allowedTimeSkew."""

from __future__ import annotations

import datetime as dt

from cryptography import x509

from pytest_talos.emulator.cluster.pki import ClusterPKI
from pytest_talos.pki import (
    KUBECONFIG_CLOCK_SKEW,
    CertificateAuthority,
    issue_apid_cert,
    issue_client_cert,
    issue_kubeconfig_client_cert,
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)  # X.509 times have whole seconds


def _window(cert: x509.Certificate) -> tuple[dt.datetime, dt.datetime]:
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def test_a_one_second_client_certificate_is_valid_when_issued() -> None:
    before = _now()
    creds = ClusterPKI(client_expiring=False).client_configuration(
        ["os:reader"], 1, cluster_name="c"
    )
    start, end = _window(x509.load_pem_x509_certificate(creds.crt))
    assert start >= before  # GenerateClientConfiguration: NotBefore(now), NotAfter(now+ttl)
    assert end - start == dt.timedelta(seconds=1)


def test_the_ca_and_the_leaf_certificates_are_not_backdated() -> None:
    before = _now()
    ca = CertificateAuthority.generate()
    apid = issue_apid_cert(ca, hostname="n", fqdn="n.example", ips=["10.5.0.2"])
    client = issue_client_cert(ca, roles=["os:admin"])
    for cert in (ca.cert, apid.cert, client.cert):
        assert cert.not_valid_before_utc >= before
    start, end = _window(apid.cert)
    assert end - start == dt.timedelta(hours=24)  # not a minute short of the crypto default


def test_only_the_kubeconfig_certificate_allows_for_clock_skew() -> None:
    kube_ca = CertificateAuthority.generate(organization="kubernetes", key_type="ecdsa")
    before = _now()
    cert = issue_kubeconfig_client_cert(kube_ca, validity=dt.timedelta(days=365)).cert
    assert KUBECONFIG_CLOCK_SKEW.total_seconds() == 10
    assert before - KUBECONFIG_CLOCK_SKEW <= cert.not_valid_before_utc < before
    assert cert.not_valid_after_utc >= before + dt.timedelta(days=365)
    assert [a.value for a in cert.subject] == ["system:masters", "admin"]
