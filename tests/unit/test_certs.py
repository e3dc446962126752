"""pytest_talos.certs without a cluster: facts, names, chains and expiry verdicts."""

from __future__ import annotations

import datetime as dt

import pytest

from pytest_talos.certs import (
    DEFAULT_FAIL_DAYS,
    DEFAULT_WARN_DAYS,
    ExpiryPolicy,
    certificate_facts,
    issuer_among,
    load_certificates,
)
from pytest_talos.certs.verdicts import renewal_findings
from pytest_talos.pki import (
    CertificateAuthority,
    issue_apid_cert,
    issue_client_cert,
    issue_kube_apiserver_cert,
)

NOW = dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.generate()


def test_facts_of_an_apid_certificate_show_names_never_keys(ca: CertificateAuthority) -> None:
    cert = issue_apid_cert(ca, hostname="cp-1", fqdn="cp-1.example.com", ips=["10.5.0.2"])
    facts = certificate_facts(cert.cert_pem)
    assert facts.subject == "CN=cp-1.example.com"
    assert facts.issuer == "O=talos"
    assert facts.names == ("10.5.0.2", "127.0.0.1", "cp-1", "cp-1.example.com")
    assert facts.key_type == "ed25519"
    shown = facts.to_json(NOW)
    assert set(shown) == {
        "subject",
        "issuer",
        "serial",
        "not_before",
        "not_after",
        "days_left",
        "sans",
        "key_type",
    }
    assert "PRIVATE" not in repr(shown)


def test_names_match_ips_dns_and_one_wildcard_label(ca: CertificateAuthority) -> None:
    cert = issue_kube_apiserver_cert(
        ca, hostname="cp-1", fqdn="cp-1", ips=["10.5.0.2"], endpoint_host="k8s.example.com"
    )
    facts = certificate_facts(cert.cert_pem)
    assert facts.covers("10.5.0.2")
    assert facts.covers("K8S.example.com.")
    assert facts.covers("kubernetes.default.svc.cluster.local")
    assert facts.covers("10.96.0.1")
    assert not facts.covers("10.5.0.3")
    wildcard = certificate_facts(
        issue_apid_cert(ca, hostname="*.nodes.example", fqdn="x", ips=[]).cert_pem
    )
    assert wildcard.covers("a.nodes.example")
    assert not wildcard.covers("a.b.nodes.example")


def test_kube_apiserver_certificate_is_as_talos_issues_it(ca: CertificateAuthority) -> None:
    kube_ca = CertificateAuthority.generate(organization="kubernetes", key_type="ecdsa")
    facts = certificate_facts(
        issue_kube_apiserver_cert(
            kube_ca, hostname="cp-1", fqdn="cp-1", ips=["10.5.0.2"], endpoint_host="10.5.0.2"
        ).cert_pem
    )
    assert facts.subject == "CN=kube-apiserver,O=kube-master"
    assert facts.key_type == "ecdsa-secp256r1"
    assert 364 < facts.days_left(NOW) < 365.1  # issued a moment after NOW was taken


def test_issuer_is_found_among_several_cas(ca: CertificateAuthority) -> None:
    other = CertificateAuthority.generate()
    leaf = issue_client_cert(ca, roles=["os:admin"]).cert
    assert issuer_among(leaf, [other.cert, ca.cert]) == ca.cert
    assert issuer_among(leaf, [other.cert]) is None
    assert len(load_certificates(other.cert_pem + ca.cert_pem)) == 2
    assert load_certificates(b"not a pem") == []


@pytest.mark.parametrize(
    ("days", "level", "words"),
    [
        (365, None, ""),
        (20, "warning", "in 20.0 days (warn under 30 days)"),
        (3, "failure", "in 3.0 days (fail under 7 days)"),
        (-1, "failure", "expired on"),
    ],
)
def test_expiry_policy_warns_then_fails(
    ca: CertificateAuthority, days: float, level: str | None, words: str
) -> None:
    start = NOW - dt.timedelta(days=400)
    cert = issue_client_cert(
        ca, roles=["os:admin"], not_before=start, not_after=NOW + dt.timedelta(days=days)
    )
    findings = ExpiryPolicy().judge(certificate_facts(cert.cert_pem), "the cert", NOW)
    assert [f.level for f in findings] == ([level] if level else [])
    assert all(words in f.message for f in findings)


def test_expiry_policy_thresholds_are_checked() -> None:
    assert (ExpiryPolicy().warn_days, ExpiryPolicy().fail_days) == (
        DEFAULT_WARN_DAYS,
        DEFAULT_FAIL_DAYS,
    )
    with pytest.raises(ValueError, match="fail days"):
        ExpiryPolicy(warn_days=5, fail_days=10)


def test_short_lived_certificate_past_renewal_fails(ca: CertificateAuthority) -> None:
    start = NOW - dt.timedelta(hours=20)
    stale = issue_client_cert(
        ca, roles=["x"], not_before=start, not_after=start + dt.timedelta(hours=24)
    )
    fresh = issue_client_cert(
        ca,
        roles=["x"],
        not_before=NOW - dt.timedelta(hours=11),
        not_after=NOW + dt.timedelta(hours=13),
    )
    (finding,) = renewal_findings(certificate_facts(stale.cert_pem), "apid's certificate", NOW)
    assert "renews it at half its lifetime, so renewal is stuck" in finding.message
    assert renewal_findings(certificate_facts(fresh.cert_pem), "apid's certificate", NOW) == []
