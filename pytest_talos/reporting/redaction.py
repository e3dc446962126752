"""Removes key material from everything that reaches a report (:func:`redact`)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["redact"]

_REDACTED = "<redacted>"
_SECRET_FIELD = re.compile(
    r"^(?:key|private[_-]?key|key[_-]?pem|token|secret|secrets|password|bootstraptoken|"
    r"aescbcencryptionsecret|secretboxencryptionsecret)$",
    re.IGNORECASE,
)
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)", re.DOTALL
)
# base64 of "-----BEGIN" starts with "LS0tLS1CRUdJTi"; talosconfigs carry keys that way.
_BASE64_PEM = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]*")
# "key: <value>" / "token: <value>" lines inside YAML or text evidence.
_SECRET_LINE = re.compile(
    r"^(?P<lead>\s*(?:-\s+)?(?:key|token|secret|password|bootstrapToken|"
    r"aescbcEncryptionSecret|secretboxEncryptionSecret)\s*:\s*)(?P<value>\S.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def _decodes_to_private_key(blob: str) -> bool:
    padded = blob + "=" * (-len(blob) % 4)
    try:
        decoded = base64.b64decode(padded, validate=False)
    except (binascii.Error, ValueError):
        return True  # undecodable base64 that starts like PEM: redact rather than guess
    return b"PRIVATE KEY" in decoded


def _redact_base64_pem(match: re.Match[str]) -> str:
    return _REDACTED if _decodes_to_private_key(match.group(0)) else match.group(0)


def _redact_text(text: str) -> str:
    text = _PEM_PRIVATE_KEY.sub(_REDACTED, text)
    text = _BASE64_PEM.sub(_redact_base64_pem, text)
    return _SECRET_LINE.sub(lambda m: m.group("lead") + _REDACTED, text)


def redact(value: Any) -> Any:
    """A JSON-ready copy of ``value`` with every piece of key material removed.

    Mappings lose the values of key-like fields, strings lose PEM private keys (plain or
    base64) and ``key:``/``token:`` lines; bytes are decoded as UTF-8 (replacement characters
    for anything else); other objects become their ``str``.
    """
    if isinstance(value, Mapping):
        return {
            str(k): (_REDACTED if _SECRET_FIELD.match(str(k)) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [redact(item) for item in items]
    if isinstance(value, bytes):
        return _redact_text(value.decode("utf-8", errors="replace"))
    if isinstance(value, str):
        return _redact_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _redact_text(str(value))
