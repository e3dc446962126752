"""Severities, outcomes and check ids: the vocabulary of every record and report."""

from __future__ import annotations

import re
from typing import Literal

from pytest_talos.errors import ConfigError

__all__ = [
    "CHECK_ID_PATTERN",
    "OUTCOMES",
    "SEVERITIES",
    "Outcome",
    "Severity",
    "parse_severity",
    "severity_rank",
    "validate_check_id",
]

Severity = Literal["critical", "high", "medium", "low"]
Outcome = Literal["passed", "failed", "error", "skipped", "waived"]

# Most severe first; the index is the rank (lower = more severe).
SEVERITIES: tuple[Severity, ...] = ("critical", "high", "medium", "low")
OUTCOMES: tuple[Outcome, ...] = ("failed", "error", "waived", "skipped", "passed")
CHECK_ID_PATTERN = re.compile(r"^[a-z][a-z0-9]*\.[a-z0-9]+(?:-[a-z0-9]+)*$")


def parse_severity(text: str) -> Severity:
    """``"High"`` -> ``"high"``; anything else is a ConfigError naming the choices."""
    value = text.strip().lower()
    if value not in SEVERITIES:
        raise ConfigError(
            f"unknown severity {text!r}; use one of {', '.join(SEVERITIES)} (most to least severe)"
        )
    return value


def severity_rank(severity: Severity) -> int:
    """0 for critical up to 3 for low."""
    return SEVERITIES.index(severity)


def validate_check_id(check_id: str) -> str:
    """Check ids look like ``area.what-is-claimed`` (lower case, digits and dashes)."""
    if not CHECK_ID_PATTERN.match(check_id):
        raise ConfigError(
            f"invalid check id {check_id!r}; write it as <area>.<claim-in-kebab-case>, "
            "for example 'immutability.no-shell'"
        )
    return check_id
