"""The end of a run: what was tested, the verdict and its exit status, the reports."""

from __future__ import annotations

import datetime as dt
import getpass
import os
import socket
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_talos.errors import ConfigError
from pytest_talos.plugin.conformance.collector import ResultCollector
from pytest_talos.plugin.conformance.parts import INPUT_AREAS, PARTS, PROFILE_PARTS
from pytest_talos.plugin.conformance.state import (
    COLLECTOR,
    GATE,
    PLANNED,
    REPORTS,
    SETTINGS,
    STARTED,
    STOP_REASON,
    UNFINISHED_WRITTEN,
    VERDICT,
    is_worker,
)
from pytest_talos.plugin.session import SESSION_KEY
from pytest_talos.reporting import (
    CheckRecord,
    RunInfo,
    TargetInfo,
    apply_gate,
    human_time,
    run_verdict,
    write_reports,
)
from pytest_talos.talos_api import is_emulator_build

__all__ = ["finish_run", "operator_facts", "run_info", "write_unfinished"]


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
    if settings.snapshot_mode == "save" and name == "post-upgrade":
        run.notes.append(
            "before the upgrade: this run saves the snapshot; the checks that compare with "
            "it and with the expected versions run after the upgrade (--talos-snapshot compare)"
        )
    if settings.leave_out:
        run.notes.append(
            "left out: "
            + ", ".join(f"{part} (needs {PARTS[part].needs})" for part in settings.leave_out)
        )


def _tested(config: pytest.Config, targets: list[TargetInfo]) -> dict[str, Any]:
    """What the run was pointed at, for the reports: real nodes or the emulator (with its
    faults, variants and clock), the endpoints and the talosconfig context (no credentials).

    Emulated is decided from what the emulator always is: its Version reply names it in
    ``built``, which a real Talos build leaves empty (talos_api.EMULATOR_BUILT)."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return {}
    s = session.settings
    tested: dict[str, Any] = {"kind": "real"}
    if any(is_emulator_build(t.built) for t in targets):
        tested.update(
            kind="emulated",
            faults=["(not known: the emulator was reached through a talosconfig)"],
            time_scale=1,
        )
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
            # Only the pytest-talos emulator advertises a clock rate in its talosconfig (a
            # key talosctl ignores): a second sign, for a run that reached no node.
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


# CI systems and the variables that say who ran the job and where to find it.
_CI = (
    ("GitHub Actions", "GITHUB_ACTIONS", "GITHUB_ACTOR", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"),
    ("GitLab CI", "GITLAB_CI", "GITLAB_USER_LOGIN", "CI_PROJECT_PATH", "CI_JOB_ID"),
    ("Jenkins", "JENKINS_URL", "BUILD_USER_ID", "JOB_NAME", "BUILD_NUMBER"),
)


def _ci(env: Mapping[str, str]) -> dict[str, str]:
    for name, marker, actor, project, job in _CI:
        if env.get(marker):
            found = {"ci": name, "actor": env.get(actor, ""), "project": env.get(project, "")}
            found["job"] = env.get(job, "")
            server, repo, run = (env.get(k, "") for k in _GITHUB_URL)
            url = env.get("CI_JOB_URL") or env.get("BUILD_URL") or ""
            if name == "GitHub Actions" and server and repo and run:
                url = f"{server}/{repo}/actions/runs/{run}"
            if url:
                found["url"] = url
            return {k: v for k, v in found.items() if v}
    if env.get("CI"):
        return {"ci": "a CI system (CI is set)"}
    return {}


_GITHUB_URL = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")


def operator_facts(config: pytest.Config, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Who ran the run: the operator (USER) or the CI job, the host, and the client
    certificate's subject, issuer, serial, expiry and roles (never key material)."""
    env = os.environ if env is None else env
    try:
        user = env.get("USER") or env.get("LOGNAME") or getpass.getuser()
    except (KeyError, OSError):
        user = ""
    facts: dict[str, Any] = {"user": user, "host": socket.gethostname(), **_ci(env)}
    session = config.stash.get(SESSION_KEY, None)
    cluster = session.cached_cluster if session is not None else None
    talosconfig = cluster.talosconfig if cluster is not None else None
    if talosconfig is not None:
        from pytest_talos.certs.facts import certificate_facts

        try:
            cert = certificate_facts(talosconfig.context.crt_pem)
        except ValueError:
            return facts
        facts["certificate"] = {
            "subject": cert.subject,
            "issuer": cert.issuer,
            "serial": cert.serial,
            "not_after": human_time(cert.not_after.isoformat()),
            "roles": list(cert.organizations),
        }
    return facts


def run_info(config: pytest.Config, collector: ResultCollector) -> RunInfo:
    settings = config.stash[SETTINGS]
    notes = []
    if settings.vendor_profile:
        notes.append(f"vendor profile: {settings.vendor_profile.name}")
    if settings.snapshot_mode:
        notes.append(f"snapshot {settings.snapshot_mode}: {settings.snapshot_path}")
    targets = collector.target_list()
    return RunInfo(
        tested=_tested(config, targets),
        operator=operator_facts(config),
        started=config.stash[STARTED],
        finished=dt.datetime.now(dt.UTC),
        suite=settings.suite.name if settings.suite else "",
        targets=targets,
        settings={
            "talos_allow": config.getoption("talos_allow", None) or "none",
            "fail_under": settings.fail_under,
            "waivers": str(settings.waivers_path or ""),
        },
        threshold=settings.fail_under,
        notes=notes,
        shard=_shard(config, collector),
    )


def _now() -> str:
    return human_time(dt.datetime.now(dt.UTC).isoformat())


def write_unfinished(config: pytest.Config) -> None:
    """At the start: the report says "not finished" until the end of the run completes it,
    so that a run killed on the way (SIGKILL, out of memory) never leaves a report that
    claims anything, nor an older run's report."""
    settings = config.stash[SETTINGS]
    collector = config.stash.get(COLLECTOR, None)
    if settings.report_dir is None or collector is None or is_worker(config):
        return
    run = run_info(config, collector)
    planned = config.stash.get(PLANNED, None)
    run.stopped = {
        "status": "in progress",
        "at": human_time(config.stash[STARTED].isoformat()),
        "pid": os.getpid(),
        "planned": len(planned) if planned is not None else None,
    }
    try:
        write_reports(settings.report_dir, [], run)
    except ConfigError:
        return  # the start checked the directory; the end says what went wrong
    config.stash[UNFINISHED_WRITTEN] = True


def _stop(session: pytest.Session, collector: ResultCollector) -> dict[str, Any] | None:
    """When, why and with which exit code the run stopped before its end; None when it ran
    to the end."""
    config = session.config
    status = int(session.exitstatus)
    why = config.stash.get(STOP_REASON, None)
    if session.shouldfail:
        why = f"{session.shouldfail} (-x/--maxfail)"
    elif session.shouldstop and not why:
        why = str(session.shouldstop)
    elif status == pytest.ExitCode.INTERRUPTED and not why:
        why = "interrupted"
    elif status == pytest.ExitCode.INTERNAL_ERROR and not why:
        why = "an internal error"
    if why is None:
        return None
    planned = config.stash.get(PLANNED, None)
    not_run = [t for t in planned or () if t["test"] not in collector.ran]
    return {
        "status": "stopped",
        "at": _now(),
        "why": why,
        "exit_code": status,
        "planned": len(planned) if planned is not None else None,
        "not_run": [{"id": t["id"], "node": t["node"]} for t in not_run],
    }


def finish_run(session: pytest.Session) -> None:
    """The verdict decides the exit status (0, 1, 6, 7); the reports are written. A run
    that stopped early keeps pytest's status (2 interrupted, 1 after -x, 3 a crash) and its
    verdict is STOPPED."""
    config = session.config
    collector = config.stash.get(COLLECTOR, None)
    if collector is None or is_worker(config):
        return
    records = collector.records()
    settings = config.stash[SETTINGS]
    gate = apply_gate(records, settings.fail_under)
    run = run_info(config, collector)
    config.stash[GATE] = gate.summary(run.unreachable | collector.unreachable)
    _verdict_inputs(config, run, collector, records)
    run.stopped = _stop(session, collector)
    verdict = run_verdict(records, run)
    if run.stopped is not None:
        config.stash[VERDICT] = verdict.summary()
    elif records and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        config.stash[VERDICT] = verdict.summary()
        code = verdict.exit_code
        if code == 0 and collector.other_failures:
            code = pytest.ExitCode.TESTS_FAILED  # a test that is not a check failed
        session.exitstatus = code
    if settings.report_dir and not records and run.stopped is None:
        _remove_unfinished(config)
    if settings.report_dir and (records or run.stopped is not None):
        try:
            written = write_reports(settings.report_dir, records, run)
        except ConfigError as exc:
            config.stash[REPORTS] = f"conformance: cannot write the report: {exc}"
        else:
            config.stash[REPORTS] = "conformance: report written: " + ", ".join(
                str(path) for path in written.values()
            )


def _remove_unfinished(config: pytest.Config) -> None:
    """No check ran and nothing stopped the run (e.g. none selected): no report, as before,
    and not the "not finished" one from the start."""
    report_dir = config.stash[SETTINGS].report_dir
    if report_dir is None or not config.stash.get(UNFINISHED_WRITTEN, False):
        return
    for name in ("results.json", "report.md", "report.html"):
        (report_dir / name).unlink(missing_ok=True)
