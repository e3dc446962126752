"""Two machine configs compared as data: document by document, path by path.

Documents are matched as Talos matches them (v1alpha1, or ``apiVersion``/``kind``/``name``;
``pytest_talos.patches.document_id``), so their order does not matter; within a document,
key order and comments do not matter either. A key missing on one side equals an empty or
zero value on the other (``null``, ``""``, ``[]``, ``{}``, ``false``, ``0``): Talos's own
encoder leaves such fields out when it writes a config (``omitempty`` in
``pkg/machinery/config/encoder/encoder.go``), so a config that went through ``talosctl`` and
one written by hand must not differ for it. Lists are compared item by item.

Scalars are compared by type (``true`` is not ``"true"``), except in the fields Talos decodes
as strings (:data:`STRING_FIELDS`): the ``extraArgs`` of kubelet and the control-plane
components (``Args``, whose values are a string or a list of strings) and the
``map[string]string`` fields (``machine.sysctls``, ``nodeLabels``, ``env``, ...; all in
``pkg/machinery/config/types/v1alpha1/v1alpha1_types.go``). Go's YAML decoder stores any
scalar's text in a string field, and ``talosctl`` writes it back quoted, so there
``rotate-server-certificates: true`` and ``"true"``, or ``1024`` and ``"1024"``, are the same
value, compared as the text written (``True`` and ``"true"`` still differ, as in Go). Elsewhere
a quoted ``"true"`` in a bool field is a config Talos refuses (``cannot unmarshal !!str``),
so it stays a difference.

Values under secret-bearing keys are never shown (:mod:`pytest_talos.drift.mask`): a
difference there says only that the values differ.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_talos.drift.mask import MASK, is_secret_path, mask_value
from pytest_talos.patches import document_id, load_documents

__all__ = [
    "ABSENT",
    "STRING_FIELDS",
    "ConfigComparison",
    "Difference",
    "compare_configs",
    "document_label",
]

ABSENT = "<absent>"
_MISSING = object()
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_VALUE_LIMIT = 200
_SHOWN_LIMIT = 40
_ANY_INDEX = -1  # in a STRING_FIELDS path: any list index
# Paths in the v1alpha1 document whose values Talos decodes as strings
# (pkg/machinery/config/types/v1alpha1/v1alpha1_types.go): `Args` (ArgValue.UnmarshalYAML
# reads a string or a list of strings; MarshalYAML writes `!!str`) and map[string]string.
STRING_FIELDS: tuple[tuple[str | int, ...], ...] = (
    ("machine", "kubelet", "extraArgs"),
    ("machine", "env"),
    ("machine", "sysctls"),
    ("machine", "sysfs"),
    ("machine", "nodeLabels"),
    ("machine", "nodeAnnotations"),
    ("machine", "nodeTaints"),
    ("machine", "logging", "destinations", _ANY_INDEX, "extraTags"),
    ("cluster", "extraManifestHeaders"),
    ("cluster", "apiServer", "extraArgs"),
    ("cluster", "apiServer", "env"),
    ("cluster", "controllerManager", "extraArgs"),
    ("cluster", "controllerManager", "env"),
    ("cluster", "proxy", "extraArgs"),
    ("cluster", "scheduler", "extraArgs"),
    ("cluster", "scheduler", "env"),
    ("cluster", "etcd", "extraArgs"),
)
_SPECIAL_FLOAT_TEXT = {math.inf: ".inf", -math.inf: "-.inf"}


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
            _walk(label, ldoc, rdoc, [], found, text=False)
    return ConfigComparison(tuple(found), left_name, right_name)


def _by_label(documents: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {document_label(doc): doc for doc in documents}


def _document_text(doc: Any) -> str:
    if doc is _MISSING:
        return ABSENT
    keys = ", ".join(str(key) for key in doc if key not in ("apiVersion", "kind"))
    return f"present ({keys or 'no fields'})"


def _empty(value: Any, text: bool = False) -> bool:
    if value is _MISSING or value is None:
        return True
    if isinstance(value, Mapping):
        return all(_empty(item, text) for item in value.values())
    if isinstance(value, str | list | tuple):
        return len(value) == 0
    if text:  # a string field holds "false" or "0": not empty
        return False
    return value is False or (isinstance(value, int | float) and value == 0)


def _same_scalar(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, str) != isinstance(right, str):
        return False
    return bool(left == right)


def scalar_text(value: Any) -> str:
    """The text a scalar was written as, which is what Go stores in a string field. The
    YAML reader (:mod:`pytest_talos.patches`) keeps every scalar that is not a canonical
    bool, int or float as the text it was (``yes``, ``0777``, ``1e3``), so this is exact."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        return _SPECIAL_FLOAT_TEXT.get(value) or _float_text(value)
    return str(value)


def _float_text(value: float) -> str:
    text = repr(value).lower()  # as PyYAML writes it, which is how it was read back
    return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text


def _string_field(label: str, path: Sequence[Any]) -> bool:
    """Whether ``path`` (of a document labelled ``label``) is a field Talos decodes as a
    string-keyed map of strings (STRING_FIELDS)."""
    if label != "v1alpha1":
        return False
    return any(_path_is(path, field) for field in STRING_FIELDS)


def _path_is(path: Sequence[Any], field: Sequence[str | int]) -> bool:
    if len(path) != len(field):
        return False
    return all(
        want == got or (want == _ANY_INDEX and isinstance(got, int))
        for want, got in zip(field, path, strict=True)
    )


def _by_text(value: Any) -> Any:
    """A mapping of a string field re-keyed by its keys' text (Go's map[string]... keys)."""
    if isinstance(value, Mapping):
        return {scalar_text(key): item for key, item in value.items()}
    return value


def _walk(
    label: str, left: Any, right: Any, path: list[Any], found: list[Difference], *, text: bool
) -> None:
    if not text and _string_field(label, path):
        text, left, right = True, _by_text(left), _by_text(right)
    if _empty(left, text) and _empty(right, text):
        return
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        for key in [*left, *(k for k in right if k not in left)]:
            lval, rval = left.get(key, _MISSING), right.get(key, _MISSING)
            _walk(label, lval, rval, [*path, key], found, text=text)
        return
    if isinstance(left, list) and isinstance(right, list):
        for index in range(max(len(left), len(right))):
            lval = left[index] if index < len(left) else _MISSING
            rval = right[index] if index < len(right) else _MISSING
            if lval is _MISSING or rval is _MISSING:
                found.append(_difference(label, [*path, index], lval, rval))
            else:
                _walk(label, lval, rval, [*path, index], found, text=text)
        return
    if not _same_value(left, right, text):
        found.append(_difference(label, path, left, right))


def _same_value(left: Any, right: Any, text: bool) -> bool:
    scalars = not isinstance(left, Mapping | list) and not isinstance(right, Mapping | list)
    if text and scalars and not {id(left), id(right)} & {id(_MISSING), id(None)}:
        return scalar_text(left) == scalar_text(right)
    return _same_scalar(left, right)


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
