"""JSON6902 (RFC 6902) patches: a list of ``{op, path, value, from}`` operations.

Talos accepts them for single-document machine configs only.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_talos.patches._yaml import (
    Document,
    PatchError,
    as_document,
    check_documents,
    describe,
    plain_copy,
)

__all__ = ["apply_json6902", "apply_json6902_to_config"]

_MULTI_DOC_JSON6902 = "JSON6902 patches are not supported for multi-document machine configuration"
_JSON6902_OPS = ("add", "remove", "replace", "move", "copy", "test")


def apply_json6902(document: Any, ops: Sequence[Any], *, what: str = "patch") -> Any:
    """Apply RFC 6902 operations to one document (a copy); returns the patched document."""
    if not isinstance(ops, list | tuple):
        raise PatchError(f"{what}: a JSON6902 patch must be a list of operations")
    root = plain_copy(document)
    for number, raw in enumerate(ops, start=1):
        op = _check_op(raw, number, what)
        label = f"{what}: JSON6902 operation #{number} ({op['op']} {op['path']})"
        try:
            root = _apply_op(root, op)
        except _PointerError as exc:
            raise PatchError(f"{label}: {exc}") from None
    return root


def apply_json6902_to_config(documents: list[Document], ops: Any, what: str) -> list[Document]:
    """Apply ``ops`` to a single-document config, as Talos does; multi-document is an error."""
    if len(documents) != 1:
        raise PatchError(
            f"{_MULTI_DOC_JSON6902}; use a strategic merge patch (YAML documents naming "
            "apiVersion/kind) for configs with more than one document"
        )
    patched = apply_json6902(documents[0], ops, what=what)
    line_doc = [(1, as_document(patched, 1, f"{what} result"))]
    check_documents(line_doc, f"{what} result")
    return [patched]


class _PointerError(Exception):
    """Internal: a JSON pointer did not resolve; wrapped into a PatchError with context."""


def _check_op(raw: Any, number: int, what: str) -> dict[str, Any]:
    prefix = f"{what}: JSON6902 operation #{number}"
    if not isinstance(raw, Mapping):
        raise PatchError(f"{prefix} is {describe(raw)}; write each one as {{op: ..., path: ...}}")
    op: dict[str, Any] = plain_copy(raw)
    if op.get("op") not in _JSON6902_OPS:
        allowed = ", ".join(_JSON6902_OPS)
        raise PatchError(f"{prefix}: JSON6902 op {op.get('op')!r} is not one of {allowed}")
    for field in ("path", *(("from",) if op["op"] in ("move", "copy") else ())):
        if not isinstance(op.get(field), str):
            raise PatchError(
                f"{prefix} ({op['op']}): '{field}' must be a JSON pointer such as /machine/type"
            )
    if op["op"] in ("add", "replace", "test") and "value" not in op:
        raise PatchError(f"{prefix} ({op['op']} {op['path']}): missing 'value'")
    return op


def _apply_op(root: Any, op: dict[str, Any]) -> Any:
    name, path = op["op"], _pointer(op["path"])
    if name == "add":
        return _add(root, path, op["value"])
    if name == "remove":
        return _remove(root, path)
    if name == "replace":
        return _replace(root, path, op["value"])
    if name == "test":
        actual = _get(root, path)
        if not _json_equal(actual, op["value"]):
            # the values stay out of the message: machine configs hold secrets
            raise _PointerError(f"test failed: {_show_pointer(path)} is not the expected value")
        return root
    source = _pointer(op["from"])
    value = copy.deepcopy(_get(root, source))
    if name == "move" and source == path:
        return root
    if name == "move":
        if path[: len(source)] == source and len(path) > len(source):
            raise _PointerError("cannot move a value into one of its own children")
        root = _remove(root, source)
    return _add(root, path, value)


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise _PointerError(f"JSON pointer {text!r} must start with '/'")
    tokens = text[1:].split("/")
    if any(re.search(r"~(?![01])", token) for token in tokens):
        raise _PointerError(f"JSON pointer {text!r} has a '~' not followed by 0 or 1")
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


def _show_pointer(tokens: Sequence[str]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens) or "(root)"


def _get(root: Any, tokens: Sequence[str]) -> Any:
    node = root
    for depth, token in enumerate(tokens):
        if isinstance(node, dict):
            if token not in node:
                raise _PointerError(f"{_show_pointer(tokens[: depth + 1])} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_list_index(token, len(node), tokens[: depth + 1])]
        else:
            raise _not_container(tokens[:depth], node)
    return node


def _not_container(tokens: Sequence[str], value: Any) -> _PointerError:
    return _PointerError(f"{_show_pointer(tokens)} is {describe(value)}, not a list or map")


def _list_index(token: str, size: int, where: Sequence[str]) -> int:
    if not re.fullmatch(r"0|[1-9][0-9]*", token) or int(token) >= size:
        shown = _show_pointer(where)
        raise _PointerError(f"{shown}: {token!r} is not an index of a list of {size}")
    return int(token)


def _add(root: Any, tokens: Sequence[str], value: Any) -> Any:
    if not tokens:
        return copy.deepcopy(value)
    parent, last = _get(root, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else _list_index(last, len(parent) + 1, tokens)
        parent.insert(index, copy.deepcopy(value))
    else:
        raise _not_container(tokens[:-1], parent)
    return root


def _replace(root: Any, tokens: Sequence[str], value: Any) -> Any:
    _get(root, tokens)  # RFC 6902: the target location must exist
    if not tokens:
        return copy.deepcopy(value)
    parent, last = _get(root, tokens[:-1]), tokens[-1]
    key = last if isinstance(parent, dict) else _list_index(last, len(parent), tokens)
    parent[key] = copy.deepcopy(value)
    return root


def _remove(root: Any, tokens: Sequence[str]) -> Any:
    if not tokens:
        raise _PointerError("cannot remove the whole document")
    parent, last = _get(root, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _PointerError(f"{_show_pointer(tokens)} does not exist")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_list_index(last, len(parent), tokens)]
    else:
        raise _not_container(tokens[:-1], parent)
    return root


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1 and key order does not matter."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, str) and isinstance(right, str):
        return str(left) == str(right)
    return type(left) is type(right) and bool(left == right)
