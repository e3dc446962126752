"""Block YAML the way Go's yaml.v3 writes it (4-space indent), with talosctl-style docs."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

# Text PyYAML writes as a plain scalar unchanged: printable ASCII without spaces or indicators
# (`#`, `,`, `[`, `{`, quotes, a leading `-`, `?`, `:`, `*`, `&`, `!`, `|`, `>`, `%`, `@`, `` ` ``).
_PLAIN_CANDIDATE = re.compile(r"[A-Za-z0-9_./+=][A-Za-z0-9_./+=:@-]*")
_IMPLICIT_RESOLVERS = yaml.SafeDumper.yaml_implicit_resolvers


def yaml_scalar(value: Any) -> str:
    """``value`` as yaml.v3 would write it inline (PyYAML's choice, with double quotes).

    The common cases are answered directly; a generated config holds a few hundred scalars and
    a ``yaml.safe_dump`` for each was most of its cost. Everything else goes to PyYAML.
    """
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is str:
        return _text_scalar(value)
    return dumped_scalar(value)


@functools.lru_cache(maxsize=1024)  # keys and most values repeat from one config to the next
def _text_scalar(text: str) -> str:
    return text if _plain_as_is(text) else dumped_scalar(text)


def _plain_as_is(text: str) -> bool:
    """True if PyYAML would write ``text`` as a plain scalar, character for character."""
    if not _PLAIN_CANDIDATE.fullmatch(text) or text.endswith(":") or text.startswith("..."):
        return False
    # A plain scalar that reads back as another type (`yes`, `1_000`, `~`, `=`) gets quoted.
    resolvers = _IMPLICIT_RESOLVERS.get(text[0], []) + _IMPLICIT_RESOLVERS.get(None, [])
    return not any(regexp.match(text) for _tag, regexp in resolvers)


def dumped_scalar(value: Any) -> str:
    if isinstance(value, str) and "\n" in value:
        return json.dumps(value)
    text = yaml.safe_dump(value, width=1 << 16).removesuffix("\n...\n").rstrip("\n")
    # yaml.v3 quotes with double quotes ("", "off"); PyYAML would pick single ones.
    return json.dumps(value) if text.startswith("'") else text


def render_yaml(value: Mapping[str, Any], docs: Mapping[str, str] | None = None) -> str:
    """Block YAML the way Go's yaml.v3 writes it (4-space indent), with talosctl-style docs."""
    return "".join(f"{line}\n" for line in _mapping_lines(value, "", 0, docs or {}))


def _mapping_lines(
    value: Mapping[str, Any], path: str, indent: int, docs: Mapping[str, str]
) -> Iterator[str]:
    pad = " " * indent
    for key, item in value.items():
        key_text = yaml_scalar(str(key))
        item_path = f"{path}.{key}" if path else str(key)
        doc = docs.get(item_path)
        if isinstance(item, dict | list) and item:
            if doc:
                yield f"{pad}# {doc}"
            yield f"{pad}{key_text}:"
            yield from _block_lines(item, item_path, indent + 4, docs)
        else:
            inline = (
                "{}"
                if isinstance(item, dict)
                else "[]"
                if isinstance(item, list)
                else (yaml_scalar(item))
            )
            yield f"{pad}{key_text}: {inline}" + (f" # {doc}" if doc else "")


def _block_lines(value: Any, path: str, indent: int, docs: Mapping[str, str]) -> Iterator[str]:
    if isinstance(value, dict):
        yield from _mapping_lines(value, path, indent, docs)
        return
    pad = " " * indent
    for item in value:
        if isinstance(item, dict) and item:
            lines = list(_mapping_lines(item, f"{path}[]", indent + 2, docs))
            yield f"{pad}- {lines[0].lstrip()}"
            yield from lines[1:]
        elif isinstance(item, list) and item:
            yield f"{pad}-"
            yield from _block_lines(item, f"{path}[]", indent + 4, docs)
        else:
            inline = (
                "{}"
                if isinstance(item, dict)
                else "[]"
                if isinstance(item, list)
                else (yaml_scalar(item))
            )
            yield f"{pad}- {inline}"
