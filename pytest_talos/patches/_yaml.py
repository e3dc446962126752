"""YAML in and out, and how machine-config documents are told apart.

YAML is read by the 1.2 core schema (as Go's yaml.v3 reads untyped values) and plain scalars
such as ``0777`` or ``yes`` are written back as they came. The helpers without a leading
underscore are shared by the other modules of :mod:`pytest_talos.patches`.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import yaml

from pytest_talos.errors import TalosError

Document = dict[str, Any]
DocumentID = tuple[str, str, str | None]

V1ALPHA1 = "v1alpha1"
_V1ALPHA1_ID: DocumentID = ("", V1ALPHA1, None)
# keys whose presence marks a kind-less document as the v1alpha1 one (as Talos's decoder does)
_V1ALPHA1_KEYS = frozenset({"machine", "cluster", "debug", "persist"})


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
                        "while constructing a mapping",
                        node.start_mark,
                        f"mapping key {key_node.value!r} already defined",
                        key_node.start_mark,
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


def parse_yaml(data: bytes | str, what: str) -> list[tuple[int, Any]]:
    """Every non-empty YAML document as ``(line, value)``."""
    text = decode_text(data, what)
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
    documents = [(line, as_document(value, line, what)) for line, value in parse_yaml(data, what)]
    check_documents(documents, what)
    return [doc for _, doc in documents]


def dump_documents(docs: Sequence[Mapping[str, Any]]) -> bytes:
    """YAML for ``docs``: block style, keys in insertion order, ``---`` between documents."""
    parts = [
        yaml.dump(
            plain_copy(doc),
            Dumper=_Dumper,
            indent=2,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=4096,
        )
        for doc in docs
    ]
    return "---\n".join(parts).encode("utf-8")


# --------------------------------------------------------------------------- document identity


def as_document(value: Any, line: int, what: str) -> Document:
    if not isinstance(value, dict):
        raise PatchError(
            f"{what}: expected a YAML mapping document at line {line}, found "
            f"{describe(value)}; each document must be a mapping of keys to values"
        )
    return value


def check_documents(documents: Sequence[tuple[int, Document]], what: str) -> None:
    seen: dict[DocumentID, int] = {}
    for line, doc in documents:
        check_identity(doc, line, what)
        if doc.get("$patch") == "delete":
            continue  # a deleted document may come back later in the same patch
        doc_id = document_id(doc)
        if doc_id in seen:
            raise PatchError(
                f"{what}: duplicate document {describe_id(doc_id)} at line {line} (first at "
                f"line {seen[doc_id]}); merge the two documents into one"
            )
        seen[doc_id] = line


def check_identity(doc: Document, line: int, what: str) -> None:
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


def describe_id(doc_id: DocumentID) -> str:
    if doc_id == _V1ALPHA1_ID:
        return V1ALPHA1
    return "/".join(part for part in doc_id if part is not None)


def describe(value: Any) -> str:
    """What a value is, never what it holds: machine configs carry keys and tokens."""
    if value is None:
        return "null"
    names = ((dict, "a mapping"), (list, "a list"), (str, "a string"), (bool, "a boolean"))
    for kind, name in names:
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, int | float) else f"a {type(value).__name__}"


def plain_copy(value: Any) -> Any:
    """A deep copy made of plain dicts and lists (so no caller's object is ever shared)."""
    if isinstance(value, Mapping):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain_copy(item) for item in value]
    return copy.deepcopy(value)


def decode_text(data: bytes | str, what: str) -> str:
    """``data`` as text; bytes must be UTF-8 (``what`` names the input in the error)."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError(f"{what} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
