"""A run that does not finish never reports PASSED: real suite runs in real processes,
stopped by real signals (SIGINT, SIGTERM, SIGKILL), by ``-x`` and by a crash in a hook.

The inner run loads a small plugin (``-p stopmark``) that drops a file after each test, so
that the signal lands after some checks ran and before the others; nothing else is changed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.suite_runner import MATRIX_ARGS, SUITE, plugin_args, subprocess_env

STOPMARK = """
import os, pathlib, time

MARKS = pathlib.Path(os.environ["STOPMARK_DIR"])
CRASH_AFTER = int(os.environ.get("STOPMARK_CRASH_AFTER", "0"))
_done = []


FINISH_PAUSE = float(os.environ.get("STOPMARK_FINISH_PAUSE", "0"))


def pytest_sessionfinish(session):
    if FINISH_PAUSE:  # a window for a signal while the run finishes
        (MARKS / "finishing").write_text("")
        time.sleep(FINISH_PAUSE)


def pytest_runtest_logfinish(nodeid, location):
    _done.append(nodeid)
    (MARKS / f"done-{len(_done)}").write_text(nodeid)
    if CRASH_AFTER and len(_done) == CRASH_AFTER:
        raise RuntimeError("a plugin hook crashed")
"""
AREAS = [str(SUITE / "immutability"), str(SUITE / "api"), str(SUITE / "services")]


def _start(
    tmp_path: Path, *args: str, crash_after: int = 0, finish_pause: float = 0
) -> subprocess.Popen[str]:
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "stopmark.py").write_text(STOPMARK)
    env = subprocess_env(
        {
            "STOPMARK_DIR": str(marks),
            "STOPMARK_CRASH_AFTER": str(crash_after),
            "STOPMARK_FINISH_PAUSE": str(finish_pause),
        }
    )
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *plugin_args(),
        "-p",
        "stopmark",
        *AREAS,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        "-o",
        "filterwarnings=",
        "-q",
        "--talos-emulator",
        "--talos-emulator-time-scale",
        "20",
        *MATRIX_ARGS,
        "--talos-report",
        str(tmp_path / "report"),
        *args,
    ]
    return subprocess.Popen(
        argv, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _wait_for(path: Path, process: subprocess.Popen[str], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, f"no {path.name} after {seconds}s"
        time.sleep(0.05)


def _results(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "report" / "results.json").read_text())
    return data


def _assert_stopped(tmp_path: Path, returncode: int, why: str) -> dict[str, Any]:
    results = _results(tmp_path)
    assert results["verdict"] == "STOPPED", results["verdict_reasons"]
    assert results["exit_code"] == returncode
    reasons = " ".join(results["verdict_reasons"])
    assert why in reasons
    assert "the run stopped at " in reasons
    stopped = results["run"]["stopped"]
    assert stopped["not_run"], "the checks it did not run are listed"
    assert f"{len(stopped['not_run'])} of {stopped['planned']} planned test(s) not run" in reasons
    html = (tmp_path / "report" / "report.html").read_text()
    assert '<div class="verdict STOPPED">STOPPED</div>' in html
    assert 'class="verdict PASSED"' not in html
    assert "**Verdict: STOPPED**" in (tmp_path / "report" / "report.md").read_text()
    return results


@pytest.mark.parametrize(
    ("signum", "why"),
    [
        (signal.SIGTERM, "SIGTERM received"),
        (signal.SIGINT, "interrupted by Ctrl-C (SIGINT)"),
    ],
)
def test_a_signalled_run_reports_stopped_with_its_exit_code(
    tmp_path: Path, signum: signal.Signals, why: str
) -> None:
    process = _start(tmp_path)
    _wait_for(tmp_path / "marks" / "done-5", process)
    process.send_signal(signum)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output
    _assert_stopped(tmp_path, process.returncode, why)
    assert "conformance: verdict STOPPED (exit 2): the run stopped at " in output


def test_stop_after_first_failure_is_stopped_not_passed(tmp_path: Path) -> None:
    process = _start(tmp_path, "-x", "--talos-emulator-fault", "extra-port")
    output = process.communicate(timeout=180)[0]
    assert process.returncode == pytest.ExitCode.TESTS_FAILED, output
    _assert_stopped(tmp_path, process.returncode, "stopping after 1 failures (-x/--maxfail)")


def test_a_crash_in_a_hook_is_stopped(tmp_path: Path) -> None:
    process = _start(tmp_path, crash_after=4)
    output = process.communicate(timeout=180)[0]
    assert process.returncode == pytest.ExitCode.INTERNAL_ERROR, output
    _assert_stopped(
        tmp_path,
        process.returncode,
        "a crash (internal error: RuntimeError: a plugin hook crashed)",
    )


def test_a_killed_run_leaves_a_not_finished_report(tmp_path: Path) -> None:
    process = _start(tmp_path)
    _wait_for(tmp_path / "marks" / "done-3", process)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    results = _results(tmp_path)
    assert results["verdict"] == "NOT FINISHED"
    assert results["exit_code"] is None
    assert "never completed this report" in results["verdict_reasons"][0]
    assert results["run"]["stopped"]["planned"] > 3
    html = (tmp_path / "report" / "report.html").read_text()
    assert '<div class="verdict NOT-FINISHED">NOT FINISHED</div>' in html


def test_a_sigterm_while_the_run_finishes_lets_the_report_complete(tmp_path: Path) -> None:
    """Every test ran: a SIGTERM while the reports are written (a CI job cancelled at the
    very end) must neither cut them short nor end in a traceback; the process exits with
    the code the report gives."""
    process = _start(tmp_path, finish_pause=1.5)
    _wait_for(tmp_path / "marks" / "finishing", process)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == pytest.ExitCode.OK, output
    assert "Traceback" not in output, output
    assert "Terminated" not in output, output
    assert "talos: SIGTERM received while the run finishes" in output
    results = _results(tmp_path)
    assert (results["verdict"], results["exit_code"]) == ("PASSED", 0)
    assert "conformance: verdict PASSED (exit 0)" in output
