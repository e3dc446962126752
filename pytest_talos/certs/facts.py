"""What a certificate says about itself: subject, issuer, serial, names and validity, never
its key (:class:`CertificateFacts`, :func:`certificate_facts`); PEM bundles
(:func:`load_certificates`) and which CA signed a certificate (:func:`issuer_among`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

__all__ = [
    "SECONDS_PER_DAY",
    "CertificateFacts",
    "certificate_facts",
    "duration_text",
    "issuer_among",
    "load_certificates",
    "utc_now",
    "utc_text",
]

SECONDS_PER_DAY = 86400.0


def utc_now() -> dt.datetime:
    """This machine's time, in UTC."""
    return dt.datetime.now(dt.UTC)


def utc_text(moment: dt.datetime) -> str:
    """A moment as a report shows it (``YYYY-MM-DD HH:MM:SS UTC``)."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration_text(seconds: float) -> str:
    """A span as a report shows it: days, or hours under one day."""
    days = seconds / SECONDS_PER_DAY
    return f"{days:.1f} days" if abs(days) >= 1 else f"{seconds / 3600:.1f} hours"


def _key_type(cert: x509.Certificate) -> str:
    key = cert.public_key()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ed25519"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ecdsa-{key.curve.name}"
    if isinstance(key, rsa.RSAPublicKey):
        return f"rsa-{key.key_size}"
    return type(key).__name__


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class CertificateFacts:
    """What a certificate says about itself (never its key)."""

    subject: str
    issuer: str
    serial: str  # lower-case hex
    not_before: dt.datetime
    not_after: dt.datetime
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    organizations: tuple[str, ...] = ()  # the roles of a Talos client certificate
    is_ca: bool = False
    key_type: str = ""
    certificate: x509.Certificate | None = field(default=None, repr=False, compare=False)

    @property
    def lifetime(self) -> float:
        return (self.not_after - self.not_before).total_seconds()

    def seconds_left(self, now: dt.datetime | None = None) -> float:
        return (self.not_after - (now or utc_now())).total_seconds()

    def days_left(self, now: dt.datetime | None = None) -> float:
        return self.seconds_left(now) / SECONDS_PER_DAY

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.ip_addresses, *self.dns_names)

    def covers(self, name: str) -> bool:
        """Whether a client reaching the server as ``name`` (IP or DNS) accepts this cert."""
        host = name.strip("[]")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return any(_dns_match(pattern, host) for pattern in self.dns_names)
        return any(ipaddress.ip_address(ip) == address for ip in self.ip_addresses)

    def to_json(self, now: dt.datetime | None = None) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "serial": self.serial,
            "not_before": utc_text(self.not_before),
            "not_after": utc_text(self.not_after),
            "days_left": round(self.days_left(now), 2),
            "sans": list(self.names),
            "key_type": self.key_type,
            **({"organizations": list(self.organizations)} if self.organizations else {}),
        }


def _dns_match(pattern: str, host: str) -> bool:
    pattern, host = pattern.lower().rstrip("."), host.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = host.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == host


def certificate_facts(data: bytes | x509.Certificate) -> CertificateFacts:
    """Facts of a certificate given as DER, PEM (the first block) or a loaded object."""
    if isinstance(data, x509.Certificate):
        cert = data
    elif data.lstrip().startswith(b"-----"):
        cert = x509.load_pem_x509_certificate(data)
    else:
        cert = x509.load_der_x509_certificate(data)
    dns: list[str] = []
    ips: list[str] = []
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        pass
    else:
        dns = list(sans.get_values_for_type(x509.DNSName))
        ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return CertificateFacts(
        subject=cert.subject.rfc4514_string() or "(empty)",
        issuer=cert.issuer.rfc4514_string() or "(empty)",
        serial=format(cert.serial_number, "x"),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        dns_names=tuple(dns),
        ip_addresses=tuple(ips),
        organizations=tuple(_text(o.value) for o in orgs if o.value),
        is_ca=is_ca,
        key_type=_key_type(cert),
        certificate=cert,
    )


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (a talosconfig's ``ca`` may hold several)."""
    try:
        return list(x509.load_pem_x509_certificates(pem))
    except ValueError:
        return []


def issuer_among(
    cert: x509.Certificate, cas: Iterable[x509.Certificate]
) -> x509.Certificate | None:
    """The CA of ``cas`` whose key signed ``cert`` (the chain a verifier would build)."""
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca
    return None
