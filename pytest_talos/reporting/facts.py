"""What every report prints first: what was tested (:func:`tested_facts`), and small
formatting helpers the Markdown and HTML reports share."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

__all__ = [
    "OUTCOME_LABEL",
    "build_facts",
    "human_duration",
    "human_time",
    "outcome_label",
    "run_by_facts",
    "tested_facts",
    "verdict_of",
]

OUTCOME_LABEL = {
    "passed": "PASS",
    "failed": "FAIL",
    "error": "ERROR",
    "skipped": "SKIP",
    "waived": "WAIVED",
}


def outcome_label(check: Mapping[str, Any]) -> str:
    """PASS, FAIL, ...; a skip the platform forces is N/A, one the identity could not run
    NOT RUN (needs os:admin)."""
    kind = check.get("skip_kind")
    if check["outcome"] == "skipped" and kind == "not-applicable":
        return "N/A"
    if check["outcome"] == "skipped" and kind == "needs-admin":
        return "NOT RUN (needs os:admin)"
    return OUTCOME_LABEL[check["outcome"]]


def run_by_facts(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Who ran the run: operator or CI job, host, the client certificate (never its key)."""
    who: Mapping[str, Any] = run.get("operator") or {}
    facts: list[tuple[str, str]] = []
    if who.get("ci"):
        job = " ".join(str(who[k]) for k in ("project", "job") if who.get(k))
        facts.append(("CI job", f"{who['ci']} {job}".strip()))
        if who.get("actor"):
            facts.append(("Started by", str(who["actor"])))
        if who.get("url"):
            facts.append(("Job URL", str(who["url"])))
    if who.get("user"):
        facts.append(("Operator", f"{who['user']} on {who.get('host', '?')}"))
    cert: Mapping[str, Any] = who.get("certificate") or {}
    if cert:
        facts.append(("Client certificate", str(cert.get("subject", ""))))
        facts.append(("Its roles", ", ".join(cert.get("roles") or ()) or "none"))
        facts.append(
            (
                "Issued by",
                f"{cert.get('issuer', '')} (serial {cert.get('serial', '')}, "
                f"valid until {cert.get('not_after', '')})",
            )
        )
    return facts


def build_facts(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Which build was tested: the Version reply's tag and sha per group of nodes, and the
    installer image (with its Image Factory schematic) where the node's config names it."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for t in run.get("targets") or ():
        key = (
            str(t.get("talos_version") or "unknown"),
            str(t.get("sha") or ""),
            str(t.get("install_image") or ""),
        )
        groups.setdefault(key, []).append(str(t.get("name")))
    facts = []
    for (tag, sha, image), nodes in groups.items():
        where = f" ({len(nodes)} node(s))" if len(groups) > 1 else ""
        facts.append(("Talos build", f"{tag}" + (f" sha {sha}" if sha else "") + where))
        if image:
            facts.append(("Installer image", image + where))
    return facts


def verdict_of(results: Mapping[str, Any]) -> str:
    verdict = results.get("verdict")
    if isinstance(verdict, str) and verdict:
        return verdict
    return "PASSED" if results["gate"]["passed"] else "FAILED"


def tested_facts(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What was tested, as (label, value) lines every report prints (``run`` is the JSON run).

    An emulated target says so first, with its faults, variants and clock rate: a report of
    an emulator must never pass for one of real nodes.
    """
    tested: Mapping[str, Any] = run.get("tested") or {}
    kind = str(tested.get("kind") or "unknown")
    facts: list[tuple[str, str]] = []
    if kind == "emulated":
        faults = ", ".join(tested.get("faults") or ()) or "none (a healthy emulated cluster)"
        variants = ", ".join(tested.get("variants") or ()) or "none"
        facts += [
            ("Target", "EMULATED cluster (pytest-talos emulator), not real nodes"),
            ("Emulated faults", faults),
            ("Emulated variants", variants),
            ("Emulated clock", f"{tested.get('time_scale', 1)}x real time"),
        ]
    else:
        facts.append(("Target", "real nodes" if kind == "real" else kind))
    for key, label in (
        ("endpoints", "Endpoints"),
        ("context", "Context"),
        ("talosconfig", "Talosconfig"),
    ):
        value = tested.get(key)
        if value:
            facts.append((label, ", ".join(value) if isinstance(value, list) else str(value)))
    versions = sorted({str(t.get("talos_version") or "unknown") for t in run.get("targets", [])})
    if versions:
        facts.append(("Talos versions", ", ".join(versions)))
    kit = run.get("kit") or {}
    facts.append(("Kit", f"{kit.get('name', 'pytest-talos')} {kit.get('version', '')}".strip()))
    settings: Mapping[str, Any] = run.get("settings") or {}
    facts += [
        ("Suite profile", str(run.get("suite") or "all checks")),
        ("Allowed changes", f"--talos-allow {settings.get('talos_allow') or 'none'}"),
        ("Severity gate", f"fail on {run.get('fail_under', 'low')} or worse"),
        ("Waivers", str(settings.get("waivers") or "none")),
        ("Date", f"{human_time(run['started'])} to {human_time(run['finished'])}"),
        ("Duration", human_duration(float(run.get("duration") or 0))),
    ]
    return facts


def human_time(iso: str) -> str:
    """``2026-12-01T11:38:47.123+00:00`` -> ``2026-12-01 11:38:47 UTC``."""
    try:
        when = dt.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if when.tzinfo is not None else "")


def human_duration(seconds: float) -> str:
    """``75.3`` -> ``1 min 15 s``; under a minute, tenths of a second."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return (f"{hours} h " if hours else "") + f"{minutes} min {rest} s"
