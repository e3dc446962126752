"""The ``quick`` profile is the CI gate: the service defects a CI user cares about (a service
that flaps between healthy and unhealthy, one stuck before it runs, an empty log) fail it,
not only the ``full`` profile."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.suite_runner import MATRIX_ARGS, run_suite

FAULTS = ("health-flap-running", "service-stuck-preparing", "empty-logs")


def test_quick_profile_catches_flapping_stuck_and_silent_services(tmp_path: Path) -> None:
    args = ["--talos-emulator", "--talos-suite", "quick", *MATRIX_ARGS]
    for fault in FAULTS:
        args += ["--talos-emulator-fault", fault]
    run = run_suite(args, tmp_path / "report")
    assert run.results is not None, run.describe()
    broken = run.broken()
    for check in (
        "services.expected-running-healthy",
        "services.no-recent-restarts",
        "services.logs-readable",
    ):
        assert broken.get(check) == "failed", run.describe()
    failed_on = {
        c.get("node")
        for c in run.checks
        if c["id"] == "services.expected-running-healthy" and c["outcome"] == "failed"
    }
    assert len(failed_on) == 2, run.describe()  # the flap on both nodes, not only trustd's
