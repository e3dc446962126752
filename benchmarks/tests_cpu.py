"""Where README command 2's CPU goes: each test file's CPU seconds in one run of the tests.

    python benchmarks/tests_cpu.py [-n auto] [--top 25] [pytest arguments...]

Runs ``pytest`` on the project's tests with this module as a plugin (``-p
benchmarks.tests_cpu``). Around every test, each pytest process adds up its own CPU, that of
the children it has waited for, and the CPU each suite run forked from the tests' fork server
reported (``tests/conformance/forkserver.py``: those children are the server's, not the test
process's, so ``RUSAGE_CHILDREN`` never sees them). At the end it prints the files that used
the most CPU, with their tests' wall seconds, and the sum of all tests. A module fixture's
CPU is charged to the test that first used it (the fault matrix's runs: to its first test).

Other work on the machine shows up as wall time, not as CPU: the split is meaningful on a
busy machine, the wall seconds are not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
OUT_ENV = "PYTEST_TALOS_TESTS_CPU_DIR"

_forked_cpu = [0.0]  # CPU seconds the forked suite runs of this process reported
_lock = threading.Lock()
_rows: dict[str, tuple[float, float]] = {}  # test id: (CPU s, wall s)


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with _lock:
        forked = _forked_cpu[0]
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked


# --------------------------------------------------------------------------- the plugin


def pytest_configure(config: pytest.Config) -> None:
    from tests.conformance import forkserver

    run_forked = forkserver.run_forked

    def counted(*args: Any, **kwargs: Any) -> forkserver.EndedRun:
        ended = run_forked(*args, **kwargs)
        with _lock:
            _forked_cpu[0] += ended.cpu_seconds or 0.0
        return ended

    forkserver.run_forked = counted


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    cpu, wall = _cpu_now(), time.monotonic()
    try:
        return (yield)
    finally:
        _rows[item.nodeid] = (_cpu_now() - cpu, time.monotonic() - wall)


def pytest_unconfigure(config: pytest.Config) -> None:
    out = os.environ.get(OUT_ENV)
    if out:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(out, f"{worker}.json").write_text(json.dumps(_rows))


# --------------------------------------------------------------------------- the command


def _split(out: Path) -> tuple[Counter[str], Counter[str], Counter[str]]:
    cpu: Counter[str] = Counter()
    wall: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for part in out.glob("*.json"):
        for test, (seconds, walled) in json.loads(part.read_text()).items():
            where = test.split("::", 1)[0]
            cpu[where] += seconds
            wall[where] += walled
            count[where] += 1
    return cpu, wall, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="files to list (default 25)")
    known, pytest_args = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="pytest-talos-tests-cpu-") as tmp:
        env = dict(os.environ, **{OUT_ENV: tmp})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "benchmarks.tests_cpu", *pytest_args],
            cwd=ROOT,
            env=env,
            check=False,
        )
        elapsed = time.monotonic() - started
        cpu, wall, count = _split(Path(tmp))
    total = sum(cpu.values())
    print(f"\npytest exit {done.returncode}, {elapsed:.0f} s; the tests' CPU: {total:.0f} s")
    print(f"{'CPU s':>8} {'share':>6} {'wall s':>8} {'tests':>6}  file")
    for where, seconds in cpu.most_common(known.top):
        share = seconds / total if total else 0.0
        print(f"{seconds:8.1f} {share:6.1%} {wall[where]:8.1f} {count[where]:6d}  {where}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
