"""``--talos-record-profile PATH``: a vendor profile recorded from nodes the user trusts.

What the target nodes run, in the format of ``--talos-profile``
(:mod:`.vendor_profile`), with a YAML comment per entry saying where it was read; accepting
a new image is then ``--talos-suite=vendor-image --talos-profile PATH``. Only facts a vendor
check judges are recorded (``talos.version``, ``kubernetes.version``, ``kernel.version``,
``kernel.args.present``, ``platform``, ``extensions.required`` and ``extensions.versions``
(an Image Factory image's schematic is its ``schematic`` extension's version),
``ports.expected``,
``image_verification.required`` and ``.rules``, and per role the ``security_settings`` of
its machine config, :mod:`.security_settings`); what a node does not show (the kernel of a container
platform, Kubernetes or the machine config's settings without os:admin) is left out with a
comment saying why and which identity would record it. What a node
cannot show (forbidden extensions, forbidden ports, forbidden kernel arguments) is the
profile writer's to add: the two forbidden lists are recorded empty (none forbidden, a met
expectation), so the recorded profile passes on the node it came from. Nodes that disagree
on a fact are refused (one paragraph): record from one golden node with ``--talos-nodes``.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pytest_talos.checks.kubernetes import read_kube_node
from pytest_talos.cluster import TalosCluster, kubernetes_client_errors
from pytest_talos.errors import ConformanceFailure, NotFound, PermissionDenied, TalosError
from pytest_talos.node import TalosNode, expected_ports_for
from pytest_talos.plugin.conformance.security_settings import (
    CONFIG_RESOURCE,
    SETTINGS,
    read_rules,
    read_settings,
    render_rule,
)

__all__ = ["RecordRefused", "record_profile", "write_profile"]

EXTENSIONS = ("ExtensionStatuses.runtime.talos.dev", "runtime")
ADMIN = "os:admin"
_CONFIG_AT = f"MachineConfig config/v1alpha1 ({ADMIN})"
_COMMENT_AT = 34  # the column the entries' comments start at


class RecordRefused(Exception):
    """The nodes cannot be recorded as one profile (one paragraph: why, what to do)."""


@dataclass
class _Profile:
    lines: list[str] = field(default_factory=list)

    def entry(self, indent: int, text: str, source: str) -> None:
        line = " " * indent + text
        self.lines.append(f"{line:<{_COMMENT_AT - 1}} # {source}")

    def note(self, indent: int, text: str) -> None:
        self.lines.append(" " * indent + f"# {text}")


def _scalar(value: object) -> str:
    return (
        str(yaml.safe_dump(value, default_flow_style=True, width=10_000))
        .strip()
        .removesuffix("\n...")
    )


def _one(fact: str, values: dict[str, str]) -> str:
    distinct = sorted(set(values.values()))
    if len(distinct) != 1:
        seen = "; ".join(f"{node}: {value}" for node, value in sorted(values.items()))
        raise RecordRefused(
            f"--talos-record-profile: the nodes differ in {fact} ({seen}), so no one profile "
            "describes them all; record from one golden node with --talos-nodes HOST"
        )
    return distinct[0]


def _common(sets: Iterable[Iterable[str]]) -> list[str]:
    groups = [set(group) for group in sets]
    return sorted(set.intersection(*groups)) if groups else []


def _extensions(node: TalosNode) -> dict[str, str]:
    """``{name: version}`` of the node's system extensions (talosctl get extensions)."""
    found = {}
    for item in node.resources(*EXTENSIONS):
        meta = (item.spec or {}).get("metadata") or {}
        name = str(meta.get("name") or (item.spec or {}).get("image") or item.id)
        found[name] = str(meta.get("version") or "")
    return found


def _kernel(node: TalosNode) -> tuple[str, list[str]] | None:
    """(release, arguments) where the node shows its own kernel, else None."""
    if node.version.in_container:
        return None
    try:
        version = node.files.read_text("/proc/version").split()
        cmdline = node.files.read_text("/proc/cmdline").split()
    except (NotFound, PermissionDenied):
        return None
    if version[:2] != ["Linux", "version"] or len(version) < 3:
        return None
    return version[2], cmdline


def _kubelet(cluster: TalosCluster, node: TalosNode) -> str | None:
    if not node.kubernetes_registration.registered:
        return None
    try:
        kube_node = read_kube_node(cluster.kubernetes, node, "vendor.kubernetes-version")
    except Exception as exc:
        # the client's own error is looked up now: the read may have loaded the client
        if isinstance(exc, (TalosError, ConformanceFailure, OSError, *kubernetes_client_errors())):
            return None  # no kubeconfig for this identity, no Node, no answer: not shown
        raise
    return str(kube_node.status.node_info.kubelet_version)


def record_profile(cluster: TalosCluster, nodes: Sequence[TalosNode], name: str) -> str:
    """The profile's text (see the module)."""
    if not nodes:
        raise RecordRefused("--talos-record-profile: no node to record (check --talos-nodes)")
    out = _Profile()
    hosts = ", ".join(node.name for node in nodes)
    out.note(0, f"Vendor image acceptance profile recorded from {hosts}")
    out.note(0, f"on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC by --talos-record-profile.")
    out.note(0, "Accept a new image with:")
    out.note(0, "  talos-conformance --talos-suite=vendor-image --talos-profile THIS_FILE ...")
    out.note(0, "A node shows what it runs, not what it must never run: the forbidden lists")
    out.note(0, "are recorded empty (none forbidden, a met expectation); fill them in, and")
    out.note(0, "kernel.args.absent (see the example profile in docs/conformance.md).")
    out.entry(0, "version: 1", "profile format version")
    out.entry(0, f"name: {_scalar(name)}", "shown in the report")
    tag = _one("Talos version", {n.name: n.version.tag for n in nodes})
    out.lines.append("talos:")
    out.entry(2, f"version: {_scalar(tag)}", "Version API (MachineService.Version): tag")
    _record_kubernetes(out, cluster, nodes)
    _record_kernel(out, nodes)
    platform = _one("platform", {n.name: n.version.platform for n in nodes})
    out.entry(0, f"platform: {_scalar(platform)}", "Version API: platform name")
    _record_extensions(out, {n.name: _extensions(n) for n in nodes})
    _record_ports(out, nodes)
    _record_image_verification(out, nodes)
    _record_settings(out, nodes)
    return "\n".join(out.lines) + "\n"


def _record_kubernetes(out: _Profile, cluster: TalosCluster, nodes: Sequence[TalosNode]) -> None:
    kubelets = {n.name: v for n in nodes if (v := _kubelet(cluster, n)) is not None}
    if not kubelets:
        out.note(0, "kubernetes.version not recorded: no node showed its Kubernetes Node")
        out.note(0, "(it needs an os:admin talosconfig for the kubeconfig, and a registered Node)")
        return
    version = _one("Kubernetes (kubelet) version", kubelets)
    out.lines.append("kubernetes:")
    out.entry(
        2,
        f"version: {_scalar(version)}",
        "Kubernetes API: Node status.nodeInfo.kubeletVersion",
    )


def _record_kernel(out: _Profile, nodes: Sequence[TalosNode]) -> None:
    kernels = {n.name: k for n in nodes if (k := _kernel(n)) is not None}
    if len(kernels) != len(nodes):
        out.note(0, "kernel not recorded: a node does not show its own kernel (a container")
        out.note(0, "platform runs the host's; or /proc/version, /proc/cmdline not served)")
        return
    release = _one("kernel release", {name: k[0] for name, k in kernels.items()})
    present = _common(k[1] for k in kernels.values())
    out.lines.append("kernel:")
    out.entry(2, f"version: {_scalar(release)}", "/proc/version (MachineService.Read): release")
    out.lines.append("  args:")
    out.entry(
        4,
        f"present: {_scalar(present)}",
        "/proc/cmdline (MachineService.Read): every argument",
    )


def _record_extensions(out: _Profile, by_node: dict[str, dict[str, str]]) -> None:
    names = _common(by_node.values())
    out.lines.append("extensions:")
    out.entry(
        2,
        f"required: {_scalar(names)}",
        "ExtensionStatuses.runtime.talos.dev (COSI): metadata.name",
    )
    out.entry(2, "forbidden: []", "none recorded: name the extensions that must never run")
    versions = {
        name: _one(f"the version of extension {name}", {n: e[name] for n, e in by_node.items()})
        for name in names
    }
    shown = {name: version for name, version in versions.items() if version}
    if not shown:
        return
    out.lines.append("  versions:")
    for name, version in sorted(shown.items()):
        out.entry(
            4,
            f"{_scalar(name)}: {_scalar(version)}",
            "ExtensionStatuses: metadata.version"
            + (" (Image Factory's schematic ID)" if name == "schematic" else ""),
        )


def _record_ports(out: _Profile, nodes: Sequence[TalosNode]) -> None:
    by_role: dict[str, list[set[int]]] = {}
    for node in nodes:
        wanted = sorted(expected_ports_for(node))
        scan = node.scan_ports(wanted)
        by_role.setdefault(node.role, []).append(set(scan.open_ports))
    out.lines.append("ports:")
    out.entry(
        2,
        "expected:",
        "TCP scan of the ports Talos opens for the role, open on every node of it",
    )
    for role in sorted(by_role):
        common = sorted(set.intersection(*by_role[role]))
        out.entry(4, f"{role}: {_scalar(common)}", f"{len(by_role[role])} {role} node(s)")
    out.entry(2, "forbidden: []", "none recorded: name the ports that must never be open")


def _roles_of(node: TalosNode) -> str:
    return ", ".join(node.client.roles) or "no role"


def _record_image_verification(out: _Profile, nodes: Sequence[TalosNode]) -> None:
    """``required`` (a rule verifies) and every rule, in order; one rule a line."""
    try:
        read = {n.name: read_rules(n) for n in nodes}
    except PermissionDenied as exc:
        out.note(0, "image_verification not recorded: this node keeps its rules only in the")
        out.note(0, f"machine config, which needs {ADMIN} ({exc.details}; this talosconfig has")
        out.note(0, f"{_roles_of(nodes[0])})")
        return
    text = {name: _scalar(rules) for name, (rules, _) in read.items()}
    _one("image-verification rules", text)
    rules, where = next(iter(read.values()))
    verifying = any("keyless" in rule or "publicKey" in rule for rule in rules)
    out.lines.append("image_verification:")
    out.entry(2, f"required: {_scalar(verifying)}", f"a rule verifies signatures: {where}")
    if not rules:
        out.entry(2, "rules: []", f"none, expected none: {where}")
        return
    out.entry(2, "rules:", f"{where}: in order, the first match decides")
    for index, rule in enumerate(rules):
        out.entry(4, f"- {_scalar(rule)}", f"{index:04d}: {render_rule(rule)}")


def _record_settings(out: _Profile, nodes: Sequence[TalosNode]) -> None:
    """Per role, each setting every node of the role agrees on (os:admin)."""
    by_role: dict[str, list[dict[str, tuple[object, str]]]] = {}
    try:
        for node in nodes:
            documents = node.machine_config.documents
            by_role.setdefault(node.role, []).append(read_settings(documents, node.role))
    except PermissionDenied as exc:
        out.note(0, "security_settings not recorded: they are read from the MachineConfig")
        out.note(0, f"resource, which is sensitive: it needs {ADMIN} ({exc.details}; this")
        out.note(0, f"talosconfig has {_roles_of(nodes[0])}); record with an {ADMIN} talosconfig")
        return
    out.lines.append("security_settings:")
    out.note(2, f"read from {CONFIG_RESOURCE} (sensitive: needs {ADMIN}); null: not set")
    out.note(2, "(Talos's default applies); []: expected none")
    for role in sorted(by_role):
        out.lines.append(f"  {role}:")
        for setting in SETTINGS:
            if setting.key not in by_role[role][0]:
                continue  # not a setting of this role
            seen = {_scalar(found[setting.key][0]) for found in by_role[role]}
            if len(seen) != 1:
                out.note(4, f"{setting.key} not recorded: the {role} nodes differ in it")
                continue
            value, where = by_role[role][0][setting.key]
            out.entry(4, f"{setting.key}: {_scalar(value)}", f"{_CONFIG_AT}: {where}")


def write_profile(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` (all or nothing); a bad path is a :class:`RecordRefused`."""
    target = Path(path)
    if not target.parent.is_dir():
        raise RecordRefused(
            f"--talos-record-profile {path}: the directory {target.parent} does not exist"
        )
    temporary = target.with_name(f".{target.name}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(target)
    except OSError as exc:
        raise RecordRefused(f"--talos-record-profile {path}: cannot write it ({exc})") from None
    return target
