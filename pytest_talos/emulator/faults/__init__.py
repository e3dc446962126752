"""Named fault profiles (:mod:`.catalogue`) and the set of them a cluster runs with.

A typo in a fault name fails type checking (:class:`Fault` members) and, for plain strings
from the command line, raises one clear :class:`~pytest_talos.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_talos.emulator.faults.catalogue import (
    FAULTS,
    PROFILES,
    AddedListener,
    FaultProfile,
    HostProcess,
)
from pytest_talos.emulator.faults.names import SEAM_WHERE, Fault, Quirk, Scope, Seam
from pytest_talos.errors import ConfigError

__all__ = [
    "FAULTS",
    "PROFILES",
    "SEAM_WHERE",
    "AddedListener",
    "Fault",
    "FaultProfile",
    "FaultSet",
    "HostProcess",
    "Quirk",
    "Scope",
    "Seam",
    "describe_faults",
    "effects_of",
    "fault_names",
    "resolve_faults",
]


def fault_names() -> list[str]:
    return sorted(FAULTS)


def describe_faults() -> str:
    """One line per profile: ``name  [scope; seams]  description`` (``--list-faults``)."""
    width = max(len(name) for name in FAULTS)
    lines = []
    for name in fault_names():
        profile = FAULTS[name]
        where = ", ".join(profile.changes)
        scope = "" if profile.scope == "all" else f"{profile.scope}; "
        lines.append(f"{name:<{width}}  {profile.description} [{scope}{where}]")
    return "\n".join(lines)


def effects_of(faults: Iterable[Fault]) -> tuple[FaultProfile, ...]:
    """The profiles of ``faults`` in catalogue order: what a seam applies generically."""
    wanted = frozenset(faults)
    return tuple(profile for profile in PROFILES if profile.fault in wanted)


def resolve_faults(names: Iterable[str | FaultProfile]) -> tuple[FaultProfile, ...]:
    """Validate fault names; unknown names raise one clear :class:`ConfigError`."""
    resolved: dict[str, FaultProfile] = {}
    for item in names:
        name = item.name if isinstance(item, FaultProfile) else str(item)
        if name not in FAULTS:
            raise ConfigError(
                f"unknown fault profile {name!r}; choose from: {', '.join(fault_names())} "
                "(python -m pytest_talos.emulator --list-faults describes them)"
            )
        resolved[name] = FAULTS[name]
    return tuple(resolved.values())


@dataclass(frozen=True)
class FaultSet:
    """The active profiles of one cluster and the node layout they are scoped against."""

    profiles: tuple[FaultProfile, ...] = ()
    last_node: str = ""
    last_controlplane: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(profile.name for profile in self.profiles)

    def active(self, fault: Fault) -> bool:
        """Whether the profile is on anywhere in the cluster."""
        return fault in self.names

    def on(self, fault: Fault, hostname: str, *, controlplane: bool = False) -> bool:
        """Whether the profile affects the node ``hostname``."""
        profile = FAULTS[fault]
        if profile not in self.profiles:
            return False
        if profile.scope == "last-node":
            return hostname == self.last_node
        if profile.scope == "controlplanes":
            return controlplane
        return True

    def quirk(self, quirk: Quirk, hostname: str, *, controlplane: bool = False) -> bool:
        """Whether a profile that affects the node ``hostname`` turns ``quirk`` on."""
        on_node = self.on_node(hostname, controlplane=controlplane)
        return any(quirk in profile.quirks for profile in effects_of(on_node))

    def on_node(self, hostname: str, *, controlplane: bool = False) -> frozenset[Fault]:
        """The faults that affect the node ``hostname``."""
        return frozenset(
            profile.fault
            for profile in self.profiles
            if self.on(profile.fault, hostname, controlplane=controlplane)
        )
