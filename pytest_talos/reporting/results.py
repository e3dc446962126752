"""``results.json`` (:func:`build_results`) and the three report files (:func:`write_reports`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pytest_talos.errors import ConfigError
from pytest_talos.reporting.html import render_html
from pytest_talos.reporting.markdown import render_markdown
from pytest_talos.reporting.records import (
    NEEDS_ADMIN,
    NOT_APPLICABLE,
    CheckRecord,
    RunInfo,
    natural_key,
)
from pytest_talos.reporting.severity import OUTCOMES, severity_rank
from pytest_talos.reporting.verdict import Verdict, apply_gate, decide_verdict, stopped_verdict

__all__ = ["RESULTS_FORMAT", "build_results", "run_verdict", "write_reports"]

RESULTS_FORMAT = "pytest-talos-conformance/1"


def _counts(records: Sequence[CheckRecord]) -> dict[str, int]:
    counts: dict[str, int] = {outcome: 0 for outcome in OUTCOMES}
    for record in records:
        counts[record.outcome] += 1
    counts["total"] = len(records)
    # Of the skips: those the platform makes meaningless, those the identity could not run.
    counts["not_applicable"] = sum(r.skip_kind == NOT_APPLICABLE for r in records)
    counts["needs_admin"] = sum(r.skip_kind == NEEDS_ADMIN for r in records)
    return counts


def _sort_key(record: CheckRecord) -> tuple[Any, ...]:
    return (
        OUTCOMES.index(record.outcome),
        severity_rank(record.severity),
        record.check_id,
        natural_key(record.node),
    )


def run_verdict(records: Sequence[CheckRecord], run: RunInfo) -> Verdict:
    """The verdict of ``records`` in ``run``: a run that did not finish is never PASSED."""
    if run.stopped is not None:
        return stopped_verdict(run.stopped)
    return decide_verdict(
        records,
        apply_gate(records, run.threshold),
        defining_areas=run.defining_areas,
        optional_areas=run.optional_areas,
        exempt=run.exempt_checks,
        unreachable=run.unreachable,
    )


def build_results(records: Iterable[CheckRecord], run: RunInfo) -> dict[str, Any]:
    """The ``results.json`` document: run facts, counts, gate verdict, every check."""
    ordered = sorted(records, key=_sort_key)
    gate = apply_gate(ordered, run.threshold)
    verdict = run_verdict(ordered, run)
    return {
        "format": RESULTS_FORMAT,
        "run": run.to_json(),
        "verdict": verdict.name,
        "verdict_reasons": list(verdict.reasons),
        # A run killed before it finished returned a code this report cannot know.
        "exit_code": None if verdict.name == "NOT FINISHED" else verdict.exit_code,
        "summary": _counts(ordered),
        "gate": {
            "fail_under": gate.threshold,
            "passed": gate.passed,
            "blocking": len(gate.blocking),
            "below": len(gate.below),
        },
        "checks": [record.to_json() for record in ordered],
    }


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
