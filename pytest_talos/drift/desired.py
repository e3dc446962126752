"""The desired state as operators keep it in git: base configs, patches, and a mapping.

A desired-state directory holds what ``talosctl gen config`` wrote (``controlplane.yaml``,
``worker.yaml``), patch files, and ``talos-desired.yaml`` saying which patches make which
node's config, in order (as repeated ``talosctl --config-patch`` options)::

    base:                                  # optional; these are the defaults
      controlplane: controlplane.yaml
      worker: worker.yaml
    nodes:                                 # optional inventory: a role, labels to select by
      cp-1: {labels: {zone: a}}
      gpu-1: {role: worker, labels: {gpu: "true"}}
    patches:                               # applied in this order to every node they select
      - file: patches/cluster.yaml         # no selector: every node
      - file: patches/controlplane.yaml
        roles: [controlplane]
      - file: patches/gpu.yaml
        labels: {gpu: "true"}              # every label must match (from `nodes:` above)
      - file: nodes/cp-1.yaml
        hostnames: [cp-1]

A node's desired config is its role's base with every selecting patch applied in order;
patches are strategic merge (with ``$patch: delete``) or JSON6902, exactly as Talos applies
them (:mod:`pytest_talos.patches`). Labels come from the inventory, never from the cluster,
so a node that drifted cannot change which patches apply to it. A node's role is the
inventory's, else the role the node reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_talos.errors import ConfigError
from pytest_talos.patches import PatchError, apply_patches, detect_patch_kind, load_documents

__all__ = [
    "MAPPING_FILE",
    "ROLES",
    "DesiredPlan",
    "DesiredState",
    "PatchRule",
    "load_desired",
    "plan_summary",
]

MAPPING_FILE = "talos-desired.yaml"
ROLES = ("controlplane", "worker")
_DEFAULT_BASES = {"controlplane": "controlplane.yaml", "worker": "worker.yaml"}
_TOP_KEYS = frozenset({"base", "nodes", "patches"})
_NODE_KEYS = frozenset({"role", "labels"})
_RULE_KEYS = frozenset({"file", "hostnames", "roles", "labels"})


@dataclass(frozen=True)
class PatchRule:
    """One patch file and the nodes it selects (no selector: every node)."""

    file: str
    hostnames: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def selects(self, hostname: str, role: str, labels: Mapping[str, str]) -> bool:
        if self.hostnames and hostname not in self.hostnames:
            return False
        if self.roles and role not in self.roles:
            return False
        return all(labels.get(key) == value for key, value in self.labels.items())


@dataclass(frozen=True)
class DesiredPlan:
    """How one node's desired config is made: a base and the patches, in order."""

    hostname: str
    role: str
    base: str
    patches: tuple[str, ...]
    named: bool  # the mapping names this node (inventory entry or a hostname selector)

    def describe(self) -> str:
        patches = ", ".join(self.patches) or "no patches"
        return f"{self.base} + {patches}"


@dataclass(frozen=True)
class DesiredState:
    """A loaded desired-state directory; :meth:`config_for` renders one node's config."""

    directory: Path
    bases: Mapping[str, str]
    rules: tuple[PatchRule, ...]
    inventory: Mapping[str, Mapping[str, Any]]
    files: Mapping[str, str] = field(repr=False)  # relative path -> text (holds secrets)

    def plan(self, hostname: str, role: str) -> DesiredPlan:
        entry = self.inventory.get(hostname, {})
        role = str(entry.get("role") or role)
        if role not in self.bases:
            raise ConfigError(
                f"{self._mapping}: node {hostname} has role {role!r}, but there is no base "
                f"config for it; give base.{role} (roles: {', '.join(ROLES)})"
            )
        labels: Mapping[str, str] = entry.get("labels") or {}
        chosen = tuple(rule.file for rule in self.rules if rule.selects(hostname, role, labels))
        named = hostname in self.inventory or any(hostname in r.hostnames for r in self.rules)
        return DesiredPlan(hostname, role, self.bases[role], chosen, named)

    def config_for(self, hostname: str, role: str) -> bytes:
        """The node's desired machine config (the base with its patches applied)."""
        return self.render(self.plan(hostname, role))

    def render(self, plan: DesiredPlan) -> bytes:
        config: bytes = self.files[plan.base].encode("utf-8")
        for name in plan.patches:
            try:
                config = apply_patches(config, [self.files[name]])
            except PatchError as exc:
                raise ConfigError(
                    f"cannot apply {name} for node {plan.hostname} (after {plan.base}): {exc}",
                    path=str(self.directory / name),
                ) from None
        return config

    @property
    def _mapping(self) -> Path:
        return self.directory / MAPPING_FILE


def load_desired(directory: str | Path) -> DesiredState:
    """Read and check a desired-state directory; ConfigError names the file and key to fix."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(
            f"the desired-state directory {root} does not exist; give the "
            f"directory holding {MAPPING_FILE} and the base configs"
        )
    mapping = _read_mapping(root)
    bases = _bases(root, mapping.get("base"))
    inventory = _inventory(root, mapping.get("nodes"))
    rules = _rules(root, mapping.get("patches"))
    files = {
        name: _read_file(root, name, what)
        for name, what in [
            *((b, "base config") for b in bases.values()),
            *((r.file, "patch") for r in rules),
        ]
    }
    for name in bases.values():
        _check_config(root, name, files[name])
    for rule in rules:
        _check_patch(root, rule.file, files[rule.file])
    return DesiredState(root, bases, rules, inventory, files)


# --------------------------------------------------------------------------- reading


def _fail(root: Path, message: str, key: str | None = None) -> ConfigError:
    error = ConfigError(message, path=str(root / MAPPING_FILE))
    error.key = key
    return error


def _read_mapping(root: Path) -> Mapping[str, Any]:
    path = root / MAPPING_FILE
    if not path.is_file():
        return {}  # bases only, no patches: a directory of gen config output
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(root, f"cannot read the mapping file: {exc}") from None
    except yaml.YAMLError as exc:
        raise _fail(root, f"not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _fail(root, "must be a mapping with base, nodes and patches")
    _known(root, data, _TOP_KEYS, "")
    return data


def _known(root: Path, data: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(str(key) for key in data if key not in allowed)
    if unknown:
        raise _fail(
            root,
            f"{where or 'the top level'} has unknown keys {unknown}; allowed: "
            f"{', '.join(sorted(allowed))}",
            key=where or None,
        )


def _strings(root: Path, value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        raise _fail(root, f"{where} must be a name or a list of names", key=where)
    return tuple(items)


def _labels(root: Path, value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(root, f"{where} must be a mapping of label names to values", key=where)
    return {str(key): str(item) for key, item in value.items()}


def _bases(root: Path, value: Any) -> dict[str, str]:
    if value is None:
        return {role: name for role, name in _DEFAULT_BASES.items() if (root / name).is_file()}
    if not isinstance(value, dict):
        raise _fail(root, "base must map roles (controlplane, worker) to files", key="base")
    bad = sorted(str(role) for role in value if role not in ROLES)
    if bad:
        raise _fail(root, f"base has unknown roles {bad}; use {', '.join(ROLES)}", key="base")
    return {str(role): _strings(root, name, f"base.{role}")[0] for role, name in value.items()}


def _inventory(root: Path, value: Any) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(root, "nodes must map hostnames to {role, labels}", key="nodes")
    inventory: dict[str, dict[str, Any]] = {}
    for hostname, entry in value.items():
        where = f"nodes.{hostname}"
        entry = entry or {}
        if not isinstance(entry, dict):
            raise _fail(root, f"{where} must be a mapping with role and labels", key=where)
        _known(root, entry, _NODE_KEYS, where)
        role = entry.get("role")
        if role is not None and role not in ROLES:
            raise _fail(root, f"{where}.role is {role!r}; use {', '.join(ROLES)}", key=where)
        inventory[str(hostname)] = {
            "role": role,
            "labels": _labels(root, entry.get("labels"), where),
        }
    return inventory


def _rules(root: Path, value: Any) -> tuple[PatchRule, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(
            root, "patches must be a list of {file, hostnames, roles, labels}", key="patches"
        )
    rules = []
    for index, entry in enumerate(value):
        where = f"patches[{index}]"
        if isinstance(entry, str):
            entry = {"file": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise _fail(root, f"{where} needs file: <path of the patch>", key=where)
        _known(root, entry, _RULE_KEYS, where)
        roles = _strings(root, entry["roles"], f"{where}.roles") if "roles" in entry else ()
        bad = [role for role in roles if role not in ROLES]
        if bad:
            raise _fail(root, f"{where}.roles has {bad}; use {', '.join(ROLES)}", key=where)
        hostnames = (
            _strings(root, entry["hostnames"], f"{where}.hostnames") if "hostnames" in entry else ()
        )
        rules.append(
            PatchRule(
                entry["file"],
                hostnames,
                roles,
                _labels(root, entry.get("labels"), f"{where}.labels"),
            )
        )
    return tuple(rules)


def _read_file(root: Path, name: str, what: str) -> str:
    path = root / name
    if not path.resolve().is_relative_to(root.resolve()):
        raise _fail(root, f"the {what} {name!r} lies outside the desired-state directory")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(root, f"the {what} {name} does not exist in {root}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the {what}: {exc}", path=str(path)) from None


def _check_config(root: Path, name: str, text: str) -> None:
    try:
        load_documents(text, what=name)
    except PatchError as exc:
        raise ConfigError(f"not a machine config: {exc}", path=str(root / name)) from None


def _check_patch(root: Path, name: str, text: str) -> None:
    try:
        detect_patch_kind(text)
    except PatchError as exc:
        raise ConfigError(f"not a patch: {exc}", path=str(root / name)) from None


def plan_summary(plans: Sequence[DesiredPlan]) -> list[str]:
    """One line per node: ``hostname (role): base + patches``."""
    return [f"{p.hostname} ({p.role}): {p.describe()}" for p in plans]
