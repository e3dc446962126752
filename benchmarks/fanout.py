"""Per-node reads one node after another vs fanned out, and what a connection costs per node.

    python benchmarks/fanout.py [--nodes 30] [--rounds 3] [--time-scale 20]

An emulated cluster (``python -m pytest_talos.emulator``, a child process so it does not
compete for this process's GIL) of ``--nodes`` nodes; this process connects as the suite
does (one channel to the first control plane's apid, ``node`` metadata per node) and
measures, in the same run, alternating round by round:

* **reads**: what every check reads of a node (version, services, processes, Netstat,
  mounts, machine config, AddressStatuses), for every node in turn vs through
  :class:`conformance._support.fanout.FanOut` (all nodes at once, bounded threads);
* **recent events**: the Events stream read to its deadline (what
  services.expected-running-healthy reads), in turn vs fanned out;
* **connection setup**: a new client straight to each node's own apid, first call
  (TCP, TLS 1.3 with Ed25519, HTTP/2) vs the next call on the same channel (reuse).

Each row prints the median seconds and the ratio; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance._support.fanout import FanOut  # noqa: E402
from pytest_talos.client import TalosClient  # noqa: E402
from pytest_talos.cluster import TalosCluster  # noqa: E402
from pytest_talos.errors import DeadlineExceeded  # noqa: E402
from pytest_talos.node import TalosNode  # noqa: E402
from pytest_talos.talosconfig import load_talosconfig  # noqa: E402

ADDRESSES = ("AddressStatuses.net.talos.dev", "network")
START_DEADLINE = 120.0


def read_everything(node: TalosNode) -> int:
    """The per-node reads every check needs; returns how many items came back."""
    items = len(node.services) + len(node.processes) + len(node.listeners)
    items += len(node.client.mounts()) + len(node.resources(*ADDRESSES))
    node.version  # noqa: B018 - a read
    return items + len(node.machine_config.raw)


def recent_events(node: TalosNode, window: float) -> int:
    found = 0
    try:
        with node.events(tail_seconds=60, timeout=window) as stream:
            for _ in stream:
                found += 1
    except DeadlineExceeded:
        pass
    return found


def serial(nodes: list[TalosNode], read: Callable[[TalosNode], int]) -> float:
    started = time.perf_counter()
    for node in nodes:
        read(node)
    return time.perf_counter() - started


def fanned(nodes: list[TalosNode], read: Callable[[TalosNode], int]) -> float:
    started = time.perf_counter()
    fan = FanOut(nodes, read, max_age=3600.0)
    for node in nodes:
        fan.get(node)
    return time.perf_counter() - started


def connection_costs(talosconfig: Path, nodes: list[TalosNode]) -> tuple[float, float]:
    """Median seconds of the first call on a new channel to a node's own apid, and of the
    next call on that channel."""
    ctx = load_talosconfig(talosconfig).context
    first, again = [], []
    for node in nodes:
        client = TalosClient(node.host, ctx.ca_pem, ctx.crt_pem, ctx.key_pem, timeout=10.0)
        try:
            started = time.perf_counter()
            client.version()
            first.append(time.perf_counter() - started)
            started = time.perf_counter()
            client.version()
            again.append(time.perf_counter() - started)
        finally:
            client.close()
    return statistics.median(first), statistics.median(again)


def start_emulator(count: int, talosconfig: Path, time_scale: float) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "pytest_talos.emulator",
        "--talosconfig",
        str(talosconfig),
        "--controlplanes",
        "1",
        "--workers",
        str(count - 1),
        "--time-scale",
        f"{time_scale:g}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    deadline = time.monotonic() + START_DEADLINE
    seen = 0
    assert child.stdout is not None
    while seen < count and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        seen += ":50000" in line
    if seen < count:
        child.kill()
        raise SystemExit(f"the emulator did not start {count} nodes")
    return child


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=20.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pytest-talos-fanout-") as scratch:
        talosconfig = Path(scratch) / "talosconfig"
        emulator = start_emulator(args.nodes, talosconfig, args.time_scale)
        try:
            cluster = TalosCluster.connect(talosconfig)
            return report(cluster, talosconfig, args)
        finally:
            emulator.terminate()
            emulator.wait(timeout=30)


def report(cluster: TalosCluster, talosconfig: Path, args: argparse.Namespace) -> int:
    nodes = list(cluster.reachable)
    window = max(0.5, 1.0 / args.time_scale)  # as services.expected-running-healthy reads
    rows: dict[str, dict[str, list[float]]] = {"reads": {}, "recent events": {}}
    for _ in range(args.rounds):
        for name, read in (
            ("reads", read_everything),
            ("recent events", lambda n: recent_events(n, window)),
        ):
            rows[name].setdefault("in turn", []).append(serial(nodes, read))
            rows[name].setdefault("fanned out", []).append(fanned(nodes, read))
    first, again = connection_costs(talosconfig, nodes)
    print(
        f"{len(nodes)} emulated nodes, time scale {args.time_scale:g}, {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    print(f"{'what':<16} {'in turn s':>9} {'fanned out s':>12} {'fanned / in turn':>16}")
    for name, cells in rows.items():
        turn, fan = statistics.median(cells["in turn"]), statistics.median(cells["fanned out"])
        print(f"{name:<16} {turn:>9.2f} {fan:>12.2f} {fan / turn:>16.2f}")
    print(
        f"connection setup per node (first call on a new channel): {first * 1000:.1f} ms; "
        f"the next call on it: {again * 1000:.1f} ms; first / reuse {first / again:.1f}"
    )
    cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
