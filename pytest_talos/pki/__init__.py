"""Certificates the way Talos issues them, for the emulator and for tests.

* the Talos OS CA: Ed25519 by default, Organization ``talos``, ten years;
* apid server certificates: CN = FQDN, SANs = node IPs + ``127.0.0.1`` + hostname and FQDN,
  ExtKeyUsage ServerAuth, 24 hours; kube-apiserver's, from the Kubernetes CA, a year;
* client (talosconfig) certificates: Organization = role strings such as ``os:admin``,
  KeyUsage DigitalSignature, ExtKeyUsage ClientAuth only, one year;
* a talosconfig file in the talosctl format.

ECDSA P-256 and RSA 2048 exist only so tests can cover other key types. Everything here
lives in memory; the only file ever written is the talosconfig a caller asks for (mode 0600).

Layout: ``keys`` (key types, PEM encodings, serials), ``authority`` (:class:`CertAndKey`,
:class:`CertificateAuthority`), ``issue`` (the leaf certificates), ``talosconfig`` (the file).
"""

from pytest_talos.pki.authority import (
    DEFAULT_CA_VALIDITY,
    CertAndKey,
    CertificateAuthority,
)
from pytest_talos.pki.issue import (
    DEFAULT_CLIENT_VALIDITY,
    DEFAULT_SERVER_VALIDITY,
    EXPIRING_CLIENT_VALIDITY,
    KUBERNETES_CERT_VALIDITY,
    issue_apid_cert,
    issue_client_cert,
    issue_kube_apiserver_cert,
    issue_kubeconfig_client_cert,
    issue_server_cert,
)
from pytest_talos.pki.keys import KUBECONFIG_CLOCK_SKEW, KeyType
from pytest_talos.pki.talosconfig import (
    SCAN_BASELINE_KEY,
    TIME_SCALE_KEY,
    render_talosconfig,
    write_talosconfig,
)

__all__ = [
    "DEFAULT_CA_VALIDITY",
    "DEFAULT_CLIENT_VALIDITY",
    "DEFAULT_SERVER_VALIDITY",
    "EXPIRING_CLIENT_VALIDITY",
    "KUBECONFIG_CLOCK_SKEW",
    "KUBERNETES_CERT_VALIDITY",
    "SCAN_BASELINE_KEY",
    "TIME_SCALE_KEY",
    "CertAndKey",
    "CertificateAuthority",
    "KeyType",
    "issue_apid_cert",
    "issue_client_cert",
    "issue_kube_apiserver_cert",
    "issue_kubeconfig_client_cert",
    "issue_server_cert",
    "render_talosconfig",
    "write_talosconfig",
]
