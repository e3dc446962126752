"""Waivers: a known, accepted deviation waived on a check (and node) until it expires."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pytest_talos.errors import ConfigError
from pytest_talos.reporting.severity import validate_check_id

__all__ = [
    "Waiver",
    "WaiverMatch",
    "check_waivers_known",
    "find_waiver",
    "load_waivers",
    "parse_waivers",
]


@dataclass(frozen=True)
class Waiver:
    """Turns a failing check into an expected failure until ``expires`` (inclusive)."""

    check: str
    reason: str
    expires: dt.date
    node: str | None = None  # None: every node
    source: str = ""  # "<file>: waivers[3]", for messages

    def covers(self, check_id: str, node: str | None) -> bool:
        return self.check == check_id and (self.node is None or self.node == node)

    def is_expired(self, today: dt.date) -> bool:
        return today > self.expires

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"waiver for {self.check}{where} until {self.expires.isoformat()}: {self.reason}"


@dataclass(frozen=True)
class WaiverMatch:
    """What the waivers say about one failing check: an active waiver, an expired one, both
    or neither. An expired waiver never waives anything: the check fails and says why."""

    active: Waiver | None = None
    expired: Waiver | None = None

    @property
    def waives(self) -> bool:
        return self.active is not None

    def expired_note(self) -> str:
        if self.expired is None:
            return ""
        return (
            f"waiver expired on {self.expired.expires.isoformat()} "
            f"({self.expired.reason}); renew it in the waivers file or fix the node"
        )


_WAIVER_KEYS = frozenset({"check", "reason", "expires", "node"})


def _waiver_date(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise ConfigError(
        f"{where}.expires is {value!r}; write the expiry date as YYYY-MM-DD", key="expires"
    )


def _required_text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}.{key} is missing or empty; every waiver needs a {key}")
    return value.strip()


def _parse_waiver(entry: Any, where: str) -> Waiver:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} must be a mapping with check, reason and expires")
    unknown = sorted(set(map(str, entry)) - _WAIVER_KEYS)
    if unknown:
        raise ConfigError(
            f"{where} has unknown keys {unknown}; allowed: {', '.join(sorted(_WAIVER_KEYS))}"
        )
    check = validate_check_id(_required_text(entry, "check", where))
    node = entry.get("node")
    if node is not None and (not isinstance(node, str) or not node.strip()):
        raise ConfigError(f"{where}.node must be a node name (or omitted for every node)")
    reason = _required_text(entry, "reason", where)
    if "expires" not in entry:
        raise ConfigError(f"{where}.expires is missing; waivers must expire (YYYY-MM-DD)")
    return Waiver(
        check=check,
        reason=reason,
        expires=_waiver_date(entry["expires"], where),
        node=node.strip() if isinstance(node, str) else None,
        source=where,
    )


def parse_waivers(
    data: Any, *, source: str = "waivers", known_checks: Collection[str] | None = None
) -> list[Waiver]:
    """Waivers from parsed YAML: ``{"waivers": [...]}`` or a bare list (empty file: none).

    With ``known_checks``, a waiver for a check id that does not exist is an error: a typo
    would otherwise silently waive nothing.
    """
    if data is None:
        return []
    entries = data.get("waivers") if isinstance(data, Mapping) else data
    if isinstance(data, Mapping) and set(map(str, data)) - {"waivers"}:
        raise ConfigError(f"{source}: the only top-level key allowed is 'waivers'")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: 'waivers' must be a list of waivers")
    waivers = [_parse_waiver(e, f"{source}: waivers[{i}]") for i, e in enumerate(entries)]
    if known_checks is not None:
        check_waivers_known(waivers, known_checks)
    return waivers


def check_waivers_known(waivers: Iterable[Waiver], known_checks: Collection[str]) -> None:
    """Raise ConfigError for the first waiver whose check id is not in ``known_checks``."""
    for waiver in waivers:
        if waiver.check not in known_checks:
            raise ConfigError(
                f"{waiver.source}: there is no check {waiver.check!r}; "
                "list the checks with `pytest conformance --collect-only -q` or see "
                "docs/conformance.md"
            )


def load_waivers(path: str | Path, *, known_checks: Collection[str] | None = None) -> list[Waiver]:
    """Read and validate a waivers YAML file (see :func:`parse_waivers`)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the waivers file ({exc.strerror}); check --talos-waivers",
            path=str(file),
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", path=str(file)) from None
    return parse_waivers(data, source=str(file), known_checks=known_checks)


def find_waiver(
    waivers: Iterable[Waiver], check_id: str, node: str | None, today: dt.date
) -> WaiverMatch:
    """The first active and the first expired waiver that cover this check on this node."""
    active: Waiver | None = None
    expired: Waiver | None = None
    for waiver in waivers:
        if not waiver.covers(check_id, node):
            continue
        if waiver.is_expired(today):
            expired = expired or waiver
        else:
            active = active or waiver
    return WaiverMatch(active=active, expired=expired)
