"""Where the certificates are read, and the report on each: the talosconfig's client
certificate and CA (:func:`client_certificate`, :func:`ca_certificates`), apid's serving
certificate on a node (:func:`apid_certificate`) and, on a control plane, kube-apiserver's
and (as evidence) the kubeconfig's client certificate (:func:`kubernetes_certificates`).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml
from cryptography import x509

from pytest_talos import models
from pytest_talos.certs.facts import certificate_facts, issuer_among, load_certificates, utc_now
from pytest_talos.certs.verdicts import (
    CertificateReport,
    ExpiryPolicy,
    Finding,
    chain_findings,
    lifetime_findings,
    name_findings,
    renewal_findings,
)
from pytest_talos.client import TalosClient
from pytest_talos.errors import TalosError, TransportError
from pytest_talos.node import TalosNode, dig, v1alpha1_document
from pytest_talos.talos_api import APID_PORT, join_host_port
from pytest_talos.talosconfig import Context
from pytest_talos.transport import read_peer_certificate

__all__ = [
    "apid_certificate",
    "ca_certificates",
    "client_certificate",
    "kubernetes_certificates",
    "local_api_server_port",
]

# pkg/machinery/constants DefaultControlPlanePort: kube-apiserver's port on a control plane
# when cluster.controlPlane.localAPIServerPort is not set.
DEFAULT_API_SERVER_PORT = 6443
# api_cert_sans.go and kubernetes_cert_sans.go put every IP of this NodeAddresses resource in
# apid's and kube-apiserver's certificates (controllers/secrets), with 127.0.0.1.
NODE_ADDRESSES = ("NodeAddresses.net.talos.dev", "accumulative-no-k8s", "network")
LOOPBACK = "127.0.0.1"
# A certificate lacking a node address may be one renewal behind an address that just came
# up (the SANs change, then the certificate is issued again): read it once more after this.
RENEWAL_RETRY = 5.0
# kubernetes_cert_sans.go: the names every kube-apiserver certificate carries, besides
# kubernetes.default.svc.<cluster.network.dnsDomain> and the first IP of each service CIDR
# (v1alpha1_clusterconfig.go APIServerIPs; defaults constants.DefaultDNSDomain,
# DefaultIPv4ServiceNet).
IN_CLUSTER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost")
DEFAULT_DNS_DOMAIN = "cluster.local"
DEFAULT_SERVICE_SUBNETS = ("10.96.0.0/12",)


def client_certificate(
    context: Context, policy: ExpiryPolicy, now: dt.datetime | None = None
) -> CertificateReport:
    """The talosconfig context's client certificate: expiry by ``policy``, roles, issuer."""
    moment = now or utc_now()
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
    moment = now or utc_now()
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
    endpoint = join_host_port(node.host, APID_PORT)
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


def node_ips(node: TalosNode) -> list[str]:
    """The IPs of the node's ``NodeAddresses/accumulative-no-k8s`` (every address it has had
    since boot, CNI addresses left out); none when the resource cannot be read."""
    try:
        spec = node.resource(*NODE_ADDRESSES[:2], NODE_ADDRESSES[2]).spec
    except TalosError:
        return []
    prefixes = spec.get("addresses") if isinstance(spec, dict) else None
    return [str(prefix).split("/", 1)[0] for prefix in prefixes or []]


def _apid_report(
    node: TalosNode, context: Context, timeout: float, moment: dt.datetime
) -> CertificateReport:
    der, how, tls_error = _apid_der(node, context, timeout)
    facts = certificate_facts(der)
    what = f"apid's certificate on {node.name}"
    findings, issuer = chain_findings(
        facts, load_certificates(context.ca_pem), what, "the talosconfig CA"
    )
    findings += renewal_findings(facts, what, moment)
    findings += lifetime_findings(facts, what)
    names = [node.host, *node_ips(node), LOOPBACK, node.hostname, _fqdn(node) or ""]
    findings += name_findings(facts, names, what)
    if tls_error and not findings:
        findings.append(
            Finding("failure", f"the TLS handshake with {node.host} failed: {tls_error}")
        )
    return CertificateReport(what, facts, findings, issuer, how, moment)


def apid_certificate(
    node: TalosNode,
    context: Context,
    *,
    timeout: float = 10.0,
    now: dt.datetime | None = None,
    retry_after: float = RENEWAL_RETRY,
) -> CertificateReport:
    """apid's serving certificate on ``node``: issued by the talosconfig CA, valid, renewed
    on time, valid no longer than Talos makes it (24 hours), and naming what
    ``api_cert_sans.go`` puts in it: the address the node is reached on, every IP of its
    ``NodeAddresses/accumulative-no-k8s``, 127.0.0.1, its hostname and FQDN. A certificate
    missing a name is read once more after ``retry_after`` seconds (a renewal may be on its
    way after an address change)."""
    report = _apid_report(node, context, timeout, now or utc_now())
    if report.failures and retry_after > 0 and any("does not name" in f for f in report.failures):
        time.sleep(retry_after)
        report = _apid_report(node, context, timeout, now or utc_now())
    return report


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


def local_api_server_port(node: TalosNode) -> tuple[int, str]:
    """The port kube-apiserver listens on at ``node``, and where that was read.

    ``cluster.controlPlane.localAPIServerPort`` of the machine config, default 6443
    (controllers/k8s/control_plane.go, control_plane_static_pod.go ``--secure-port``). The
    kubeconfig's server is the cluster endpoint, often a load balancer on another port.
    """
    try:
        config = node.machine_config
    except TalosError as exc:
        return DEFAULT_API_SERVER_PORT, f"the default (the machine config is unreadable: {exc})"
    port = dig(v1alpha1_document(config), "cluster", "controlPlane", "localAPIServerPort")
    if isinstance(port, int) and not isinstance(port, bool) and port > 0:
        return port, "cluster.controlPlane.localAPIServerPort"
    return DEFAULT_API_SERVER_PORT, "the default (no cluster.controlPlane.localAPIServerPort)"


def _apiserver_report(
    host: str,
    port: int,
    names: list[str],
    cas: Sequence[x509.Certificate],
    policy: ExpiryPolicy,
    timeout: float,
    moment: dt.datetime,
) -> CertificateReport:
    where = join_host_port(host, port)
    facts = certificate_facts(_served(host, port, timeout))
    what = f"kube-apiserver's certificate at {where}"
    findings, issuer = chain_findings(facts, cas, what, "the kubeconfig's certificate authority")
    findings += policy.judge(facts, what, moment)
    findings += name_findings(facts, names, what)
    return CertificateReport(what, facts, findings, issuer, f"TLS handshake with {where}", moment)


def in_cluster_names(config: models.MachineConfig | None) -> list[str]:
    """The names kubernetes_cert_sans.go gives every kube-apiserver certificate whatever
    the node: :data:`IN_CLUSTER_NAMES`, ``kubernetes.default.svc.<dnsDomain>``, 127.0.0.1
    and the first IP of each service CIDR (``cluster.network`` of ``config``; Talos's
    defaults where it says nothing). Without a config only the fixed names."""
    names = [*IN_CLUSTER_NAMES, LOOPBACK]
    if config is None:
        return names
    network = dig(v1alpha1_document(config), "cluster", "network")
    network = network if isinstance(network, dict) else {}
    domain = network.get("dnsDomain") or DEFAULT_DNS_DOMAIN
    names.append(f"kubernetes.default.svc.{domain}")
    for cidr in network.get("serviceSubnets") or DEFAULT_SERVICE_SUBNETS:
        try:
            net = ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            continue
        names.append(str(net.network_address + 1))  # sideronet.NthIPInCIDRSet(cidrs, 1)
    return names


def _machine_config(node: TalosNode) -> models.MachineConfig | None:
    try:
        return node.machine_config
    except TalosError:
        return None


def kubernetes_certificates(
    node: TalosNode,
    kubeconfig: bytes,
    policy: ExpiryPolicy,
    *,
    timeout: float = 10.0,
    now: dt.datetime | None = None,
    node_port: int = DEFAULT_API_SERVER_PORT,
    at_node: bool = True,
) -> list[CertificateReport]:
    """On a control plane: the kube-apiserver certificate at the kubeconfig's server and at
    the node's own address on ``node_port`` (its local API server port), each issued by the
    kubeconfig's CA, not near expiry and naming what it is reached as and what in-cluster
    clients reach it as (:func:`in_cluster_names`; at the node's own address also its
    hostname and every IP of its ``NodeAddresses/accumulative-no-k8s``, as
    kubernetes_cert_sans.go puts them); and the kubeconfig's client certificate, as
    evidence only.

    The Kubeconfig RPC mints that client certificate on every call, valid for
    ``cluster.adminKubeconfig.certLifetime`` (v1alpha1_server.go Kubeconfig,
    pkg/kubeconfig/generate.go): its expiry restates the configured lifetime, so it is
    shown, not judged.

    ``at_node=False`` (this machine does not reach the node's own address): nothing on the
    node's address is read, the kubeconfig's server only when it is elsewhere (a load
    balancer).
    """
    moment = now or utc_now()
    config = _kubeconfig(kubeconfig)
    cas = load_certificates(config.ca_pem)
    common = in_cluster_names(_machine_config(node))
    own = [node.host, *node_ips(node), node.hostname, *common]
    if (node.host, node_port) == (config.host, config.port):
        targets = [(config.host, config.port, [config.host, *own])]
    else:
        targets = [
            (config.host, config.port, [config.host, *common]),
            (node.host, node_port, [*own, config.host]),
        ]
    if not at_node:
        targets = [target for target in targets if target[0] != node.host]
    reports = [
        _apiserver_report(host, port, names, cas, policy, timeout, moment)
        for host, port, names in targets
    ]
    if config.crt_pem is not None:
        reports.append(
            CertificateReport(
                "the kubeconfig client certificate (minted by this Kubeconfig call; "
                "shown, not judged)",
                certificate_facts(config.crt_pem),
                [],
                how="client-certificate-data of the kubeconfig",
                now=moment,
            )
        )
    return reports
