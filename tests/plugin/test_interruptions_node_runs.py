"""A real SIGTERM while the suite's try-mode check runs on every node at once.

``config.try-mode-reverts`` changes every target node from threads (one guard each,
``conformance/_support/node_runs.py``). The run here is a real ``pytest`` subprocess running
that check against the emulator's CLI cluster at real time (a 10 s try window); it gets
SIGTERM right after the first change was applied, and every node must have the exact
config bytes it had before, with no journal left.
"""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugin import interruptions as scenarios
from tests.plugin.interruptions import REPO, Emulator, Run


@pytest.fixture(scope="module")
def real_time_emu() -> Iterator[Emulator]:
    with (
        tempfile.TemporaryDirectory(prefix="emulator-") as directory,
        scenarios.emulator(Path(directory), time_scale=1.0) as running,
    ):
        yield running


def test_sigterm_during_the_fleet_try_window_restores_every_node(
    real_time_emu: Emulator, tmp_path: Path
) -> None:
    emu = real_time_emu
    before = {hostname: emu.config(hostname) for hostname in emu.nodes}
    suite_check = REPO / "conformance" / "config" / "test_config.py"
    run = Run(emu, tmp_path, extra=(str(suite_check), "-k", "try_mode_change_reverts"))
    (run.work / "test_change.py").write_text("")  # only the suite's check changes nodes
    run.start()
    run.wait_mark("applied")
    time.sleep(0.3)  # inside the 10 s try window: the nodes run the tried config
    run.signal(signal.SIGTERM)
    code, output = run.finish()
    assert code == pytest.ExitCode.INTERRUPTED, output
    assert "conformance: the try-mode revert on 2 nodes at once" in output
    assert "Terminated: SIGTERM received: stopping like Ctrl-C" in output
    assert "original config restored" in output
    assert {hostname: emu.config(hostname) for hostname in emu.nodes} == before, output
    assert run.journals() == [], "a finished run leaves no journal"
