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
    "OUTCOMES",
    "SEVERITIES",
    "CheckRecord",
    "GateResult",
    "Outcome",
    "RunInfo",
    "Severity",
    "TargetInfo",
    "Waiver",
    "WaiverMatch",
    "apply_gate",
    "build_results",
    "check_waivers_known",
    "find_waiver",
    "load_waivers",
    "parse_severity",
    "parse_waivers",
    "redact",
    "render_html",
    "render_markdown",
    "severity_rank",
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

    def to_json(self) -> dict[str, Any]:
        finished = self.finished or self.started
        return {
            "started": self.started.isoformat(),
            "finished": finished.isoformat(),
            "duration": round((finished - self.started).total_seconds(), 3),
            "suite": self.suite,
            "targets": [redact(vars(t)) for t in self.targets],
            "settings": redact(self.settings),
            "fail_under": self.threshold,
            "notes": redact(self.notes),
        }


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
    return {
        "format": "pytest-talos-conformance/1",
        "run": run.to_json(),
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
    verdict = "PASSED" if gate["passed"] else "FAILED"
    lines = [
        "# Talos conformance report",
        "",
        f"**Verdict: {verdict}** (severity gate: fail on `{gate['fail_under']}` or worse; "
        f"{gate['blocking']} blocking, {gate['below']} below the gate)",
        "",
        f"- Run: {run['started']} to {run['finished']} ({run['duration']} s)",
        f"- Suite profile: {run['suite'] or 'all'}",
        f"- Checks: {summary['total']} — " + ", ".join(
            f"{summary[o]} {o}" for o in OUTCOMES if summary[o]
        ),
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


_HTML_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;"
    "text-align:left;vertical-align:top}pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"
    ".passed{color:#176f2c}.failed,.error{color:#b00020;font-weight:bold}"
    ".waived{color:#8a5a00}.skipped{color:#555}"
)


def _h(text: Any) -> str:
    return html.escape(str(text if text is not None else ""))


def _html_evidence(evidence: Mapping[str, Any]) -> str:
    items = []
    for key, value in evidence.items():
        shown = value if isinstance(value, str) else json.dumps(value, indent=1)
        items.append(f"<dt>{_h(key)}</dt><dd><pre>{_h(shown)}</pre></dd>")
    return f"<dl>{''.join(items)}</dl>" if items else ""


def _html_row(c: Mapping[str, Any]) -> str:
    detail = ""
    if c["waiver"]:
        detail += f"<p>Waived until {_h(c['waiver']['expires'])}: {_h(c['waiver']['reason'])}</p>"
    if c["message"]:
        detail += f"<pre>{_h(c['message'])}</pre>"
    detail += _html_evidence(c["evidence"])
    return (
        f"<tr><td class=\"{_h(c['outcome'])}\">{_h(_OUTCOME_LABEL[c['outcome']])}</td>"
        f"<td>{_h(c['severity'])}</td><td><code>{_h(c['id'])}</code></td>"
        f"<td>{_h(c['node'] or 'cluster')}</td><td>{_h(c['claim'])}{detail}</td></tr>"
    )


def render_html(results: Mapping[str, Any]) -> str:
    """The same content as the Markdown report, as one self-contained HTML page."""
    run, gate = results["run"], results["gate"]
    verdict = "PASSED" if gate["passed"] else "FAILED"
    targets = "".join(
        f"<tr><td>{_h(t['name'])}</td><td>{_h(t['role'])}</td><td>{_h(t['talos_version'])}</td>"
        f"<td>{_h(t['platform'])}</td></tr>"
        for t in run["targets"]
    )
    rows = "".join(_html_row(c) for c in results["checks"])
    counts = ", ".join(f"{n} {o}" for o, n in results["summary"].items() if o != "total" and n)
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
        f"<title>Talos conformance report</title><style>{_HTML_STYLE}</style></head><body>"
        f"<h1>Talos conformance report</h1><p><strong>Verdict: {verdict}</strong> "
        f"(fail on <code>{_h(gate['fail_under'])}</code> or worse; {gate['blocking']} blocking, "
        f"{gate['below']} below the gate)</p>"
        f"<p>Run {_h(run['started'])} to {_h(run['finished'])}; suite profile "
        f"{_h(run['suite'] or 'all')}; {_h(counts)}</p>"
        "<h2>Nodes</h2><table><tr><th>Node</th><th>Role</th><th>Talos</th><th>Platform</th></tr>"
        f"{targets}</table><h2>Checks</h2><table><tr><th>Outcome</th><th>Severity</th>"
        f"<th>Check</th><th>Node</th><th>Claim and evidence</th></tr>{rows}</table>"
        "</body></html>\n"
    )


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
