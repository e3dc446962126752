"""Machine-config patches, applied the way Talos applies them.

Talos (``pkg/machinery/config/configpatcher``) knows two kinds of patch:

* **strategic merge** — one or more YAML documents written like a (partial) machine config.
  Documents are matched to the config's documents (the ``v1alpha1`` document to the
  ``v1alpha1`` document, the others by ``(apiVersion, kind, name)``); unmatched ones are
  appended. Within a document scalars are overwritten unless the patch value is zero
  (``""``, ``0``, ``null``; ``false`` always wins), maps are merged per key and lists are
  appended — except a few replace-fields and a few lists merged by a key (see
  ``_REPLACE_FIELDS`` and ``_KEYED_LISTS``). ``$patch: delete`` removes a document, a key
  or a list item.
* **JSON6902** (RFC 6902) — a JSON or YAML list of ``{op, path, value, from}`` operations;
  only for single-document configs.

The same code serves both sides: the emulator applies patches server-side, and the client
builds patched configs locally (as ``talosctl patch`` does) before ApplyConfiguration.
Nothing here mutates its inputs. YAML is read by the 1.2 core schema (as Go's yaml.v3 reads
untyped values) and plain scalars such as ``0777`` or ``yes`` are written back as they came.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from pytest_talos.errors import TalosError

__all__ = [
    "PatchError",
    "PatchInput",
    "apply_json6902",
    "apply_patches",
    "apply_strategic_merge",
    "config_diff",
    "detect_patch_kind",
    "document_id",
    "dump_documents",
    "load_documents",
]

Document = dict[str, Any]
DocumentID = tuple[str, str, str | None]
PatchInput = bytes | str | Mapping[str, Any] | list[Any]
PatchKind = Literal["strategic", "json6902"]

V1ALPHA1 = "v1alpha1"
_V1ALPHA1_ID: DocumentID = ("", V1ALPHA1, None)
# keys whose presence marks a kind-less document as the v1alpha1 one (as Talos's decoder does)
_V1ALPHA1_KEYS = frozenset({"machine", "cluster", "debug", "persist"})
_MULTI_DOC_JSON6902 = "JSON6902 patches are not supported for multi-document machine configuration"
_JSON6902_OPS = ("add", "remove", "replace", "move", "copy", "test")


class PatchError(TalosError):
    """A patch or a machine config is malformed, or a patch cannot be applied."""


# --------------------------------------------------------------------------- YAML in and out


_STR_TAG, _INT_TAG = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int"
_FLOAT_TAG, _BOOL_TAG = "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")
_SPECIAL_FLOATS = {".inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
_YAML11_ONLY_TAGS = frozenset(
    {_BOOL_TAG, _INT_TAG, _FLOAT_TAG, "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"}
)


if TYPE_CHECKING:
    _SafeLoaderBase = yaml.SafeLoader
else:  # libyaml's parser, when installed, reads big configs about ten times faster
    _SafeLoaderBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Verbatim(str):
    """A plain scalar kept exactly as written, e.g. ``0777``, ``1.30``, ``yes``, ``True``.

    Talos (Go's yaml.v3) reads such text by the type of the field it lands in; converting it
    to a Python number or quoting it would change what Talos reads, so it is dumped unquoted.
    """

    __slots__ = ()


class _Loader(_SafeLoaderBase):
    """Reads scalars by the YAML 1.2 core schema, as Go's yaml.v3 does for untyped values.

    PyYAML's YAML 1.1 rules would turn ``on`` into a boolean, ``10:20`` into an integer and
    dates into datetimes. Duplicate keys are an error, as in Talos.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"mapping key {key_node.value!r} already defined", key_node.start_mark,
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def _implicit_tag(cls: type[yaml.SafeLoader] | type[yaml.SafeDumper], text: str) -> str:
    """The tag ``cls`` gives ``text`` as a plain scalar (what Resolver.resolve does)."""
    candidates = cls.yaml_implicit_resolvers.get(text[:1], [])
    for tag, pattern in [*candidates, *cls.yaml_implicit_resolvers.get(None, [])]:
        if pattern.match(text):
            return str(tag)
    return _STR_TAG


def _yaml_float_text(value: float) -> str:
    """How PyYAML writes a float (so only floats that survive a round trip become floats)."""
    text = repr(value).lower()
    return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text


def _construct_str(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    text = str(loader.construct_scalar(node))
    plain_str = not node.style and _implicit_tag(_Loader, text) == _STR_TAG  # '' or None: plain
    return _Verbatim(text) if plain_str and _implicit_tag(_Dumper, text) != _STR_TAG else text


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
    text = str(loader.construct_scalar(node))
    return int(text) if _CANONICAL_INT.fullmatch(text) else _Verbatim(text)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float | str:
    text = str(loader.construct_scalar(node))
    if text in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text]
    if text.lower().endswith(("inf", "nan")):
        return _Verbatim(text)
    value = float(text)
    return value if _yaml_float_text(value) == text else _Verbatim(text)


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool | str:
    text = str(loader.construct_scalar(node))
    return text == "true" if text in ("true", "false") else _Verbatim(text)


def _add_yaml12_resolvers(cls: type[yaml.SafeLoader] | type[yaml.SafeDumper]) -> None:
    cls.add_implicit_resolver(_BOOL_TAG, _BOOL_12, list("tTfF"))
    cls.add_implicit_resolver(_INT_TAG, _INT_12, list("-+0123456789"))
    cls.add_implicit_resolver(_FLOAT_TAG, _FLOAT_12, list("-+.0123456789"))


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_add_yaml12_resolvers(_Loader)
_Loader.add_constructor(_STR_TAG, _construct_str)
_Loader.add_constructor(_INT_TAG, _construct_int)
_Loader.add_constructor(_FLOAT_TAG, _construct_float)
_Loader.add_constructor(_BOOL_TAG, _construct_bool)


class _Dumper(yaml.SafeDumper):
    """Block style, sequences indented under their key, no anchors, literal multi-line text."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar(_STR_TAG, text, style=style)


def _represent_verbatim(dumper: yaml.SafeDumper, text: _Verbatim) -> yaml.ScalarNode:
    # tagged as the resolver will read it back, so the emitter writes it plain
    return dumper.represent_scalar(_implicit_tag(_Dumper, text), str(text))


# Quote strings a YAML 1.2 reader would take for something else (e.g. "1e5"), on top of
# the YAML 1.1 look-alikes ("yes", "0777") SafeDumper already quotes.
_add_yaml12_resolvers(_Dumper)
_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(_Verbatim, _represent_verbatim)


def _yaml_error(what: str, exc: yaml.YAMLError) -> PatchError:
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return PatchError(f"{what} is not valid YAML: {exc}")
    parts = [_at(exc.problem_mark)]
    if exc.context:
        context_mark = exc.context_mark
        started = f" (started at {_at(context_mark)})" if context_mark is not None else ""
        parts.append(f"{exc.context}{started}")
    parts.append(str(exc.problem))
    return PatchError(f"{what} is not valid YAML: " + ": ".join(parts))


def _at(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _parse_yaml(data: bytes | str, what: str) -> list[tuple[int, Any]]:
    """Every non-empty YAML document as ``(line, value)``."""
    text = _text(data, what)
    documents: list[tuple[int, Any]] = []
    try:
        loader = _Loader(text)
        try:
            while loader.check_node():
                node = loader.get_node()
                value = loader.construct_document(node) if node is not None else None
                if node is not None and value is not None:
                    documents.append((node.start_mark.line + 1, value))
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise _yaml_error(what, exc) from None
    return documents


def load_documents(data: bytes | str, *, what: str = "machine config") -> list[Document]:
    """Parse a (multi-document) machine config; check every document can be identified.

    Raises :class:`PatchError` for invalid YAML, a document that is not a mapping, a missing
    ``kind``/``apiVersion`` and duplicate documents. ``what`` names the input in messages.
    """
    documents = [(line, _as_document(value, line, what)) for line, value in _parse_yaml(data, what)]
    _check_documents(documents, what)
    return [doc for _, doc in documents]


def dump_documents(docs: Sequence[Mapping[str, Any]]) -> bytes:
    """YAML for ``docs``: block style, keys in insertion order, ``---`` between documents."""
    parts = [
        yaml.dump(
            _plain(doc), Dumper=_Dumper, indent=2, sort_keys=False,
            default_flow_style=False, allow_unicode=True, width=4096,
        )
        for doc in docs
    ]
    return "---\n".join(parts).encode("utf-8")


def _as_document(value: Any, line: int, what: str) -> Document:
    if not isinstance(value, dict):
        raise PatchError(
            f"{what}: expected a YAML mapping document at line {line}, found "
            f"{_describe(value)}; each document must be a mapping of keys to values"
        )
    return value


def _check_documents(documents: Sequence[tuple[int, Document]], what: str) -> None:
    seen: dict[DocumentID, int] = {}
    for line, doc in documents:
        _check_identity(doc, line, what)
        if doc.get("$patch") == "delete":
            continue  # a deleted document may come back later in the same patch
        doc_id = document_id(doc)
        if doc_id in seen:
            raise PatchError(
                f"{what}: duplicate document {_describe_id(doc_id)} at line {line} (first at "
                f"line {seen[doc_id]}); merge the two documents into one"
            )
        seen[doc_id] = line


def _check_identity(doc: Document, line: int, what: str) -> None:
    has_kind, has_api = doc.get("kind") is not None, doc.get("apiVersion") is not None
    if has_kind and not has_api:
        raise PatchError(
            f"{what}: document at line {line} (kind {doc['kind']!r}) is missing apiVersion; "
            "add apiVersion (e.g. 'apiVersion: v1alpha1')"
        )
    if not has_kind and not _is_v1alpha1(doc):
        raise PatchError(
            f"{what}: document at line {line} is missing kind; every document except the "
            "v1alpha1 one (which has machine:/cluster: keys) needs apiVersion and kind"
        )


def _is_v1alpha1(doc: Mapping[str, Any]) -> bool:
    if doc.get("kind") is not None:
        return False
    return doc.get("apiVersion") == V1ALPHA1 or not _V1ALPHA1_KEYS.isdisjoint(doc)


def document_id(doc: Mapping[str, Any]) -> DocumentID:
    """How Talos tells documents apart: v1alpha1, or ``(apiVersion, kind, name)``."""
    if doc.get("kind") is None:
        return _V1ALPHA1_ID
    name = doc.get("name")
    return (str(doc.get("apiVersion", "")), str(doc["kind"]), None if name is None else str(name))


def _describe_id(doc_id: DocumentID) -> str:
    if doc_id == _V1ALPHA1_ID:
        return V1ALPHA1
    return "/".join(part for part in doc_id if part is not None)


def _describe(value: Any) -> str:
    """What a value is, never what it holds: machine configs carry keys and tokens."""
    if value is None:
        return "null"
    names = ((dict, "a mapping"), (list, "a list"), (str, "a string"), (bool, "a boolean"))
    for kind, name in names:
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, int | float) else f"a {type(value).__name__}"


def _plain(value: Any) -> Any:
    """A deep copy made of plain dicts and lists (so no caller's object is ever shared)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return copy.deepcopy(value)


# --------------------------------------------------------------------------- reading patches


def _text(data: bytes | str, what: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError(f"{what} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None


def _read_patch_source(patch: bytes | str, index: int) -> tuple[str, str]:
    """The patch text and how to name it; ``@path`` reads the file, as talosctl does."""
    what = f"patch #{index}"
    text = _text(patch, what)
    if not text.startswith("@"):
        return text, what
    path = text[1:]
    what = f"patch file {path!r}"
    try:
        return _text(Path(path).read_bytes(), what), what
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
    documents = _parse_yaml(text, what)
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
                f"{line}, found {_describe(value)}{hint}"
            )
    return "strategic", documents


def _load_patch(patch: PatchInput, index: int) -> tuple[PatchKind, Any]:
    if isinstance(patch, list):
        return "json6902", _plain(patch)
    if isinstance(patch, Mapping):
        if "op" in patch and "path" in patch:
            raise PatchError(
                f"patch #{index} looks like one JSON6902 operation; a JSON6902 patch is a list "
                "of operations, so pass [[op, ...]] rather than [op, ...]"
            )
        return "strategic", [(1, _plain(patch))]
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
            documents = _json6902_documents(documents, parsed, f"patch #{index}")
        else:
            documents = _strategic_merge(documents, parsed, f"patch #{index}")
    return dump_documents(documents)


def _json6902_documents(documents: list[Document], ops: Any, what: str) -> list[Document]:
    if len(documents) != 1:
        raise PatchError(
            f"{_MULTI_DOC_JSON6902}; use a strategic merge patch (YAML documents naming "
            "apiVersion/kind) for configs with more than one document"
        )
    patched = apply_json6902(documents[0], ops, what=what)
    line_doc = [(1, _as_document(patched, 1, f"{what} result"))]
    _check_documents(line_doc, f"{what} result")
    return [patched]


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


# --------------------------------------------------------------------------- strategic merge

# Fields tagged `merge:"replace"` in Talos: replaced (when the patch value is non-empty).
_REPLACE_FIELDS: dict[str, frozenset[str]] = {
    V1ALPHA1: frozenset({
        "cluster.network.podSubnets", "cluster.network.serviceSubnets",
        "cluster.apiServer.auditPolicy",
    }),
    "NetworkRuleConfig": frozenset({"ingress", "portSelector.ports"}),
}


def _same_value_of(key: str) -> Callable[[Any, Any], bool]:
    def same(existing: Any, new: Any) -> bool:
        return isinstance(existing, dict) and existing.get(key) == new.get(key)

    return same


def _same_interface(existing: Any, new: Any) -> bool:
    if not isinstance(existing, dict):
        return False
    if new.get("interface"):
        return bool(existing.get("interface") == new["interface"])
    selector = new.get("deviceSelector")
    return selector is not None and existing.get("deviceSelector") == selector


# Lists with a custom Merge in Talos: an item matching an existing one is merged into it.
_KEYED_LISTS: dict[str, dict[str, Callable[[Any, Any], bool]]] = {
    V1ALPHA1: {
        "machine.network.interfaces": _same_interface,
        "machine.network.interfaces[].vlans": _same_value_of("vlanId"),
        "cluster.apiServer.admissionControl": _same_value_of("name"),
    },
    "ExtensionServiceConfig": {"configFiles": _same_value_of("mountPath")},
}

# Talos's `Args` maps (extraArgs) merge by copying keys over: a list value is replaced.
_ARGS_KEY = "extraArgs"
# Talos drops a patch document that (after taking out its deletes) has only these keys.
_IDENTITY_ONLY_KEYS = frozenset({"version", "kind", "name"})


def apply_strategic_merge(
    documents: Sequence[Mapping[str, Any]], patch: Sequence[Mapping[str, Any]]
) -> list[Document]:
    """Strategic-merge the ``patch`` documents into ``documents``; returns new documents."""
    config = [_as_document(_plain(doc), n, "machine config") for n, doc in enumerate(documents, 1)]
    patch_docs = [(n, _as_document(_plain(doc), n, "patch")) for n, doc in enumerate(patch, 1)]
    return _strategic_merge(config, patch_docs, "patch")


def _strategic_merge(
    documents: list[Document], patch_docs: list[tuple[int, Document]], what: str
) -> list[Document]:
    result = [_plain(doc) for doc in documents]
    prepared = [(line, *_extract_deletes(_plain(doc), line, what)) for line, doc in patch_docs]
    remaining = [(line, doc) for line, doc, _ in prepared if doc is not None]
    _check_documents(remaining, what)
    for line, doc, deletes in prepared:
        for delete in deletes:
            result = delete.apply(result, what)
        if doc is not None:
            _merge_document(result, doc, line, what)
    return result


def _merge_document(result: list[Document], patch_doc: Document, line: int, what: str) -> None:
    doc_id = document_id(patch_doc)
    for target in result:
        if document_id(target) == doc_id:
            _merge_mapping(target, patch_doc, "", doc_id[1], f"{what} (line {line})")
            return
    result.append(patch_doc)


def _merge_mapping(left: Document, right: Document, path: str, kind: str, what: str) -> None:
    for key, value in right.items():
        key_path = f"{path}.{key}" if path else str(key)
        if left.get(key) is None:
            if value is not None:
                left[key] = value
            continue
        left[key] = _merge_value(left[key], value, key_path, kind, what)


def _merge_value(left: Any, right: Any, path: str, kind: str, what: str) -> Any:
    if right is None:
        return left
    if path in _REPLACE_FIELDS.get(kind, ()):
        return right if not _is_zero(right) else left
    if isinstance(left, dict) and isinstance(right, dict):
        if path.rsplit(".", 1)[-1] == _ARGS_KEY:
            left.update(right)
        else:
            _merge_mapping(left, right, path, kind, what)
        return left
    if isinstance(left, list) and isinstance(right, list):
        return _merge_list(left, right, path, kind, what)
    if not isinstance(left, dict | list) and not isinstance(right, dict | list):
        return left if _is_zero(right) else right
    raise PatchError(
        f"{what}: cannot merge {_describe(right)} into {_describe(left)} at '{path}'; "
        "the patch must have the same shape as the config there"
    )


def _merge_list(left: list[Any], right: list[Any], path: str, kind: str, what: str) -> list[Any]:
    same = _KEYED_LISTS.get(kind, {}).get(path)
    if same is None:
        return left + right
    for item in right:
        match = next((old for old in left if isinstance(item, dict) and same(old, item)), None)
        if match is None:
            left.append(item)
        else:
            _merge_mapping(match, item, f"{path}[]", kind, what)
    return left


def _is_zero(value: Any) -> bool:
    """Go's zero values, which a patch cannot merge in (``false`` is not one of them here)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float | str | list | dict):
        return not value
    return value is None


# --------------------------------------------------------------------------- $patch: delete


class _Delete:
    """One ``$patch: delete`` found in a patch document.

    ``path`` leads (by keys) to the deleted key, or to the list holding the deleted item;
    ``item`` is the ``(key, value)`` choosing that item; an empty path deletes the document.
    """

    def __init__(
        self, doc_id: DocumentID, path: tuple[Any, ...], item: tuple[Any, Any] | None, line: int
    ):
        self.doc_id, self.path, self.item, self.line = doc_id, path, item, line

    def describe(self) -> str:
        document = f"document {_describe_id(self.doc_id)}"
        if not self.path:
            return document
        where = _dotted(self.path)
        if self.item is not None:
            where += f"[{self.item[0]}={_scalar_text(self.item[1])}]"
        return f"'{where}' in {document}"

    def apply(self, documents: list[Document], what: str) -> list[Document]:
        index = next((i for i, d in enumerate(documents) if document_id(d) == self.doc_id), None)
        if index is None:
            raise self._lookup_failed(what, "the config has no such document")
        if not self.path:
            return documents[:index] + documents[index + 1:]
        if self.item is None:
            _delete_key(documents[index], self.path, lambda why: self._lookup_failed(what, why))
        else:
            _delete_item(documents[index], self.path, self.item,
                         lambda why: self._lookup_failed(what, why))
        return documents

    def _lookup_failed(self, what: str, why: str) -> PatchError:
        return PatchError(
            f"{what} (line {self.line}): $patch: delete of {self.describe()} failed: lookup "
            f"failed ({why}); delete only what the config contains"
        )


def _extract_deletes(
    doc: Document, line: int, what: str
) -> tuple[Document | None, list[_Delete]]:
    """Take the ``$patch: delete`` markers out of a patch document.

    Returns what is left to merge (``None`` when nothing is) and the deletes, which Talos
    applies before merging the rest of the document.
    """
    where = f"{what} (line {line})"
    if _IDENTITY_ONLY_KEYS.issuperset(doc):
        return None, []  # Talos drops a document with nothing but version/kind/name
    if _is_delete_marker(doc, where, ""):
        if doc.get("kind") is None:
            raise PatchError(
                f"{where}: $patch: delete cannot remove the v1alpha1 document; delete its keys "
                "instead, or name the apiVersion and kind of the document to delete"
            )
        _check_identity(doc, line, what)
        return None, [_Delete(document_id(doc), (), None, line)]
    _check_identity(doc, line, what)
    deletes: list[_Delete] = []
    _DeleteFinder(document_id(doc), line, where, deletes).walk_mapping(doc, ())
    return (None if _IDENTITY_ONLY_KEYS.issuperset(doc) else doc), deletes


def _is_delete_marker(node: Mapping[Any, Any], where: str, path: str) -> bool:
    if "$patch" not in node:
        return False
    if node["$patch"] != "delete":
        raise PatchError(
            f"{where}: unsupported '$patch: {node['$patch']}' at '{path or '<document>'}'; "
            "only '$patch: delete' is supported"
        )
    return True


class _DeleteFinder:
    """Walks a patch document, removing delete markers and recording them as `_Delete`s."""

    def __init__(self, doc_id: DocumentID, line: int, where: str, found: list[_Delete]):
        self.doc_id, self.line, self.where, self.found = doc_id, line, where, found

    def walk_mapping(self, node: Document, path: tuple[Any, ...], in_item: bool = False) -> bool:
        """Returns True when ``node`` emptied because of deletes (so its parent drops it)."""
        removed = False
        for key in list(node):
            if self._walk_child(node[key], (*path, key), in_item):
                del node[key]
                removed = True
        return removed and not node

    def _walk_child(self, child: Any, path: tuple[Any, ...], in_item: bool) -> bool:
        if isinstance(child, dict):
            if _is_delete_marker(child, self.where, _dotted(path)):
                self._no_list_in_chain(path, in_item)
                self.found.append(_Delete(self.doc_id, path, None, self.line))
                return True
            return self.walk_mapping(child, path, in_item)
        if isinstance(child, list):
            return self._walk_list(child, path, in_item)
        return False

    def _walk_list(self, items: list[Any], path: tuple[Any, ...], in_item: bool) -> bool:
        kept: list[Any] = []
        for item in items:
            if isinstance(item, dict) and _is_delete_marker(item, self.where, _dotted(path)):
                self._no_list_in_chain(path, in_item)
                selector = self._item_selector(item, path)
                self.found.append(_Delete(self.doc_id, path, selector, self.line))
            elif not self._walk_child(item, path, in_item=True):
                kept.append(item)
        removed = len(kept) != len(items)
        items[:] = kept
        return removed and not items

    def _item_selector(self, item: Mapping[Any, Any], path: tuple[Any, ...]) -> tuple[Any, Any]:
        for key, value in item.items():
            if key != "$patch" and not isinstance(value, dict | list):
                return key, value
        raise PatchError(
            f"{self.where}: the '$patch: delete' item in '{_dotted(path)}' needs a key: value "
            "saying which item to delete (e.g. '- interface: eth0' above '$patch: delete')"
        )

    def _no_list_in_chain(self, path: tuple[Any, ...], in_item: bool) -> None:
        if in_item:
            raise PatchError(
                f"{self.where}: cannot delete inside a list item ('{_dotted(path)}'); Talos "
                "supports '$patch: delete' on map keys and on whole items of a list reached "
                "through map keys only"
            )



def _delete_key(doc: Document, path: tuple[Any, ...], fail: Callable[[str], PatchError]) -> None:
    parent = _lookup_mapping(doc, path[:-1], fail)
    if path[-1] not in parent:
        raise fail(f"there is no key {str(path[-1])!r}")
    del parent[path[-1]]
    _prune_emptied(doc, path[:-1])


def _delete_item(
    doc: Document, path: tuple[Any, ...], item: tuple[Any, Any], fail: Callable[[str], PatchError]
) -> None:
    items = _lookup_mapping(doc, path[:-1], fail).get(path[-1])
    if not isinstance(items, list):
        raise fail("there is no such list")
    key, wanted = item[0], _scalar_text(item[1])
    for index, candidate in enumerate(items):
        found = isinstance(candidate, dict) and key in candidate
        if found and _scalar_text(candidate[key]) == wanted:
            del items[index]  # Talos removes the first match only
            _prune_emptied(doc, path)
            return
    raise fail(f"no item has {key}: {wanted}")


def _lookup_mapping(
    doc: Document, path: tuple[Any, ...], fail: Callable[[str], PatchError]
) -> dict[Any, Any]:
    node: dict[Any, Any] = doc
    for depth, key in enumerate(path):
        child = node.get(key)
        if not isinstance(child, dict):
            shown = _dotted(path[: depth + 1])
            problem = "is not in the config" if child is None else "is not a map"
            raise fail(f"'{shown}' {problem}")
        node = child
    return node


def _prune_emptied(doc: Document, path: tuple[Any, ...]) -> None:
    """Drop containers a delete left empty, as Talos's encoder omits empty fields."""
    for depth in range(len(path), 0, -1):
        parent = doc
        for key in path[: depth - 1]:
            parent = parent[key]
        if parent[path[depth - 1]] not in ({}, []):
            return
        del parent[path[depth - 1]]


def _dotted(path: Sequence[Any]) -> str:
    return ".".join(str(key) for key in path)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


# --------------------------------------------------------------------------- JSON6902


def apply_json6902(document: Any, ops: Sequence[Any], *, what: str = "patch") -> Any:
    """Apply RFC 6902 operations to one document (a copy); returns the patched document."""
    if not isinstance(ops, list | tuple):
        raise PatchError(f"{what}: a JSON6902 patch must be a list of operations")
    root = _plain(document)
    for number, raw in enumerate(ops, start=1):
        op = _check_op(raw, number, what)
        label = f"{what}: JSON6902 operation #{number} ({op['op']} {op['path']})"
        try:
            root = _apply_op(root, op)
        except _PointerError as exc:
            raise PatchError(f"{label}: {exc}") from None
    return root


class _PointerError(Exception):
    """Internal: a JSON pointer did not resolve; wrapped into a PatchError with context."""


def _check_op(raw: Any, number: int, what: str) -> dict[str, Any]:
    prefix = f"{what}: JSON6902 operation #{number}"
    if not isinstance(raw, Mapping):
        raise PatchError(f"{prefix} is {_describe(raw)}; write each one as {{op: ..., path: ...}}")
    op: dict[str, Any] = _plain(raw)
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
    return _PointerError(f"{_show_pointer(tokens)} is {_describe(value)}, not a list or map")


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
