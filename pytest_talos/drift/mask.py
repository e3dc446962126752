"""Which machine-config values are secret, and how they are shown: never.

A machine config carries the cluster's PKI and credentials: the OS and Kubernetes CA keys,
the machine and bootstrap tokens, the cluster secret, the secretbox and AESCBC encryption
secrets, service-account and etcd keys, registry passwords, WireGuard keys, disk encryption
passphrases, files that may hold any of these. Every value under a secret-bearing key is
replaced by :data:`MASK` before it is printed or reported, and so is any string that looks
like key material wherever it appears (PEM blocks, base64 of PEM, ``token=`` in a URL).

The rules are by field name, so they cover documents this module has never heard of; they
mask certificates too (the issue they solve: a report must be safe to paste anywhere).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MASK", "is_secret_key", "is_secret_path", "looks_secret", "mask_value"]

MASK = "<masked>"

# Keys whose whole value is secret (compared lower-case, without "-" and "_").
_SECRET_NAMES = frozenset(
    {
        "crt",
        "cert",
        "certs",
        "certificate",
        "certificates",
        "ca",
        "acceptedcas",
        "auth",
        "password",
        "passphrase",
        "content",
        "contents",
        "environment",
        "bootstraptoken",
        "secretboxencryptionsecret",
        "aescbcencryptionsecret",
    }
)
# ... and keys ending like these: key, privateKey, presharedKey, token, identityToken,
# secret, clientSecret, password.
_SECRET_SUFFIXES = ("key", "keys", "token", "tokens", "secret", "secrets", "password")
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----")
_BASE64_PEM = re.compile(r"LS0tLS1CRUdJTi")  # base64 of "-----BEGIN"
_URL_SECRET = re.compile(r"(?i)\b(\w*(?:token|secret|password|key))=([^&\s]+)")


def _normal(key: str) -> str:
    return key.replace("-", "").replace("_", "").lower()


def is_secret_key(key: Any) -> bool:
    """Whether every value under the mapping key ``key`` is secret."""
    name = _normal(str(key))
    return name in _SECRET_NAMES or name.endswith(_SECRET_SUFFIXES)


def is_secret_path(keys: Sequence[Any]) -> bool:
    """Whether a value at this path (mapping keys and list indices) lies under a secret key."""
    return any(isinstance(key, str) and is_secret_key(key) for key in keys)


def looks_secret(text: str) -> bool:
    """A string that carries key material whatever its field: a PEM block, base64 of one."""
    return bool(_PEM.search(text) or _BASE64_PEM.search(text))


def _mask_string(text: str) -> str:
    if looks_secret(text):
        return MASK
    return _URL_SECRET.sub(lambda m: f"{m.group(1)}={MASK}", text)


def mask_value(value: Any) -> Any:
    """A copy of ``value`` with every secret replaced by :data:`MASK` (plain dicts, lists)."""
    if isinstance(value, Mapping):
        return {
            key: MASK if is_secret_key(key) else mask_value(item) for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_value(item) for item in value]
    if isinstance(value, str):
        return _mask_string(value)
    return value
