"""Nothing lost, whatever stops the run: real signals sent to real pytest runs.

The emulator runs from its CLI (``python -m pytest_talos.emulator``) as an outside cluster;
each test starts a pytest subprocess with a changing test, signals it at a chosen point
(see :mod:`tests.plugin.interruptions`), and compares the worker's config bytes read over
the API before and after.
"""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_talos.journal import read_journal
from pytest_talos.patches import apply_patches
from tests.plugin import interruptions as scenarios
from tests.plugin.interruptions import QUIET, Emulator, Run

RESTORING = "talos: restoring talos-default-worker-1, please wait"


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with (
        tempfile.TemporaryDirectory(prefix="emulator-") as directory,
        scenarios.emulator(Path(directory)) as running,
    ):
        yield running


def _restored(outcome: scenarios.Outcome) -> None:
    assert outcome.same, outcome.output
    assert outcome.journals == [], "a finished run leaves no journal"


@pytest.mark.parametrize("point", ["after-change", "before-change", "try-window", "check-wait"])
def test_one_ctrl_c_restores_the_exact_bytes(emu: Emulator, point: str) -> None:
    outcome = scenarios.sigint_once(emu, point)
    assert outcome.returncode == pytest.ExitCode.INTERRUPTED, outcome.output
    assert "KeyboardInterrupt" in outcome.output
    _restored(outcome)


@pytest.mark.parametrize("point", ["after-change", "try-window", "pass"])
def test_more_ctrl_c_during_the_restore_are_deferred(emu: Emulator, point: str) -> None:
    outcome = scenarios.sigint_twice(emu, point)
    assert outcome.returncode == pytest.ExitCode.INTERRUPTED, outcome.output
    assert outcome.output.count(RESTORING) == 2, outcome.output
    assert "Traceback" not in outcome.output
    _restored(outcome)


@pytest.mark.parametrize("point", ["after-change", "try-window", "then-sigint"])
def test_sigterm_is_handled_like_ctrl_c(emu: Emulator, point: str) -> None:
    outcome = scenarios.sigterm(emu, point)
    assert outcome.returncode == pytest.ExitCode.INTERRUPTED, outcome.output
    assert "Terminated: SIGTERM received: stopping like Ctrl-C" in outcome.output
    assert "talos: talos-default-worker-1: original config restored" in outcome.output
    if point == "then-sigint":
        assert "SIGTERM deferred" in outcome.output
        assert "SIGINT deferred" in outcome.output
    _restored(outcome)


@pytest.mark.parametrize(
    ("point", "how"),
    [
        ("after-change", "command"),
        ("after-change", "pytest"),
        ("after-change", "next-run"),
        ("try-window", "command"),
        ("mid-restore", "command"),
    ],
)
def test_sigkill_leaves_a_journal_that_recovery_uses(emu: Emulator, point: str, how: str) -> None:
    outcome = scenarios.sigkill_then_recover(emu, point, how)
    assert outcome.returncode == -signal.SIGKILL
    assert "a run (pid " in outcome.output
    assert "stopped before restoring its original config" in outcome.output
    assert "it still runs a config this kit left there; its original config is back" in (
        outcome.output
    )
    _restored(outcome)


def _killed_after_change(emu: Emulator, work: Path) -> Run:
    run = Run(emu, work).start()
    run.wait_mark("applied")
    run.signal(signal.SIGKILL)
    run.finish()
    return run


def test_the_journal_is_private_and_holds_the_original(emu: Emulator, tmp_path: Path) -> None:
    before = emu.config()
    run = _killed_after_change(emu, tmp_path)
    [journal] = run.journals()
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(journal.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(run.state.stat().st_mode) == 0o700
    record = read_journal(journal)
    assert record.original_bytes == before
    assert record.node == scenarios.WORKER
    assert record.talos_version == "v1.13.9"
    assert [change.state for change in record.changes] == ["applied"]
    assert b"interrupted" in emu.config()
    _recover(run)
    assert emu.config() == before


def _recover(run: Run, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_talos.recover", f"--state-dir={run.state}", *extra],
        cwd=run.work,
        env=run.env,
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_recovery_refuses_a_node_someone_changed_since(emu: Emulator, tmp_path: Path) -> None:
    before = emu.config()
    run = _killed_after_change(emu, tmp_path)
    theirs = apply_patches(before, [{"machine": {"nodeLabels": {"someone": "else"}}}])
    emu.apply(theirs)
    try:
        done = _recover(run)
        assert done.returncode == 1, done.stdout
        assert "which is neither its original config" in done.stdout
        assert "someone changed the node since, so it is not restored" in done.stdout
        assert "journal kept:" in done.stdout
        assert emu.config() == theirs  # their change is left alone
        assert run.journals(), "the journal stays"
        again = subprocess.run(  # a next run refuses to snapshot that node
            run.args,
            cwd=run.work,
            env=run.env,
            text=True,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert "may still run a config a killed run left on it" in again.stdout
        assert emu.config() == theirs
        assert _recover(run, "--discard", run.journals()[0].stem).returncode == 0
        assert run.journals() == []
    finally:
        emu.apply(before)
    assert emu.config() == before


def test_a_next_run_without_changes_allowed_only_warns(emu: Emulator, tmp_path: Path) -> None:
    before = emu.config()
    run = _killed_after_change(emu, tmp_path)
    (run.work / "test_change.py").write_text("def test_nothing():\n    pass\n")
    args = [a for a in run.args if a not in ("--talos-allow", "mutating")]
    done = subprocess.run(
        args, cwd=run.work, env=run.env, text=True, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout
    assert "has a journal from an interrupted run" in done.stdout
    assert "pytest --talos-recover" in done.stdout
    assert b"interrupted" in emu.config()  # untouched without --talos-allow mutating
    assert _recover(run).returncode == 0
    assert emu.config() == before


def test_recover_with_nothing_to_do(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *QUIET,
            "--talos-recover",
            f"--talos-state-dir={tmp_path}",
        ],
        cwd=tmp_path,
        env=scenarios.child_env(HOME=str(tmp_path)),
        text=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert f"talos-recover: no journal in {tmp_path}/journal: nothing to recover" in done.stdout


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.slow
def test_xdist_workers_never_overlap_on_a_node(emu: Emulator, workers: int) -> None:
    started = time.monotonic()
    outcome = scenarios.xdist(emu, workers)
    assert outcome.returncode == 0, outcome.output
    assert f"{8 + scenarios.XDIST_CHECKS} passed" in outcome.output
    _restored(outcome)
    assert time.monotonic() - started < 120


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_xdist_workers_restore_when_the_process_group_is_signalled(
    emu: Emulator, signum: int
) -> None:
    outcome = scenarios.xdist_signal(emu, signum)
    assert outcome.returncode == pytest.ExitCode.INTERRUPTED, outcome.output
    _restored(outcome)


def test_the_emulator_stayed_quiet_through_all_of_it(emu: Emulator) -> None:
    """Clients killed mid-call must not fill the emulator's stderr."""
    assert emu.stderr().strip() == ""
