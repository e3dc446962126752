"""A context's ``ca``, ``crt`` and ``key``: decoded, checked against each other, in date.

As in :mod:`pytest_talos.talosconfig.document`, errors are raised outside ``except`` blocks,
so that no chained exception carries key material into a traceback.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from pytest_talos.keyfile import SecretBytes
from pytest_talos.talosconfig.document import SecretStr, Where
from pytest_talos.talosconfig.keys import relabel_pkcs8_key
from pytest_talos.talosconfig.model import KeyType, format_utc

_PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
EXPIRY_WARNING_WINDOW = dt.timedelta(days=7)
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")
_KEY_LABELS = frozenset({"PRIVATE KEY", "ED25519 PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"})


def _decode_b64(where: Where, body: dict[Any, Any], name: str) -> bytes:
    value = body.get(name)
    if value is None or value == "":
        where.fail("missing; the context needs ca, crt and key (base64 of PEM)")
    if not isinstance(value, str):
        where.fail("must be a base64 string")
    decoded = _b64decode("".join(value.split()))
    if decoded is None:
        hint = " (it looks like raw PEM; the file must hold base64 of the PEM)"
        hint = hint if "-----BEGIN" in value else ""
        where.fail(f"not valid base64{hint}; regenerate the talosconfig")
    return SecretBytes(decoded) if isinstance(value, SecretStr) else decoded


def _b64decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _pem_labels(data: bytes) -> list[str]:
    return [label.decode("ascii") for label in _PEM_BLOCK.findall(data)]


def _require_pem(where: Where, data: bytes, wanted: frozenset[str], kind: str) -> None:
    labels = _pem_labels(data)
    if not labels:
        where.fail(f"not PEM: expected base64 of a -----BEGIN {kind}----- block")
    if wanted.intersection(labels):
        return
    if "ENCRYPTED PRIVATE KEY" in labels:
        where.fail("the private key is encrypted; talosconfig keys must be unencrypted")
    where.fail(f"PEM of the wrong kind: found {', '.join(labels)}, expected {kind}")


def _certificates(where: Where, data: bytes) -> list[x509.Certificate]:
    _require_pem(where, data, frozenset({"CERTIFICATE"}), "CERTIFICATE")
    certificates = _load_certificates(data)
    if not certificates:
        where.fail("the CERTIFICATE block is not a valid X.509 certificate; regenerate it")
    return certificates


def _load_certificates(data: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        return []


def _private_key(where: Where, data: bytes) -> _PrivateKey:
    _require_pem(where, data, _KEY_LABELS, "PRIVATE KEY")
    key, problem = _load_key(data)
    if problem:
        where.fail(problem)
    if not isinstance(
        key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    ):
        where.fail(f"unsupported key type {type(key).__name__}; use Ed25519, ECDSA or RSA")
    return key


def _load_key(data: bytes) -> tuple[object, str | None]:
    # cryptography's own message is dropped: it adds nothing a user can act on.
    try:
        return serialization.load_pem_private_key(relabel_pkcs8_key(data), password=None), None
    except TypeError:
        return None, "the private key is encrypted; talosconfig keys must be unencrypted"
    except (ValueError, UnsupportedAlgorithm):
        return None, "the PRIVATE KEY block is not a valid private key; regenerate it"


def _key_type(key: _PrivateKey) -> KeyType:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "ed25519"
    return "ecdsa" if isinstance(key, ec.EllipticCurvePrivateKey) else "rsa"


def _spki(public_key: Any) -> bytes:
    return bytes(
        public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _span(delta: dt.timedelta) -> str:
    days, hours = delta.days, delta.seconds // 3600
    return f"{days}d {hours}h" if days else f"{hours}h {delta.seconds % 3600 // 60}m"


def check_validity(where: Where, cert: x509.Certificate, now: dt.datetime) -> str | None:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < start:
        where.fail(
            f"the client certificate is not valid before {format_utc(start)}; "
            "check this machine's clock or issue a new certificate"
        )
    if now >= end:
        where.fail(
            f"the client certificate expired on {format_utc(end)} ({_span(now - end)} ago); "
            "get a new talosconfig (talosctl config new, or regenerate it from the "
            "cluster secrets)"
        )
    if end - now <= EXPIRY_WARNING_WINDOW:
        return (
            f"the client certificate in {where.path} ({where.key}) expires on {format_utc(end)}, "
            f"in {_span(end - now)}; renew it with talosctl config new"
        )
    return None


@dataclass(frozen=True)
class Credentials:
    ca_pem: bytes
    crt_pem: bytes
    key_pem: bytes = field(repr=False)
    leaf: x509.Certificate
    key_type: KeyType


def credentials(where: Where, body: dict[Any, Any]) -> Credentials:
    if "crt" not in body and "key" not in body and isinstance(body.get("auth"), dict):
        where.fail(
            "uses auth (e.g. Omni auth.siderov1) instead of a client certificate; "
            "pytest-talos needs a talosconfig with ca, crt and key"
        )
    base = where.key
    ca_pem = _decode_b64(where.at(f"{base}.ca"), body, "ca")
    _certificates(where.at(f"{base}.ca"), ca_pem)
    crt_pem = _decode_b64(where.at(f"{base}.crt"), body, "crt")
    leaf = _certificates(where.at(f"{base}.crt"), crt_pem)[0]
    key_where = where.at(f"{base}.key")
    key = _private_key(key_where, _decode_b64(key_where, body, "key"))
    if _spki(key.public_key()) != _spki(leaf.public_key()):
        key_where.fail(
            f"the private key does not belong to the client certificate in {base}.crt; "
            "use the crt and key issued together"
        )
    key_pem = SecretBytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Credentials(ca_pem, crt_pem, key_pem, leaf, _key_type(key))
