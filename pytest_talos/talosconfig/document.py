"""Reading a talosconfig file into a YAML document, key material hidden from the start."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import yaml

from pytest_talos.errors import ConfigError
from pytest_talos.keyfile import SecretBytes


class SecretStr(str):
    """A string holding key material (base64 of a key): ``repr`` never shows the content."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<secret: {len(self)} characters>"


def _hide_keys(doc: Any) -> Any:
    """The parsed talosconfig with every context's ``key`` wrapped in :class:`SecretStr`."""
    contexts = doc.get("contexts") if isinstance(doc, dict) else None
    for body in contexts.values() if isinstance(contexts, dict) else ():
        if isinstance(body, dict) and isinstance(body.get("key"), str):
            body["key"] = SecretStr(body["key"])
    return doc


# Errors are raised *outside* ``except`` blocks on purpose: a chained exception (PyYAML's
# quotes the offending line) could carry key material into a traceback.


class Where:
    """The file and key path an error points at."""

    def __init__(self, path: Path, key: str | None = None):
        self.path = path
        self.key = key

    def at(self, key: str) -> Where:
        return Where(self.path, key)

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(message, path=str(self.path), key=self.key) from None


def read_file(where: Where) -> bytes:
    if where.path.is_dir():
        where.fail("is a directory, not a talosconfig file")
    data, reason = read_bytes(where.path)
    if data is None:
        where.fail(f"cannot read the talosconfig ({reason}); check its permissions")
    return data


def read_bytes(path: Path) -> tuple[bytes | None, str]:
    try:
        return SecretBytes(path.read_bytes()), ""  # the whole file holds the key
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__


def safe_load(data: bytes) -> tuple[Any, str | None]:
    """The YAML document, or None and a description of where it is broken."""
    try:
        return _hide_keys(yaml.safe_load(data)), None
    except yaml.YAMLError as exc:
        # Never str(exc): PyYAML quotes the offending line, which may hold key material.
        return None, _yaml_location(exc)


def parse_yaml(where: Where, data: bytes) -> dict[Any, Any]:
    if not data.strip():
        where.fail("talos config file is empty")
    doc, broken_at = safe_load(data)
    if broken_at is not None:
        where.fail(f"not valid YAML{broken_at}; fix the syntax or regenerate the file")
    if not isinstance(doc, dict):
        where.fail("not a talosconfig: the top level must be a mapping with context and contexts")
    return doc


def _yaml_location(exc: yaml.YAMLError) -> str:
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return ""
    mark = exc.problem_mark
    problem = f": {exc.problem}" if exc.problem else ""
    return f" (line {mark.line + 1}, column {mark.column + 1}{problem})"
