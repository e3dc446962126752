"""What other threads of the scanning process cost a port scan, and what a worker process
(pytest_talos/ports/workers.py) saves, measured in the same run.

    python benchmarks/portscan_threads.py            # 65535 ports; 2000 beside a busy thread
    python benchmarks/portscan_threads.py --busy-ports 500

Each case runs in a fresh interpreter (so the CPU of its worker processes is counted once
they are stopped): one full scan in the process alone; two at once in two threads, made
here and made in workers; one beside a thread running Python, made here (on a shorter
range: each connect waits for that thread's turn at the GIL) and made in a worker. The
target is a loopback address with four listeners of this script's own. CPU is user +
system of the process and its waited-for children; compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOSTS = ("127.0.0.201", "127.0.0.202")

_CASE = textwrap.dedent(
    """
    import json, resource, sys, threading, time
    from pytest_talos import ports
    from pytest_talos.ports.workers import shutdown_workers

    case, spec, busy_spec = sys.argv[1], sys.argv[2], sys.argv[3]
    hosts = sys.argv[4:]
    in_worker = case.endswith("worker")

    def cpu():
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    stop = threading.Event()
    def spin():
        while not stop.is_set():
            pass

    started, wall = cpu(), time.monotonic()
    scan_wall = None
    if case == "alone":
        scanned = len(ports.scan(hosts[0], spec, in_worker=False).results)
    elif case.startswith("two"):
        found = []
        def one(host):
            found.append(len(ports.scan(host, spec, in_worker=in_worker).results))
        threads = [threading.Thread(target=one, args=(h,)) for h in hosts]
        for t in threads: t.start()
        for t in threads: t.join()
        scanned = sum(found)
    else:  # the busy thread burns a CPU of its own: only the scan's wall time is told
        busy = threading.Thread(target=spin)
        busy.start()
        began = time.monotonic()
        scanned = len(ports.scan(hosts[0], busy_spec, in_worker=in_worker).results)
        scan_wall = time.monotonic() - began
        stop.set()
        busy.join()
    shutdown_workers()
    if scan_wall is not None:
        print(json.dumps({"wall": scan_wall, "cpu": None, "ports": scanned}))
    else:
        used = cpu() - started
        print(json.dumps({"wall": time.monotonic() - wall, "cpu": used, "ports": scanned}))
    """
)

CASES = (
    ("alone", "one full scan, nothing else in the process"),
    ("two-here", "two full scans in two threads, made here"),
    ("two-worker", "two full scans in two threads, made in workers"),
    ("busy-here", "one scan beside a busy thread, made here"),
    ("busy-worker", "one scan beside a busy thread, made in a worker"),
)


def _listeners() -> list[socket.socket]:
    opened = []
    for host in HOSTS:
        for _ in range(4):
            sock = socket.socket()
            sock.bind((host, 0))
            sock.listen(16)
            opened.append(sock)
    return opened


def _run(case: str, spec: str, busy_spec: str) -> dict[str, float | None]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _CASE, case, spec, busy_spec, *HOSTS],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=True,
    )
    result: dict[str, float | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", default="1-65535", help="the range of the full scans")
    parser.add_argument(
        "--busy-ports", default="1-2000", help="the range scanned beside a busy thread"
    )
    args = parser.parse_args()
    opened = _listeners()
    try:
        print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
        print(f"{'case':<52} | {'ports':>6} | {'wall s':>7} | {'CPU s':>6} | {'us/port':>7}")
        for case, label in CASES:
            spec = args.ports
            found = _run(case, spec, args.busy_ports)
            wall, cpu, scanned = found["wall"] or 0.0, found["cpu"], int(found["ports"] or 0)
            per_port = f"{wall / scanned * 1e6:7.1f}" if scanned else "-"
            shown = f"{cpu:6.2f}" if cpu is not None else "     -"
            print(f"{label:<52} | {scanned:>6} | {wall:7.2f} | {shown} | {per_port}")
    finally:
        for sock in opened:
            sock.close()


if __name__ == "__main__":
    main()
