"""Keys as Talos makes them: types, PEM encodings (talosctl's labels), serials, the clock."""

from __future__ import annotations

import datetime as dt
import re
import secrets
from typing import Literal

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

__all__ = [
    "KUBECONFIG_CLOCK_SKEW",
    "KeyType",
    "PrivateKey",
    "generate_key",
    "key_type_of",
    "new_serial",
    "pkcs8_pem",
    "signature_hash",
    "talos_key_pem",
    "utc_now",
]

KeyType = Literal["ed25519", "ecdsa", "rsa"]
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# Certificates start now (siderolabs/crypto x509 NewDefaultOptions NotBefore: time.Now();
# pkg/machinery/config/generate/secrets/ca.go NotBefore(currentTime)). Only the kubeconfig's
# client certificate is backdated, by pkg/kubeconfig/generate.go allowedTimeSkew.
KUBECONFIG_CLOCK_SKEW = dt.timedelta(seconds=10)
_PEM_LABEL = re.compile(rb"-----(BEGIN|END) PRIVATE KEY-----")


def generate_key(key_type: KeyType) -> PrivateKey:
    if key_type == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"unknown key type {key_type!r}; use 'ed25519', 'ecdsa' or 'rsa'")


def key_type_of(key: PrivateKey) -> KeyType:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "ed25519"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return "ecdsa"
    return "rsa"


def signature_hash(key: PrivateKey) -> hashes.SHA256 | None:
    # Ed25519 signs the message itself; a separate digest is an error there.
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def pkcs8_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def talos_key_pem(key: PrivateKey) -> bytes:
    """The key PEM exactly as talosctl / siderolabs/crypto write it."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        # PKCS#8 DER under a non-standard label.
        return _PEM_LABEL.sub(rb"-----\1 ED25519 PRIVATE KEY-----", pkcs8_pem(key))
    # ECDSA as SEC1 "EC PRIVATE KEY", RSA as PKCS#1 "RSA PRIVATE KEY".
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_serial() -> int:
    # Positive, at most 20 octets (RFC 5280 4.1.2.2).
    return secrets.randbits(159) | 1
