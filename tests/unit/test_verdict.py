"""decide_verdict: what a conformance run may claim (docs/conformance.md, exit codes)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pytest_talos.plugin.conformance.outcomes import collapse_repeats
from pytest_talos.reporting import (
    EXIT_CODES,
    NEEDS_ADMIN,
    NOT_APPLICABLE,
    CheckRecord,
    Outcome,
    RunInfo,
    Severity,
    apply_gate,
    build_results,
    decide_verdict,
    natural_key,
    run_verdict,
)
from pytest_talos.reporting.merge import ShardResults, merge_shards
from pytest_talos.talos_api import EMULATOR_BUILT, is_emulator_build


def rec(check: str, outcome: Outcome, severity: Severity = "high", test: str = "") -> CheckRecord:
    return CheckRecord(check, severity, "claim", outcome, node="n1", test_id=test or f"{check}[n1]")


def verdict(records: list[CheckRecord], **kwargs: Any) -> str:
    return decide_verdict(records, apply_gate(records, "low"), **kwargs).name


def test_exit_codes_are_distinct() -> None:
    assert EXIT_CODES == {"PASSED": 0, "FAILED": 1, "USAGE": 4, "INCOMPLETE": 6, "UNREACHABLE": 7}


def test_passed_failed_incomplete() -> None:
    assert verdict([rec("api.a", "passed")]) == "PASSED"
    assert verdict([rec("api.a", "passed"), rec("api.b", "failed")]) == "FAILED"
    assert verdict([rec("api.a", "skipped")]) == "INCOMPLETE"
    assert verdict([rec("api.a", "waived")]) == "PASSED"
    assert verdict([]) == "INCOMPLETE"


def test_a_critical_check_not_run_anywhere_is_incomplete() -> None:
    records = [rec("api.a", "passed"), rec("api.c", "skipped", "critical")]
    result = decide_verdict(records, apply_gate(records, "low"))
    assert result.name == "INCOMPLETE"
    assert result.exit_code == 6
    assert result.reasons == ("not run on any node: api.c",)
    ran_once = [*records, CheckRecord("api.c", "critical", "c", "passed", node="n2")]
    assert verdict(ran_once) == "PASSED"
    # in an area that needs inputs the run did not ask for: not required
    upgrade = [rec("api.a", "passed"), rec("upgrade.v", "skipped", "critical")]
    assert verdict(upgrade, optional_areas={"upgrade"}) == "PASSED"
    assert (
        verdict(
            [rec("api.a", "passed"), rec("vendor.x", "skipped", "low")], defining_areas={"vendor"}
        )
        == "INCOMPLETE"
    )
    assert verdict(records, exempt={"api.c"}) == "PASSED"


def test_unreachable_targets_have_their_own_verdict() -> None:
    lost = rec("api.a", "error", test="t-lost")
    assert verdict([lost], unreachable={"t-lost"}) == "UNREACHABLE"
    assert verdict([lost, rec("api.b", "failed")], unreachable={"t-lost"}) == "FAILED"


def test_a_check_the_identity_cannot_run_is_named_not_incomplete() -> None:
    admin = rec("immutability.rootfs-read-only", "skipped", "critical")
    admin.skip_kind = NEEDS_ADMIN
    records = [rec("api.a", "passed"), admin]
    result = decide_verdict(records, apply_gate(records, "low"))
    assert result.name == "PASSED"
    assert result.reasons == (
        "1 check(s) not run: they need os:admin, which this talosconfig lacks (an os:admin "
        "talosconfig runs them): immutability.rootfs-read-only",
    )
    plain = rec("immutability.rootfs-read-only", "skipped", "critical")
    assert verdict([rec("api.a", "passed"), plain]) == "INCOMPLETE"


def test_a_check_the_platform_makes_meaningless_is_done() -> None:
    kernel = rec("vendor.kernel-version", "skipped")
    kernel.skip_kind = NOT_APPLICABLE
    records = [rec("vendor.platform", "passed"), kernel]
    result = decide_verdict(records, apply_gate(records, "low"), defining_areas={"vendor"})
    assert result.name == "PASSED"
    assert result.reasons == ("not applicable on this platform: vendor.kernel-version",)
    kernel.skip_kind = ""
    assert verdict(records, defining_areas={"vendor"}) == "INCOMPLETE"


def test_a_run_that_did_not_finish_is_never_passed() -> None:
    records = [rec("api.a", "passed")]
    run = RunInfo(started=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    run.stopped = {
        "status": "stopped",
        "at": "2026-01-01 00:00:45 UTC",
        "why": "SIGTERM received",
        "exit_code": 2,
        "planned": 3,
        "not_run": [{"id": "api.b", "node": "n1"}, {"id": "api.c", "node": None}],
    }
    stopped = run_verdict(records, run)
    assert (stopped.name, stopped.exit_code) == ("STOPPED", 2)
    assert stopped.reasons == (
        "the run stopped at 2026-01-01 00:00:45 UTC: SIGTERM received",
        "2 of 3 planned test(s) not run: api.b on n1, api.c",
    )
    run.stopped = {"status": "in progress", "at": "2026-01-01 00:00:00 UTC", "planned": 3}
    results = build_results(records, run)
    assert (results["verdict"], results["exit_code"]) == ("NOT FINISHED", None)


def test_a_stopped_run_names_each_check_and_node_once() -> None:
    """A parametrized check's cases on one node are one name in the not-run list (the count
    is still of tests)."""
    run = RunInfo(started=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    case = {"id": "config.invalid-patch-rejected", "node": "w1"}
    run.stopped = {
        "status": "stopped",
        "at": "2026-01-01 00:00:45 UTC",
        "why": "SIGTERM received",
        "exit_code": 2,
        "planned": 4,
        "not_run": [case, case, {"id": "api.b", "node": "w1"}],
    }
    stopped = run_verdict([rec("api.a", "passed")], run)
    assert stopped.reasons[1] == (
        "3 of 4 planned test(s) not run: config.invalid-patch-rejected on w1, api.b on w1"
    )


def test_an_unreachable_run_does_not_count_blocking_failures() -> None:
    lost = [rec(f"api.c{i}", "error", test=f"t{i}") for i in range(33)]
    gate = apply_gate(lost, "low")
    text = gate.summary(unreachable={f"t{i}" for i in range(33)})
    assert "blocking failure" not in text
    assert "no check reached its target (33 test(s) could not connect" in text


def test_node_names_sort_naturally() -> None:
    names = ["worker-10", "worker-2", "controlplane-1", "worker-1"]
    assert sorted(names, key=natural_key) == ["controlplane-1", "worker-1", "worker-2", "worker-10"]


def test_only_the_emulators_own_marker_means_emulated() -> None:
    # pkg/machinery/version/version.go (v1.13.9): Built is never set, a real reply has "".
    assert not is_emulator_build("")
    assert not is_emulator_build("2026-01-01T00:00:00Z")  # a custom build that sets it
    assert is_emulator_build(EMULATOR_BUILT)


def test_repeated_event_lines_are_shown_once_with_a_count() -> None:
    event = "[Waiting] " + "x" * 300
    assert collapse_repeats(["[Running] up", *[event] * 46, "[Running] up"]) == [
        "[Running] up",
        f"{event}  (x46)",
        "[Running] up",
    ]


def _shard(index: int, stopped: dict[str, Any] | None) -> ShardResults:
    started = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    run = RunInfo(started=started, shard={"index": index, "count": 2})
    run.stopped = stopped
    record = CheckRecord("api.a", "high", "claim", "passed", node=f"n{index}")
    return ShardResults(f"shard-{index}", build_results([record], run))


def test_a_merge_with_a_shard_that_did_not_finish_is_not_passed() -> None:
    stopped = {"status": "stopped", "at": "t", "why": "SIGTERM received", "exit_code": 2}
    records, run = merge_shards([_shard(1, None), _shard(2, {**stopped, "planned": 2})])
    assert run_verdict(records, run).name == "STOPPED"
    killed = {"status": "in progress", "at": "t", "planned": 2}
    records, run = merge_shards([_shard(1, None), _shard(2, killed)])
    assert run_verdict(records, run).name == "NOT FINISHED"
    records, run = merge_shards([_shard(1, None), _shard(2, None)])
    assert run_verdict(records, run).name == "PASSED"
