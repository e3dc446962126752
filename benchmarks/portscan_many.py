"""Time full 1-65535 scans of several loopback addresses: one after another, against
``scan_many`` (several at once on one event loop), against two threads (two loops).

    python benchmarks/portscan_many.py [--hosts 10] [--runs 3] [--at-once 4]

The addresses are 127.0.0.10, 127.0.0.11, ... (``--hosts``), each with 4 listeners on ports
the kernel picks, scanned with the baseline 127.0.0.254 (as the conformance suite scans
emulated nodes). Two shapes, each timed ``--runs`` times with the ways alternating in the
same run, so machine noise hits all of them:

* ``loopback``: every port answers at once; the cost is the connect() system calls, all
  on this machine's CPUs;
* ``loopback + 8 silent``: each address also has 8 ports that never answer (listeners
  with a full accept queue, whose SYNs the kernel drops), probed with the default 1 s
  timeout: a stand-in for a real node behind a firewall, where a scan waits on the network.

Every way must find exactly each address's listeners; the last table gives each way's
median over one after another's (below 1: faster).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tests/

from pytest_talos.ports import DEFAULT_HOSTS_AT_ONCE, ScanResult, scan, scan_many
from tests.integration.silent_ports import make_silent_port, why_no_silent_ports

BASELINE = "127.0.0.254"
LISTENERS = 4
SILENT = 8
SILENT_TIMEOUT = 1.0  # the default probe timeout, as the suite scans
FULL = "1-65535"

Way = Callable[[list[str], float], list[ScanResult]]


@contextmanager
def ports_on(
    address: str, count: int, make: Callable[[str, list[socket.socket]], int]
) -> Iterator[list[int]]:
    """``count`` ports on ``address``, each from ``make``, for the duration of the block."""
    opened: list[socket.socket] = []
    try:
        yield sorted(make(address, opened) for _ in range(count))
    finally:
        for sock in opened:
            sock.close()


def listener(address: str, opened: list[socket.socket]) -> int:
    sock = socket.socket()
    opened.append(sock)
    sock.bind((address, 0))
    sock.listen(128)
    return int(sock.getsockname()[1])


def one_after_another(hosts: list[str], timeout: float) -> list[ScanResult]:
    return [scan(host, FULL, timeout=timeout, baseline_host=BASELINE) for host in hosts]


def many(at_once: int) -> Way:
    def run(hosts: list[str], timeout: float) -> list[ScanResult]:
        return scan_many(
            hosts, FULL, timeout=timeout, baseline_host=BASELINE, hosts_at_once=at_once
        )

    return run


def two_threads(hosts: list[str], timeout: float) -> list[ScanResult]:
    """Half the hosts on each of two threads, each one after another on its own loop."""
    results: dict[str, ScanResult] = {}

    def work(part: list[str]) -> None:
        for host in part:
            results[host] = scan(host, FULL, timeout=timeout, baseline_host=BASELINE)

    threads = [threading.Thread(target=work, args=(hosts[i::2],)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[host] for host in hosts]


def time_ways(
    ways: dict[str, Way], hosts: list[str], timeout: float, expected: list[list[int]], runs: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(runs):
        for name, way in ways.items():
            started = time.perf_counter()
            results = way(hosts, timeout)
            times[name].append(time.perf_counter() - started)
            found = [sorted(result.open_ports) for result in results]
            if found != expected:
                raise SystemExit(f"{name} found {found}, expected {expected}")
    return times


def run_shape(name: str, hosts: list[str], silent: int, ways: dict[str, Way], runs: int) -> None:
    with ExitStack() as stack:
        expected = [stack.enter_context(ports_on(host, LISTENERS, listener)) for host in hosts]
        for host in hosts if silent else ():
            stack.enter_context(ports_on(host, silent, make_silent_port))
        timeout = SILENT_TIMEOUT
        times = time_ways(ways, hosts, timeout, expected, runs)
    base = statistics.median(times["one after another"])
    print(f"\n{name}: {len(hosts)} addresses, full range each, baseline {BASELINE}")
    width = max(map(len, ways))
    print(f"{'way':<{width}}  {'best s':>7}  {'median s':>8}  {'/ one after another':>19}")
    for way, values in times.items():
        median = statistics.median(values)
        print(f"{way:<{width}}  {min(values):7.2f}  {median:8.2f}  {median / base:19.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--at-once", type=int, default=DEFAULT_HOSTS_AT_ONCE)
    args = parser.parse_args(argv)
    hosts = [f"127.0.0.{10 + i}" for i in range(args.hosts)]
    ways: dict[str, Way] = {
        "one after another": one_after_another,
        f"scan_many, {args.at_once} at once (1 loop)": many(args.at_once),
        "two threads, one after another each (2 loops)": two_threads,
    }
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the start")
    run_shape("loopback", hosts, 0, ways, args.runs)
    why_not = why_no_silent_ports()
    if why_not is None:
        run_shape(f"loopback + {SILENT} silent ports", hosts, SILENT, ways, args.runs)
    else:
        print(f"\n(no silent ports here, that shape is left out: {why_not})")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
