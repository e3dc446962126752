"""Read the certificate a TLS server presents, without trusting it.

The regular connection verifies the server (CA and name) and stops at the first problem; a
certificate check wants to see the certificate that failed, too: expired, issued by another
CA, missing the name it was reached by. This handshake verifies nothing and sends nothing
after it; the caller judges the certificate. A client certificate can be presented, so that
servers that require one (apid) finish the handshake.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence

from pytest_talos.errors import ConnectError
from pytest_talos.keyfile import load_client_identity

__all__ = ["read_peer_certificate"]


def read_peer_certificate(
    host: str,
    port: int,
    *,
    timeout: float,
    client_crt_pem: bytes | None = None,
    client_key_pem: bytes | None = None,
    alpn: Sequence[str] = ("h2",),
    server_name: str | None = None,
) -> bytes:
    """DER of the leaf certificate ``host:port`` presents; ConnectError if none arrives."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # judged by the caller, from the certificate itself
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if alpn:
        context.set_alpn_protocols(list(alpn))
    if client_crt_pem is not None and client_key_pem is not None:
        load_client_identity(context, client_crt_pem, client_key_pem)
    name = server_name or (None if _is_ip(host) else host)
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=name) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectError(
            f"cannot read the TLS certificate of {host}:{port}: {exc}", node=host
        ) from None
    if not der:
        raise ConnectError(f"{host}:{port} presented no TLS certificate", node=host)
    return der


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True
