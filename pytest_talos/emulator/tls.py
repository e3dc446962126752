"""TLS for the emulated apid: contexts from in-memory PEM, and apid's EKU rule.

Upstream: ``internal/app/apid/service.go`` and siderolabs/crypto ``tls/tls.go``.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

__all__ = [
    "client_tls_context",
    "ext_key_usage_acceptable",
    "ignore_validity_period",
    "load_cert_chain",
    "server_tls_context",
    "trust_also",
]

# OpenSSL's X509_V_FLAG_NO_CHECK_TIME (x509_vfy.h); Python's ssl has no name for it.
_NO_CHECK_TIME = 0x200000


def load_cert_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a certificate and key from memory (Python's ssl reads only files).

    Linux: an anonymous in-memory file (memfd); elsewhere a private temporary directory that
    is removed at once.
    """
    chain = cert_pem.rstrip(b"\n") + b"\n" + key_pem
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("emulator-cert", os.MFD_CLOEXEC)
        try:
            os.write(fd, chain)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(chain)
        context.load_cert_chain(path)


def server_tls_context(
    *,
    ca_pem: bytes,
    cert_pem: bytes,
    key_pem: bytes,
    require_client_cert: bool = True,
    verify_client_cert: bool = True,
) -> ssl.SSLContext:
    """apid's TLS (siderolabs/crypto ``tls/tls.go``): TLS >= 1.2, ALPN h2, no tickets.

    The two flags exist for faults: ``no-mtls`` makes the certificate optional, and
    ``client-certs-unverified`` stops asking for one, so no CA is ever checked.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_TICKET
    if not verify_client_cert:
        context.verify_mode = ssl.CERT_NONE
    else:
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=ca_pem.decode("ascii"))
    load_cert_chain(context, cert_pem, key_pem)
    context.set_alpn_protocols(["h2"])
    return context


def client_tls_context(*, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A client context trusting only the Talos CA, presenting ``cert_pem``."""
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    load_cert_chain(context, cert_pem, key_pem)
    context.set_alpn_protocols(["h2"])
    return context


def ext_key_usage_acceptable(der: bytes | None) -> bool:
    """apid's ``verifyExtKeyUsage`` (internal/app/apid/service.go): EKU is ``[ClientAuth]``."""
    if der is None:
        return True  # no certificate at all: TLS already decided (fault no-mtls)
    cert = x509.load_der_x509_certificate(der)
    with contextlib.suppress(x509.ExtensionNotFound):
        if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return True
    try:
        usages = list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return False
    return usages == [ExtendedKeyUsageOID.CLIENT_AUTH]


def ignore_validity_period(context: ssl.SSLContext) -> None:
    """Fault ``expired-certs-accepted``: client certificates are verified without their dates.

    Healthy apid (Go crypto/tls under siderolabs/crypto ``tls/tls.go``) refuses a certificate
    outside its NotBefore..NotAfter window.
    """
    context.verify_flags |= _NO_CHECK_TIME


def trust_also(context: ssl.SSLContext, ca_pem: bytes) -> None:
    """Fault ``kube-ca-trusted``: one more CA signs acceptable client certificates.

    Healthy apid trusts only the ``AcceptedCAs`` of its ApiCertificates, the Talos OS CA
    (``internal/app/apid/pkg/provider/provider.go``), never the Kubernetes CA.
    """
    context.load_verify_locations(cadata=ca_pem.decode("ascii"))
