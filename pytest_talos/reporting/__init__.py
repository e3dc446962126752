"""Conformance results: check records, waivers, the severity gate, the verdict and the reports.

Pure Python (no pytest): the conformance plugin (:mod:`pytest_talos.plugin.conformance`) feeds
it one :class:`CheckRecord` per check and node; this package decides what a waiver covers,
whether the run passes the severity gate and what it may claim, and writes ``results.json``,
``report.md`` and ``report.html``; :mod:`.merge` combines the results of a sharded run.

Nothing here ever writes key material: every string and mapping that reaches a report goes
through :func:`redact`, which removes PEM private keys, base64-encoded PEM blocks and the values
of key-like fields (``key``, ``token``, ``secret``, ``password`` ...).

Layout, by responsibility: :mod:`.severity` (vocabulary), :mod:`.redaction`, :mod:`.waivers`,
:mod:`.records` (the results model), :mod:`.verdict` (gate and verdict), :mod:`.facts` (what was
tested), :mod:`.results` (``results.json`` and writing), :mod:`.markdown`, :mod:`.html`,
:mod:`.merge` and :mod:`.cli` (``talos-report merge``).
"""

from pytest_talos.reporting.facts import human_duration, human_time, tested_facts
from pytest_talos.reporting.html import render_html
from pytest_talos.reporting.markdown import render_markdown
from pytest_talos.reporting.records import (
    NEEDS_ADMIN,
    NOT_APPLICABLE,
    CheckRecord,
    RunInfo,
    TargetInfo,
    natural_key,
)
from pytest_talos.reporting.redaction import redact
from pytest_talos.reporting.results import (
    RESULTS_FORMAT,
    build_results,
    run_verdict,
    write_reports,
)
from pytest_talos.reporting.severity import (
    CHECK_ID_PATTERN,
    OUTCOMES,
    SEVERITIES,
    Outcome,
    Severity,
    parse_severity,
    severity_rank,
    validate_check_id,
)
from pytest_talos.reporting.verdict import (
    EXIT_CODES,
    GateResult,
    Verdict,
    apply_gate,
    decide_verdict,
)
from pytest_talos.reporting.waivers import (
    Waiver,
    WaiverMatch,
    check_waivers_known,
    find_waiver,
    load_waivers,
    parse_waivers,
)

__all__ = [
    "CHECK_ID_PATTERN",
    "EXIT_CODES",
    "NEEDS_ADMIN",
    "NOT_APPLICABLE",
    "OUTCOMES",
    "RESULTS_FORMAT",
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
    "human_duration",
    "human_time",
    "load_waivers",
    "natural_key",
    "parse_severity",
    "parse_waivers",
    "redact",
    "render_html",
    "render_markdown",
    "run_verdict",
    "severity_rank",
    "tested_facts",
    "validate_check_id",
    "write_reports",
]
