"""JSON6902 (RFC 6902) patches: a list of ``{op, path, value, from}`` operations.

Talos accepts them for single-document machine configs only
(``pkg/machinery/config/configpatcher/json6902.go``) and applies them with
``github.com/evanphx/json-patch`` v5.9.11 (the package at the module root, which Talos's
``pkg/machinery/go.mod`` pins). Its ``patch.go`` goes beyond RFC 6902 in ways a user can rely
on, and so does this module:

* **Negative list indices** (``SupportNegativeIndices`` is on by default) count from the end.
  For ``remove``, ``replace``, ``test`` and the ``from`` of ``move``/``copy``, ``-1`` is the
  last item (``-n`` the first of ``n``); for ``add`` the list is one longer, so ``-1``
  appends like ``-`` and ``-(n+1)`` inserts at the front. Anything further out is an error.
* A list index is read with Go's ``strconv.Atoi``: a sign and leading zeros are accepted
  (``01`` is 1, ``+1`` is 1, ``-0`` is 0).
* ``replace`` of a key a mapping lacks adds it (only list items must exist); ``copy`` from a
  missing mapping key writes ``null``; ``test`` of a missing key passes when the expected
  value is ``null`` or not given; ``add``/``replace`` without a ``value`` write ``null``.
* A pointer is split at every ``/`` and its first piece is dropped, so ``a/b`` acts as ``/b``;
  a pointer without any ``/`` (other than ``""``) resolves to nothing. ``~`` not followed by
  ``0`` or ``1`` is kept as it is.
* The whole document (``""``) can only be replaced (by a mapping or a list) or tested; it
  cannot be added to, removed, moved or copied.

Error texts are ours (they name the operation and never echo config values).
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
_ATOI = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi accepts
_ABSENT = object()  # an operation without a "value"


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
    return op


# ---- pointers ---------------------------------------------------------------------------


def _pointer(text: str) -> tuple[list[str], str] | None:
    """``(parent tokens, last token)`` as the library's findObject splits ``text``; None for
    ``""`` and for a pointer without any ``/`` (both resolve to no parent)."""
    pieces = text.split("/")
    if len(pieces) < 2:
        return None
    tokens = [_unescape(piece) for piece in pieces[1:]]
    return tokens[:-1], tokens[-1]


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _show(tokens: Sequence[str]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens) or "(root)"


def _index(token: str, size: int, where: Sequence[str], *, insert: bool = False) -> int:
    """A list index the library accepts: Atoi, negatives from the end (``insert``: for add,
    where the list counts one more slot)."""
    slots = size + 1 if insert else size
    if _ATOI.fullmatch(token):
        index = int(token)
        if index < 0:
            index += slots
        if 0 <= index < slots:
            return index
    raise _PointerError(f"{_show(where)}: {token!r} is not an index of a list of {size}")


def _parent(root: Any, text: str, role: str = "path") -> tuple[Any, str, list[str]]:
    """The container ``text`` points into, its last token, and the full token list."""
    found = _pointer(text)
    if found is None:
        if text == "":
            raise _PointerError(f"the whole document cannot be the {role} of this operation")
        raise _PointerError(f"JSON pointer {text!r} must start with '/'")
    parents, last = found
    node = root
    for depth, token in enumerate(parents):
        where = parents[: depth + 1]
        if isinstance(node, dict):
            if node.get(token) is None:  # missing, or null: nothing to go into
                raise _PointerError(f"{_show(where)} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), where)]
        else:
            raise _not_container(parents[:depth], node)
    if not isinstance(node, dict | list):
        raise _not_container(parents, node)
    return node, last, [*parents, last]


def _not_container(tokens: Sequence[str], value: Any) -> _PointerError:
    return _PointerError(f"{_show(tokens)} is {describe(value)}, not a list or map")


# ---- operations -------------------------------------------------------------------------


def _apply_op(root: Any, op: dict[str, Any]) -> Any:
    name, path, value = op["op"], op["path"], op.get("value", _ABSENT)
    if name == "replace" and path == "":
        if not isinstance(value, dict | list):
            raise _PointerError("the whole document can only be replaced by a list or a map")
        return copy.deepcopy(value)
    if name == "test" and path == "":
        _expect(root, value, [])
        return root
    if name in ("add", "replace"):
        _put(root, path, None if value is _ABSENT else value, insert=name == "add")
    elif name == "remove":
        _take(root, path)
    elif name == "test":
        container, last, tokens = _parent(root, path)
        _expect(_get(container, last, tokens), value, tokens)
    elif name == "copy":
        container, last, tokens = _parent(root, op["from"], "from")
        _put(root, path, copy.deepcopy(_get(container, last, tokens)), insert=True)
    else:  # move: take it out, then add it where it goes
        _move(root, op["from"], path)
    return root


def _get(container: Any, last: str, tokens: Sequence[str]) -> Any:
    """The value at ``last``; a mapping's missing key reads as null (the library's get)."""
    if isinstance(container, dict):
        return container.get(last)
    return container[_index(last, len(container), tokens)]


def _put(root: Any, path: str, value: Any, *, insert: bool) -> None:
    container, last, tokens = _parent(root, path)
    if isinstance(container, dict):
        container[last] = copy.deepcopy(value)  # replace of a missing key adds it
    elif insert:
        index = len(container) if last == "-" else _index(last, len(container), tokens, insert=True)
        container.insert(index, copy.deepcopy(value))
    else:
        container[_index(last, len(container), tokens)] = copy.deepcopy(value)


def _take(root: Any, path: str, role: str = "path") -> Any:
    container, last, tokens = _parent(root, path, role)
    if isinstance(container, dict):
        if last not in container:
            raise _PointerError(f"{_show(tokens)} does not exist")
        return container.pop(last)
    return container.pop(_index(last, len(container), tokens))


def _move(root: Any, source: str, path: str) -> None:
    """The library takes the value out first, then looks the destination up in what is
    left: a destination inside the moved value is then gone, unless list items moved up
    into its place (``/a/1`` to ``/a/1/-`` appends to the item that follows)."""
    value = _take(root, source, "from")
    try:
        _put(root, path, value, insert=True)
    except _PointerError:
        if _inside(source, path):
            raise _PointerError("cannot move a value into one of its own children") from None
        raise


def _inside(source: str, path: str) -> bool:
    """Whether ``path`` lies below ``source`` (both as pointers)."""
    found_source, found_path = _pointer(source), _pointer(path)
    if not (found_source and found_path):
        return False
    source_tokens = [*found_source[0], found_source[1]]
    path_tokens = [*found_path[0], found_path[1]]
    below = len(path_tokens) > len(source_tokens)
    return below and path_tokens[: len(source_tokens)] == source_tokens


def _expect(actual: Any, expected: Any, tokens: Sequence[str]) -> None:
    if actual is None:  # missing or null: passes for an expected null or no value at all
        passed = expected is None or expected is _ABSENT
    else:
        passed = expected is not _ABSENT and _json_equal(actual, expected)
    if not passed:
        # the values stay out of the message: machine configs hold secrets
        raise _PointerError(f"test failed: {_show(tokens)} is not the expected value")


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
