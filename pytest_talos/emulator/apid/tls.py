"""TLS for the emulated apid: contexts from in-memory PEM, and apid's EKU rule.

Upstream: ``internal/app/apid/service.go`` and siderolabs/crypto ``tls/tls.go``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ssl
from collections.abc import Callable

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from pytest_talos.keyfile import load_chain

__all__ = [
    "certificate_expired",
    "client_tls_context",
    "ext_key_usage_acceptable",
    "ext_key_usage_lacks_server_auth",
    "ignore_validity_period",
    "load_cert_chain",
    "server_tls_context",
    "trust_also",
]

# OpenSSL's X509_V_FLAG_NO_CHECK_TIME (x509_vfy.h); Python's ssl has no name for it.
_NO_CHECK_TIME = 0x200000


def load_cert_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a certificate and key from memory (Python's ssl reads only files).

    One loader for the whole kit (:func:`pytest_talos.keyfile.load_chain`): Linux uses an
    anonymous in-memory file (memfd); elsewhere a 0600 file in a private temporary directory
    that is removed at once.
    """
    load_chain(context, cert_pem, key_pem, name="emulator-cert")


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


def _eku_judged(der: bytes | None, rule: Callable[[list[x509.ObjectIdentifier]], bool]) -> bool:
    """A client certificate's EKU list judged by ``rule``; no certificate (TLS already
    decided: fault no-mtls) and CA certificates pass, a leaf without the extension fails."""
    if der is None:
        return True
    cert = x509.load_der_x509_certificate(der)
    with contextlib.suppress(x509.ExtensionNotFound):
        if cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return True
    try:
        usages = list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return False
    return rule(usages)


def ext_key_usage_acceptable(der: bytes | None) -> bool:
    """apid's ``verifyExtKeyUsage`` (internal/app/apid/service.go): EKU is ``[ClientAuth]``."""
    return _eku_judged(der, lambda usages: usages == [ExtendedKeyUsageOID.CLIENT_AUTH])


def ext_key_usage_lacks_server_auth(der: bytes | None) -> bool:
    """Fault ``eku-rule-only-refuses-server-auth``: a weaker rule than apid's, refusing only a
    certificate without the extension or with ServerAuth in it (so ``[ClientAuth,
    CodeSigning]`` passes; OpenSSL's own client-purpose check still refuses a list without
    ClientAuth or anyExtendedKeyUsage before this runs)."""
    return _eku_judged(der, lambda usages: ExtendedKeyUsageOID.SERVER_AUTH not in usages)


def certificate_expired(der: bytes | None) -> bool:
    """Whether a client certificate's NotAfter has passed (wall clock, as TLS judges it): for
    fault ``not-yet-valid-certs-accepted``, whose apid checks NotAfter only."""
    if der is None:
        return False
    cert = x509.load_der_x509_certificate(der)
    return cert.not_valid_after_utc < dt.datetime.now(dt.UTC)


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
