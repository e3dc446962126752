"""Each node against the desired state: its active config, and its persistent one.

Talos keeps two ``MachineConfigs`` resources (``pkg/machinery/resources/config/
machine_config.go``): ``v1alpha1``, the config the running OS applies, and ``persistent``,
the config saved for the next boot. ``persistent`` runs ahead of the active config while a
change is staged for the next reboot and behind it while a try-mode change is active; it is
absent where the node loaded its config only from its STATE partition and nothing has been
applied since (``internal/app/machined/pkg/controllers/config/acquire.go``). Both are
sensitive resources: reading them needs ``os:admin``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_talos import models
from pytest_talos.drift.compare import ConfigComparison, compare_configs
from pytest_talos.drift.desired import DesiredPlan, DesiredState
from pytest_talos.errors import NotFound
from pytest_talos.node import TalosNode

__all__ = ["MACHINE_CONFIGS", "NodeDrift", "check_node", "check_nodes", "persistent_config"]

MACHINE_CONFIGS = ("MachineConfigs.config.talos.dev", "config")


@dataclass(frozen=True)
class NodeDrift:
    """One node: how its desired config is made, and how its configs compare."""

    node: str
    address: str
    plan: DesiredPlan
    active: ConfigComparison  # desired vs active
    active_version: int
    persisted: ConfigComparison | None  # persistent vs active; None: the node keeps none
    persistent_version: int | None

    @property
    def matches_desired(self) -> bool:
        return self.active.equal

    @property
    def staged(self) -> bool:
        """A persistent config that differs from the active one (the next boot changes it)."""
        return self.persisted is not None and not self.persisted.equal

    @property
    def in_sync(self) -> bool:
        return self.matches_desired and not self.staged

    def drift_lines(self) -> list[str]:
        if self.active.equal:
            return [
                f"{self.node}: the active config (version {self.active_version}) matches "
                f"the desired one ({self.plan.describe()})"
            ]
        head = (
            f"{self.node}: the active config (version {self.active_version}) differs from "
            f"the desired one ({self.plan.describe()}) in {len(self.active.differences)} "
            f"place(s), documents {', '.join(self.active.documents)}:"
        )
        if not self.plan.named:
            head += (
                " (the desired state does not name this node: no nodes: entry and no "
                "patch selects its hostname)"
            )
        return [head, *("  " + line for line in self.active.lines())]

    def staged_lines(self) -> list[str]:
        if self.persisted is None:
            return [
                f"{self.node}: no persistent config: the node booted from its STATE "
                "partition and nothing was applied since, so the next boot loads the same "
                "config"
            ]
        if self.persisted.equal:
            return [
                f"{self.node}: the persistent config (version {self.persistent_version}) "
                f"equals the active one (version {self.active_version})"
            ]
        head = (
            f"{self.node}: a change is waiting: the persistent config (version "
            f"{self.persistent_version}) differs from the active one (version "
            f"{self.active_version}) in {len(self.persisted.differences)} place(s) — "
            "staged for the next reboot, or a try-mode change that will be reverted:"
        )
        return [head, *("  " + line for line in self.persisted.lines())]

    def lines(self) -> list[str]:
        return [*self.drift_lines(), *self.staged_lines()]

    def to_json(self) -> dict[str, Any]:
        """Evidence for reports: plan, versions and masked differences (never a value)."""
        return {
            "node": self.node,
            "desired": self.plan.describe(),
            "active_version": self.active_version,
            "persistent_version": self.persistent_version,
            "matches_desired": self.matches_desired,
            "differences": self.active.to_json(),
            "staged_differences": self.persisted.to_json() if self.persisted else None,
        }


def persistent_config(node: TalosNode) -> models.Resource | None:
    """The node's ``persistent`` MachineConfig resource, or None where it keeps none."""
    kind, namespace = MACHINE_CONFIGS
    try:
        return node.client.get(kind, "persistent", namespace)
    except NotFound:
        return None


def _raw(resource: models.Resource) -> bytes:
    spec = resource.typed_spec
    if isinstance(spec, models.MachineConfigSpec):
        return spec.yaml
    return str(resource.spec or "").encode("utf-8")


def check_node(node: TalosNode, desired: DesiredState) -> NodeDrift:
    """Compare the node's active config with its desired one, and its persistent one with
    the active one. Raises TalosError if the node cannot be read (needs ``os:admin``)."""
    plan = desired.plan(node.hostname, node.role)
    active = node.client.machine_config()
    comparison = compare_configs(desired.render(plan), active.raw)
    found = persistent_config(node)
    persisted = None
    if found is not None:
        persisted = compare_configs(
            active.raw, _raw(found), left_name="active", right_name="persistent"
        )
    return NodeDrift(
        node.name,
        node.address,
        plan,
        comparison,
        active.version,
        persisted,
        found.version if found is not None else None,
    )


def check_nodes(nodes: Iterable[TalosNode], desired: DesiredState) -> list[NodeDrift]:
    return [check_node(node, desired) for node in nodes]
