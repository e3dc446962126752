"""The end of a run: what was tested, the verdict and its exit status, the reports."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from pytest_talos.errors import ConfigError
from pytest_talos.plugin.conformance.collector import ResultCollector
from pytest_talos.plugin.conformance.parts import INPUT_AREAS, PARTS, PROFILE_PARTS
from pytest_talos.plugin.conformance.state import (
    COLLECTOR,
    GATE,
    REPORTS,
    SETTINGS,
    STARTED,
    VERDICT,
    is_worker,
)
from pytest_talos.plugin.session import SESSION_KEY
from pytest_talos.reporting import CheckRecord, RunInfo, apply_gate, decide_verdict, write_reports

__all__ = ["finish_run", "run_info"]


def _verdict_inputs(
    config: pytest.Config, run: RunInfo, collector: ResultCollector, records: list[CheckRecord]
) -> None:
    """What the verdict needs beyond the records: the parts the profile is for, the areas
    that need inputs, the tests that never reached their node."""
    settings = config.stash[SETTINGS]
    name = settings.suite.name if settings.suite else "full"
    defining = {
        check.split(".", 1)[0]
        for part in PROFILE_PARTS.get(name, ())
        for check in PARTS[part].checks
    }
    exempt = set() if settings.snapshot_mode == "save" else {"upgrade.snapshot-recorded"}
    # Checks --talos-allow keeps from running are the run's choice (the report says so).
    exempt |= {
        r.check_id for r in records if r.outcome == "skipped" and r.check_id in collector.held
    }
    held = {r.check_id for r in records if r.check_id in exempt and r.outcome == "skipped"}
    held.discard("upgrade.snapshot-recorded")
    if held:
        allow = config.getoption("talos_allow", None) or "none"
        run.notes.append(f"{len(held)} check(s) that change nodes not run (--talos-allow {allow})")
    run.defining_areas = frozenset(defining)
    run.optional_areas = INPUT_AREAS - run.defining_areas
    run.exempt_checks = frozenset(exempt)
    run.unreachable = frozenset(collector.unreachable)
    if settings.leave_out:
        run.notes.append(
            "left out: "
            + ", ".join(f"{part} (needs {PARTS[part].needs})" for part in settings.leave_out)
        )


def _tested(config: pytest.Config) -> dict[str, Any]:
    """What the run was pointed at, for the reports: real nodes or the emulator (with its
    faults, variants and clock), the endpoints and the talosconfig context (no credentials)."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return {}
    s = session.settings
    tested: dict[str, Any] = {"kind": "real"}
    if s.emulator.value is not None:
        cp, workers = s.emulator.value
        tested = {
            "kind": "emulated",
            "size": f"{cp} control plane(s), {workers} worker(s)",
            "faults": list(s.faults.value),
            "variants": list(s.variants.value),
            "time_scale": s.time_scale.value,
        }
    tested["endpoints"] = list(s.endpoints.value)
    cluster = session.cached_cluster
    talosconfig = cluster.talosconfig if cluster is not None else None
    if cluster is not None:
        tested["endpoints"] = [cluster.client.endpoint]
    elif s.emulator.value is not None:
        tested["endpoints"] = ["each test process's own emulated cluster (pytest-xdist)"]
    if talosconfig is not None:
        tested["context"] = talosconfig.context_name
        if s.emulator.value is None:
            tested["talosconfig"] = str(talosconfig.path)
        if s.emulator.value is None and talosconfig.context.time_scale != 1:
            # Only the pytest-talos emulator advertises a clock rate in its talosconfig.
            tested.update(
                kind="emulated",
                time_scale=talosconfig.context.time_scale,
                faults=["(not known: the emulator was reached through a talosconfig)"],
            )
    elif s.context.value:
        tested["context"] = s.context.value
    return tested


def _shard(config: pytest.Config, collector: ResultCollector) -> dict[str, Any] | None:
    shard = config.stash[SETTINGS].shard
    if shard is None:
        return None
    names = [target.name for target in collector.target_list()]
    return {"index": shard.index, "count": shard.count, "nodes": shard.nodes(names)}


def run_info(config: pytest.Config, collector: ResultCollector) -> RunInfo:
    settings = config.stash[SETTINGS]
    notes = []
    if settings.vendor_profile:
        notes.append(f"vendor profile: {settings.vendor_profile.name}")
    if settings.snapshot_mode:
        notes.append(f"snapshot {settings.snapshot_mode}: {settings.snapshot_path}")
    return RunInfo(
        tested=_tested(config),
        started=config.stash[STARTED],
        finished=dt.datetime.now(dt.UTC),
        suite=settings.suite.name if settings.suite else "",
        targets=collector.target_list(),
        settings={
            "talos_allow": config.getoption("talos_allow", None) or "none",
            "fail_under": settings.fail_under,
            "waivers": str(settings.waivers_path or ""),
        },
        threshold=settings.fail_under,
        notes=notes,
        shard=_shard(config, collector),
    )


def finish_run(session: pytest.Session) -> None:
    """The verdict decides the exit status (0, 1, 6, 7); the reports are written."""
    config = session.config
    collector = config.stash.get(COLLECTOR, None)
    if collector is None or is_worker(config):
        return
    records = collector.records()
    settings = config.stash[SETTINGS]
    gate = apply_gate(records, settings.fail_under)
    config.stash[GATE] = gate.summary()
    run = run_info(config, collector)
    _verdict_inputs(config, run, collector, records)
    verdict = decide_verdict(
        records,
        gate,
        defining_areas=run.defining_areas,
        optional_areas=run.optional_areas,
        exempt=run.exempt_checks,
        unreachable=run.unreachable,
    )
    if records and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        config.stash[VERDICT] = verdict.summary()
        code = verdict.exit_code
        if code == 0 and collector.other_failures:
            code = pytest.ExitCode.TESTS_FAILED  # a test that is not a check failed
        session.exitstatus = code
    if settings.report_dir and records:
        try:
            written = write_reports(settings.report_dir, records, run)
        except ConfigError as exc:
            config.stash[REPORTS] = f"conformance: cannot write the report: {exc}"
        else:
            config.stash[REPORTS] = "conformance: report written: " + ", ".join(
                str(path) for path in written.values()
            )
