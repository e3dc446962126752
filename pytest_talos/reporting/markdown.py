"""``report.md``: a report a person can hand to a vendor."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pytest_talos.reporting.facts import (
    build_facts,
    outcome_label,
    run_by_facts,
    tested_facts,
    verdict_of,
)
from pytest_talos.reporting.severity import OUTCOMES

__all__ = ["render_markdown"]


def _md_cell(text: Any) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def _md_evidence(evidence: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for key, value in evidence.items():
        if isinstance(value, str) and "\n" in value:
            lines += [f"- **{key}**:", "", "  ```", *("  " + ln for ln in value.splitlines())]
            lines += ["  ```", ""]
        else:
            shown = json.dumps(value) if not isinstance(value, str) else value
            lines.append(f"- **{key}**: {shown}")
    return lines


def _md_header(results: Mapping[str, Any]) -> list[str]:
    run, summary, gate = results["run"], results["summary"], results["gate"]
    verdict = verdict_of(results)
    lines = ["# Talos conformance report", ""]
    tested = run.get("tested") or {}
    if tested.get("kind") == "emulated":
        lines += [
            "> **EMULATED TARGET** — these results are of the pytest-talos emulator, not of "
            f"real Talos nodes (faults: {', '.join(tested.get('faults') or ()) or 'none'}; "
            f"variants: {', '.join(tested.get('variants') or ()) or 'none'}; "
            f"clock {tested.get('time_scale', 1)}x).",
            "",
        ]
    lines += [
        f"**Verdict: {verdict}** (severity gate: fail on `{gate['fail_under']}` or worse; "
        f"{gate['blocking']} blocking, {gate['below']} below the gate)",
        "",
        *(f"- **Why:** {_md_cell(reason)}" for reason in results.get("verdict_reasons") or ()),
        f"- Exit code: {_exit(results)}",
        f"- Results: {summary['total']} — "
        + ", ".join(f"{summary[o]} {o}" for o in OUTCOMES if summary[o])
        + _kinds(summary),
        *(f"- {label}: {_md_cell(value)}" for label, value in tested_facts(run)),
        *(f"- {label}: {_md_cell(value)}" for label, value in build_facts(run)),
    ]
    lines += [f"- Note: {note}" for note in run["notes"]]
    who = run_by_facts(run)
    if who:
        lines += ["", "## Run by", "", *(f"- {k}: {_md_cell(v)}" for k, v in who)]
    return lines


def _exit(results: Mapping[str, Any]) -> str:
    code = results.get("exit_code")
    return "unknown (the run did not finish)" if code is None else str(code)


def _kinds(summary: Mapping[str, Any]) -> str:
    """Of the skips: not applicable on this platform, not run for lack of os:admin."""
    parts = []
    if summary.get("not_applicable"):
        parts.append(f"{summary['not_applicable']} not applicable")
    if summary.get("needs_admin"):
        parts.append(f"{summary['needs_admin']} not run (needs os:admin)")
    return f" (of the skips: {', '.join(parts)})" if parts else ""


SIGN_OFF = ("Reviewed by", "Role", "Date", "Signature", "Decision (accept / reject)")


def _md_sign_off() -> list[str]:
    lines = ["", "## Sign-off", "", "| | |", "| --- | --- |"]
    return lines + [f"| {label} | |" for label in SIGN_OFF]


def _md_targets(results: Mapping[str, Any]) -> list[str]:
    targets = results["run"]["targets"]
    if not targets:
        return []
    lines = ["", "## Nodes", "", "| Node | Role | Talos | Platform |", "| --- | --- | --- | --- |"]
    for t in targets:
        lines.append(
            f"| {_md_cell(t['name'])} | {_md_cell(t['role'])} | "
            f"{_md_cell(t['talos_version'])} | {_md_cell(t['platform'])} |"
        )
    return lines


def _md_table(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "",
        "## All checks",
        "",
        "| Outcome | Severity | Check | Node | Claim |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in checks:
        lines.append(
            f"| {outcome_label(c)} | {c['severity']} | `{c['id']}` | "
            f"{_md_cell(c['node'] or 'cluster')} | {_md_cell(c['claim'])} |"
        )
    return lines


def _md_details(
    checks: Sequence[Mapping[str, Any]], outcomes: Collection[str], title: str
) -> list[str]:
    chosen = [c for c in checks if c["outcome"] in outcomes]
    if not chosen:
        return []
    lines = ["", f"## {title}"]
    for c in chosen:
        lines += ["", f"### `{c['id']}` on {c['node'] or 'the cluster'} ({c['severity']})", ""]
        lines.append(f"Claim: {c['claim']}")
        if c["waiver"]:
            w = c["waiver"]
            lines += ["", f"Waived until {w['expires']}: {w['reason']}"]
        if c["message"]:
            lines += ["", "```", *c["message"].rstrip().splitlines(), "```"]
        lines += [f"> Note: {note}" for note in c.get("notes") or ()]
        if c["evidence"]:
            lines += ["", "Evidence:", "", *_md_evidence(c["evidence"])]
    return lines


def _md_skips(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per check and reason, naming every node it was skipped on."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for c in checks:
        if c["outcome"] == "skipped":
            grouped.setdefault((c["id"], c["message"]), []).append(c["node"] or "cluster")
    if not grouped:
        return []
    kinds = {(c["id"], c["message"]): outcome_label(c) for c in checks}
    lines = [
        "",
        "## Skipped",
        "",
        "| Check | Nodes | As | Reason |",
        "| --- | --- | --- | --- |",
    ]
    for (check_id, reason), nodes in grouped.items():
        lines.append(
            f"| `{check_id}` | {_md_cell(', '.join(nodes))} | {kinds[(check_id, reason)]} | "
            f"{_md_cell(reason)} |"
        )
    return lines


def render_markdown(results: Mapping[str, Any]) -> str:
    """A report a person can hand to a vendor: verdict, nodes, failures with evidence."""
    checks: Sequence[Mapping[str, Any]] = results["checks"]
    lines = _md_header(results) + _md_targets(results)
    lines += _md_details(checks, ("failed", "error"), "Failures")
    lines += _md_details(checks, ("waived",), "Waived failures")
    lines += _md_skips(checks)
    lines += _md_table(checks)
    lines += _md_sign_off()
    return "\n".join(lines) + "\n"
