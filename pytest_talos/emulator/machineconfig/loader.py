"""Reading config bytes as Talos's configloader does: documents, kinds, strict decoding
(``pkg/machinery/config/configloader``).

Also the lenient, cached reading the accessors and the immediate-apply check use.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from pytest_talos.emulator.machineconfig.common import go_quote, invalid_argument
from pytest_talos.emulator.machineconfig.render import render_yaml
from pytest_talos.emulator.machineconfig.schema import (
    ANY,
    OTHER_KINDS,
    STRICT_DOCUMENTS,
    V1ALPHA1_MARKERS,
    SchemaType,
)

_YAML11_ONLY = frozenset(
    {
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
        "tag:yaml.org,2002:value",
    }
)
_TAG_STR, _TAG_NULL = "tag:yaml.org,2002:str", "tag:yaml.org,2002:null"
_TAG_BOOL, _TAG_INT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int"
# yaml.v3 still decodes the YAML 1.1 words into a typed bool field.
_YAML11_BOOL_WORDS = frozenset({"y", "yes", "on", "n", "no", "off"})


# libyaml's parser when PyYAML has it (about 10x faster); the resolvers below still apply.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """YAML 1.2 core scalars, as Go's yaml.v3 reads them (`off` stays a string)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _TAG_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    _TAG_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)
_Loader.add_constructor(_TAG_BOOL, lambda _loader, node: str(node.value).lower() == "true")
_Loader.add_constructor(_TAG_INT, lambda _loader, node: _yaml12_int(str(node.value)))


def _yaml12_int(text: str) -> int:
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def construct_value(node: yaml.Node) -> Any:
    loader = _Loader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:  # e.g. a list used as a mapping key
        problem = getattr(exc, "problem", None) or str(exc)
        raise invalid_argument(f"decode error: yaml: {problem}") from None
    finally:
        loader.dispose()


@dataclass(frozen=True)
class _Document:
    api_version: str
    kind: str  # "v1alpha1" for the legacy main document
    name: str
    line: int
    node: yaml.MappingNode

    @property
    def ident(self) -> str:
        return f"{self.api_version}/{self.kind}/{self.name}"


def _compose(data: bytes) -> list[yaml.Node]:
    try:
        return [node for node in yaml.compose_all(data, Loader=_Loader) if node is not None]
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise invalid_argument(f"decode error: yaml: line {line}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise invalid_argument(f"decode error: yaml: {exc}") from None


def _top_value(node: yaml.MappingNode, key: str) -> str:
    for key_node, value_node in node.value:
        if key_node.value == key and isinstance(value_node, yaml.ScalarNode):
            return str(value_node.value)
    return ""


def parse_documents(data: bytes) -> list[_Document]:
    """Talos's configloader: documents in order, or the loader error (``NewFromBytes``)."""
    documents: list[_Document] = []
    seen: set[str] = set()
    for node in _compose(data):
        if isinstance(node, yaml.ScalarNode) and node.tag == _TAG_NULL:
            continue
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.MappingNode):
            raise invalid_argument(f"expected a YAML document at line {line}")
        doc = _Document(
            _top_value(node, "apiVersion"),
            _top_value(node, "kind") or "v1alpha1",
            _top_value(node, "name"),
            line,
            node,
        )
        if doc.ident in seen:
            raise invalid_argument(f"duplicate document {doc.ident} is not allowed (line {line})")
        seen.add(doc.ident)
        _decode(doc)
        documents.append(doc)
    if not documents:
        raise invalid_argument("config not found")
    return documents


def _decode(doc: _Document) -> None:
    """Resolve the document kind, then decode it strictly (Talos decoder.decode)."""
    keys = {key.value for key, _ in doc.node.value if isinstance(key, yaml.ScalarNode)}
    version = doc.api_version or ("v1alpha1" if keys & V1ALPHA1_MARKERS else "")
    kind = _top_value(doc.node, "kind")
    problem = ""
    if kind == "" and version != "v1alpha1":
        problem = "missing kind"
    elif kind and version == "":
        problem = "missing apiVersion"
    elif kind and (version != "v1alpha1" or kind not in STRICT_DOCUMENTS.keys() | OTHER_KINDS):
        problem = f"{go_quote(kind)} {go_quote(version)}: not registered"
    else:
        problem = _strict_decode(kind, STRICT_DOCUMENTS.get(kind or "v1alpha1", ANY), doc.node)
    if problem:
        raise invalid_argument(f"error decoding document {doc.ident} (line {doc.line}): {problem}")


def _strict_decode(kind: str, schema: SchemaType, node: yaml.Node) -> str:
    type_errors = list(_type_errors(schema, node))
    if type_errors:
        joined = "\n  ".join(type_errors)
        return f"error decoding {kind} to *{schema.go}: yaml: unmarshal errors:\n  {joined}"
    unknown = _unknown_keys(schema, node)
    if unknown:
        return f"unknown keys found during decoding:\n{render_yaml(unknown)}"
    return ""


def _short_tag(tag: str) -> str:
    return "!!" + tag.rsplit(":", 1)[-1] if tag.startswith("tag:yaml.org,2002:") else tag


def _type_error(node: yaml.Node, go: str) -> str:
    value = ""
    if isinstance(node, yaml.ScalarNode):
        text = str(node.value)
        value = f" `{text[:7]}...`" if len(text) > 10 else f" `{text}`"
    line = node.start_mark.line + 1
    return f"line {line}: cannot unmarshal {_short_tag(node.tag)}{value} into {go}"


def _scalar_fits(schema: SchemaType, node: yaml.ScalarNode) -> bool:
    if schema.go == "bool":
        return node.tag == _TAG_BOOL or str(node.value).lower() in _YAML11_BOOL_WORDS
    if schema.go == "int":
        return node.tag == _TAG_INT
    return True  # yaml.v3 decodes any scalar into a string


def _type_errors(schema: SchemaType, node: yaml.Node) -> Iterator[str]:
    """yaml.v3's unmarshal errors for ``node`` decoded into ``schema``."""
    if schema.kind == "any" or (isinstance(node, yaml.ScalarNode) and node.tag == _TAG_NULL):
        return
    wanted = {"scalar": yaml.ScalarNode, "seq": yaml.SequenceNode}.get(
        schema.kind, yaml.MappingNode
    )
    if not isinstance(node, wanted) or (
        isinstance(node, yaml.ScalarNode) and not _scalar_fits(schema, node)
    ):
        yield _type_error(node, schema.go)
        return
    if isinstance(node, yaml.SequenceNode) and schema.item is not None:
        for item in node.value:
            yield from _type_errors(schema.item, item)
    elif isinstance(node, yaml.MappingNode):
        yield from _mapping_type_errors(schema, node)


def _mapping_type_errors(schema: SchemaType, node: yaml.MappingNode) -> Iterator[str]:
    first_seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            yield _type_error(key_node, "string")
            continue
        key, line = str(key_node.value), key_node.start_mark.line + 1
        if key in first_seen:
            earlier = first_seen[key]
            yield f"line {line}: mapping key {go_quote(key)} already defined at line {earlier}"
            continue
        first_seen[key] = line
        child = schema.item if schema.kind == "map" else schema.fields.get(key)
        if child is not None:
            yield from _type_errors(child, value_node)


def _unknown_keys(schema: SchemaType, node: yaml.Node) -> dict[str, Any] | None:
    """The keys a Go struct has no field for, nested as in the document."""
    if schema.kind != "struct" or not isinstance(node, yaml.MappingNode):
        return None
    unknown: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        child = schema.fields.get(key)
        if child is None:
            unknown[key] = construct_value(value_node)
            continue
        inner = _unknown_keys(child, value_node)
        if inner:
            unknown[key] = inner
    # Go marshals the map[string]interface{} of unknown keys in key order.
    return dict(sorted(unknown.items())) or None


@functools.lru_cache(maxsize=256)
def lenient_documents(data: bytes) -> tuple[dict[str, Any], ...]:
    """The mapping documents of ``data`` (none if it does not parse).

    Cached because the emulator reads the same active config on every Kubernetes request;
    callers must treat the result as read-only.
    """
    try:
        loaded = list(yaml.load_all(data, Loader=_Loader))
    except yaml.YAMLError:
        return ()
    return tuple(doc for doc in loaded if isinstance(doc, dict))


def main_document(data: bytes) -> dict[str, Any]:
    for doc in lenient_documents(data):
        if not doc.get("kind") and (
            doc.get("apiVersion") == "v1alpha1" or V1ALPHA1_MARKERS & doc.keys()
        ):
            return doc
    return {}
