"""The suite on the terminal: progress lines while checks run, and the closing table, gate,
report and verdict lines."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_talos.plugin.conformance.state import (
    COLLECTOR,
    GATE,
    REPORTS,
    SETTINGS,
    VERDICT,
    is_worker,
)
from pytest_talos.reporting import CheckRecord, natural_key

__all__ = ["progress", "summary_table", "terminal_summary"]

_RANKS = {"critical": 0, "high": 1, "medium": 2, "low": 3}


def progress(config: pytest.Config, line: str) -> None:
    """One line on the terminal while checks run (not captured; nothing under xdist)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or is_worker(config):
        return
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.write_line(line)


def terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if is_worker(config) or GATE not in config.stash:
        return
    settings = config.stash[SETTINGS]
    collector = config.stash.get(COLLECTOR, None)
    if collector is not None:
        quiet = config.get_verbosity() < 0
        for line in summary_table(collector.records(), quiet=quiet):
            terminalreporter.write_line(line)
    if settings.fail_under != "low" or "blocking" in config.stash[GATE]:
        terminalreporter.write_line(f"conformance: {config.stash[GATE]}")
    if REPORTS in config.stash:
        terminalreporter.write_line(config.stash[REPORTS])
    if VERDICT in config.stash:
        terminalreporter.write_line(f"conformance: {config.stash[VERDICT]}")


def _rows(records: Sequence[CheckRecord]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for r in records:
        row = rows.setdefault(
            r.check_id,
            {
                "severity": r.severity,
                "passed": 0,
                "failed": 0,
                "waived": 0,
                "skipped": 0,
                "nodes": [],
            },
        )
        outcome = "failed" if r.outcome == "error" else r.outcome
        row[outcome] += 1
        if outcome == "failed":
            row["nodes"].append(r.node or "cluster")
    return rows


def summary_table(records: Sequence[CheckRecord], *, quiet: bool = False) -> list[str]:
    """The closing table: one line per check id (most severe failures first) with how many
    nodes passed, failed, were waived or skipped, and the failing nodes."""
    if not records:
        return []
    rows = _rows(records)
    order = sorted(
        rows, key=lambda c: (not rows[c]["failed"], _RANKS.get(rows[c]["severity"], 9), c)
    )
    shown = order
    if quiet:  # -q: only what did not pass cleanly
        shown = [c for c in order if rows[c]["failed"] or rows[c]["waived"]]
    width = max(len(c) for c in rows)
    lines = [
        "",
        f"{'conformance check':<{width}}  severity  pass  fail  waived  skip",
        "-" * (width + 38),
    ]
    for check_id in shown:
        row = rows[check_id]
        row["nodes"].sort(key=natural_key)  # worker-2 before worker-10
        failing = f"  {', '.join(row['nodes'][:4])}" if row["nodes"] else ""
        if len(row["nodes"]) > 4:
            failing += f" (+{len(row['nodes']) - 4})"
        lines.append(
            f"{check_id:<{width}}  {row['severity']:<8}  {row['passed']:>4}  "
            f"{row['failed']:>4}  {row['waived']:>6}  {row['skipped']:>4}{failing}"
        )
    if len(shown) < len(order):
        lines.append(
            f"... and {len(order) - len(shown)} checks that passed or skipped "
            "(without -q: every check; the report lists them all)"
        )
    return lines
