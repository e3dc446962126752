"""The try-mode check on every node, one node after another vs all at once (NodeRuns).

    python benchmarks/node_runs.py [--nodes 10] [--rounds 2] [--time-scale 20]

An emulated cluster of ``--nodes`` nodes (in this process, as the suite's
``--talos-emulator`` runs it); the script connects as the suite does and runs
``config.try-mode-reverts`` (a try-mode label, the node's revert after its 10 node-second
timer, a settle time, the label leaving the Kubernetes Node) on every node, alternating
round by round:

* **in turn**: node after node, each through a guard of its own (what the suite did before,
  and still does under pytest-xdist);
* **at once**: through :class:`conformance._support.node_runs.NodeRuns`, one thread and one
  guard per node, as the suite does now.

Every check must pass and every node must end with its original config bytes (the guards
restore them); the script says so and exits 1 otherwise. Rows print median seconds and the
ratio; nothing is asserted in a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance._support.context import Timing  # noqa: E402
from conformance._support.node_runs import NodeRun, NodeRuns  # noqa: E402
from conformance.config.test_config import (  # noqa: E402
    _try_reverts,
    test_try_mode_change_reverts,
)
from pytest_talos.cluster import TalosCluster  # noqa: E402
from pytest_talos.emulator import EmulatedCluster  # noqa: E402
from pytest_talos.guard import ConfigGuard  # noqa: E402
from pytest_talos.node import TalosNode  # noqa: E402
from pytest_talos.plugin.conformance.catalogue import marked_check  # noqa: E402

CHECK = marked_check(test_try_mode_change_reverts).id


def guards(state_dir: Path) -> Any:
    @contextlib.contextmanager
    def guarded(label: str) -> Iterator[ConfigGuard]:
        guard = ConfigGuard(state_dir=state_dir, journal=False, label=label)
        try:
            yield guard
        finally:
            guard.restore()

    return guarded


def in_turn(nodes: list[TalosNode], cluster: TalosCluster, timing: Timing, state: Path) -> float:
    started = time.perf_counter()
    guarded = guards(state)
    for node in nodes:
        with guarded(node.name) as guard:
            _try_reverts(
                node.with_guard(guard), NodeRun(check_id=CHECK), cluster=cluster, timing=timing
            )
    return time.perf_counter() - started


def at_once(nodes: list[TalosNode], cluster: TalosCluster, timing: Timing, state: Path) -> float:
    started = time.perf_counter()
    check = partial(_try_reverts, cluster=cluster, timing=timing)
    runs = NodeRuns(nodes, check, guards(state), check_id=CHECK, label="the try-mode revert")
    for node in nodes:
        runs.outcome(node, {})
    runs.close(30.0)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=20.0)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="pytest-talos-node-runs-") as scratch,
        EmulatedCluster(1, args.nodes - 1, time_scale=args.time_scale) as emulator,
        TalosCluster.connect(emulator.talosconfig_path, endpoints=[emulator.endpoint]) as cluster,
    ):
        return report(cluster, Path(scratch), args)


def report(cluster: TalosCluster, scratch: Path, args: argparse.Namespace) -> int:
    nodes = list(cluster.reachable)
    timing = Timing(args.time_scale, "--time-scale")
    before = {node.name: node.machine_config.raw for node in nodes}
    times: dict[str, list[float]] = {"in turn": [], "at once": []}
    for _ in range(args.rounds):
        times["in turn"].append(in_turn(nodes, cluster, timing, scratch))
        times["at once"].append(at_once(nodes, cluster, timing, scratch))
    changed = [node.name for node in nodes if node.machine_config.raw != before[node.name]]
    print(
        f"{len(nodes)} emulated nodes, time scale {args.time_scale:g}, {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    turn, once = statistics.median(times["in turn"]), statistics.median(times["at once"])
    print(f"{'check':<24} {'in turn s':>9} {'at once s':>9} {'at once / in turn':>17}")
    print(f"{'config.try-mode-reverts':<24} {turn:>9.2f} {once:>9.2f} {once / turn:>17.2f}")
    if changed:
        print(f"NOT RESTORED: {', '.join(changed)}")
        return 1
    print("every check passed; every node has its original config bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
