"""CPU per node of the ``quick`` profile, the kit (suite process) and the emulator apart, and
the wall time, with or without the emulator's latency model, in the same run.

    python benchmarks/fleet_cpu.py                          # 3 and 10 nodes, 0 and 20 ms
    python benchmarks/fleet_cpu.py --nodes 3,30 --latency 20ms
    python benchmarks/fleet_cpu.py --nodes 3 --latency 0,20ms --repeat 2

Each cell starts ``python -m pytest_talos.emulator`` in its own process (time scale 20 unless
``--time-scale``), then runs ``pytest conformance --talosconfig ... --talos-suite quick`` against
it, exactly what a user runs against a real fleet. The suite's CPU is its ``wait4`` resource
usage (every child included); the emulator's is read from ``/proc/<pid>/stat`` just before
the suite starts and just after it ends, so its start-up is left out. The emulator prints
how many calls it served when it stops: its CPU per served call (forwarded hops count as
calls of their own, as each is served). On a shared machine compare rows of one run (the
ratios), not figures across runs; nothing here is asserted in a test.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # its sibling suite.py, as mypy sees it

from suite import _environment, _layout, _plugin_args, _wait4  # noqa: E402

RUN_TIMEOUT = 1800.0
START_TIMEOUT = 120.0
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Cell:
    nodes: int
    latency: str
    wall: float
    suite_user: float
    suite_sys: float
    emulator_cpu: float
    served: int
    passed: bool

    @property
    def suite_cpu(self) -> float:
        return self.suite_user + self.suite_sys


def _cpu_of(pid: int) -> float:
    """utime + stime of a running process, in seconds (/proc/<pid>/stat fields 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _start_emulator(
    nodes: int, latency: str, time_scale: float, scratch: Path
) -> tuple[subprocess.Popen[str], Path]:
    controlplanes, workers = (int(part) for part in _layout(nodes).split(":"))
    talosconfig = scratch / f"talosconfig-{nodes}-{latency}"
    argv = [
        sys.executable,
        "-m",
        "pytest_talos.emulator",
        "--controlplanes",
        str(controlplanes),
        "--workers",
        str(workers),
        "--time-scale",
        f"{time_scale:g}",
        *(["--latency", latency] if latency not in ("0", "0ms") else []),
        "--talosconfig",
        str(talosconfig),
    ]
    child = subprocess.Popen(  # cwd: -m would import from the current directory first
        argv,
        cwd=scratch,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    seen = 0
    while seen < nodes and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError("the emulator ended before it served every node")
        seen += line.rstrip().endswith(":50000")
    return child, talosconfig


def _stop_emulator(child: subprocess.Popen[str]) -> int:
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    found = re.search(r"served (\d+) calls", out or "")
    return int(found[1]) if found else 0


def measure(nodes: int, latency: str, time_scale: float, scratch: Path) -> Cell:
    emulator, talosconfig = _start_emulator(nodes, latency, time_scale, scratch)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *_plugin_args(),
        str(REPO / "conformance"),
        "--talosconfig",
        str(talosconfig),
        "--talos-suite",
        "quick",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
    ]
    try:
        before = _cpu_of(emulator.pid)
        started = time.perf_counter()
        with tempfile.TemporaryFile("w+") as output:
            suite = subprocess.Popen(
                argv, cwd=scratch, env=_environment(), stdout=output, stderr=subprocess.STDOUT
            )
            try:
                _, status, usage = _wait4(suite.pid, RUN_TIMEOUT)
            except TimeoutError:
                suite.kill()
                _, status, usage = os.wait4(suite.pid, 0)
            wall = time.perf_counter() - started
            emulator_cpu = _cpu_of(emulator.pid) - before
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                output.seek(0)
                tail = "\n".join(output.read().splitlines()[-15:])
                print(f"  !! {nodes} nodes, {latency}: exit {code}\n{tail}", file=sys.stderr)
    finally:
        served = _stop_emulator(emulator)
    return Cell(
        nodes, latency, wall, usage.ru_utime, usage.ru_stime, emulator_cpu, served, code == 0
    )


def table(cells: Sequence[Cell]) -> str:
    head = (
        f"{'nodes':>5} | {'latency':>7} | {'wall s':>6} | {'kit CPU/node':>12} | "
        f"{'(user, sys)':>12} | {'emu CPU/node':>12} | {'calls':>6} | {'emu ms/call':>11} | "
        f"{'wall x first':>12}"
    )
    lines = [head, "-" * len(head)]
    first = cells[0]
    for cell in cells:
        per_call = 1000 * cell.emulator_cpu / cell.served if cell.served else 0.0
        flag = "" if cell.passed else "  (the run failed)"
        lines.append(
            f"{cell.nodes:>5} | {cell.latency:>7} | {cell.wall:>6.1f} | "
            f"{cell.suite_cpu / cell.nodes:>12.2f} | "
            f"{f'{cell.suite_user / cell.nodes:.2f}, {cell.suite_sys / cell.nodes:.2f}':>12} | "
            f"{cell.emulator_cpu / cell.nodes:>12.2f} | {cell.served:>6} | {per_call:>11.2f} | "
            f"{cell.wall / first.wall:>11.2f}x{flag}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="3,10", help="cluster sizes (default 3,10)")
    parser.add_argument("--latency", default="0,20ms", help="round-trip times (default 0,20ms)")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; least CPU kept")
    args = parser.parse_args(argv)
    sizes = sorted({int(n) for n in args.nodes.split(",") if n.strip()})
    latencies = [text.strip() for text in args.latency.split(",") if text.strip()]
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="pytest-talos-fleet-") as scratch:
        for latency in latencies:
            for nodes in sizes:
                runs = [
                    measure(nodes, latency, args.time_scale, Path(scratch))
                    for _ in range(args.repeat)
                ]
                cells.append(min(runs, key=lambda c: c.suite_cpu))
                print(f"  {nodes} nodes, {latency}: {cells[-1].wall:.1f}s", file=sys.stderr)
    print(
        f"quick profile, emulator in its own process, time scale {args.time_scale:g}x, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}"
    )
    print(table(cells))
    return 0 if all(cell.passed for cell in cells) else 1


if __name__ == "__main__":
    raise SystemExit(main())
