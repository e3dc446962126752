"""The desired state an emulated cluster was generated from, as an operator keeps it in git.

``EmulatedCluster.write_desired(DIR)`` (and ``python -m pytest_talos.emulator --write-desired
DIR``) writes what the nodes' configs are made of: one base config per role as the generator
wrote it (``controlplane.yaml``, ``worker.yaml``, comments and all), one patch file per
healthy variant that lives in the machine config (``patches/kube-proxy-disabled.yaml``...),
per-node patches where the generator wrote a node's own name, and ``talos-desired.yaml``
mapping them to the nodes — the layout ``pytest_talos.drift`` reads (documented in
docs/conformance.md). ``pytest conformance --talos-desired DIR`` then finds every healthy node
in sync; the faults ``config-drift`` and ``config-staged`` make one node differ.

This module does not import the client side: it writes the mapping file by its documented
keys (``base``, ``nodes``, ``patches``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pytest_talos.errors import ConfigError
from pytest_talos.patches import dump_documents, load_documents

__all__ = [
    "CONFIG_DRIFT_PATCH",
    "CONFIG_STAGED_PATCH",
    "MAPPING_FILE",
    "DesiredNode",
    "desired_files",
    "write_desired_files",
]

MAPPING_FILE = "talos-desired.yaml"
# fault config-drift: one path changed by hand on the node, outside the desired state.
CONFIG_DRIFT_PATCH = 'machine:\n  sysctls:\n    vm.max_map_count: "262144"\n'
# fault config-staged: a change applied with --mode staged, waiting for the next reboot.
CONFIG_STAGED_PATCH = 'machine:\n  sysctls:\n    net.core.somaxconn: "65535"\n'
_DOCUMENT_SPLIT = re.compile(r"(?m)^---[ \t]*\n")


@dataclass(frozen=True)
class DesiredNode:
    hostname: str
    role: str


def _split_placeholder(template: str, placeholder: str) -> tuple[str, list[dict[str, Any]]]:
    """The template without the documents naming a node, and those documents.

    Chunks are cut at ``---`` lines so the base keeps the generator's comments. A v1alpha1
    document that names the node (``machine.network.hostname``) keeps its place: only the
    key is taken out (into the node's patch).
    """
    kept, named = [], []
    for chunk in _DOCUMENT_SPLIT.split(template):
        if placeholder not in chunk:
            kept.append(chunk)
            continue
        documents = load_documents(chunk, what="the generated config")
        for document in documents:
            if document.get("kind") is None:  # v1alpha1: cut the key, keep the document
                patch: dict[str, Any] = {}
                _move_placeholder(document, patch, placeholder)
                kept.append(dump_documents([document]).decode("utf-8"))
                named.append(patch)
            else:
                named.append(document)
    return "---\n".join(chunk for chunk in kept if chunk.strip()), named


def _move_placeholder(source: dict[str, Any], patch: dict[str, Any], placeholder: str) -> None:
    for key, value in list(source.items()):
        if value == placeholder:
            patch[key] = value
            del source[key]
        elif isinstance(value, dict):
            inner: dict[str, Any] = {}
            _move_placeholder(value, inner, placeholder)
            if inner:
                patch[key] = inner


def desired_files(
    *,
    bases: Mapping[str, bytes],
    variant_patches: Sequence[tuple[str, str]],
    nodes: Sequence[DesiredNode],
    placeholder: str,
    patch_roles: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, bytes]:
    """``{relative path: content}`` of a desired-state directory for these nodes.

    ``bases`` maps each role to its generated template (naming no node, or naming it as
    ``placeholder``); ``variant_patches`` are ``(name, patch)`` applied to every node, or
    only to the roles ``patch_roles`` names for it.
    """
    files: dict[str, bytes] = {}
    node_docs: dict[str, list[dict[str, Any]]] = {}
    for role, template in bases.items():
        base, named = _split_placeholder(template.decode("utf-8"), placeholder)
        files[f"{role}.yaml"] = base.encode("utf-8")
        node_docs[role] = named
    rules: list[dict[str, Any]] = []
    for name, text in variant_patches:
        files[f"patches/{name}.yaml"] = text.encode("utf-8")
        rule: dict[str, Any] = {"file": f"patches/{name}.yaml"}
        if patch_roles and name in patch_roles:
            rule["roles"] = list(patch_roles[name])
        rules.append(rule)
    for node in nodes:
        documents = node_docs.get(node.role)
        if documents:
            text = dump_documents(documents).decode("utf-8").replace(placeholder, node.hostname)
            files[f"nodes/{node.hostname}.yaml"] = text.encode("utf-8")
            rules.append({"file": f"nodes/{node.hostname}.yaml", "hostnames": [node.hostname]})
    mapping = {
        "base": {role: f"{role}.yaml" for role in bases},
        "nodes": {node.hostname: {"role": node.role} for node in nodes},
        "patches": rules,
    }
    header = (
        "# The desired state of an emulated cluster (python -m pytest_talos.emulator "
        "--write-desired).\n# Check a cluster against it: pytest conformance "
        "--talos-desired DIR -k drift\n"
    )
    files[MAPPING_FILE] = (header + yaml.safe_dump(mapping, sort_keys=False)).encode("utf-8")
    return files


def write_desired_files(directory: Path, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` under ``directory`` (created if needed); the mapping file's path."""
    try:
        for name, content in files.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the desired state ({exc.strerror}); choose a writable directory",
            path=str(directory),
        ) from None
    return directory / MAPPING_FILE
