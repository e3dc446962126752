"""Two machine configs compared as data: document by document, path by path.

Documents are matched as Talos matches them (v1alpha1, or ``apiVersion``/``kind``/``name``;
``pytest_talos.patches.document_id``), so their order does not matter; within a document,
key order and comments do not matter either. A key missing on one side equals an empty or
zero value on the other (``null``, ``""``, ``[]``, ``{}``, ``false``, ``0``): Talos's own
encoder leaves such fields out when it writes a config (``omitempty`` in
``pkg/machinery/config/encoder/encoder.go``), so a config that went through ``talosctl`` and
one written by hand must not differ for it. Lists are compared item by item.

Values under secret-bearing keys are never shown (:mod:`pytest_talos.drift.mask`): a
difference there says only that the values differ.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_talos.drift.mask import MASK, is_secret_path, mask_value
from pytest_talos.patches import document_id, load_documents

__all__ = ["ABSENT", "ConfigComparison", "Difference", "compare_configs", "document_label"]

ABSENT = "<absent>"
_MISSING = object()
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_VALUE_LIMIT = 200
_SHOWN_LIMIT = 40


@dataclass(frozen=True)
class Difference:
    """One place where two configs differ; ``left``/``right`` are display texts (masked)."""

    document: str  # "v1alpha1", "HostnameConfig", "ExtensionServiceConfig/nut-client"
    path: str  # "machine.nodeLabels.zone", "" for the whole document
    left: str
    right: str
    secret: bool = False

    def describe(self, left_name: str = "desired", right_name: str = "actual") -> str:
        where = f"{self.document} {self.path}" if self.path else f"{self.document} (document)"
        if self.secret:
            return f"{where}: {left_name} and {right_name} differ (secret values masked)"
        return f"{where}: {left_name} {self.left}, {right_name} {self.right}"

    def to_json(self, left_name: str = "desired", right_name: str = "actual") -> dict[str, Any]:
        return {
            "document": self.document,
            "path": self.path,
            left_name: self.left,
            right_name: self.right,
            "masked": self.secret,
        }


@dataclass(frozen=True)
class ConfigComparison:
    """The differences between two configs (none: they are the same machine config)."""

    differences: tuple[Difference, ...]
    left_name: str = "desired"
    right_name: str = "actual"

    @property
    def equal(self) -> bool:
        return not self.differences

    @property
    def documents(self) -> list[str]:
        """The documents that differ, in order of first difference."""
        return list(dict.fromkeys(d.document for d in self.differences))

    def lines(self, limit: int = _SHOWN_LIMIT) -> list[str]:
        shown = [d.describe(self.left_name, self.right_name) for d in self.differences[:limit]]
        if len(self.differences) > limit:
            shown.append(f"... and {len(self.differences) - limit} more difference(s)")
        return shown

    def to_json(self, limit: int = 100) -> list[dict[str, Any]]:
        return [d.to_json(self.left_name, self.right_name) for d in self.differences[:limit]]


def document_label(doc: Mapping[str, Any]) -> str:
    api_version, kind, name = document_id(doc)
    if kind == "v1alpha1" and not api_version:
        return "v1alpha1"
    return f"{kind}/{name}" if name is not None else kind


def compare_configs(
    left: bytes | str,
    right: bytes | str,
    *,
    left_name: str = "desired",
    right_name: str = "actual",
) -> ConfigComparison:
    """Compare two (multi-document) configs; raises PatchError if either is not a config."""
    lefts = _by_label(load_documents(left, what=f"the {left_name} config"))
    rights = _by_label(load_documents(right, what=f"the {right_name} config"))
    found: list[Difference] = []
    for label in [*lefts, *(name for name in rights if name not in lefts)]:
        ldoc, rdoc = lefts.get(label, _MISSING), rights.get(label, _MISSING)
        if ldoc is _MISSING or rdoc is _MISSING:
            found.append(Difference(label, "", _document_text(ldoc), _document_text(rdoc)))
        else:
            _walk(label, ldoc, rdoc, [], found)
    return ConfigComparison(tuple(found), left_name, right_name)


def _by_label(documents: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {document_label(doc): doc for doc in documents}


def _document_text(doc: Any) -> str:
    if doc is _MISSING:
        return ABSENT
    keys = ", ".join(str(key) for key in doc if key not in ("apiVersion", "kind"))
    return f"present ({keys or 'no fields'})"


def _empty(value: Any) -> bool:
    if value is _MISSING or value is None or value is False:
        return True
    if isinstance(value, Mapping):
        return all(_empty(item) for item in value.values())
    if isinstance(value, str | list | tuple):
        return len(value) == 0
    return isinstance(value, int | float) and value == 0


def _same_scalar(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, str) != isinstance(right, str):
        return False
    return bool(left == right)


def _walk(label: str, left: Any, right: Any, path: list[Any], found: list[Difference]) -> None:
    if _empty(left) and _empty(right):
        return
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        for key in [*left, *(k for k in right if k not in left)]:
            _walk(label, left.get(key, _MISSING), right.get(key, _MISSING), [*path, key], found)
        return
    if isinstance(left, list) and isinstance(right, list):
        for index in range(max(len(left), len(right))):
            lval = left[index] if index < len(left) else _MISSING
            rval = right[index] if index < len(right) else _MISSING
            if lval is _MISSING or rval is _MISSING:
                found.append(_difference(label, [*path, index], lval, rval))
            else:
                _walk(label, lval, rval, [*path, index], found)
        return
    if not _same_scalar(left, right):
        found.append(_difference(label, path, left, right))


def _difference(label: str, path: list[Any], left: Any, right: Any) -> Difference:
    secret = is_secret_path(path)
    return Difference(
        label, format_path(path), _shown(left, secret), _shown(right, secret), secret=secret
    )


def format_path(path: Sequence[Any]) -> str:
    """``["machine", "nodeLabels", "a.b/c"]`` -> ``machine.nodeLabels["a.b/c"]``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            text += ("." if text else "") + str(part)
        else:
            text += f"[{json.dumps(str(part))}]"
    return text


def _shown(value: Any, secret: bool) -> str:
    if value is _MISSING:
        return ABSENT
    if secret:
        return MASK
    text = json.dumps(mask_value(value), default=str, ensure_ascii=False)
    if len(text) > _VALUE_LIMIT:
        text = text[: _VALUE_LIMIT - 15] + f"... ({len(text)} chars)"
    return text
