"""Griffe extension for the docs site: read the kit's reST-flavoured docstrings as Markdown.

The docstrings use one style: prose, ``double backticks`` for code and Sphinx roles
(:class:`X`, :func:`~pytest_talos.x.y`, ...) for cross-references, no field lists. This
extension turns each role into an optional cross-reference (a link when the target is on the
site, plain code otherwise) and a reST ``::`` literal-block marker into a Markdown one, before
mkdocstrings renders the docstring.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|data|attr|mod|exc|obj|const):`(~?)([^`]+)`")
_LITERAL_MARKER = re.compile(r"(?m)^(?P<indent>[ \t]*)(?P<text>.*?)::[ \t]*$")


def _target(obj: griffe.Object, name: str) -> str:
    """The full dotted path of ``name`` as written in ``obj``'s docstring, if griffe knows it."""
    head, _, rest = name.lstrip(".").partition(".")
    scope: griffe.Object | None = obj if obj.is_class or obj.is_module else obj.parent
    while scope is not None:
        try:
            resolved = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{resolved}.{rest}" if rest else resolved
    return name.lstrip(".")


def _role(obj: griffe.Object, match: re.Match[str]) -> str:
    short, name = match.group(1) == "~", match.group(2)
    shown = name.rsplit(".", 1)[-1] if short else name
    return f'<autoref identifier="{_target(obj, name)}" optional><code>{shown}</code></autoref>'


def _literal_marker(match: re.Match[str]) -> str:
    text = match.group("text")
    if not text.strip():
        return ""  # a lone "::": the indented block that follows is code already
    return f"{match.group('indent')}{text}:"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles and ``::`` markers in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = _ROLE.sub(lambda match: _role(obj, match), obj.docstring.value)
        obj.docstring.value = _LITERAL_MARKER.sub(_literal_marker, text)
