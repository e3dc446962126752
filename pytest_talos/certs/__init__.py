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

The package is split by responsibility: :mod:`pytest_talos.certs.facts` (what a certificate
says), :mod:`pytest_talos.certs.verdicts` (findings, the expiry policy, the report) and
:mod:`pytest_talos.certs.readers` (where each certificate is read). Import from
``pytest_talos.certs``.
"""

from __future__ import annotations

from pytest_talos.certs.facts import (
    CertificateFacts,
    certificate_facts,
    issuer_among,
    load_certificates,
)
from pytest_talos.certs.readers import (
    apid_certificate,
    ca_certificates,
    client_certificate,
    kubernetes_certificates,
    local_api_server_port,
)
from pytest_talos.certs.verdicts import (
    DEFAULT_FAIL_DAYS,
    DEFAULT_WARN_DAYS,
    RENEWAL_FLOOR,
    CertificateReport,
    ExpiryPolicy,
    Finding,
)
from pytest_talos.certs.verdicts import Level as Level
from pytest_talos.talos_api import APID_PORT

# Also importable from here, outside __all__ as before: Level (the ``X as X`` import).
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
    "local_api_server_port",
]
