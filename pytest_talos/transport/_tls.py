"""The client's TLS: endpoint parsing and the mTLS context talosctl uses."""

from __future__ import annotations

import ssl

from pytest_talos.errors import ConfigError
from pytest_talos.talos_api import split_host_port
from pytest_talos.talosconfig import SecretBytes, load_client_identity, normalize_endpoint

__all__ = ["build_ssl_context", "split_endpoint"]


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host[:port]`` (default 50000, IPv6 in brackets) -> ``(host, port)``."""
    host, port = split_host_port(normalize_endpoint(endpoint))
    assert port is not None  # a normalized endpoint always carries its port
    return host, int(port)


def build_ssl_context(ca_pem: bytes, crt_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A client context as talosctl uses: TLS >= 1.2, ALPN h2, mTLS, hostname checked.

    The key may carry talosctl's ``ED25519 PRIVATE KEY`` label; it is loaded from memory.
    """
    key_pem = SecretBytes(key_pem)  # no plain key bytes in this frame, even from a caller
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED + check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers("ECDHE+AESGCM:ECDHE+CHACHA20")  # TLS 1.2 only; 1.3 suites are fixed
    ctx.set_alpn_protocols(["h2"])
    try:
        ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ConfigError(
            f"the CA certificate is not a usable PEM certificate ({type(exc).__name__}); "
            "check the ca of the talosconfig context"
        ) from None
    load_client_identity(ctx, crt_pem, key_pem)
    return ctx
