"""Check metadata (the ``talos_check`` marker) and the suite profiles that select checks.

Every test in ``conformance/`` carries exactly one marker::

    @pytest.mark.talos_check("immutability.no-shell-or-ssh", severity="critical",
                             claim="There is no shell, busybox or SSH on the node")

The id's first part is the area (the folder); the severity feeds ``--talos-fail-under`` and
the reports; the claim is what the report prints. Profiles (``--talos-suite``) select areas.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_talos.errors import ConfigError
from pytest_talos.reporting import Severity, parse_severity, validate_check_id

__all__ = [
    "AREAS",
    "PROFILE_MARKERS",
    "SUITES",
    "CheckSpec",
    "SuiteProfile",
    "check_spec_from_marker",
    "marked_check",
]

AREAS = (
    "immutability",
    "api",
    "services",
    "config",
    "kubernetes",
    "cluster",
    "upgrade",
    "vendor",
    "certs",
)


@dataclass(frozen=True)
class CheckSpec:
    id: str
    severity: Severity
    claim: str

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else None


def check_spec_from_marker(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> CheckSpec:
    """``talos_check(id, severity, claim)`` (positional or keyword) -> a validated CheckSpec."""
    check_id = _argument(args, kwargs, 0, "id")
    severity = _argument(args, kwargs, 1, "severity")
    claim = _argument(args, kwargs, 2, "claim")
    if not isinstance(check_id, str):
        raise ConfigError("talos_check needs the check id first, e.g. 'api.mtls-required'")
    validate_check_id(check_id)
    if check_id.split(".", 1)[0] not in AREAS:
        raise ConfigError(f"check {check_id!r}: the area must be one of {', '.join(AREAS)}")
    if not isinstance(severity, str):
        raise ConfigError(f"check {check_id!r}: talos_check needs severity=critical|high|...")
    if not isinstance(claim, str) or not claim.strip():
        raise ConfigError(f"check {check_id!r}: talos_check needs claim='what the check proves'")
    return CheckSpec(check_id, parse_severity(severity), claim.strip())


def marked_check(test: Callable[..., Any]) -> CheckSpec:
    """The check a test function is, from its ``talos_check`` marker (for code that holds
    the function, not the collected item: a module fixture, a direct call)."""
    for mark in getattr(test, "pytestmark", ()):
        if mark.name == "talos_check":
            return check_spec_from_marker(mark.args, mark.kwargs)
    raise ConfigError(f"{test.__qualname__} has no talos_check marker")


@dataclass(frozen=True)
class SuiteProfile:
    """A named selection of checks: by area, optionally read-only checks only."""

    name: str
    areas: frozenset[str]
    read_only: bool
    description: str

    @property
    def marker(self) -> str:
        return self.name.replace("-", "_")

    def selects(self, area: str, changes: str | None) -> bool:
        return area in self.areas and not (self.read_only and changes is not None)


SUITES: Mapping[str, SuiteProfile] = {
    p.name: p
    for p in (
        SuiteProfile(
            "quick",
            frozenset({"immutability", "api", "services", "kubernetes", "cluster", "certs"}),
            read_only=True,
            description="read-only checks of a running cluster (CI gate, a few seconds per node)",
        ),
        SuiteProfile(
            "full",
            frozenset(AREAS),
            read_only=False,
            description="every check; config checks run as far as --talos-allow permits",
        ),
        SuiteProfile(
            "post-upgrade",
            frozenset({"upgrade", "services", "kubernetes", "cluster"}),
            read_only=True,
            description="after an upgrade: versions, snapshot comparison, services, cluster",
        ),
        SuiteProfile(
            "vendor-image",
            frozenset({"vendor", "immutability", "api"}),
            read_only=True,
            description="accepting a vendor image: the --talos-profile expectations, "
            "immutability and API security",
        ),
    )
}
PROFILE_MARKERS: Collection[str] = tuple(p.marker for p in SUITES.values() if p.name != "full")
