"""Reading patches (text, ``@file``, mappings, operation lists) and applying them in order."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pytest_talos.patches._yaml import (
    PatchError,
    decode_text,
    describe,
    dump_documents,
    load_documents,
    parse_yaml,
    plain_copy,
)
from pytest_talos.patches.json6902 import apply_json6902_to_config
from pytest_talos.patches.strategic import merge_patch_documents

__all__ = ["PatchInput", "PatchKind", "apply_patches", "config_diff", "detect_patch_kind"]

PatchInput = bytes | str | Mapping[str, Any] | list[Any]
PatchKind = Literal["strategic", "json6902"]


# --------------------------------------------------------------------------- reading patches


def _read_patch_source(patch: bytes | str, index: int) -> tuple[str, str]:
    """The patch text and how to name it; ``@path`` reads the file, as talosctl does."""
    what = f"patch #{index}"
    text = decode_text(patch, what)
    if not text.startswith("@"):
        return text, what
    path = text[1:]
    what = f"patch file {path!r}"
    try:
        return decode_text(Path(path).read_bytes(), what), what
    except OSError as exc:
        raise PatchError(f"cannot read patch file {path!r}: {exc.strerror or exc}") from None


def _parse_patch_text(text: str, what: str) -> tuple[PatchKind, Any]:
    """JSON6902 operations (a list) or strategic-merge documents as ``[(line, doc)]``."""
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(stripped)
        except ValueError:
            pass  # YAML flow style rather than JSON: let the YAML reader judge it
        else:
            return ("json6902", data) if isinstance(data, list) else ("strategic", [(1, data)])
    documents = parse_yaml(text, what)
    if len(documents) == 1 and isinstance(documents[0][1], list):
        return "json6902", documents[0][1]
    for line, value in documents:
        if isinstance(value, list):
            raise PatchError(
                f"{what}: a JSON6902 patch must be a single list of operations, but the list at "
                f"line {line} shares the input with other YAML documents"
            )
        if not isinstance(value, dict):
            # a lone word is usually a file name given without the '@'
            word = isinstance(value, str)
            hint = f" {value!r} (to load a file, prefix its path with @)" if word else ""
            raise PatchError(
                f"{what}: expected a YAML mapping or a list of JSON6902 operations at line "
                f"{line}, found {describe(value)}{hint}"
            )
    return "strategic", documents


def _load_patch(patch: PatchInput, index: int) -> tuple[PatchKind, Any]:
    if isinstance(patch, list):
        return "json6902", plain_copy(patch)
    if isinstance(patch, Mapping):
        if "op" in patch and "path" in patch:
            raise PatchError(
                f"patch #{index} looks like one JSON6902 operation; a JSON6902 patch is a list "
                "of operations, so pass [[op, ...]] rather than [op, ...]"
            )
        return "strategic", [(1, plain_copy(patch))]
    if isinstance(patch, bytes | str):
        return _parse_patch_text(*_read_patch_source(patch, index))
    raise PatchError(
        f"patch #{index} is a {type(patch).__name__}; a patch is YAML/JSON text (bytes or str, "
        "'@path' for a file), a mapping (strategic merge) or a list of JSON6902 operations"
    )


def detect_patch_kind(patch: PatchInput) -> PatchKind:
    """``"json6902"`` for a list of operations, ``"strategic"`` for mapping documents."""
    kind, _ = _load_patch(patch, 1)
    return kind


# --------------------------------------------------------------------------- applying patches


def apply_patches(config: bytes | str, patches: Sequence[PatchInput]) -> bytes:
    """Apply ``patches`` in order to ``config`` and return the patched config as YAML.

    The result is re-dumped (comments are lost), as Talos re-encodes patched configs.
    """
    if isinstance(patches, bytes | str | Mapping):
        raise PatchError("patches must be a sequence of patches; wrap a single patch in a list")
    documents = load_documents(config)
    for index, patch in enumerate(patches, start=1):
        kind, parsed = _load_patch(patch, index)
        if kind == "json6902":
            documents = apply_json6902_to_config(documents, parsed, f"patch #{index}")
        else:
            documents = merge_patch_documents(documents, parsed, f"patch #{index}")
    return dump_documents(documents)


def config_diff(old: bytes | str, new: bytes | str) -> str:
    """Unified diff (``--- a`` / ``+++ b``) of two configs re-dumped without comments.

    Returns ``""`` when they are equal. This is the diff Talos shows in dry-run replies.
    """
    before = dump_documents(load_documents(old)).decode("utf-8")
    after = dump_documents(load_documents(new)).decode("utf-8")
    if before == after:
        return ""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), "a", "b"
    )
    return "".join(lines)
