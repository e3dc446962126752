"""decide_verdict: what a conformance run may claim (docs/conformance.md, exit codes)."""

from __future__ import annotations

from typing import Any

from pytest_talos.reporting import (
    EXIT_CODES,
    CheckRecord,
    Outcome,
    Severity,
    apply_gate,
    decide_verdict,
)


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
