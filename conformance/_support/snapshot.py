"""Pre-upgrade snapshots (``--talos-snapshot save|compare PATH``).

A snapshot records, per node, what an upgrade must not change: the SHA-256 of the machine
config bytes (never the bytes: they hold the cluster's secrets), the installed system
extensions and the Kubernetes node labels. ``save`` writes it before the upgrade; ``compare``
checks the upgraded nodes against it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pytest_talos.errors import ConfigError

__all__ = [
    "EXTENSION_LABEL_PREFIX",
    "FORMAT",
    "NodeSnapshot",
    "Snapshot",
    "SnapshotMode",
    "config_digest",
    "diff_labels",
    "diff_sections",
    "load_snapshot",
    "lost_extension_labels",
    "save_snapshot",
    "section_digests",
    "without_extension_labels",
]

FORMAT = "pytest-talos-snapshot/1"
SnapshotMode = Literal["save", "compare"]
# pkg/machinery/constants/constants.go K8sExtensionPrefix: Talos labels the Node with each
# installed extension's version (internal/app/machined/pkg/controllers/k8s/
# node_label_spec.go extensionsToNodeKV).
EXTENSION_LABEL_PREFIX = "extensions.talos.dev/"
# k8s.io/apimachinery validation.IsValidLabelValue: at most 63 characters of this form.
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def config_digest(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def section_digests(raw: bytes) -> dict[str, str]:
    """A digest per section of a machine config, so a change can be told by where it is
    without ever storing its content: ``machine.<key>`` and ``cluster.<key>`` of the
    v1alpha1 document (and its other top-level keys), ``<kind>/<name>`` of every other
    document. Undecodable YAML gives ``{}`` (the whole-file digest still compares)."""
    try:
        documents = list(yaml.safe_load_all(raw))
    except yaml.YAMLError:
        return {}
    sections: dict[str, str] = {}
    for index, doc in enumerate(documents):
        if not isinstance(doc, Mapping):
            continue
        if "kind" not in doc:  # the v1alpha1 document: version, machine, cluster, ...
            for top, value in doc.items():
                if top in ("machine", "cluster") and isinstance(value, Mapping):
                    for key, part in value.items():
                        sections[f"{top}.{key}"] = _digest(part)
                else:
                    sections[str(top)] = _digest(value)
            continue
        name = doc.get("name")
        label = f"{doc['kind']}/{name}" if name else f"{doc['kind']}[{index}]"
        sections[label] = _digest(doc)
    return sections


def diff_sections(before: Mapping[str, str], now: Mapping[str, str]) -> dict[str, list[str]]:
    """Which sections changed, appeared or disappeared between two section-digest maps."""
    return {
        "changed": sorted(k for k in set(before) & set(now) if before[k] != now[k]),
        "added": sorted(set(now) - set(before)),
        "removed": sorted(set(before) - set(now)),
    }


@dataclass(frozen=True)
class NodeSnapshot:
    talos_version: str
    config_digest: str
    config_version: int
    extensions: Mapping[str, str] = field(default_factory=dict)  # name -> version
    node_labels: Mapping[str, str] | None = None  # None: Kubernetes was not reachable
    config_sections: Mapping[str, str] = field(default_factory=dict)  # section -> digest

    def to_json(self) -> dict[str, Any]:
        return {
            "talos_version": self.talos_version,
            "config_digest": self.config_digest,
            "config_version": self.config_version,
            "config_sections": dict(sorted(self.config_sections.items())),
            "extensions": dict(sorted(self.extensions.items())),
            "node_labels": None
            if self.node_labels is None
            else dict(sorted(self.node_labels.items())),
        }


@dataclass(frozen=True)
class Snapshot:
    taken: str
    nodes: Mapping[str, NodeSnapshot]
    source: str = ""

    def node(self, name: str) -> NodeSnapshot | None:
        return self.nodes.get(name)


def save_snapshot(path: str | Path, nodes: Mapping[str, NodeSnapshot]) -> Path:
    """Write the snapshot as JSON (no secrets: the config is only a digest)."""
    file = Path(path)
    document = {
        "format": FORMAT,
        "taken": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nodes": {name: snap.to_json() for name, snap in sorted(nodes.items())},
    }
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot write the snapshot ({exc.strerror}); choose a writable path for "
            "--talos-snapshot save",
            path=str(file),
        ) from None
    return file


def _node_from_json(name: str, data: Any, source: str) -> NodeSnapshot:
    if not isinstance(data, Mapping):
        raise ConfigError(f"nodes.{name} must be a mapping", path=source)
    try:
        labels = data.get("node_labels")
        return NodeSnapshot(
            talos_version=str(data["talos_version"]),
            config_digest=str(data["config_digest"]),
            config_version=int(data["config_version"]),
            extensions={str(k): str(v) for k, v in (data.get("extensions") or {}).items()},
            node_labels=None if labels is None else {str(k): str(v) for k, v in labels.items()},
            config_sections={
                str(k): str(v) for k, v in (data.get("config_sections") or {}).items()
            },
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"nodes.{name} is incomplete or malformed ({type(exc).__name__}: {exc}); "
            "take a new snapshot with --talos-snapshot save",
            path=source,
        ) from None


def load_snapshot(path: str | Path) -> Snapshot:
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(
            f"cannot read the snapshot ({exc.strerror}); take one before the upgrade with "
            "--talos-snapshot save PATH",
            path=str(file),
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not a snapshot file (invalid JSON: {exc})", path=str(file)) from None
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ConfigError(f"not a {FORMAT} snapshot", path=str(file))
    nodes = data.get("nodes")
    if not isinstance(nodes, Mapping):
        raise ConfigError("the snapshot has no nodes", path=str(file))
    return Snapshot(
        taken=str(data.get("taken", "")),
        nodes={str(n): _node_from_json(str(n), v, str(file)) for n, v in nodes.items()},
        source=str(file),
    )


def diff_labels(
    before: Mapping[str, str], after: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, tuple[str, str]], dict[str, str]]:
    """``(missing, changed, added)`` label differences between two label maps."""
    missing = {k: v for k, v in before.items() if k not in after}
    changed = {k: (v, after[k]) for k, v in before.items() if k in after and after[k] != v}
    added = {k: v for k, v in after.items() if k not in before}
    return missing, changed, added


def without_extension_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` without Talos's ``extensions.talos.dev/<name>`` ones, whose values are
    extension versions (an upgrade brings new ones; upgrade.extensions-unchanged judges
    them)."""
    return {k: v for k, v in labels.items() if not k.startswith(EXTENSION_LABEL_PREFIX)}


def _label_value(text: str) -> bool:
    return len(text) <= 63 and _LABEL_VALUE.fullmatch(text) is not None


def lost_extension_labels(
    before: Mapping[str, str], after: Mapping[str, str], installed: Mapping[str, str]
) -> dict[str, str]:
    """Extension labels of ``before`` missing from ``after`` although their extension is
    still ``installed`` (name -> version) with a version Talos puts on the Node (a valid
    label value, as node_label_spec.go requires): ``{label: current version}``."""
    lost = {}
    for key in before:
        name = key.removeprefix(EXTENSION_LABEL_PREFIX)
        if key == name or key in after or name not in installed:
            continue
        if _label_value(installed[name]):
            lost[key] = installed[name]
    return lost
