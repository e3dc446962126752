#!/usr/bin/env python3
"""Regenerate the generated blocks of docs/emulator.md from the emulator's code.

Usage:
    python scripts/gen_emulator_docs.py           # rewrite the blocks in docs/emulator.md
    python scripts/gen_emulator_docs.py --check   # exit 1 if docs/emulator.md is stale

Blocks sit between ``<!-- BEGIN <NAME> -->`` and ``<!-- END <NAME> -->`` markers:
``RPCS`` (every served RPC with its stream kind, roles, control-plane-only flag and whether
it mutates, from the servicers and their rule tables), ``FAULTS`` (the fault profiles),
``VARIANTS`` (the healthy variants), ``RESOURCES`` (the COSI resource types) and ``INFERRED``
(every guess, from the emulator, machineconfig and the Kubernetes API module).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "emulator.md"
sys.path.insert(0, str(ROOT))

from pytest_talos.emulator import kubeapi, machineconfig  # noqa: E402
from pytest_talos.emulator.apid.server import method_table  # noqa: E402
from pytest_talos.emulator.apid.servicers import (  # noqa: E402
    CONTROL_PLANE_ONLY,
    MUTATING_METHODS,
    allowed_roles,
)
from pytest_talos.emulator.cosi.registry import DEFINITIONS  # noqa: E402
from pytest_talos.emulator.faults import FAULTS, fault_names, inferred  # noqa: E402
from pytest_talos.emulator.faults.variants import VARIANTS, Variant, variant_names  # noqa: E402

_ROLE_ABBREVIATIONS = {
    "os:admin": "A",
    "os:operator": "O",
    "os:reader": "R",
    "os:etcd:backup": "EB",
    "os:meta:writer": "MW",
}


def _roles(path: str) -> str:
    roles = allowed_roles(path)
    return " ".join(abbr for role, abbr in _ROLE_ABBREVIATIONS.items() if role in roles)


def render_rpcs() -> str:
    lines = [
        "| RPC | Kind | Roles | Control plane only | Mutating |",
        "| --- | --- | --- | --- | --- |",
    ]
    for path, (spec, _) in sorted(method_table().items()):
        kind = "server stream" if spec.cardinality.server_streaming else "unary"
        cp_only = "yes" if path in CONTROL_PLANE_ONLY else ""
        mutating = "yes" if path in MUTATING_METHODS else ""
        lines.append(f"| `{path}` | {kind} | {_roles(path)} | {cp_only} | {mutating} |")
    return "\n".join(lines)


def render_faults() -> str:
    lines = ["| Fault | Nodes | What it breaks |", "| --- | --- | --- |"]
    for name in fault_names():
        profile = FAULTS[name]
        lines.append(f"| `{name}` | {profile.scope} | {profile.description} |")
    return "\n".join(lines)


def render_variants() -> str:
    lines = ["| Variant | What a healthy real cluster of this shape does |", "| --- | --- |"]
    for name in variant_names():
        lines.append(f"| `{name}` | {VARIANTS[Variant(name)]} |")
    return "\n".join(lines)


def render_resources() -> str:
    lines = [
        "| Type | Namespace | Aliases (all) | Sensitive |",
        "| --- | --- | --- | --- |",
    ]
    for definition in DEFINITIONS.values():
        aliases = ", ".join(f"`{alias}`" for alias in definition.all_aliases)
        sensitive = "yes" if definition.sensitive else ""
        lines.append(
            f"| `{definition.type}` | {definition.default_namespace} | {aliases} | {sensitive} |"
        )
    return "\n".join(lines)


def render_inferred() -> str:
    sections = [
        ("Emulator (`pytest_talos/emulator/faults/inferred.py`)", list(inferred.INFERRED)),
        ("Machine config (`machineconfig.INFERRED`)", list(machineconfig.INFERRED)),
        ("Kubernetes API (`kubeapi.LIMITS`)", list(kubeapi.LIMITS)),
    ]
    parts = []
    for title, items in sections:
        parts.append(f"**{title}**\n")
        parts.extend(f"- {item}" for item in items if item)
        parts.append("")
    return "\n".join(parts).rstrip()


BLOCKS = {
    "RPCS": render_rpcs,
    "FAULTS": render_faults,
    "VARIANTS": render_variants,
    "RESOURCES": render_resources,
    "INFERRED": render_inferred,
}


def _replacement(body: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        return match.group(1) + body + match.group(2)

    return replace


def regenerate(text: str) -> str:
    for name, render in BLOCKS.items():
        pattern = re.compile(rf"(<!-- BEGIN {name} -->\n).*?(<!-- END {name} -->)", flags=re.DOTALL)
        if not pattern.search(text):
            raise SystemExit(f"{DOC}: the {name} block markers are missing")
        body = render() + "\n"
        text = pattern.sub(_replacement(body), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the doc is stale")
    args = parser.parse_args(argv)
    current = DOC.read_text(encoding="utf-8")
    fresh = regenerate(current)
    if args.check:
        if fresh != current:
            print(f"{DOC} is stale: run python scripts/gen_emulator_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
