"""Conformance results: check records, waivers, the severity gate and the reports.

Pure Python (no pytest): the conformance suite's ``conftest.py`` feeds it one
:class:`CheckRecord` per check and node; this module decides what a waiver covers, whether the
run passes the severity gate, and writes ``results.json``, ``report.md`` and ``report.html``.

Nothing here ever writes key material: every string and mapping that reaches a report goes
through :func:`redact`, which removes PEM private keys, base64-encoded PEM blocks and the values
of key-like fields (``key``, ``token``, ``secret``, ``password`` ...).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import html
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pytest_talos.errors import ConfigError

__all__ = [
    "CHECK_ID_PATTERN",
    "EXIT_CODES",
    "OUTCOMES",
    "SEVERITIES",
    "CheckRecord",
    "GateResult",
    "Outcome",
    "RunInfo",
    "Severity",
    "TargetInfo",
    "Verdict",
    "Waiver",
    "WaiverMatch",
    "apply_gate",
    "build_results",
    "check_waivers_known",
    "decide_verdict",
    "find_waiver",
    "load_waivers",
    "parse_severity",
    "parse_waivers",
    "redact",
    "render_html",
    "render_markdown",
    "severity_rank",
    "tested_facts",
    "validate_check_id",
    "write_reports",
]

Severity = Literal["critical", "high", "medium", "low"]
Outcome = Literal["passed", "failed", "error", "skipped", "waived"]

# Most severe first; the index is the rank (lower = more severe).
SEVERITIES: tuple[Severity, ...] = ("critical", "high", "medium", "low")
OUTCOMES: tuple[Outcome, ...] = ("failed", "error", "waived", "skipped", "passed")
CHECK_ID_PATTERN = re.compile(r"^[a-z][a-z0-9]*\.[a-z0-9]+(?:-[a-z0-9]+)*$")

_REDACTED = "<redacted>"
_SECRET_FIELD = re.compile(
    r"^(?:key|private[_-]?key|key[_-]?pem|token|secret|secrets|password|bootstraptoken|"
    r"aescbcencryptionsecret|secretboxencryptionsecret)$",
    re.IGNORECASE,
)
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)", re.DOTALL
)
# base64 of "-----BEGIN" starts with "LS0tLS1CRUdJTi"; talosconfigs carry keys that way.
_BASE64_PEM = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]*")
# "key: <value>" / "token: <value>" lines inside YAML or text evidence.
_SECRET_LINE = re.compile(
    r"^(?P<lead>\s*(?:-\s+)?(?:key|token|secret|password|bootstrapToken|"
    r"aescbcEncryptionSecret|secretboxEncryptionSecret)\s*:\s*)(?P<value>\S.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_EVIDENCE_TEXT_LIMIT = 4000
_MESSAGE_LIMIT = 8000


# --------------------------------------------------------------------------- severity


def parse_severity(text: str) -> Severity:
    """``"High"`` -> ``"high"``; anything else is a ConfigError naming the choices."""
    value = text.strip().lower()
    if value not in SEVERITIES:
        raise ConfigError(
            f"unknown severity {text!r}; use one of {', '.join(SEVERITIES)} "
            "(most to least severe)"
        )
    return value


def severity_rank(severity: Severity) -> int:
    """0 for critical up to 3 for low."""
    return SEVERITIES.index(severity)


def validate_check_id(check_id: str) -> str:
    """Check ids look like ``area.what-is-claimed`` (lower case, digits and dashes)."""
    if not CHECK_ID_PATTERN.match(check_id):
        raise ConfigError(
            f"invalid check id {check_id!r}; write it as <area>.<claim-in-kebab-case>, "
            "for example 'immutability.no-shell'"
        )
    return check_id


# --------------------------------------------------------------------------- redaction


def _decodes_to_private_key(blob: str) -> bool:
    padded = blob + "=" * (-len(blob) % 4)
    try:
        decoded = base64.b64decode(padded, validate=False)
    except (binascii.Error, ValueError):
        return True  # undecodable base64 that starts like PEM: redact rather than guess
    return b"PRIVATE KEY" in decoded


def _redact_base64_pem(match: re.Match[str]) -> str:
    return _REDACTED if _decodes_to_private_key(match.group(0)) else match.group(0)


def _redact_text(text: str) -> str:
    text = _PEM_PRIVATE_KEY.sub(_REDACTED, text)
    text = _BASE64_PEM.sub(_redact_base64_pem, text)
    return _SECRET_LINE.sub(lambda m: m.group("lead") + _REDACTED, text)


def redact(value: Any) -> Any:
    """A JSON-ready copy of ``value`` with every piece of key material removed.

    Mappings lose the values of key-like fields, strings lose PEM private keys (plain or
    base64) and ``key:``/``token:`` lines; bytes are decoded as UTF-8 (replacement characters
    for anything else); other objects become their ``str``.
    """
    if isinstance(value, Mapping):
        return {
            str(k): (_REDACTED if _SECRET_FIELD.match(str(k)) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [redact(item) for item in items]
    if isinstance(value, bytes):
        return _redact_text(value.decode("utf-8", errors="replace"))
    if isinstance(value, str):
        return _redact_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _redact_text(str(value))


# --------------------------------------------------------------------------- waivers


@dataclass(frozen=True)
class Waiver:
    """Turns a failing check into an expected failure until ``expires`` (inclusive)."""

    check: str
    reason: str
    expires: dt.date
    node: str | None = None  # None: every node
    source: str = ""  # "<file>: waivers[3]", for messages

    def covers(self, check_id: str, node: str | None) -> bool:
        return self.check == check_id and (self.node is None or self.node == node)

    def is_expired(self, today: dt.date) -> bool:
        return today > self.expires

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"waiver for {self.check}{where} until {self.expires.isoformat()}: {self.reason}"


@dataclass(frozen=True)
class WaiverMatch:
    """What the waivers say about one failing check: an active waiver, an expired one, both
    or neither. An expired waiver never waives anything: the check fails and says why."""

    active: Waiver | None = None
    expired: Waiver | None = None

    @property
    def waives(self) -> bool:
        return self.active is not None

    def expired_note(self) -> str:
        if self.expired is None:
            return ""
        return (
            f"waiver expired on {self.expired.expires.isoformat()} "
            f"({self.expired.reason}); renew it in the waivers file or fix the node"
        )


_WAIVER_KEYS = frozenset({"check", "reason", "expires", "node"})


def _waiver_date(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise ConfigError(
        f"{where}.expires is {value!r}; write the expiry date as YYYY-MM-DD", key="expires"
    )


def _required_text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}.{key} is missing or empty; every waiver needs a {key}")
    return value.strip()


def _parse_waiver(entry: Any, where: str) -> Waiver:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} must be a mapping with check, reason and expires")
    unknown = sorted(set(map(str, entry)) - _WAIVER_KEYS)
    if unknown:
        raise ConfigError(
            f"{where} has unknown keys {unknown}; allowed: {', '.join(sorted(_WAIVER_KEYS))}"
        )
    check = validate_check_id(_required_text(entry, "check", where))
    node = entry.get("node")
    if node is not None and (not isinstance(node, str) or not node.strip()):
        raise ConfigError(f"{where}.node must be a node name (or omitted for every node)")
    reason = _required_text(entry, "reason", where)
    if "expires" not in entry:
        raise ConfigError(f"{where}.expires is missing; waivers must expire (YYYY-MM-DD)")
    return Waiver(
        check=check,
        reason=reason,
        expires=_waiver_date(entry["expires"], where),
        node=node.strip() if isinstance(node, str) else None,
        source=where,
    )


def parse_waivers(
    data: Any, *, source: str = "waivers", known_checks: Collection[str] | None = None
) -> list[Waiver]:
    """Waivers from parsed YAML: ``{"waivers": [...]}`` or a bare list (empty file: none).

    With ``known_checks``, a waiver for a check id that does not exist is an error: a typo
    would otherwise silently waive nothing.
    """
    if data is None:
        return []
    entries = data.get("waivers") if isinstance(data, Mapping) else data
    if isinstance(data, Mapping) and set(map(str, data)) - {"waivers"}:
        raise ConfigError(f"{source}: the only top-level key allowed is 'waivers'")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: 'waivers' must be a list of waivers")
    waivers = [_parse_waiver(e, f"{source}: waivers[{i}]") for i, e in enumerate(entries)]
    if known_checks is not None:
        check_waivers_known(waivers, known_checks)
    return waivers


def check_waivers_known(waivers: Iterable[Waiver], known_checks: Collection[str]) -> None:
    """Raise ConfigError for the first waiver whose check id is not in ``known_checks``."""
    for waiver in waivers:
        if waiver.check not in known_checks:
            raise ConfigError(
                f"{waiver.source}: there is no check {waiver.check!r}; "
                "list the checks with `pytest conformance --collect-only -q` or see "
                "docs/conformance.md"
            )


def load_waivers(
    path: str | Path, *, known_checks: Collection[str] | None = None
) -> list[Waiver]:
    """Read and validate a waivers YAML file (see :func:`parse_waivers`)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the waivers file ({exc.strerror}); check --talos-waivers",
            path=str(file),
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", path=str(file)) from None
    return parse_waivers(data, source=str(file), known_checks=known_checks)


def find_waiver(
    waivers: Iterable[Waiver], check_id: str, node: str | None, today: dt.date
) -> WaiverMatch:
    """The first active and the first expired waiver that cover this check on this node."""
    active: Waiver | None = None
    expired: Waiver | None = None
    for waiver in waivers:
        if not waiver.covers(check_id, node):
            continue
        if waiver.is_expired(today):
            expired = expired or waiver
        else:
            active = active or waiver
    return WaiverMatch(active=active, expired=expired)


# --------------------------------------------------------------------------- records


@dataclass
class CheckRecord:
    """The outcome of one check on one node (``node`` is ``None`` for cluster-wide checks)."""

    check_id: str
    severity: Severity
    claim: str
    outcome: Outcome
    node: str | None = None
    area: str = ""
    duration: float = 0.0
    message: str = ""  # failure text or skip reason, redacted
    evidence: dict[str, Any] = field(default_factory=dict)
    waiver: Waiver | None = None
    test_id: str = ""  # the pytest node id
    notes: list[str] = field(default_factory=list)  # warnings the check raised, redacted

    @property
    def is_failure(self) -> bool:
        return self.outcome in ("failed", "error")

    def to_json(self) -> dict[str, Any]:
        waiver = None
        if self.waiver is not None:
            waiver = {
                "reason": redact(self.waiver.reason),
                "expires": self.waiver.expires.isoformat(),
                "node": self.waiver.node,
            }
        return {
            "id": self.check_id,
            "node": self.node,
            "area": self.area or self.check_id.split(".", 1)[0],
            "outcome": self.outcome,
            "severity": self.severity,
            "claim": self.claim,
            "duration": round(self.duration, 3),
            "message": _clip(redact(self.message), _MESSAGE_LIMIT),
            "evidence": _clip_evidence(redact(self.evidence)),
            "waiver": waiver,
            "test": self.test_id,
            "notes": [_clip(redact(note), _MESSAGE_LIMIT) for note in self.notes],
        }


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 40].rstrip() + f"\n... ({len(text) - limit + 40} more characters)"


def _clip_evidence(value: Any) -> Any:
    if isinstance(value, str):
        return _clip(value, _EVIDENCE_TEXT_LIMIT)
    if isinstance(value, dict):
        return {k: _clip_evidence(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_evidence(v) for v in value]
    return value


# --------------------------------------------------------------------------- severity gate


@dataclass(frozen=True)
class GateResult:
    """Failures at or above the threshold block the run; the ones below are only reported."""

    threshold: Severity
    blocking: tuple[CheckRecord, ...]
    below: tuple[CheckRecord, ...]

    @property
    def passed(self) -> bool:
        return not self.blocking

    def summary(self) -> str:
        if self.passed and not self.below:
            return f"severity gate '{self.threshold}': no failing checks"
        parts = [f"severity gate '{self.threshold}': {len(self.blocking)} blocking failure(s)"]
        if self.below:
            parts.append(f"{len(self.below)} failure(s) below the gate (reported, not blocking)")
        return ", ".join(parts)


# The conformance run's exit status for each verdict (0-5 are pytest's own: 2 interrupted,
# 3 internal error, 4 usage error, 5 no checks collected).
EXIT_CODES: Mapping[str, int] = {
    "PASSED": 0,
    "FAILED": 1,
    "USAGE": 4,
    "INCOMPLETE": 6,
    "UNREACHABLE": 7,
}


@dataclass(frozen=True)
class Verdict:
    """What a run may claim: PASSED, FAILED, INCOMPLETE or UNREACHABLE, and why."""

    name: str
    reasons: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.name]

    def summary(self) -> str:
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        return f"verdict {self.name} (exit {self.exit_code}){why}"


def decide_verdict(
    records: Sequence[CheckRecord],
    gate: GateResult,
    *,
    defining_areas: Collection[str] = (),
    optional_areas: Collection[str] = (),
    exempt: Collection[str] = (),
    unreachable: Collection[str] = (),
) -> Verdict:
    """The honest verdict of a run.

    FAILED: a failure at or above the gate on a node the run reached. UNREACHABLE: tests
    (``unreachable``: their pytest ids) that could not reach or authenticate to their target,
    and nothing else blocking.
    INCOMPLETE: nothing passed (or was waived), or a check that must run did not run on any
    node: every critical check outside ``optional_areas`` (areas that need inputs the run
    did not ask for), and every check of ``defining_areas`` (what the suite profile is for),
    ``exempt`` ids aside. PASSED otherwise.
    """
    reached = [r for r in gate.blocking if r.test_id not in unreachable]
    if reached:
        return Verdict("FAILED", (f"{len(reached)} blocking failure(s)",))
    if unreachable:
        return Verdict("UNREACHABLE", (
            f"{len(unreachable)} test(s) could not reach or authenticate to their target",))
    ran: dict[str, bool] = {}
    for record in records:
        area = record.area or record.check_id.split(".", 1)[0]
        must = record.check_id not in exempt and (
            area in defining_areas
            or (record.severity == "critical" and area not in optional_areas))
        if must:
            ran[record.check_id] = ran.get(record.check_id, False) or record.outcome != "skipped"
    missing = sorted(check for check, done in ran.items() if not done)
    reasons = []
    if not any(r.outcome in ("passed", "waived") for r in records):
        reasons.append("no check passed")
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5
                                          else "")
        reasons.append(f"not run on any node: {shown}")
    if reasons:
        return Verdict("INCOMPLETE", tuple(reasons))
    return Verdict("PASSED")


def apply_gate(records: Iterable[CheckRecord], threshold: Severity) -> GateResult:
    """Split failed/errored checks into blocking (severity >= threshold) and below."""
    limit = severity_rank(threshold)
    failures = [r for r in records if r.is_failure]
    blocking = tuple(r for r in failures if severity_rank(r.severity) <= limit)
    below = tuple(r for r in failures if severity_rank(r.severity) > limit)
    return GateResult(threshold=threshold, blocking=blocking, below=below)


# --------------------------------------------------------------------------- run info


@dataclass(frozen=True)
class TargetInfo:
    """One node the run talked to."""

    name: str
    role: str = ""
    talos_version: str = ""
    platform: str = ""
    address: str = ""


@dataclass
class RunInfo:
    """Facts about the run as a whole (never credentials)."""

    started: dt.datetime
    finished: dt.datetime | None = None
    suite: str = ""
    targets: list[TargetInfo] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    threshold: Severity = "low"
    notes: list[str] = field(default_factory=list)
    # What was tested: "kind" ("real" or "emulated"), "endpoints", "context", "talosconfig";
    # for an emulated target also "faults", "variants", "time_scale" (see tested_facts).
    tested: dict[str, Any] = field(default_factory=dict)
    kit_version: str = ""
    # What the verdict needs beyond the records (see decide_verdict).
    defining_areas: frozenset[str] = frozenset()
    optional_areas: frozenset[str] = frozenset()
    exempt_checks: frozenset[str] = frozenset()
    unreachable: frozenset[str] = frozenset()  # ids of tests that never reached their node

    def to_json(self) -> dict[str, Any]:
        finished = self.finished or self.started
        return {
            "started": self.started.isoformat(),
            "finished": finished.isoformat(),
            "duration": round((finished - self.started).total_seconds(), 3),
            "suite": self.suite,
            "kit": {"name": "pytest-talos", "version": self.kit_version or _kit_version()},
            "tested": redact(self.tested),
            "targets": [redact(vars(t)) for t in self.targets],
            "settings": redact(self.settings),
            "fail_under": self.threshold,
            "notes": redact(self.notes),
        }


def _kit_version() -> str:
    from pytest_talos import __version__  # the package imports this module lazily

    return str(__version__)


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
    for key, label in (("endpoints", "Endpoints"), ("context", "Context"),
                       ("talosconfig", "Talosconfig")):
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


def _counts(records: Sequence[CheckRecord]) -> dict[str, int]:
    counts: dict[str, int] = {outcome: 0 for outcome in OUTCOMES}
    for record in records:
        counts[record.outcome] += 1
    counts["total"] = len(records)
    return counts


def _sort_key(record: CheckRecord) -> tuple[int, int, str, str]:
    return (
        OUTCOMES.index(record.outcome),
        severity_rank(record.severity),
        record.check_id,
        record.node or "",
    )


def build_results(records: Iterable[CheckRecord], run: RunInfo) -> dict[str, Any]:
    """The ``results.json`` document: run facts, counts, gate verdict, every check."""
    ordered = sorted(records, key=_sort_key)
    gate = apply_gate(ordered, run.threshold)
    verdict = decide_verdict(
        ordered, gate, defining_areas=run.defining_areas, optional_areas=run.optional_areas,
        exempt=run.exempt_checks, unreachable=run.unreachable,
    )
    return {
        "format": "pytest-talos-conformance/1",
        "run": run.to_json(),
        "verdict": verdict.name,
        "verdict_reasons": list(verdict.reasons),
        "exit_code": verdict.exit_code,
        "summary": _counts(ordered),
        "gate": {
            "fail_under": gate.threshold,
            "passed": gate.passed,
            "blocking": len(gate.blocking),
            "below": len(gate.below),
        },
        "checks": [record.to_json() for record in ordered],
    }


# --------------------------------------------------------------------------- markdown


_OUTCOME_LABEL = {
    "passed": "PASS",
    "failed": "FAIL",
    "error": "ERROR",
    "skipped": "SKIP",
    "waived": "WAIVED",
}


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
    verdict = _verdict_of(results)
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
        f"- Results: {summary['total']} — " + ", ".join(
            f"{summary[o]} {o}" for o in OUTCOMES if summary[o]
        ),
        *(f"- {label}: {_md_cell(value)}" for label, value in tested_facts(run)),
    ]
    lines += [f"- Note: {note}" for note in run["notes"]]
    return lines


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
            f"| {_OUTCOME_LABEL[c['outcome']]} | {c['severity']} | `{c['id']}` | "
            f"{_md_cell(c['node'] or 'cluster')} | {_md_cell(c['claim'])} |"
        )
    return lines


def _md_details(checks: Sequence[Mapping[str, Any]], outcomes: Collection[str],
                title: str) -> list[str]:
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
    lines = ["", "## Skipped", "", "| Check | Nodes | Reason |", "| --- | --- | --- |"]
    for (check_id, reason), nodes in grouped.items():
        lines.append(f"| `{check_id}` | {_md_cell(', '.join(nodes))} | {_md_cell(reason)} |")
    return lines


def render_markdown(results: Mapping[str, Any]) -> str:
    """A report a person can hand to a vendor: verdict, nodes, failures with evidence."""
    checks: Sequence[Mapping[str, Any]] = results["checks"]
    lines = _md_header(results) + _md_targets(results)
    lines += _md_details(checks, ("failed", "error"), "Failures")
    lines += _md_details(checks, ("waived",), "Waived failures")
    lines += _md_skips(checks)
    lines += _md_table(checks)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- html


_HTML_STYLE = """
:root{--pass:#1b7f3b;--fail:#c0162c;--waive:#a86400;--skip:#7a7f87;--err:#7b1fa2;
--line:#d5d9de;--soft:#f4f6f8}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d232a;
margin:0 auto;padding:1.5em 2em;max-width:80em}
h1{font-size:1.6em;margin:.2em 0 .4em}h2{font-size:1.25em;margin:1.6em 0 .5em;
border-bottom:2px solid var(--line);padding-bottom:.2em}h3{font-size:1.05em;margin:0 0 .3em}
code{font:13px ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace}
pre{font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace;background:var(--soft);
padding:.6em .8em;margin:.3em 0;white-space:pre-wrap;overflow-wrap:anywhere;
border-radius:4px}
table{border-collapse:collapse}td,th{border:1px solid var(--line);padding:.25em .55em;
text-align:left;vertical-align:top}th{background:var(--soft)}
.emulated{border:3px solid #d97706;background:#fff4e0;padding:.7em 1em;margin:.6em 0 1em;
font-size:1.05em;border-radius:6px}.emulated strong{color:#9a4a00}
.summary{display:flex;flex-wrap:wrap;gap:1.2em;align-items:flex-start;border:1px solid
var(--line);border-radius:8px;padding:1em;margin-bottom:1em}
.verdict{font-size:1.5em;font-weight:700;padding:.35em .8em;border-radius:6px;color:#fff}
.verdict.PASSED{background:var(--pass)}.verdict.FAILED{background:var(--fail)}
.verdict.INCOMPLETE{background:var(--waive)}.verdict.ERROR{background:var(--err)}
.summary table td,.summary table th{text-align:right}.summary table td:first-child,
.summary table th:first-child{text-align:left}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1.2em;margin:0}
.facts dt{font-weight:600}.facts dd{margin:0;overflow-wrap:anywhere}
.o-passed{color:var(--pass)}.o-failed{color:var(--fail);font-weight:700}
.o-error{color:var(--err);font-weight:700}.o-waived{color:var(--waive)}
.o-skipped{color:var(--skip)}
.matrix{font-size:12px}.matrix td,.matrix th{padding:0;border:none;background:none}
.matrix th.node{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;
padding:.3em 0;font-weight:500;background:none;max-height:14em}
.matrix th.check{text-align:right;padding:0 .5em;font-weight:400;white-space:nowrap;
background:none}
.cell{display:block;width:15px;height:15px;margin:1px;border-radius:2px;
-webkit-print-color-adjust:exact;print-color-adjust:exact}
.c-passed{background:var(--pass)}.c-failed{background:var(--fail)}
.c-error{background:var(--err)}.c-waived{background:var(--waive)}
.c-skipped{background:#c9ced4}.c-none{background:none}
.legend span{display:inline-flex;align-items:center;gap:.3em;margin-right:1em}
.card{border:1px solid var(--line);border-left:6px solid var(--fail);border-radius:4px;
padding:.6em .9em;margin:.7em 0;break-inside:avoid}
.card.waived{border-left-color:var(--waive)}.card.error{border-left-color:var(--err)}
.card .meta{color:#4a525c;font-size:.92em;margin-bottom:.3em}
.card dl{display:grid;grid-template-columns:minmax(8em,max-content) 1fr;gap:.1em .8em;
margin:.3em 0}.card dt{font-weight:600;padding-top:.35em}.card dd{margin:0;min-width:0}
.card p{margin:.2em 0}
.sev{display:inline-block;padding:0 .45em;border-radius:3px;font-size:.85em;
font-weight:600;color:#fff;background:#56606b}.sev.critical{background:#7f1020}
.sev.high{background:#c0162c}.sev.medium{background:#c26a00}.sev.low{background:#56606b}
.note{background:#fff8db;border:1px solid #e6d28a;padding:.4em .7em;border-radius:4px;
margin:.4em 0}
details{margin:.5em 0}summary{cursor:pointer;font-weight:600}
@media print{
body{max-width:none;padding:0;font-size:11pt}
details::details-content{content-visibility:visible;display:block}
details:not([open])>summary~*{display:block}
details>summary{list-style:none}
.card,.summary,.emulated,tr{break-inside:avoid}
h2{break-after:avoid}a{color:inherit;text-decoration:none}
.noprint{display:none}
@page{margin:14mm}
}
"""


def _h(text: Any) -> str:
    return html.escape(str(text if text is not None else ""))


def _verdict_of(results: Mapping[str, Any]) -> str:
    verdict = results.get("verdict")
    if isinstance(verdict, str) and verdict:
        return verdict
    return "PASSED" if results["gate"]["passed"] else "FAILED"


def _html_evidence(evidence: Mapping[str, Any]) -> str:
    items = []
    for key, value in evidence.items():
        shown = value if isinstance(value, str) else json.dumps(value, indent=1)
        items.append(f"<dt>{_h(key)}</dt><dd><pre>{_h(shown)}</pre></dd>")
    return f"<dl>{''.join(items)}</dl>" if items else ""


def _html_notes(c: Mapping[str, Any]) -> str:
    return "".join(f"<div class=\"note\">Note: {_h(n)}</div>" for n in c.get("notes") or ())


def _html_card(c: Mapping[str, Any]) -> str:
    where = _h(c["node"] or "the cluster")
    body = f"<p>{_h(c['claim'])}</p>"
    if c["waiver"]:
        w = c["waiver"]
        body += (f"<div class=\"note\"><strong>Waived</strong> until {_h(w['expires'])}: "
                 f"{_h(w['reason'])}</div>")
    if c["message"]:
        body += f"<pre>{_h(c['message'])}</pre>"
    body += _html_notes(c) + _html_evidence(c["evidence"])
    return (
        f"<div class=\"card {_h(c['outcome'])}\" id=\"{_h(_anchor(c))}\">"
        f"<h3><code>{_h(c['id'])}</code> on {where}</h3>"
        f"<div class=\"meta\"><span class=\"o-{_h(c['outcome'])}\">"
        f"{_h(_OUTCOME_LABEL[c['outcome']])}</span> · "
        f"<span class=\"sev {_h(c['severity'])}\">{_h(c['severity'])}</span> · "
        f"{_h(c['area'])} · {float(c['duration']):.1f} s</div>{body}</div>"
    )


_OPEN_PER_CHECK = 3  # failure cards shown open per check; the rest are collapsed


def _html_failures(failures: Sequence[Mapping[str, Any]]) -> str:
    """Every failure with its evidence, by check; a check failing on many nodes shows its
    first cards and folds the others (printing opens them)."""
    by_check: dict[str, list[Mapping[str, Any]]] = {}
    for c in failures:
        by_check.setdefault(c["id"], []).append(c)
    out = []
    for cards in by_check.values():
        cards.sort(key=lambda c: _natural(str(c["node"] or "")))
        out += [_html_card(c) for c in cards[:_OPEN_PER_CHECK]]
        rest = cards[_OPEN_PER_CHECK:]
        if rest:
            nodes = ", ".join(str(c["node"] or "cluster") for c in rest)
            out.append(f"<details><summary>{len(rest)} more node(s) failing "
                       f"<code>{_h(cards[0]['id'])}</code>: {_h(nodes)}</summary>"
                       + "".join(_html_card(c) for c in rest) + "</details>")
    return "".join(out)


def _anchor(c: Mapping[str, Any]) -> str:
    return f"{c['id']}@{c['node'] or 'cluster'}"


def _count_table(checks: Sequence[Mapping[str, Any]], key: str, title: str,
                 order: Sequence[str]) -> str:
    groups: dict[str, dict[str, int]] = {}
    for c in checks:
        groups.setdefault(str(c[key]), dict.fromkeys(OUTCOMES, 0))[c["outcome"]] += 1
    names = [n for n in order if n in groups] + sorted(set(groups) - set(order))
    shown = [o for o in OUTCOMES if any(groups[n][o] for n in names)]
    head = "".join(f"<th class=\"o-{o}\">{_h(o)}</th>" for o in shown)
    rows = "".join(
        f"<tr><td>{_h(n)}</td>"
        + "".join(f"<td class=\"o-{o}\">{groups[n][o] or ''}</td>" for o in shown) + "</tr>"
        for n in names
    )
    return f"<table><tr><th>{_h(title)}</th>{head}</tr>{rows}</table>"


def _html_summary(results: Mapping[str, Any]) -> str:
    gate, summary, checks = results["gate"], results["summary"], results["checks"]
    verdict = _verdict_of(results)
    counts = ", ".join(f"{summary[o]} {o}" for o in OUTCOMES if summary[o])
    return (
        "<section class=\"summary\"><div>"
        f"<div class=\"verdict {_h(verdict)}\">{_h(verdict)}</div>"
        f"<p>{summary['total']} results: {_h(counts)}<br>severity gate: fail on "
        f"<code>{_h(gate['fail_under'])}</code> or worse<br>{gate['blocking']} blocking, "
        f"{gate['below']} below the gate</p></div>"
        f"{_count_table(checks, 'severity', 'Severity', SEVERITIES)}"
        f"{_count_table(checks, 'area', 'Area', ())}</section>"
    )


def _html_tested(run: Mapping[str, Any]) -> tuple[str, str]:
    facts = tested_facts(run)
    banner = ""
    tested = run.get("tested") or {}
    if tested.get("kind") == "emulated":
        faults = ", ".join(tested.get("faults") or ()) or "none"
        variants = ", ".join(tested.get("variants") or ()) or "none"
        banner = (
            "<div class=\"emulated\"><strong>EMULATED TARGET</strong>: these results are of "
            "the pytest-talos emulator, not of real Talos nodes. Faults: "
            f"<strong>{_h(faults)}</strong>; variants: <strong>{_h(variants)}</strong>; "
            f"clock <strong>{_h(tested.get('time_scale', 1))}x</strong> real time.</div>"
        )
    rows = "".join(f"<dt>{_h(k)}</dt><dd>{_h(v)}</dd>" for k, v in facts)
    notes = "".join(f"<div class=\"note\">{_h(n)}</div>" for n in run.get("notes") or ())
    return banner, f"<h2>What was tested</h2><dl class=\"facts\">{rows}</dl>{notes}"


def _html_nodes(run: Mapping[str, Any]) -> str:
    targets = run["targets"]
    if not targets:
        return ""
    rows = "".join(
        f"<tr><td>{_h(t['name'])}</td><td>{_h(t['role'])}</td><td>{_h(t['talos_version'])}"
        f"</td><td>{_h(t['platform'])}</td><td>{_h(t.get('address', ''))}</td></tr>"
        for t in targets
    )
    body = ("<table><tr><th>Node</th><th>Role</th><th>Talos</th><th>Platform</th>"
            f"<th>Address</th></tr>{rows}</table>")
    if len(targets) > 12:
        return (f"<h2>Nodes</h2><details><summary>{len(targets)} nodes</summary>{body}"
                "</details>")
    return f"<h2>Nodes</h2>{body}"


def _html_matrix(results: Mapping[str, Any]) -> str:
    """Checks down, nodes across (cluster-wide checks in their own column): one cell each."""
    checks = results["checks"]
    if not checks:
        return ""
    nodes = [t["name"] for t in results["run"]["targets"]]
    for c in checks:
        if c["node"] and c["node"] not in nodes:
            nodes.append(c["node"])
    nodes.sort(key=_natural)  # worker-2 before worker-10
    columns = (["cluster"] if any(c["node"] is None for c in checks) else []) + nodes
    cells: dict[tuple[str, str], Mapping[str, Any]] = {}
    order: list[str] = []
    for c in sorted(checks, key=lambda c: str(c["id"])):
        if c["id"] not in order:
            order.append(c["id"])
        cells[(c["id"], c["node"] or "cluster")] = c
    head = "".join(f"<th class=\"node\">{_h(n)}</th>" for n in columns)
    rows = []
    for check_id in order:
        row = []
        for column in columns:
            c = cells.get((check_id, column))
            if c is None:
                row.append("<td><span class=\"cell c-none\"></span></td>")
                continue
            title = f"{check_id} on {column}: {c['outcome']}"
            link = f"#{_anchor(c)}" if c["outcome"] in ("failed", "error", "waived") else ""
            cell = f"<span class=\"cell c-{_h(c['outcome'])}\" title=\"{_h(title)}\"></span>"
            row.append(f"<td><a href=\"{_h(link)}\">{cell}</a></td>" if link else
                       f"<td>{cell}</td>")
        rows.append(f"<tr><th class=\"check\"><code>{_h(check_id)}</code></th>{''.join(row)}"
                    "</tr>")
    legend = "".join(
        f"<span><span class=\"cell c-{o}\"></span>{_h(o)}</span>" for o in OUTCOMES)
    return (f"<h2>Results by node</h2><p class=\"legend\">{legend}</p>"
            f"<table class=\"matrix\"><tr><th></th>{head}</tr>{''.join(rows)}</table>")


def _natural(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _html_grouped(checks: Sequence[Mapping[str, Any]], outcome: str, title: str) -> str:
    """Passes or skips, one line per check (nodes grouped), collapsed."""
    grouped: dict[tuple[str, str], list[str]] = {}
    claims: dict[str, str] = {}
    for c in checks:
        if c["outcome"] == outcome:
            key = (c["id"], c["message"] if outcome == "skipped" else "")
            grouped.setdefault(key, []).append(c["node"] or "cluster")
            claims[c["id"]] = c["claim"]
    if not grouped:
        return ""
    total = sum(len(v) for v in grouped.values())
    extra = "<th>Reason</th>" if outcome == "skipped" else ""
    rows = "".join(
        f"<tr><td><code>{_h(cid)}</code></td><td>{_h(claims[cid])}</td>"
        f"<td>{_h(', '.join(nodes))}</td>"
        + (f"<td>{_h(reason)}</td>" if outcome == "skipped" else "") + "</tr>"
        for (cid, reason), nodes in grouped.items()
    )
    return (f"<h2>{_h(title)}</h2><details><summary>{total} result(s) of {len(grouped)} "
            f"check(s)</summary><table><tr><th>Check</th><th>Claim</th><th>Nodes</th>{extra}"
            f"</tr>{rows}</table></details>")


def render_html(results: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML document (no scripts, prints cleanly to PDF):
    what was tested, a summary, a check x node matrix, failures with their evidence, waived
    failures, then passes and skips collapsed."""
    run, checks = results["run"], results["checks"]
    banner, tested = _html_tested(run)
    failures = [c for c in checks if c["outcome"] in ("failed", "error")]
    waived = [c for c in checks if c["outcome"] == "waived"]
    noted = [c for c in checks if c.get("notes") and c["outcome"] not in ("failed", "error",
                                                                             "waived")]
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"

        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>Talos conformance report — {_h(_verdict_of(results))}</title>"
        f"<style>{_HTML_STYLE}</style></head><body>",
        f"<h1>Talos conformance report</h1>{banner}{_html_summary(results)}{tested}",
        _html_matrix(results),
        f"<h2>Failures ({len(failures)})</h2>" + (_html_failures(failures) or "<p>None.</p>"),
    ]
    if waived:
        parts.append(f"<h2>Waived failures ({len(waived)})</h2>"
                     + "".join(_html_card(c) for c in waived))
    if noted:
        parts.append("<h2>Notes from checks</h2>" + "".join(
            f"<p><code>{_h(c['id'])}</code> on {_h(c['node'] or 'the cluster')}:</p>"
            + _html_notes(c) for c in noted))
    parts += [_html_nodes(run),
              _html_grouped(checks, "passed", "Passed"),
              _html_grouped(checks, "skipped", "Skipped"),
              f"<p class=\"meta\">Generated by pytest-talos "
              f"{_h((run.get('kit') or {}).get('version', ''))}.</p></body></html>\n"]
    return "".join(parts)


# --------------------------------------------------------------------------- writing


def write_reports(
    directory: str | Path, records: Iterable[CheckRecord], run: RunInfo
) -> dict[str, Path]:
    """Write ``results.json``, ``report.md`` and ``report.html`` into ``directory``."""
    out = Path(directory)
    results = build_results(records, run)
    files = {
        "results.json": json.dumps(results, indent=2, sort_keys=False) + "\n",
        "report.md": render_markdown(results),
        "report.html": render_html(results),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, text in files.items():
            path = out / name
            path.write_text(text, encoding="utf-8")
            written[name] = path
    except OSError as exc:
        raise ConfigError(
            f"cannot write the conformance report ({exc.strerror}); choose a writable "
            "--talos-report directory",
            path=str(out),
        ) from None
    return written
