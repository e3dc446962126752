"""The client's TLS: endpoint parsing and the mTLS context talosctl uses."""

from __future__ import annotations

import hashlib
import ssl
import threading
from collections import OrderedDict

from pytest_talos.endpoint import Endpoint
from pytest_talos.errors import ConfigError
from pytest_talos.keyfile import SecretBytes, load_client_identity

__all__ = ["build_ssl_context", "shared_ssl_context", "split_endpoint"]

_SHARED_MAX = 64  # identities kept (a run uses a handful: admin, reader, operator, ...)
_shared: OrderedDict[bytes, ssl.SSLContext] = OrderedDict()
_shared_lock = threading.Lock()


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host[:port]`` (default 50000, IPv6 in brackets) -> ``(host, port)``.

    Kept for callers of the tuple form; new code parses an :class:`Endpoint` once.
    """
    parsed = Endpoint.parse(endpoint)
    return parsed.host, parsed.port


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


def shared_ssl_context(ca_pem: bytes, crt_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """:func:`build_ssl_context`, built once per identity (CA, certificate and key) and then
    shared: loading the CA and the key is the costly part, and every connection of the same
    identity can use one context. Callers must not change the context they get."""
    digest = hashlib.sha256()
    for part in (ca_pem, crt_pem, key_pem):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    key = digest.digest()  # never the key itself: only a digest names the entry
    with _shared_lock:
        found = _shared.get(key)
        if found is not None:
            _shared.move_to_end(key)
            return found
    ctx = build_ssl_context(ca_pem, crt_pem, key_pem)  # raises ConfigError, nothing kept
    with _shared_lock:
        _shared[key] = ctx
        while len(_shared) > _SHARED_MAX:
            _shared.popitem(last=False)
    return ctx
