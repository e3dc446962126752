"""Leaf certificates as Talos issues them: apid's, kube-apiserver's, talosconfig clients'."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pytest_talos.pki.authority import CertAndKey, CertificateAuthority, key_usage
from pytest_talos.pki.keys import (
    KUBECONFIG_CLOCK_SKEW,
    KeyType,
    PrivateKey,
    generate_key,
    utc_now,
)

__all__ = [
    "DEFAULT_CLIENT_VALIDITY",
    "DEFAULT_SERVER_VALIDITY",
    "EXPIRING_CLIENT_VALIDITY",
    "KUBERNETES_CERT_VALIDITY",
    "issue_apid_cert",
    "issue_client_cert",
    "issue_kube_apiserver_cert",
    "issue_kubeconfig_client_cert",
    "issue_server_cert",
]

DEFAULT_SERVER_VALIDITY = dt.timedelta(hours=24)  # siderolabs/crypto default validity
DEFAULT_CLIENT_VALIDITY = dt.timedelta(days=365)  # admin certificate TTL


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
        .add_extension(key_usage(), critical=True)
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
    loopback: bool = True,
) -> CertAndKey:
    """A server certificate: CN = ``common_name`` (default the hostname); SANs = IPs +
    127.0.0.1, the hostname + ``dns``.

    ``hostname_san=False`` leaves the hostname out of the SANs, ``loopback=False`` leaves
    127.0.0.1 out and ``not_before`` moves the validity window (for faults and tests: a
    certificate missing a name, an expired one).
    """
    key = generate_key(key_type)
    wanted = [*ips, "127.0.0.1"] if loopback else [ip for ip in ips if ip != "127.0.0.1"]
    ip_sans = [ipaddress.ip_address(ip) for ip in _unique(wanted)]
    dns_sans = _unique([hostname, *dns] if hostname_san else [n for n in dns if n != hostname])
    sans: list[x509.GeneralName] = [x509.IPAddress(ip) for ip in ip_sans]
    sans += [x509.DNSName(name) for name in dns_sans]
    # siderolabs/crypto x509 NewDefaultOptions: NotBefore time.Now(), no allowance
    start = not_before if not_before is not None else utc_now()
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
    validity: dt.timedelta = DEFAULT_SERVER_VALIDITY,
    loopback: bool = True,
) -> CertAndKey:
    """apid's serving certificate as machined issues it.

    internal/app/machined/pkg/controllers/secrets/api.go: CN = FQDN, the siderolabs/crypto
    default validity (24 h; a worker's comes from trustd's signing of its CSR with the same
    default, internal/app/trustd/internal/reg/reg.go); api_cert_sans.go: IPs = every IP of
    NodeAddresses ``accumulative-no-k8s`` (``ips``) + 127.0.0.1, DNS = hostname and FQDN.
    ``hostname_san=False`` (fault apid-cert-missing-san) leaves both names out;
    ``validity`` and ``loopback=False`` make certificates Talos never issues (tests).
    """
    names = _unique([hostname, fqdn]) if hostname_san else []
    return issue_server_cert(
        ca,
        hostname=hostname,
        ips=ips,
        dns=names,
        common_name=fqdn,
        hostname_san=hostname_san,
        validity=validity,
        loopback=loopback,
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
    in_cluster_names: bool = True,
) -> CertAndKey:
    """kube-apiserver's serving certificate as machined issues it.

    internal/app/machined/pkg/controllers/secrets/kubernetes_dynamic_certs.go: CN
    ``kube-apiserver``, O ``kube-master``, one year, ECDSA (the Kubernetes CA's key type);
    kubernetes_cert_sans.go: the endpoint's host, ``kubernetes``, ``kubernetes.default``,
    ``kubernetes.default.svc``, ``kubernetes.default.svc.<domain>``, ``localhost``, the
    hostname and FQDN, the first service IP, the node addresses and 127.0.0.1.
    ``expired`` (fault kube-cert-expired) issues one whose year ended a day ago;
    ``in_cluster_names=False`` one without the in-cluster names, the service IP and
    127.0.0.1 (a certificate Talos never issues: tests).
    """
    in_cluster = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        f"kubernetes.default.svc.{dns_domain}",
        "localhost",
    ]
    dns = [*(in_cluster if in_cluster_names else []), hostname, fqdn]
    addresses = [service_ip, *ips] if in_cluster_names else list(ips)
    try:
        ipaddress.ip_address(endpoint_host)
    except ValueError:
        dns.insert(0, endpoint_host)
    else:
        addresses.insert(0, endpoint_host)
    start = utc_now() - KUBERNETES_CERT_VALIDITY - dt.timedelta(days=1) if expired else None
    return issue_server_cert(
        ca,
        hostname=hostname,
        ips=addresses,
        dns=dns,
        validity=KUBERNETES_CERT_VALIDITY,
        key_type=ca.key_type,
        common_name="kube-apiserver",
        organization="kube-master",
        not_before=start,
        loopback=in_cluster_names,
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

    Valid from now (secrets/ca.go NewAdminCertificateAndKey and GenerateClientConfiguration:
    NotBefore(now), NotAfter(now + ttl)). ``not_before``/``not_after`` let tests issue
    expired or nearly expired certificates; ``ext_key_usage`` lets them issue one apid must
    reject (anything but ``[ClientAuth]``). An empty ``ext_key_usage`` omits the extension.
    """
    key = generate_key(key_type)
    start = not_before if not_before is not None else utc_now()
    end = not_after if not_after is not None else start + validity
    builder = _leaf_builder(_roles_subject(roles, common_name), key, start, end)
    if ext_key_usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(ext_key_usage)), False)
    return CertAndKey.from_key(ca.sign(builder), key)


def issue_kubeconfig_client_cert(
    ca: CertificateAuthority,
    *,
    validity: dt.timedelta = DEFAULT_CLIENT_VALIDITY,
    key_type: KeyType = "ecdsa",
) -> CertAndKey:
    """The admin kubeconfig's client certificate (CN ``admin``, O ``system:masters``).

    pkg/kubeconfig/generate.go: NotBefore now - allowedTimeSkew (10 s), NotAfter now +
    ``cluster.adminKubeconfig.certLifetime`` (default one year); the only certificate Talos
    backdates.
    """
    now = utc_now()
    return issue_client_cert(
        ca,
        roles=["system:masters"],
        common_name="admin",
        key_type=key_type,
        not_before=now - KUBECONFIG_CLOCK_SKEW,
        not_after=now + validity,
    )
