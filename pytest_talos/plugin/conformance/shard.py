"""``--talos-shard I/N``: which nodes one CI job of a sharded run checks.

Every node is in exactly one shard. The nodes are ordered by the SHA-256 of their hostname
(stable across processes, machines and Python versions, unlike the salted ``hash()``) and
dealt round robin, so shards differ in size by at most one node. A node's shard depends on
the node list, which every job of a run reads from the same cluster; ``talos-report merge``
refuses shards that saw different node lists.

Cluster-wide checks (those without a node) run in shard 1 only: each of them looks at the
whole cluster once.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Shard", "assign_shards", "parse_shard"]

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def runs_cluster_checks(self) -> bool:
        return self.index == 1

    def nodes(self, names: Iterable[str]) -> list[str]:
        """The names (of all the run's nodes) this shard checks, sorted."""
        shards = assign_shards(names, self.count)
        return sorted(name for name, index in shards.items() if index == self.index)


def parse_shard(text: str) -> Shard:
    """``"2/4"`` -> ``Shard(2, 4)``; ValueError saying what is wrong otherwise."""
    match = _SHARD.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not I/N")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"{text!r} is not a shard: I must be from 1 to N, and N at least 1")
    return Shard(index, count)


def _digest(name: str) -> bytes:
    return hashlib.sha256(name.encode("utf-8")).digest()


def assign_shards(names: Iterable[str], count: int) -> Mapping[str, int]:
    """``{hostname: shard index}`` for ``count`` shards: ordered by the hostnames' SHA-256,
    dealt round robin (ties, impossible in practice, fall back to the name)."""
    ordered = sorted(set(names), key=lambda name: (_digest(name), name))
    return {name: position % count + 1 for position, name in enumerate(ordered)}
