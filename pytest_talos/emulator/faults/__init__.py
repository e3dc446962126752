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
from pytest_talos.emulator.faults.names import (
    QUIRK_KINDS,
    SEAM_WHERE,
    ApplyQuirk,
    AuthenticationQuirk,
    AuthorizationQuirk,
    CosiQuirk,
    DiscoveryQuirk,
    Fault,
    GeneratedConfigQuirk,
    KubeQuirk,
    MachineApiQuirk,
    Quirk,
    Scope,
    Seam,
    ServiceQuirk,
)
from pytest_talos.errors import ConfigError

__all__ = [
    "FAULTS",
    "PROFILES",
    "QUIRK_KINDS",
    "SEAM_WHERE",
    "AddedListener",
    "ApplyQuirk",
    "AuthenticationQuirk",
    "AuthorizationQuirk",
    "CosiQuirk",
    "DiscoveryQuirk",
    "Fault",
    "FaultProfile",
    "FaultSet",
    "GeneratedConfigQuirk",
    "HostProcess",
    "KubeQuirk",
    "MachineApiQuirk",
    "Quirk",
    "Scope",
    "Seam",
    "ServiceQuirk",
    "describe_faults",
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


_CATALOGUE_ORDER = {profile.fault: index for index, profile in enumerate(PROFILES)}


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
        profile = next((p for p in self.profiles if p.fault == fault), None)
        return profile is not None and self._affects(profile, hostname, controlplane)

    def _affects(self, profile: FaultProfile, hostname: str, controlplane: bool) -> bool:
        if profile.scope == "last-node":
            return hostname == self.last_node
        if profile.scope == "controlplanes":
            return controlplane
        return True

    def quirk(self, quirk: Quirk, hostname: str, *, controlplane: bool = False) -> bool:
        """Whether a profile that affects the node ``hostname`` turns ``quirk`` on."""
        profiles = self.profiles_on(hostname, controlplane=controlplane)
        return any(quirk in profile.quirks for profile in profiles)

    def profiles_on(self, hostname: str, *, controlplane: bool = False) -> tuple[FaultProfile, ...]:
        """This set's profiles that affect the node ``hostname``, in catalogue order: the
        profile objects themselves, so what a profile declares is what the node does."""
        return tuple(
            sorted(
                (p for p in self.profiles if self._affects(p, hostname, controlplane)),
                key=lambda profile: _CATALOGUE_ORDER[profile.fault],
            )
        )

    def on_node(self, hostname: str, *, controlplane: bool = False) -> frozenset[Fault]:
        """The faults that affect the node ``hostname``."""
        return frozenset(
            profile.fault
            for profile in self.profiles
            if self.on(profile.fault, hostname, controlplane=controlplane)
        )
