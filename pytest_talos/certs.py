"""Certificate hygiene: the run's client certificate, apid's and kube-apiserver's.

Talos signs the talosconfig client certificate and every node's apid certificate with the OS
CA (``pkg/machinery/config/generate/secrets/ca.go``); apid's certificate lives 24 hours and
is renewed at half its lifetime (``internal/app/machined/pkg/controllers/secrets/api.go``),
with the node's addresses, ``127.0.0.1``, its hostname and FQDN among the names
(``.../secrets/api_cert_sans.go``). kube-apiserver's certificate lives a year and is renewed
at half-life too (``.../secrets/kubernetes_dynamic_certs.go``); the admin kubeconfig's client
certificate a year (``pkg/machinery/constants``: ``KubernetesAdminCertDefaultLifetime``).

Everything here reads certificates, never keys: a :class:`CertificateFacts` holds subject,
issuer, serial, names and validity, which is all a report shows. Verdicts are
:class:`Finding` lists (a failure or a warning each) so a caller decides what to do.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from pytest_talos.client import TalosClient
from pytest_talos.errors import TalosError, TransportError
from pytest_talos.node import TalosNode
from pytest_talos.talos_api import APID_PORT
from pytest_talos.talosconfig import Context
from pytest_talos.transport import read_peer_certificate

__all__ = [
    "APID_PORT",
    "DEFAULT_FAIL_DAYS",
    "DEFAULT_WARN_DAYS",
    "RENEWAL_FLOOR",
    "CertificateFacts",
    "CertificateReport",
    "ExpiryPolicy",
    "Finding",
    "apid_certificate",
    "ca_certificates",
    "certificate_facts",
    "client_certificate",
    "issuer_among",
    "kubernetes_certificates",
    "load_certificates",
]

DEFAULT_WARN_DAYS = 30.0
DEFAULT_FAIL_DAYS = 7.0
# Talos renews apid's (and kube-apiserver's) certificate at half its lifetime; one with less
# than a quarter left was not renewed when it should have been.
RENEWAL_FLOOR = 0.25
_DAY = 86400.0

Level = Literal["failure", "warning"]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _days(seconds: float) -> str:
    days = seconds / _DAY
    return f"{days:.1f} days" if abs(days) >= 1 else f"{seconds / 3600:.1f} hours"


# --------------------------------------------------------------------------- facts


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
        return (self.not_after - (now or _now())).total_seconds()

    def days_left(self, now: dt.datetime | None = None) -> float:
        return self.seconds_left(now) / _DAY

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
            "not_before": _when(self.not_before),
            "not_after": _when(self.not_after),
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


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Finding:
    level: Level
    message: str


@dataclass(frozen=True)
class ExpiryPolicy:
    """Days before expiry below which a long-lived certificate warns, and fails."""

    warn_days: float = DEFAULT_WARN_DAYS
    fail_days: float = DEFAULT_FAIL_DAYS

    def __post_init__(self) -> None:
        if not 0 <= self.fail_days <= self.warn_days:
            raise ValueError(
                f"need 0 <= fail days ({self.fail_days:g}) <= warn days ({self.warn_days:g})"
            )

    def judge(self, facts: CertificateFacts, what: str, now: dt.datetime) -> list[Finding]:
        found = _validity(facts, what, now)
        if found:
            return found
        left = facts.seconds_left(now)
        if left < self.fail_days * _DAY:
            return [
                Finding(
                    "failure",
                    f"{what} expires on {_when(facts.not_after)}, in "
                    f"{_days(left)} (fail under {self.fail_days:g} days)",
                )
            ]
        if left < self.warn_days * _DAY:
            return [
                Finding(
                    "warning",
                    f"{what} expires on {_when(facts.not_after)}, in "
                    f"{_days(left)} (warn under {self.warn_days:g} days)",
                )
            ]
        return []


def _validity(facts: CertificateFacts, what: str, now: dt.datetime) -> list[Finding]:
    if now < facts.not_before:
        return [
            Finding(
                "failure",
                f"{what} is not valid before {_when(facts.not_before)}: "
                "check the clocks of this machine and the node",
            )
        ]
    if now >= facts.not_after:
        return [
            Finding(
                "failure",
                f"{what} expired on {_when(facts.not_after)}, "
                f"{_days(-facts.seconds_left(now))} ago",
            )
        ]
    return []


def _renewal(facts: CertificateFacts, what: str, now: dt.datetime) -> list[Finding]:
    """A short-lived, auto-renewed certificate: valid, and renewed on time."""
    found = _validity(facts, what, now)
    if found:
        return found
    left = facts.seconds_left(now)
    if facts.lifetime > 0 and left < RENEWAL_FLOOR * facts.lifetime:
        return [
            Finding(
                "failure",
                f"{what} has {_days(left)} of its {_days(facts.lifetime)} "
                "left: Talos renews it at half its lifetime, so renewal is stuck",
            )
        ]
    return []


def _chain(
    facts: CertificateFacts, cas: Sequence[x509.Certificate], what: str, ca_name: str
) -> tuple[list[Finding], CertificateFacts | None]:
    cert = facts.certificate
    issuer = issuer_among(cert, cas) if cert is not None else None
    if issuer is None:
        return [
            Finding("failure", f"{what} (issuer {facts.issuer}) was not issued by {ca_name}")
        ], None
    return [], certificate_facts(issuer)


def _names(facts: CertificateFacts, names: Iterable[str], what: str) -> list[Finding]:
    missing = [name for name in dict.fromkeys(names) if name and not facts.covers(name)]
    if not missing:
        return []
    return [
        Finding(
            "failure",
            f"{what} does not name {', '.join(missing)} (its names: "
            f"{', '.join(facts.names) or 'none'}): a client that reaches it by that name "
            "refuses it",
        )
    ]


@dataclass
class CertificateReport:
    """One certificate, what it was checked for, and what was found."""

    what: str
    facts: CertificateFacts | None
    findings: list[Finding] = field(default_factory=list)
    issuer: CertificateFacts | None = None
    how: str = ""  # where and how it was read
    now: dt.datetime = field(default_factory=_now)

    @property
    def failures(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "failure"]

    @property
    def warnings(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "warning"]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"certificate": self.what}
        if self.how:
            data["read"] = self.how
        if self.facts is not None:
            data.update(self.facts.to_json(self.now))
        if self.issuer is not None:
            data["issued_by"] = {"subject": self.issuer.subject, "serial": self.issuer.serial}
        if self.findings:
            data["findings"] = [f"{f.level}: {f.message}" for f in self.findings]
        return data


# --------------------------------------------------------------------------- the checks


def client_certificate(
    context: Context, policy: ExpiryPolicy, now: dt.datetime | None = None
) -> CertificateReport:
    """The talosconfig context's client certificate: expiry by ``policy``, roles, issuer."""
    moment = now or _now()
    facts = certificate_facts(context.crt_pem)
    what = "the talosconfig client certificate"
    report = CertificateReport(what, facts, policy.judge(facts, what, moment), now=moment)
    cas = load_certificates(context.ca_pem)
    if facts.certificate is not None:
        issuer = issuer_among(facts.certificate, cas)
        report.issuer = certificate_facts(issuer) if issuer is not None else None
    return report


def ca_certificates(
    context: Context, policy: ExpiryPolicy, now: dt.datetime | None = None
) -> list[CertificateReport]:
    """The talosconfig's CA certificate(s) (the Talos OS CA), judged by ``policy``."""
    moment = now or _now()
    reports = []
    for cert in load_certificates(context.ca_pem):
        facts = certificate_facts(cert)
        what = f"the Talos CA ({facts.subject})"
        findings = policy.judge(facts, what, moment)
        if not facts.is_ca:
            findings.append(Finding("failure", f"{what} is not a CA certificate"))
        reports.append(CertificateReport(what, facts, findings, now=moment))
    return reports


def _apid_der(node: TalosNode, context: Context, timeout: float) -> tuple[bytes, str, str]:
    """The certificate apid presents on the node's own address, and how it was read.

    First as the client connects (CA and name verified); if that handshake fails, without
    verification so the certificate that failed can be judged. Third item: the TLS error.
    """
    endpoint = f"{node.host}:{APID_PORT}"
    client = TalosClient(
        endpoint, context.ca_pem, context.crt_pem, context.key_pem, timeout=timeout
    )
    try:
        client.version()
        der = client.peer_certificate
        if der:
            return der, f"TLS handshake of a Version call to {endpoint}", ""
        tls_error = "the connection exposed no certificate"
    except TransportError as exc:
        tls_error = str(exc)
    finally:
        client.close()
    der = read_peer_certificate(
        node.host,
        APID_PORT,
        timeout=timeout,
        client_crt_pem=context.crt_pem,
        client_key_pem=context.key_pem,
    )
    return der, f"unverified TLS handshake with {endpoint} (the verified one failed)", tls_error


def _fqdn(node: TalosNode) -> str | None:
    try:
        spec = node.resource("HostnameStatuses.net.talos.dev", "hostname", "network").spec
    except TalosError:
        return None
    if isinstance(spec, dict) and spec.get("domainname"):
        return f"{spec.get('hostname') or node.hostname}.{spec['domainname']}"
    return None


def apid_certificate(
    node: TalosNode, context: Context, *, timeout: float = 10.0, now: dt.datetime | None = None
) -> CertificateReport:
    """apid's serving certificate on ``node``: issued by the talosconfig CA, valid and
    renewed on time, naming the address the node is reached on, its hostname and FQDN."""
    der, how, tls_error = _apid_der(node, context, timeout)
    moment = now or _now()
    facts = certificate_facts(der)
    what = f"apid's certificate on {node.name}"
    findings, issuer = _chain(facts, load_certificates(context.ca_pem), what, "the talosconfig CA")
    findings += _renewal(facts, what, moment)
    names = [node.host, node.hostname, _fqdn(node) or ""]
    findings += _names(facts, names, what)
    if tls_error and not findings:
        findings.append(
            Finding("failure", f"the TLS handshake with {node.host} failed: {tls_error}")
        )
    return CertificateReport(what, facts, findings, issuer, how, moment)


@dataclass(frozen=True)
class _Kubeconfig:
    server: str
    host: str
    port: int
    ca_pem: bytes
    crt_pem: bytes | None


def _kubeconfig(data: bytes) -> _Kubeconfig:
    doc = yaml.safe_load(data) or {}
    contexts = {c.get("name"): c.get("context", {}) for c in doc.get("contexts") or []}
    current: dict[str, Any] = contexts.get(doc.get("current-context")) or next(
        iter(contexts.values()), {}
    )
    clusters = {c.get("name"): c.get("cluster", {}) for c in doc.get("clusters") or []}
    users = {u.get("name"): u.get("user", {}) for u in doc.get("users") or []}
    cluster = clusters.get(current.get("cluster")) or {}
    user = users.get(current.get("user")) or {}
    server = str(cluster.get("server") or "")
    url = urlsplit(server)
    if not url.hostname:
        raise TalosError(f"the kubeconfig's server {server!r} is not an https:// URL")
    ca = base64.b64decode(cluster.get("certificate-authority-data") or "")
    crt = user.get("client-certificate-data")
    return _Kubeconfig(
        server, url.hostname, url.port or 443, ca, base64.b64decode(crt) if crt else None
    )


def _served(host: str, port: int, timeout: float) -> bytes:
    return read_peer_certificate(host, port, timeout=timeout, alpn=("http/1.1",))


def kubernetes_certificates(
    node: TalosNode,
    kubeconfig: bytes,
    policy: ExpiryPolicy,
    *,
    timeout: float = 10.0,
    now: dt.datetime | None = None,
) -> list[CertificateReport]:
    """On a control plane: the kube-apiserver certificate at the kubeconfig's server and at
    the node's own address (issued by the kubeconfig's CA, not near expiry, naming what it
    is reached as), and the kubeconfig client certificate's expiry."""
    moment = now or _now()
    config = _kubeconfig(kubeconfig)
    cas = load_certificates(config.ca_pem)
    targets = {config.host: [config.host]}
    targets.setdefault(node.host, []).append(config.host)
    reports = []
    for host, names in targets.items():
        facts = certificate_facts(_served(host, config.port, timeout))
        what = f"kube-apiserver's certificate at {host}:{config.port}"
        findings, issuer = _chain(facts, cas, what, "the kubeconfig's certificate authority")
        findings += policy.judge(facts, what, moment)
        findings += _names(facts, [host, *names], what)
        reports.append(
            CertificateReport(
                what, facts, findings, issuer, f"TLS handshake with {host}:{config.port}", moment
            )
        )
    if config.crt_pem is not None:
        facts = certificate_facts(config.crt_pem)
        what = "the kubeconfig client certificate"
        reports.append(
            CertificateReport(
                what,
                facts,
                policy.judge(facts, what, moment),
                how="client-certificate-data of the kubeconfig",
                now=moment,
            )
        )
    return reports
