"""What every passed check returns: :class:`CheckResult`, the check's name and its evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckResult"]


@dataclass
class CheckResult:
    """A passed check: its name, the node, and what it saw."""

    check: str
    node: str
    evidence: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # parts skipped, and why
