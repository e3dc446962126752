"""A node's filesystem through the List and Read APIs (read-only, like the node)."""

from __future__ import annotations

import builtins
import posixpath
from typing import TYPE_CHECKING

from pytest_talos import models
from pytest_talos.errors import TalosError

if TYPE_CHECKING:
    from pytest_talos.node._node import TalosNode

__all__ = ["NodeFiles", "is_missing_path"]


def is_missing_path(exc: TalosError) -> bool:
    """Whether ``exc`` says a path does not exist, whatever its gRPC code.

    List returns the walker's ``lstat <path>: no such file or directory`` as code Unknown
    (``pkg/archiver/walker.go``), Read a ``stat`` error as NotFound (``v1alpha1_server.go``).
    """
    return "no such file or directory" in str(exc)


class NodeFiles:
    """The node's filesystem through the List and Read APIs (read-only, like the node)."""

    def __init__(self, node: TalosNode) -> None:
        self._node = node

    def list(
        self, path: str = "/", *, recurse: bool = False, depth: int = 0
    ) -> builtins.list[models.FileInfo]:
        """Entries under ``path`` (``recurse`` with ``depth`` 0: the whole tree)."""
        return self._node.client.list(path, recurse, depth)

    def entries(self, path: str) -> builtins.list[models.FileInfo] | None:
        """The entries directly in directory ``path``, or ``None`` if nothing exists there.

        A symlinked ``path`` is followed (``/bin`` lists ``/usr/bin``; names are the real
        paths). Any error but a missing path is raised.
        """
        try:
            listing = self.list(path)
        except TalosError as exc:
            if is_missing_path(exc):
                return None
            raise
        return [entry for entry in listing if not _is_listing_root(entry, path)]

    def names(self, path: str) -> builtins.list[str]:
        """The base names of the entries directly in directory ``path``."""
        return sorted(
            posixpath.basename(entry.name.rstrip("/"))
            for entry in self.list(path)
            if not entry.error and not _is_listing_root(entry, path)
        )

    def info(self, path: str) -> models.FileInfo | None:
        """The entry for ``path``, or ``None`` if nothing exists there."""
        parent, name = posixpath.split(path.rstrip("/") or "/")
        entries = self.entries(parent or "/")
        if entries is None:
            return None
        for entry in entries:
            if not entry.error and posixpath.basename(entry.name.rstrip("/")) == name:
                return entry
        return None

    def exists(self, path: str) -> bool:
        return self.info(path) is not None

    def read(self, path: str) -> bytes:
        """A regular file's bytes (the Read API needs os:admin)."""
        return self._node.client.read(path)

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8", errors="replace")


def _is_listing_root(entry: models.FileInfo, path: str) -> bool:
    """The walked root itself: relative name ``.`` (a directory) or the path (a file)."""
    return entry.relative_name == "." or entry.name.rstrip("/") == (path.rstrip("/") or "/")
