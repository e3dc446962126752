"""Time a full 1-65535 TCP connect scan: pytest_talos.ports side by side with nmap -sT -T4.

    python benchmarks/portscan.py [--runs 3] [--no-nmap]          # every target shape
    python benchmarks/portscan.py --address 127.0.0.77 --ports 50000,6443

By default every target shape is measured in one run: an IPv4 address (127.0.0.77) and
IPv6 ``::1``, each with few (4) and with many (200) listeners on ports the kernel picks;
the last table gives ours / nmap per shape (goal <= 0.5, must be <= 1.0).
Listeners are opened on a loopback address of the benchmark's own, then
each tool scans every port of that address ``--runs`` times, alternating, in the same run.
Both must find the listeners; the open-port sets of the two tools must be equal (a
wildcard listener of some other program shows up in both). Our scanner is also timed in
baseline mode (``--baseline``), which must leave exactly the benchmark's listeners.

nmap is used when it is on PATH (``nmap -sT -p- -T4 -n -Pn --open``, ``-6`` for IPv6);
when it is not, the script says so and times ours only. It never installs anything.
Only loopback addresses are scanned.

To time a running emulated node instead, call :func:`bench_host` with its address and the
ports it should have open (see ``--host``/``--expect``).
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    from pytest_talos.errors import TalosError
    from pytest_talos.ports import scan
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pytest_talos.errors import TalosError
    from pytest_talos.ports import scan

DEFAULT_ADDRESS = "127.0.0.77"
DEFAULT_BASELINE = "127.0.0.254"
TALOS_PORTS = (6443, 10250, 50000, 50001)
NMAP_DEADLINE = 600.0
NMAP_FLAGS = ("-sT", "-p-", "-T4", "-n", "-Pn", "--open")
NMAP_TOOL = "nmap " + " ".join(NMAP_FLAGS)
SHAPES = (
    ("IPv4", DEFAULT_ADDRESS, 4),
    ("IPv4", DEFAULT_ADDRESS, 200),
    ("IPv6", "::1", 4),
    ("IPv6", "::1", 200),
)


@dataclass(frozen=True)
class Row:
    """One tool's timings and what it found."""

    tool: str
    times: tuple[float, ...]
    found: frozenset[int]

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@contextmanager
def listeners(address: str, ports: Sequence[int]) -> Iterator[list[int]]:
    """Listen on ``address`` at each port (0: one the kernel picks) for the duration of the
    block, which gets the ports listened on."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    opened: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket(family, socket.SOCK_STREAM)
            opened.append(sock)
            try:
                sock.bind((address, port))
            except OSError as exc:
                raise SystemExit(
                    f"cannot listen on {address}:{port} ({exc.strerror}); "
                    "pick another --address or free the port"
                ) from None
            sock.listen(128)
        yield sorted(sock.getsockname()[1] for sock in opened)
    finally:
        for sock in opened:
            sock.close()


def ours(host: str, *, baseline: str | None = None) -> Callable[[], frozenset[int]]:
    def run() -> frozenset[int]:
        return frozenset(scan(host, "1-65535", baseline_host=baseline).open_ports)

    return run


def nmap(host: str) -> Callable[[], frozenset[int]]:
    def run() -> frozenset[int]:
        family = ["-6"] if ":" in host else []
        command = ["nmap", *family, *NMAP_FLAGS, "-oG", "-", host]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=NMAP_DEADLINE, check=True
        )
        return frozenset(int(port) for port in re.findall(r"(\d+)/open/tcp", done.stdout))

    return run


def time_tools(tools: dict[str, Callable[[], frozenset[int]]], runs: int) -> dict[str, Row]:
    """Run each tool ``runs`` times, alternating, so machine noise hits all of them."""
    times: dict[str, list[float]] = {name: [] for name in tools}
    found: dict[str, frozenset[int]] = {}
    for _ in range(runs):
        for name, run in tools.items():
            started = time.perf_counter()
            result = run()
            times[name].append(time.perf_counter() - started)
            if found.setdefault(name, result) != result:
                print(f"warning: {name} found different ports between runs", file=sys.stderr)
    return {name: Row(name, tuple(times[name]), found[name]) for name in tools}


def bench_host(
    host: str,
    expected: Sequence[int],
    *,
    runs: int = 3,
    baseline: str | None = DEFAULT_BASELINE,
    use_nmap: bool = True,
) -> tuple[list[Row], list[str]]:
    """Time full scans of ``host`` (e.g. an emulated node) and check what they find.

    Returns the rows and a list of problems (empty when every check holds): each tool must
    find ``expected``; ours and nmap must agree; in baseline mode ours must find exactly
    ``expected``.
    """
    _require_loopback(host)
    tools = {"pytest_talos.ports": ours(host)}
    if baseline is not None and (":" in baseline) == (":" in host):
        _require_loopback(baseline)
        tools[f"pytest_talos.ports --baseline {baseline}"] = ours(host, baseline=baseline)
    if use_nmap and shutil.which("nmap"):
        tools[NMAP_TOOL] = nmap(host)
    rows = list(time_tools(tools, runs).values())
    return rows, _problems(rows, frozenset(expected))


def _problems(rows: Sequence[Row], expected: frozenset[int]) -> list[str]:
    problems = []
    plain = [row for row in rows if "--baseline" not in row.tool]
    for row in rows:
        if not expected <= row.found:
            problems.append(f"{row.tool} missed {sorted(expected - row.found)}")
        if "--baseline" in row.tool and row.found != expected:
            problems.append(f"{row.tool} found {sorted(row.found)}, expected {sorted(expected)}")
    if len({row.found for row in plain}) > 1:
        sets = "; ".join(f"{row.tool}: {sorted(row.found)}" for row in plain)
        problems.append(f"the tools disagree: {sets}")
    return problems


def _require_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise SystemExit(f"{host!r} is not a loopback address; this benchmark scans only those")


def print_table(rows: Sequence[Row], expected: Sequence[int]) -> None:
    width = max(len(row.tool) for row in rows)
    print(f"{'tool':<{width}}  {'best s':>7}  {'median s':>8}  runs  open ports found")
    for row in rows:
        extra = sorted(row.found - set(expected))
        mine = sorted(row.found & set(expected))
        found = ",".join(map(str, mine)) if len(mine) <= 8 else f"{len(mine)} listeners"
        if extra:
            found += f" (+ not ours: {','.join(map(str, extra))})"
        print(
            f"{row.tool:<{width}}  {row.best:7.2f}  {row.median:8.2f}  {len(row.times):4d}  {found}"
        )
    by_tool = {row.tool: row for row in rows}
    ours = by_tool["pytest_talos.ports"]
    theirs = next((row for row in rows if row.tool.startswith("nmap")), None)
    if theirs is not None:
        print(
            f"ours / nmap (median): {ours.median / theirs.median:.2f}  "
            f"(best: {ours.best / theirs.best:.2f})"
        )


def ratio(rows: Sequence[Row]) -> float | None:
    """ours / nmap, medians (None without nmap)."""
    by_tool = {row.tool: row for row in rows}
    theirs = by_tool.get(NMAP_TOOL)
    return None if theirs is None else by_tool["pytest_talos.ports"].median / theirs.median


def run_shapes(runs: int, use_nmap: bool, baseline: str | None) -> int:
    """Every target shape in one run; the summary table gives ours / nmap per shape."""
    summary: list[tuple[str, int, Row, float | None]] = []
    failed = False
    for family, address, count in SHAPES:
        with listeners(address, [0] * count) as expected:
            rows, problems = bench_host(
                address, expected, runs=runs, baseline=baseline, use_nmap=use_nmap
            )
        print(f"\n{family} {address}, {count} listeners, full 1-65535 scan, {runs} runs each")
        print_table(rows, expected)
        for problem in problems:
            print(f"PROBLEM: {problem}", file=sys.stderr)
        failed = failed or bool(problems)
        summary.append((f"{family} {address}", count, rows[0], ratio(rows)))
    print(f"\n{'target':<16} {'open':>4}  {'ours median s':>13}  {'ours / nmap -T4':>15}")
    for target, count, mine, share in summary:
        shown = "no nmap" if share is None else f"{share:.2f}"
        print(f"{target:<16} {count:>4}  {mine.median:>13.2f}  {shown:>15}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time a full TCP connect scan: pytest_talos.ports vs nmap -sT -T4."
    )
    parser.add_argument("--address", help="open listeners here (default: every shape)")
    parser.add_argument("--ports", default=",".join(map(str, TALOS_PORTS)))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--baseline", default=DEFAULT_BASELINE, help="'' to skip the baseline-mode row"
    )
    parser.add_argument("--no-nmap", action="store_true")
    parser.add_argument(
        "--host", help="scan this already running host (e.g. an emulated node) instead"
    )
    parser.add_argument("--expect", default="", help="with --host: the ports it should have open")
    args = parser.parse_args(argv)

    use_nmap = not args.no_nmap
    if use_nmap and not shutil.which("nmap"):
        print("nmap is not on PATH: timing pytest_talos.ports only (no ratio)", file=sys.stderr)
    try:
        if not args.host and not args.address:
            return run_shapes(args.runs, use_nmap, args.baseline or None)
        if args.host:
            expected = [int(port) for port in args.expect.split(",") if port.strip()]
            rows, problems = bench_host(
                args.host,
                expected,
                runs=args.runs,
                baseline=args.baseline or None,
                use_nmap=use_nmap,
            )
        else:
            with listeners(args.address, [int(p) for p in args.ports.split(",")]) as expected:
                rows, problems = bench_host(
                    args.address,
                    expected,
                    runs=args.runs,
                    baseline=args.baseline or None,
                    use_nmap=use_nmap,
                )
    except (TalosError, ValueError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"full 1-65535 TCP connect scan of {args.host or args.address}, {args.runs} runs each")
    print_table(rows, expected)
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    if not problems:
        agree = "; ours and nmap agree" if any(r.tool.startswith("nmap") for r in rows) else ""
        print(f"checks passed: every tool found the expected ports{agree}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
