"""Run the conformance suite in a new process, as a user would, and read its results.json.

The process is forked from a server that has the heavy third-party libraries imported
already (:mod:`tests.conformance.forkserver`, which says when a plain ``python -m pytest``
subprocess is used instead). Every run gets ``-p no:cacheprovider`` (no .pytest_cache in
the checkout), ``-p no:hypothesispytest`` (the suite has no use for hypothesis's plugin,
which costs 0.2 s of CPU a run to import), a report directory, and a deadline. The plugin
is loaded through its entry point when pytest-talos is installed, else with
``-p pytest_talos.plugin``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.conformance import forkserver

__all__ = [
    "MATRIX_ARGS",
    "REPO",
    "SUITE",
    "TIME_SCALE",
    "SuiteRun",
    "plugin_args",
    "run_pytest",
    "run_suite",
    "subprocess_env",
    "target_args",
]

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "conformance"
TIME_SCALE = "20"  # the emulator's clock runs 20x: try windows and crash loops in a blink
# (added to every run that starts the emulator: --talos-emulator-time-scale)
# Make every run deterministic: the whole life of the emulator is "recent history", and the
# watch lasts longer than the slowest periodic fault (a 30 s flap, plus its 5 s restart).
# Every run also compares each node with the desired state the emulator was generated from,
# so the drift checks pass healthy and under every fault that leaves the configs alone.
MATRIX_ARGS = (
    "--talos-restart-window",
    "100000",
    "--talos-observe",
    "40",
    "--talos-desired",
    "emulator:",
)
RUN_TIMEOUT = 240.0


@cache
def plugin_args() -> tuple[str, ...]:
    installed = any(
        ep.value.startswith("pytest_talos.plugin") for ep in metadata.entry_points(group="pytest11")
    )
    return () if installed else ("-p", "pytest_talos.plugin")


def subprocess_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TALOS", "PYTEST_ADDOPTS", "PYTEST_XDIST"))
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


@dataclass
class SuiteRun:
    args: tuple[str, ...]
    returncode: int
    output: str
    results: dict[str, Any] | None
    seconds: float = 0.0  # the run's wall time (for the fault matrix's timing table)
    cpu_seconds: float | None = None  # a forked run's CPU, as it reported (else unknown)

    @property
    def checks(self) -> list[dict[str, Any]]:
        return list(self.results["checks"]) if self.results else []

    def outcomes(self) -> dict[str, set[str]]:
        """``{check id: {outcomes on the nodes it ran on}}``."""
        found: dict[str, set[str]] = {}
        for check in self.checks:
            found.setdefault(check["id"], set()).add(check["outcome"])
        return found

    def broken(self) -> dict[str, str]:
        """Checks that did not pass or skip: ``{id: "failed" | "error"}`` (error wins)."""
        found: dict[str, str] = {}
        for check in self.checks:
            if check["outcome"] in ("failed", "error") and found.get(check["id"]) != "error":
                found[check["id"]] = check["outcome"]
        return found

    def describe(self) -> str:
        tail = "\n".join(self.output.splitlines()[-40:])
        return f"pytest {' '.join(self.args)} -> exit {self.returncode}\n{tail}"


def run_suite(
    args: Sequence[str],
    report_dir: Path,
    *,
    paths: Sequence[str] = (str(SUITE),),
    env: Mapping[str, str] | None = None,
    timeout: float = RUN_TIMEOUT,
    cwd: Path | None = None,
) -> SuiteRun:
    """``python -m pytest <suite> <args> --talos-report <report_dir>``; never raises on
    failing checks (read ``returncode`` and ``results``)."""
    uses_emulator = any(a == "--talos-emulator" or a.startswith("--talos-emulator=") for a in args)
    scale = ("--talos-emulator-time-scale", TIME_SCALE) if uses_emulator else ()
    # The project's own warning filter (every warning an error) is for its tests: the suite
    # runs with none, as in a user's checkout, so its own warnings (an expiring
    # certificate) stay warnings it reports.
    argv = (
        *plugin_args(),
        *paths,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:hypothesispytest",
        "-o",
        "filterwarnings=",
        "-q",
        "-rfEsx",
        "--talos-report",
        str(report_dir),
        *scale,
        *args,
    )
    started = time.monotonic()
    ended = run_pytest(argv, cwd=cwd or report_dir.parent, env=subprocess_env(env), timeout=timeout)
    output = ended.stdout + ended.stderr
    if ended.timed_out:
        return SuiteRun(tuple(argv), -1, f"timed out after {timeout:g}s\n{output}", None, timeout)
    results_file = report_dir / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else None
    seconds = time.monotonic() - started
    return SuiteRun(tuple(argv), ended.returncode, output, results, seconds, ended.cpu_seconds)


def run_pytest(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
) -> forkserver.EndedRun:
    """``python -m pytest <argv>``: forked from the fork server where it can be, else a
    plain subprocess (:func:`tests.conformance.forkserver.usable` says when)."""
    if forkserver.usable(env):
        return forkserver.run_forked(argv, cwd=cwd, env=env, timeout=timeout)
    return _subprocess(argv, cwd, env, timeout)


def _subprocess(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float
) -> forkserver.EndedRun:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        return forkserver.EndedRun(-1, output, "", timed_out=True)
    return forkserver.EndedRun(done.returncode, done.stdout, done.stderr, timed_out=False)


def target_args(emulator: Any) -> list[str]:
    """Options that point the suite at an emulator started in this process, as if it were a
    real cluster (talosconfig + endpoint; no ``--talos-emulator``). The suite learns the
    emulated clock's rate from the talosconfig, which advertises it (pki.TIME_SCALE_KEY)."""
    return ["--talosconfig", str(emulator.talosconfig_path), "--talos-endpoint", emulator.endpoint]
