"""The services checks against nodes whose clock ran 2 h ahead until their first time sync
stepped it back (emulator variant ``clock-stepped``): the boot's first events carry later
times than its end, and the node's tail_seconds search may send its whole buffer. A healthy
node like that passes; the window check says it could not compare the older events."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.suite_runner import SUITE, run_suite

WINDOW = "services.events-cover-window"


def test_a_node_whose_clock_stepped_back_passes_the_services_checks(tmp_path: Path) -> None:
    run = run_suite(
        ["--talos-emulator", "--talos-emulator-variant", "clock-stepped"],
        tmp_path,
        paths=(str(SUITE / "services"),),
    )
    assert run.returncode == 0, run.describe()
    assert not run.broken(), run.describe()
    windows = [check for check in run.checks if check["id"] == WINDOW]
    assert len(windows) == 2  # one control plane, one worker
    for check in windows:
        note = check["evidence"]["not compared"]
        assert note.startswith("the node's clock stepped back from "), note
        assert note.endswith(
            ": events older than the window cannot be told (the node's tail_seconds search "
            "assumes event times that only increase)"
        ), note
