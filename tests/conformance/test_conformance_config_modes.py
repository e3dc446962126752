"""The config checks' other modes and the persistent config, run as a user runs the suite:
each apply fault they were strengthened for breaks the one check it must (and says why), and
config.persisted-matches-active runs without a desired state; a link too slow for the try
timers gives those checks no verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_talos.reporting.reach import READ_TOO_LATE
from tests.conformance.suite_runner import SUITE, SuiteRun, run_suite

pytestmark = pytest.mark.slow

CONFIG = str(SUITE / "config")
STAGED = "config.persisted-matches-active"
TRY, CANCEL = "config.try-mode-reverts", "config.apply-cancels-try-revert"
CONTROL_PLANE = "talos-default-controlplane-1"


def _run(tmp_path: Path, *args: str) -> SuiteRun:
    tmp_path.mkdir(exist_ok=True)
    return run_suite(
        ["--talos-emulator", "--talos-allow", "mutating", *args],
        tmp_path / "report",
        paths=[CONFIG],
    )


# fault, the tests that show it (-k), the check it breaks, and a line of its failure
CASES = [
    (
        "try-reverts-early",
        "try_mode_change_reverts",
        "config.try-mode-reverts",
        "the try-mode change was reverted early: ",
    ),
    (
        "try-persists-config",
        "try_mode_change_reverts",
        "config.try-mode-reverts",
        "the try-mode apply changed the config the next boot loads (during the try window; ",
    ),
    (
        "staged-skips-validation",
        "invalid_label_patch",
        "config.invalid-patch-rejected",
        "accepted (staged): Staged configuration to be applied after the next reboot",
    ),
    (
        "try-accepts-reboot-fields",
        "reboot_only_fields",
        "config.no-reboot-refuses-reboot-fields",
        "accepted (try): Applied configuration without a reboot",
    ),
    (
        "staged-dry-run-applies",
        "dry_run",
        "config.dry-run-changes-nothing",
        "the persistent config (loaded at the next boot): its bytes changed within 10 node seconds "
        "(restored)",
    ),
    (
        "no-reboot-not-persisted",
        "label_patch_applies",
        "config.label-applies-without-reboot",
        "the label was applied to the active config only: the next boot would load a config "
        "without it",
    ),
    (
        "apply-during-try-dropped",
        "try_window_cancels",
        "config.apply-cancels-try-revert",
        "the regular apply during the try window did not land: its label is not in the active "
        "config",
    ),
]


@pytest.mark.parametrize(("fault", "select", "check", "line"), CASES, ids=[c[0] for c in CASES])
def test_each_apply_fault_breaks_its_check(
    tmp_path: Path, fault: str, select: str, check: str, line: str
) -> None:
    result = _run(tmp_path, "--talos-emulator-fault", fault, "-k", select)
    assert result.broken() == {check: "failed"}, result.describe()
    assert line in result.output, result.describe()


def test_the_new_cases_pass_on_a_healthy_node(tmp_path: Path) -> None:
    result = _run(tmp_path, "-k", "invalid_label_patch or reboot_only_fields or dry_run")
    assert result.broken() == {}, result.describe()
    cases = {c["test"].split("[", 1)[1] for c in result.checks if "[" in c.get("test", "")}
    for case in ("no-reboot", "staged", "env-try"):
        assert any(case in name for name in cases), cases


def test_persisted_matches_active_needs_no_desired_state(tmp_path: Path) -> None:
    healthy = _run(tmp_path / "healthy", "-k", "persistent_config_matches")
    assert {c["outcome"] for c in healthy.checks if c["id"] == STAGED} == {"passed"}
    staged = _run(tmp_path / "staged", "--talos-emulator-fault", "config-staged", "-k", "drift")
    assert staged.broken() == {STAGED: "failed"}, staged.describe()
    assert "a change is waiting for the next reboot: the persistent config differs" in (
        staged.output
    )


def test_a_link_too_slow_for_the_try_timers_gives_no_verdict_either_way(tmp_path: Path) -> None:
    # 0.25 s per round trip at 200x: timers of 10, 20 and 40 node seconds (0.05 to 0.2 s)
    # all end before an apply and a read come back, when an unchanged config may already be
    # the revert. Neither check may fail (or pass) on what it could not see.
    result = _run(
        tmp_path,
        "--talos-emulator-time-scale",
        "200",
        "--talos-emulator-latency",
        "250ms",
        "--talos-nodes",
        CONTROL_PLANE,
        "-k",
        "try_mode_change_reverts or try_window_cancels",
    )
    assert result.results is not None, result.describe()
    outcomes = {c["id"]: c["outcome"] for c in result.checks}
    assert outcomes == {TRY: "skipped", CANCEL: "skipped"}, result.describe()
    for check in result.checks:
        assert check["message"].startswith(f"{READ_TOO_LATE}[node {CONTROL_PLANE}] the "), check
        assert (
            "the node was read too late, when the revert may already have happened"
            in (check["message"])
        )
    reasons = result.results["verdict_reasons"]
    assert (
        "not judged (this machine read the node too late for the node's own timers; run on a "
        f"less busy machine or nearer the nodes): 2 check(s): {CANCEL}, {TRY}"
    ) in reasons, reasons
