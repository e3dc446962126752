"""Certificates the way Talos issues them, for the emulator and for tests.

* the Talos OS CA: Ed25519 by default, Organization ``talos``, ten years;
* apid server certificates: CN = FQDN, SANs = node IPs + ``127.0.0.1`` + hostname and FQDN,
  ExtKeyUsage ServerAuth, 24 hours; kube-apiserver's, from the Kubernetes CA, a year;
* client (talosconfig) certificates: Organization = role strings such as ``os:admin``,
  KeyUsage DigitalSignature, ExtKeyUsage ClientAuth only, one year;
* a talosconfig file in the talosctl format.

ECDSA P-256 and RSA 2048 exist only so tests can cover other key types. Everything here
lives in memory; the only file ever written is the talosconfig a caller asks for (mode 0600).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import re
import secrets
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pytest_talos.errors import ConfigError
from pytest_talos.keyfile import load_chain

__all__ = [
    "DEFAULT_CA_VALIDITY",
    "DEFAULT_CLIENT_VALIDITY",
    "DEFAULT_SERVER_VALIDITY",
    "EXPIRING_CLIENT_VALIDITY",
    "KUBERNETES_CERT_VALIDITY",
    "SCAN_BASELINE_KEY",
    "TIME_SCALE_KEY",
    "CertAndKey",
    "CertificateAuthority",
    "KeyType",
    "issue_apid_cert",
    "issue_client_cert",
    "issue_kube_apiserver_cert",
    "issue_server_cert",
    "render_talosconfig",
    "write_talosconfig",
]

KeyType = Literal["ed25519", "ecdsa", "rsa"]
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

DEFAULT_CA_VALIDITY = dt.timedelta(days=3650)  # NewTalosCA: 87600h
DEFAULT_SERVER_VALIDITY = dt.timedelta(hours=24)  # siderolabs/crypto default validity
DEFAULT_CLIENT_VALIDITY = dt.timedelta(days=365)  # admin certificate TTL
# Backdate notBefore a little so a peer whose clock lags slightly still accepts the cert.
_CLOCK_SKEW = dt.timedelta(minutes=1)
_PEM_LABEL = re.compile(rb"-----(BEGIN|END) PRIVATE KEY-----")


def _generate_key(key_type: KeyType) -> PrivateKey:
    if key_type == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"unknown key type {key_type!r}; use 'ed25519', 'ecdsa' or 'rsa'")


def _key_type_of(key: PrivateKey) -> KeyType:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "ed25519"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return "ecdsa"
    return "rsa"


def _signature_hash(key: PrivateKey) -> hashes.SHA256 | None:
    # Ed25519 signs the message itself; a separate digest is an error there.
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _pkcs8_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _talos_key_pem(key: PrivateKey) -> bytes:
    """The key PEM exactly as talosctl / siderolabs/crypto write it."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        # PKCS#8 DER under a non-standard label.
        return _PEM_LABEL.sub(rb"-----\1 ED25519 PRIVATE KEY-----", _pkcs8_pem(key))
    # ECDSA as SEC1 "EC PRIVATE KEY", RSA as PKCS#1 "RSA PRIVATE KEY".
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _serial() -> int:
    # Positive, at most 20 octets (RFC 5280 4.1.2.2).
    return secrets.randbits(159) | 1


@dataclass(frozen=True)
class CertAndKey:
    """A PEM certificate and its private key. ``repr`` never shows the key."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)  # PKCS#8 "PRIVATE KEY", loadable by any TLS stack
    key_pem_talos: bytes = field(repr=False)  # as talosctl writes it (Ed25519 label etc.)

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def key_type(self) -> KeyType:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        return _key_type_of(cast(PrivateKey, key))

    def __repr__(self) -> str:
        cert = self.cert
        return (
            f"CertAndKey(subject={cert.subject.rfc4514_string()!r}, "
            f"not_after={cert.not_valid_after_utc.isoformat()}, key=<hidden>)"
        )

    def load_into(self, ctx: ssl.SSLContext) -> None:
        """Load this certificate and key into ``ctx`` (e.g. an emulated apid's server side).

        ``ssl`` reads keys only from a path: :func:`pytest_talos.keyfile.load_chain` gives it
        an anonymous in-memory file (Linux ``memfd_create``), or elsewhere a 0600 file in a
        private directory removed right after loading.
        """
        try:
            load_chain(ctx, self.cert_pem, self.key_pem, name="pytest-talos-pki")
        except ssl.SSLError as exc:
            raise ConfigError(f"ssl rejected the certificate and key ({exc.reason})") from None

    @classmethod
    def from_key(cls, cert: x509.Certificate, key: PrivateKey) -> CertAndKey:
        return cls(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=_pkcs8_pem(key),
            key_pem_talos=_talos_key_pem(key),
        )


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that can sign certificates. ``repr`` never shows the key."""

    cert: x509.Certificate
    private_key: PrivateKey = field(repr=False)

    @classmethod
    def generate(
        cls,
        organization: str = "talos",
        validity: dt.timedelta = DEFAULT_CA_VALIDITY,
        key_type: KeyType = "ed25519",
    ) -> CertificateAuthority:
        key = _generate_key(key_type)
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)])
        not_before = _now() - _CLOCK_SKEW
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(_serial())
            .not_valid_before(not_before)
            .not_valid_after(not_before + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, _signature_hash(key))
        )
        return cls(cert=cert, private_key=key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_type(self) -> KeyType:
        return _key_type_of(self.private_key)

    def as_cert_and_key(self) -> CertAndKey:
        return CertAndKey.from_key(self.cert, self.private_key)

    def sign(self, builder: x509.CertificateBuilder) -> x509.Certificate:
        """Sign a leaf builder that already has subject, key, validity and extensions."""
        issuer_key: CertificateIssuerPrivateKeyTypes = self.private_key
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(self.private_key.public_key())
        return (
            builder.issuer_name(self.cert.subject)
            .serial_number(_serial())
            .add_extension(aki, critical=False)
            .sign(issuer_key, _signature_hash(self.private_key))
        )

    def __repr__(self) -> str:
        return (
            f"CertificateAuthority(subject={self.cert.subject.rfc4514_string()!r}, "
            f"key_type={self.key_type!r}, key=<hidden>)"
        )


def _key_usage(*, cert_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _leaf_builder(
    subject: x509.Name,
    key: PrivateKey,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .public_key(key.public_key())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )


def issue_server_cert(
    ca: CertificateAuthority,
    *,
    hostname: str,
    ips: Sequence[str],
    dns: Sequence[str] = (),
    validity: dt.timedelta = DEFAULT_SERVER_VALIDITY,
    key_type: KeyType = "ed25519",
    common_name: str | None = None,
    organization: str | None = None,
    hostname_san: bool = True,
    not_before: dt.datetime | None = None,
) -> CertAndKey:
    """A server certificate: CN = ``common_name`` (default the hostname); SANs = IPs +
    127.0.0.1, the hostname + ``dns``.

    ``hostname_san=False`` leaves the hostname out of the SANs and ``not_before`` moves the
    validity window (both for faults: a certificate missing a name, an expired one).
    """
    key = _generate_key(key_type)
    ip_sans = [ipaddress.ip_address(ip) for ip in _unique([*ips, "127.0.0.1"])]
    dns_sans = _unique([hostname, *dns] if hostname_san else [n for n in dns if n != hostname])
    sans: list[x509.GeneralName] = [x509.IPAddress(ip) for ip in ip_sans]
    sans += [x509.DNSName(name) for name in dns_sans]
    start = not_before if not_before is not None else _now() - _CLOCK_SKEW
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name or hostname)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    builder = (
        _leaf_builder(subject, key, start, start + validity)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
    )
    return CertAndKey.from_key(ca.sign(builder), key)


# pkg/machinery/constants: KubernetesDefaultCertificateValidityDuration (one year).
KUBERNETES_CERT_VALIDITY = dt.timedelta(days=365)
EXPIRING_CLIENT_VALIDITY = dt.timedelta(days=3)  # fault client-cert-expiring


def issue_apid_cert(
    ca: CertificateAuthority,
    *,
    hostname: str,
    fqdn: str,
    ips: Sequence[str],
    hostname_san: bool = True,
) -> CertAndKey:
    """apid's serving certificate as machined issues it.

    internal/app/machined/pkg/controllers/secrets/api.go: CN = FQDN, the siderolabs/crypto
    default validity; api_cert_sans.go: IPs = node addresses + 127.0.0.1, DNS = hostname and
    FQDN. ``hostname_san=False`` (fault apid-cert-missing-san) leaves both names out.
    """
    names = _unique([hostname, fqdn]) if hostname_san else []
    return issue_server_cert(
        ca, hostname=hostname, ips=ips, dns=names, common_name=fqdn, hostname_san=hostname_san
    )


def issue_kube_apiserver_cert(
    ca: CertificateAuthority,
    *,
    hostname: str,
    fqdn: str,
    ips: Sequence[str],
    endpoint_host: str,
    service_ip: str = "10.96.0.1",
    dns_domain: str = "cluster.local",
    expired: bool = False,
) -> CertAndKey:
    """kube-apiserver's serving certificate as machined issues it.

    internal/app/machined/pkg/controllers/secrets/kubernetes_dynamic_certs.go: CN
    ``kube-apiserver``, O ``kube-master``, one year, ECDSA (the Kubernetes CA's key type);
    kubernetes_cert_sans.go: the endpoint's host, ``kubernetes``, ``kubernetes.default``,
    ``kubernetes.default.svc``, ``kubernetes.default.svc.<domain>``, ``localhost``, the
    hostname and FQDN, the first service IP, the node addresses and 127.0.0.1.
    ``expired`` (fault kube-cert-expired) issues one whose year ended a day ago.
    """
    dns = ["kubernetes", "kubernetes.default", "kubernetes.default.svc",
           f"kubernetes.default.svc.{dns_domain}", "localhost", hostname, fqdn]
    addresses = [service_ip, *ips]
    try:
        ipaddress.ip_address(endpoint_host)
    except ValueError:
        dns.insert(0, endpoint_host)
    else:
        addresses.insert(0, endpoint_host)
    start = _now() - KUBERNETES_CERT_VALIDITY - dt.timedelta(days=1) if expired else None
    return issue_server_cert(
        ca, hostname=hostname, ips=addresses, dns=dns, validity=KUBERNETES_CERT_VALIDITY,
        key_type=ca.key_type, common_name="kube-apiserver", organization="kube-master",
        not_before=start,
    )


def _roles_subject(roles: Sequence[str], common_name: str | None) -> x509.Name:
    # Go puts all Organization values in one multi-valued RDN; readers take every O value.
    rdns: list[x509.RelativeDistinguishedName] = []
    orgs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, role) for role in _unique(roles)]
    if orgs:
        rdns.append(x509.RelativeDistinguishedName(orgs))
    if common_name:
        rdns.append(
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        )
    return x509.Name(rdns)


def issue_client_cert(
    ca: CertificateAuthority,
    *,
    roles: Sequence[str],
    validity: dt.timedelta = DEFAULT_CLIENT_VALIDITY,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    key_type: KeyType = "ed25519",
    ext_key_usage: Sequence[x509.ObjectIdentifier] = (ExtendedKeyUsageOID.CLIENT_AUTH,),
    common_name: str | None = None,
) -> CertAndKey:
    """A talosconfig client certificate; Organization = the role strings.

    ``not_before``/``not_after`` let tests issue expired or nearly expired certificates;
    ``ext_key_usage`` lets them issue one apid must reject (anything but ``[ClientAuth]``).
    An empty ``ext_key_usage`` omits the extension.
    """
    key = _generate_key(key_type)
    start = not_before if not_before is not None else _now() - _CLOCK_SKEW
    end = not_after if not_after is not None else start + validity
    builder = _leaf_builder(_roles_subject(roles, common_name), key, start, end)
    if ext_key_usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(ext_key_usage)), False)
    return CertAndKey.from_key(ca.sign(builder), key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# The emulated clock's rate, advertised to whoever connects with the file (the client side
# reads it as pytest_talos.talosconfig.TIME_SCALE_KEY). talosctl ignores keys it does not
# know: its decoder does not set KnownFields (pkg/machinery/client/config/config.go ReadFrom).
TIME_SCALE_KEY = "x-pytest-talos-time-scale"
# An address of the emulated cluster's /24 where no node lives: scanning it shows which ports
# the host itself listens on for every address (wildcard listeners), which the client side
# (pytest_talos.talosconfig.SCAN_BASELINE_KEY) then does not count as the node's. talosctl
# ignores it like the key above.
SCAN_BASELINE_KEY = "x-pytest-talos-scan-baseline"


def render_talosconfig(
    *,
    context: str,
    endpoints: Sequence[str],
    nodes: Sequence[str] = (),
    ca_pem: bytes,
    client: CertAndKey,
    cluster: str | None = None,
    time_scale: float = 1.0,
    scan_baseline: str | None = None,
) -> bytes:
    """The talosconfig YAML (talosctl layout; ca/crt/key are base64 of the PEM); a clock
    faster than real time is advertised under ``TIME_SCALE_KEY``."""
    entry: dict[str, object] = {"endpoints": list(endpoints)}
    if nodes:
        entry["nodes"] = list(nodes)
    if cluster:
        entry["cluster"] = cluster
    entry.update(ca=_b64(ca_pem), crt=_b64(client.cert_pem), key=_b64(client.key_pem_talos))
    if time_scale != 1:
        entry[TIME_SCALE_KEY] = float(time_scale)
    if scan_baseline:
        entry[SCAN_BASELINE_KEY] = scan_baseline
    document = {"context": context, "contexts": {context: entry}}
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1 << 16)
    return text.encode("utf-8")


def write_talosconfig(
    path: str | os.PathLike[str] | None,
    *,
    context: str,
    endpoints: Sequence[str],
    nodes: Sequence[str] = (),
    ca_pem: bytes,
    client: CertAndKey,
    cluster: str | None = None,
    time_scale: float = 1.0,
    scan_baseline: str | None = None,
) -> bytes:
    """Render a talosconfig and, when ``path`` is given, write it with mode 0600.

    Returns the YAML bytes either way (``path=None`` only renders).
    """
    data = render_talosconfig(
        context=context,
        endpoints=endpoints,
        nodes=nodes,
        ca_pem=ca_pem,
        client=client,
        cluster=cluster,
        time_scale=time_scale,
        scan_baseline=scan_baseline,
    )
    if path is not None:
        _write_private_file(Path(path), data)
    return data


def _write_private_file(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Create with 0600 so the key is never readable by others, not even briefly.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o600)  # the file may have existed with wider permissions
            handle.write(data)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the talosconfig ({exc.strerror}); choose a writable path",
            path=str(path),
        ) from None
