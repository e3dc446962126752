"""The emulator's PKI issues what Talos issues, and writes a talosconfig talosctl would."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import ssl
import stat
import tempfile
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pytest_talos import pki
from pytest_talos.errors import ConfigError
from pytest_talos.talosconfig import load_talosconfig


@pytest.fixture(scope="module")
def ca() -> pki.CertificateAuthority:
    return pki.CertificateAuthority.generate()


@pytest.fixture(scope="module")
def admin(ca: pki.CertificateAuthority) -> pki.CertAndKey:
    return pki.issue_client_cert(ca, roles=["os:admin"])


def _lifetime(cert: x509.Certificate) -> dt.timedelta:
    return cert.not_valid_after_utc - cert.not_valid_before_utc


def _ext(
    cert: x509.Certificate, kind: type[x509.ExtensionType]
) -> x509.Extension[x509.ExtensionType]:
    return cert.extensions.get_extension_for_class(kind)


# --------------------------------------------------------------------------- CA


def test_ca_is_self_signed_ed25519_talos_org_for_ten_years(ca: pki.CertificateAuthority) -> None:
    cert = ca.cert
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "talos"
    assert isinstance(cert.public_key(), ed25519.Ed25519PublicKey)
    assert _lifetime(cert) == dt.timedelta(days=3650)
    cert.verify_directly_issued_by(cert)


def test_ca_constraints_allow_signing_certificates(ca: pki.CertificateAuthority) -> None:
    constraints = _ext(ca.cert, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value == x509.BasicConstraints(ca=True, path_length=None)
    usage = _ext(ca.cert, x509.KeyUsage).value
    assert isinstance(usage, x509.KeyUsage)
    assert usage.key_cert_sign
    assert usage.crl_sign


@pytest.mark.parametrize(
    ("key_type", "public_type"),
    [
        ("ecdsa", ec.EllipticCurvePublicKey),
        ("rsa", rsa.RSAPublicKey),
    ],
)
def test_ca_other_key_types(key_type: pki.KeyType, public_type: type[object]) -> None:
    other = pki.CertificateAuthority.generate(organization="lab", key_type=key_type)
    key = other.cert.public_key()
    assert isinstance(key, public_type)
    if isinstance(key, ec.EllipticCurvePublicKey):
        assert key.curve.name == "secp256r1"
    if isinstance(key, rsa.RSAPublicKey):
        assert key.key_size == 2048
    assert other.key_type == key_type
    assert other.cert.subject.rfc4514_string() == "O=lab"
    leaf = pki.issue_client_cert(other, roles=["os:reader"], key_type=key_type)
    leaf.cert.verify_directly_issued_by(other.cert)


def test_unknown_key_type_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown key type 'dsa'"):
        pki.CertificateAuthority.generate(key_type="dsa")  # type: ignore[arg-type]


def test_ca_repr_hides_the_key(ca: pki.CertificateAuthority) -> None:
    text = repr(ca)
    assert "key=<hidden>" in text
    assert "O=talos" in text
    assert _key_body(ca.as_cert_and_key().key_pem) not in text


# --------------------------------------------------------------------------- server cert


def test_server_cert_names_and_sans(ca: pki.CertificateAuthority) -> None:
    server = pki.issue_server_cert(
        ca, hostname="cp-1", ips=["10.5.0.2", "fd00::2"], dns=["cp-1.lab.example"]
    )
    cert = server.cert
    assert cert.subject.rfc4514_string() == "CN=cp-1"
    sans = _ext(cert, x509.SubjectAlternativeName).value
    assert isinstance(sans, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.5.0.2"),
        ipaddress.ip_address("fd00::2"),
        ipaddress.ip_address("127.0.0.1"),
    ]
    assert sans.get_values_for_type(x509.DNSName) == ["cp-1", "cp-1.lab.example"]
    cert.verify_directly_issued_by(ca.cert)


def test_server_cert_does_not_repeat_loopback_or_hostname(ca: pki.CertificateAuthority) -> None:
    server = pki.issue_server_cert(ca, hostname="n", ips=["127.0.0.1"], dns=["n"])
    sans = _ext(server.cert, x509.SubjectAlternativeName).value
    assert isinstance(sans, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == ["n"]


def test_server_cert_usage_and_lifetime(ca: pki.CertificateAuthority) -> None:
    cert = pki.issue_server_cert(ca, hostname="n", ips=["10.5.0.3"]).cert
    eku = _ext(cert, x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]  # type: ignore[call-overload]
    assert _ext(cert, x509.BasicConstraints).value == x509.BasicConstraints(
        ca=False, path_length=None
    )
    assert _lifetime(cert) == dt.timedelta(hours=24)
    assert isinstance(cert.public_key(), ed25519.Ed25519PublicKey)


# --------------------------------------------------------------------------- client cert


def test_client_cert_roles_are_the_organization(ca: pki.CertificateAuthority) -> None:
    client = pki.issue_client_cert(ca, roles=["os:operator", "os:etcd:backup"])
    orgs = client.cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [attr.value for attr in orgs] == ["os:operator", "os:etcd:backup"]
    client.cert.verify_directly_issued_by(ca.cert)


def test_client_cert_usage_is_client_auth_only(admin: pki.CertAndKey) -> None:
    eku = _ext(admin.cert, x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]  # type: ignore[call-overload]
    usage = _ext(admin.cert, x509.KeyUsage).value
    assert isinstance(usage, x509.KeyUsage)
    assert usage.digital_signature
    assert not usage.key_cert_sign
    assert _lifetime(admin.cert) == dt.timedelta(days=365)


def test_client_cert_with_a_wrong_eku_for_negative_tests(ca: pki.CertificateAuthority) -> None:
    wrong = pki.issue_client_cert(
        ca,
        roles=["os:admin"],
        ext_key_usage=[ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH],
    )
    eku = _ext(wrong.cert, x509.ExtendedKeyUsage).value
    assert list(eku) == [  # type: ignore[call-overload]
        ExtendedKeyUsageOID.CLIENT_AUTH,
        ExtendedKeyUsageOID.SERVER_AUTH,
    ]
    bare = pki.issue_client_cert(ca, roles=["os:admin"], ext_key_usage=[])
    with pytest.raises(x509.ExtensionNotFound):
        bare.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage)


def test_client_cert_validity_window_is_settable(ca: pki.CertificateAuthority) -> None:
    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    expired = pki.issue_client_cert(
        ca, roles=["os:admin"], not_before=start, not_after=start + dt.timedelta(days=1)
    )
    assert expired.cert.not_valid_before_utc == start
    assert expired.cert.not_valid_after_utc == start + dt.timedelta(days=1)
    short = pki.issue_client_cert(ca, roles=["os:admin"], validity=dt.timedelta(hours=2))
    assert _lifetime(short.cert) == dt.timedelta(hours=2)


# --------------------------------------------------------------------------- keys


def _key_body(pem: bytes) -> str:
    """The base64 body of a PEM block, on one line."""
    return "".join(line for line in pem.decode().splitlines() if not line.startswith("-----"))


@pytest.mark.parametrize(
    ("key_type", "talos_label"),
    [
        ("ed25519", b"ED25519 PRIVATE KEY"),
        ("ecdsa", b"EC PRIVATE KEY"),
        ("rsa", b"RSA PRIVATE KEY"),
    ],
)
def test_key_pem_forms(
    ca: pki.CertificateAuthority, key_type: pki.KeyType, talos_label: bytes
) -> None:
    pair = pki.issue_client_cert(ca, roles=["os:admin"], key_type=key_type)
    assert pair.key_pem.startswith(b"-----" + b"BEGIN PRIVATE KEY-----\n")
    assert pair.key_pem_talos.startswith(b"-----BEGIN " + talos_label + b"-----\n")
    assert pair.key_type == key_type
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert key.public_key() == pair.cert.public_key()


def test_ed25519_talos_key_is_pkcs8_under_another_label(admin: pki.CertAndKey) -> None:
    assert _key_body(admin.key_pem_talos) == _key_body(admin.key_pem)
    assert admin.key_pem_talos.rstrip().endswith(b"-----END ED25519 PRIVATE KEY-----")


def test_cert_and_key_repr_never_shows_the_key(admin: pki.CertAndKey) -> None:
    text = repr(admin)
    assert "key=<hidden>" in text
    assert "O=os:admin" in text
    for secret in (_key_body(admin.key_pem), _key_body(admin.key_pem_talos)):
        assert secret not in text
        assert secret[:24] not in text
    assert "PRIVATE KEY" not in str(admin)


def test_load_into_an_ssl_context(ca: pki.CertificateAuthority, admin: pki.CertAndKey) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    pki.issue_server_cert(ca, hostname="n", ips=["10.5.0.2"]).load_into(ctx)
    mixed = pki.CertAndKey(
        cert_pem=admin.cert_pem,
        key_pem=ca.as_cert_and_key().key_pem,
        key_pem_talos=b"",
    )
    with pytest.raises(ConfigError, match=r"ssl rejected the certificate and key \(KEY_VALUES"):
        mixed.load_into(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))


def test_load_into_works_without_memfd_and_leaves_no_file(
    monkeypatch: pytest.MonkeyPatch, admin: pki.CertAndKey, tmp_path: Path
) -> None:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    admin.load_into(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- talosconfig


def _render(ca: pki.CertificateAuthority, client: pki.CertAndKey, path: Path | None) -> bytes:
    return pki.write_talosconfig(
        path,
        context="lab",
        endpoints=["10.5.0.2", "10.5.0.3"],
        nodes=["10.5.0.2"],
        ca_pem=ca.cert_pem,
        client=client,
    )


def test_talosconfig_layout_is_talosctls(
    ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    doc = yaml.safe_load(_render(ca, admin, None))
    assert list(doc) == ["context", "contexts"]
    assert doc["context"] == "lab"
    entry = doc["contexts"]["lab"]
    assert list(entry) == ["endpoints", "nodes", "ca", "crt", "key"]
    assert entry["endpoints"] == ["10.5.0.2", "10.5.0.3"]
    assert entry["nodes"] == ["10.5.0.2"]
    assert base64.b64decode(entry["ca"]) == ca.cert_pem
    assert base64.b64decode(entry["crt"]) == admin.cert_pem
    assert base64.b64decode(entry["key"]) == admin.key_pem_talos


def test_talosconfig_file_is_private(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    target = tmp_path / "talos" / "config"
    data = _render(ca, admin, target)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_rewriting_a_world_readable_talosconfig_tightens_it(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    target = tmp_path / "config"
    target.write_text("old")
    target.chmod(0o644)
    _render(ca, admin, target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert yaml.safe_load(target.read_bytes())["context"] == "lab"


def test_rendering_only_writes_nothing(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    assert _render(ca, admin, None).startswith(b"context: lab\n")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_talosconfig_path_is_a_config_error(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot write the talosconfig") as info:
        _render(ca, admin, blocker / "config")
    assert str(blocker / "config") in str(info.value)


@pytest.mark.parametrize("key_type", ["ed25519", "ecdsa", "rsa"])
def test_generated_talosconfig_loads_back(tmp_path: Path, key_type: pki.KeyType) -> None:
    own_ca = pki.CertificateAuthority.generate(key_type=key_type)
    client = pki.issue_client_cert(own_ca, roles=["os:reader"], key_type=key_type)
    target = tmp_path / "config"
    _render(own_ca, client, target)
    config = load_talosconfig(target, env={})
    assert config.context_name == "lab"
    assert config.context.endpoints == ("10.5.0.2:50000", "10.5.0.3:50000")
    assert config.context.nodes == ("10.5.0.2",)
    assert config.roles == ("os:reader",)
    assert config.key_type == key_type
    assert config.context.ca_pem == own_ca.cert_pem
    assert config.context.crt_pem == client.cert_pem
    assert config.context.key_pem == client.key_pem
