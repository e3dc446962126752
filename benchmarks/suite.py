"""Wall time of the conformance suite's ``quick`` profile against 3, 30 and 100 emulated nodes,
serial and with pytest-xdist, measured side by side in the same run.

    python benchmarks/suite.py                     # 3, 30 and 100 nodes; -n 0 vs -n 2
    python benchmarks/suite.py --nodes 3,10 --xdist 4 --repeat 3 --time-scale 1
    python benchmarks/suite.py --readme            # README command 1, 2 nodes, real time
    python benchmarks/suite.py --readme --nodes 2,10,30 --time-scale 1

``--readme`` times the README's first command (every check, the emulator's clock at real
time unless ``--time-scale`` says otherwise) and shows it as a ratio of the suite's longest
watch window (the machine hold, node time): every node is watched at once in one window per
run, so the ratio stays near 1 however many nodes there are.

Each measurement is one ``pytest conformance --talos-emulator=CP:W --talos-suite quick``
subprocess (emulator start, collection and every check included), exactly what a user runs.
The table shows the best of ``--repeat`` runs, the time per node, how each column grows
relative to the smallest cluster (the goal: 100 nodes within 2x the 3-node time), and the
peak memory of the serial run (the emulator runs inside it), with the memory each node
above the smallest cluster adds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "conformance"
RUN_TIMEOUT = 1800.0


@dataclass(frozen=True)
class Measurement:
    nodes: int
    workers: int  # 0: serial
    seconds: float
    passed: bool
    peak_mib: float = 0.0  # the run's peak resident memory (emulator included)


def _layout(nodes: int) -> str:
    """CP:W with three control planes once the cluster is big enough for that."""
    controlplanes = 1 if nodes < 5 else 3
    return f"{controlplanes}:{nodes - controlplanes}"


def _plugin_args() -> list[str]:
    installed = any(
        ep.value.startswith("pytest_talos.plugin") for ep in metadata.entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "pytest_talos.plugin"]


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TALOS", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def measure(
    nodes: int, workers: int, scratch: Path, time_scale: float | None, profile: str | None = "quick"
) -> Measurement:
    xdist = ["-n", str(workers), "--dist", "loadgroup"] if workers else ["-p", "no:xdist"]
    suite = ["--talos-suite", profile] if profile else []
    scale = ["--talos-emulator-time-scale", f"{time_scale:g}"] if time_scale else []
    argv = [
        sys.executable,
        "-m",
        "pytest",
        *_plugin_args(),
        str(SUITE),
        f"--talos-emulator={_layout(nodes)}",
        *suite,
        "-q",
        *scale,
        "-p",
        "no:cacheprovider",
        *xdist,
    ]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as output:
        child = subprocess.Popen(
            argv,
            cwd=scratch,
            env=_environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            _, status, usage = _wait4(child.pid, RUN_TIMEOUT)
        except TimeoutError:
            child.kill()
            _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    if child.returncode != 0:
        tail = "\n".join(text.splitlines()[-15:])
        print(f"  !! {nodes} nodes, -n {workers}: exit {child.returncode}\n{tail}", file=sys.stderr)
    # ru_maxrss is KiB on Linux; the largest process of the run (pytest, or an xdist worker)
    return Measurement(nodes, workers, elapsed, child.returncode == 0, usage.ru_maxrss / 1024)


def _wait4(pid: int, timeout: float) -> tuple[int, int, resource.struct_rusage]:
    """os.wait4 with a deadline: the run's exit status and its resource usage."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found, status, usage = os.wait4(pid, os.WNOHANG)
        if found:
            return found, status, usage
        time.sleep(0.2)
    raise TimeoutError


def best(samples: Sequence[Measurement]) -> Measurement:
    return min(samples, key=lambda m: m.seconds)


def table(rows: dict[int, dict[int, Measurement]], workers: int) -> str:
    smallest = min(rows)
    head = (
        f"{'nodes':>5} | {'serial s':>8} | {'x ' + str(smallest) + ' nodes':>9} | "
        f"{f'-n {workers} s':>7} | {'x ' + str(smallest) + ' nodes':>9} | "
        f"{'s/node':>6} | {'peak MiB':>8} | {'MiB/node':>8}"
    )
    lines = [head, "-" * len(head)]
    base, base_parallel = rows[smallest][0], rows[smallest][workers]
    for nodes in sorted(rows):
        serial, parallel = rows[nodes][0], rows[nodes][workers]
        flag = "" if serial.passed and parallel.passed else "  (a run failed)"
        per_node = (
            (serial.peak_mib - base.peak_mib) / (nodes - smallest) if nodes > smallest else 0.0
        )
        lines.append(
            f"{nodes:>5} | {serial.seconds:>8.1f} | {serial.seconds / base.seconds:>8.2f}x | "
            f"{parallel.seconds:>7.1f} | {parallel.seconds / base_parallel.seconds:>8.2f}x | "
            f"{serial.seconds / nodes:>6.2f} | {serial.peak_mib:>8.0f} | "
            f"{per_node:>8.2f}{flag}"
        )
    return "\n".join(lines)


def _hold_window() -> float:
    """Node seconds of the suite's longest watch (the machine hold of upgrade.nodes-running)."""
    sys.path.insert(0, str(REPO))
    from conformance._support.observe import READY_STABLE_FOR

    return READY_STABLE_FOR


def readme_table(rows: dict[int, Measurement], time_scale: float, window: float) -> str:
    """README command 1 per cluster size, as ratios of the watch window and of the smallest."""
    real_window = window / time_scale
    smallest = min(rows)
    head = (
        f"{'nodes':>5} | {'wall s':>7} | {f'x window ({real_window:g}s)':>16} | "
        f"{'growth vs ' + str(smallest):>13}"
    )
    lines = [head, "-" * len(head)]
    for nodes in sorted(rows):
        run = rows[nodes]
        flag = "" if run.passed else "  (the run failed)"
        lines.append(
            f"{nodes:>5} | {run.seconds:>7.1f} | {run.seconds / real_window:>15.2f}x | "
            f"{run.seconds / rows[smallest].seconds:>12.2f}x{flag}"
        )
    return "\n".join(lines)


def readme(sizes: Sequence[int], repeat: int, time_scale: float | None) -> int:
    rows: dict[int, Measurement] = {}
    with tempfile.TemporaryDirectory(prefix="pytest-talos-bench-") as scratch:
        for nodes in sizes:
            samples = [
                measure(nodes, 0, Path(scratch), time_scale, profile=None) for _ in range(repeat)
            ]
            rows[nodes] = best(samples)
            print(f"  {nodes:>3} nodes: {rows[nodes].seconds:.1f}s", file=sys.stderr)
    scale = time_scale or 1.0
    print(
        f"README command 1 (pytest conformance --talos-emulator[=CP:W]), emulator time scale "
        f"{scale:g}x, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    print(readme_table(rows, scale, _hold_window()))
    return 0 if all(m.passed for m in rows.values()) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nodes",
        default=None,
        help="cluster sizes, comma-separated (default 3,30,100; --readme: 2)",
    )
    parser.add_argument(
        "--xdist",
        type=int,
        default=2,
        help="pytest-xdist workers for the parallel column (default 2)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; best is kept")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="the emulator's time scale (default 20, with --readme 1 as the "
        "README runs it; 1 shows the real-time cost of the watch window)",
    )
    parser.add_argument(
        "--readme",
        action="store_true",
        help="time README command 1 (every check; default --nodes 2)",
    )
    args = parser.parse_args(argv)
    nodes_text = args.nodes if args.nodes is not None else ("2" if args.readme else "3,30,100")
    sizes = sorted({int(n) for n in nodes_text.split(",") if n.strip()})
    bad_scale = args.time_scale is not None and args.time_scale <= 0
    if not sizes or min(sizes) < 2 or args.xdist < 1 or args.repeat < 1 or bad_scale:
        parser.error("need cluster sizes >= 2, --xdist >= 1, --repeat >= 1, --time-scale > 0")
    if args.readme:
        return readme(sizes, args.repeat, args.time_scale)
    args.time_scale = args.time_scale or 20.0
    rows: dict[int, dict[int, Measurement]] = {}
    with tempfile.TemporaryDirectory(prefix="pytest-talos-bench-") as scratch:
        for nodes in sizes:
            rows[nodes] = {}
            for workers in (0, args.xdist):
                samples = [
                    measure(nodes, workers, Path(scratch), args.time_scale)
                    for _ in range(args.repeat)
                ]
                rows[nodes][workers] = best(samples)
                spread = (
                    f" (median {statistics.median(s.seconds for s in samples):.1f}s)"
                    if args.repeat > 1
                    else ""
                )
                print(
                    f"  {nodes:>3} nodes, -n {workers}: {rows[nodes][workers].seconds:.1f}s"
                    f"{spread}",
                    file=sys.stderr,
                )
    print(
        f"quick profile, emulator time scale {args.time_scale:g}x, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}"
    )
    print(table(rows, args.xdist))
    return 0 if all(m.passed for row in rows.values() for m in row.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
