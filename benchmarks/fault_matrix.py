"""A fault's run of the fault matrix: the whole suite vs the areas of the checks it must break.

    python benchmarks/fault_matrix.py [--faults rw-rootfs,no-mtls,...] [--rounds 2]

For each fault (default: one for each area the matrix targets), this runs the suite twice
per round, alternating, as ``tests/conformance/test_conformance_fault_matrix.py`` does
(``--talos-emulator --talos-allow disruptive``, the matrix's arguments, time scale 20): once
over the whole suite and once over :attr:`FaultCase.areas` only. It prints the median wall
and CPU seconds of each (the CPU of the child, from ``resource.getrusage``) and their ratios,
and checks that both runs break exactly the fault's row (a targeted run that missed a
check would be no saving). Nothing is asserted beyond that; runs go one at a time so they do
not compete.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conformance.fault_matrix import FAULT_MATRIX, FaultCase  # noqa: E402
from tests.conformance.forkserver import OFF_SWITCH  # noqa: E402
from tests.conformance.suite_runner import MATRIX_ARGS, SUITE, run_suite  # noqa: E402

# Each run a plain `python -m pytest` subprocess (not forked from the tests' fork server), so
# that its CPU is this process's RUSAGE_CHILDREN.
PLAIN_PROCESS = {OFF_SWITCH: "0"}

# One fault for each area the matrix targets, and one that needs two areas.
DEFAULT_FAULTS = (
    "rw-rootfs",  # immutability
    "no-mtls",  # api
    "logs-broken",  # services
    "node-memory-pressure",  # kubernetes
    "member-hidden",  # cluster
    "client-cert-expiring",  # certs
    "lenient-validation",  # config
    "kube-cert-expired",  # certs, config, kubernetes
)


@dataclass(frozen=True)
class Timed:
    wall: float
    cpu: float
    matches: bool


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(case: FaultCase, paths: tuple[str, ...], scratch: Path) -> Timed:
    args = ["--talos-emulator", "--talos-allow", "disruptive", *MATRIX_ARGS, *case.fault_args()]
    report = Path(tempfile.mkdtemp(dir=scratch)) / "report"
    cpu, started = _children_cpu(), time.monotonic()
    run = run_suite(args, report, paths=paths, env=PLAIN_PROCESS)
    wall, used = time.monotonic() - started, _children_cpu() - cpu
    return Timed(wall, used, run.results is not None and run.broken() == dict(case.broken))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(DEFAULT_FAULTS))
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args(argv)
    names = [name for name in options.faults.split(",") if name]
    unknown = [name for name in names if name not in FAULT_MATRIX]
    if unknown:
        parser.error(f"not in the fault matrix: {', '.join(unknown)}")
    print(
        f"{'fault':<24} {'areas':<28} {'whole s':>8} {'areas s':>8} {'wall x':>7} "
        f"{'CPU whole':>9} {'CPU areas':>9} {'CPU x':>6}"
    )
    totals = {"whole": [0.0, 0.0], "areas": [0.0, 0.0]}
    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as scratch:
        for name in names:
            case = FAULT_MATRIX[name]
            areas = case.areas or ()
            targeted = case.paths(SUITE)
            runs: dict[str, list[Timed]] = {"whole": [], "areas": []}
            for _ in range(options.rounds):
                runs["whole"].append(run_once(case, (str(SUITE),), Path(scratch)))
                runs["areas"].append(run_once(case, targeted, Path(scratch)))
            wall = {k: statistics.median(t.wall for t in v) for k, v in runs.items()}
            cpu = {k: statistics.median(t.cpu for t in v) for k, v in runs.items()}
            for key in totals:
                totals[key][0] += wall[key]
                totals[key][1] += cpu[key]
            odd = [k for k, v in runs.items() if not all(t.matches for t in v)]
            print(
                f"{name:<24} {','.join(areas) or 'all':<28} {wall['whole']:8.1f} "
                f"{wall['areas']:8.1f} {wall['areas'] / wall['whole']:7.2f} "
                f"{cpu['whole']:9.1f} {cpu['areas']:9.1f} {cpu['areas'] / cpu['whole']:6.2f}"
                + (f"  (row not matched: {', '.join(odd)})" if odd else "")
            )
    (whole_wall, whole_cpu), (areas_wall, areas_cpu) = totals["whole"], totals["areas"]
    print(
        f"{'all of the above':<53} {whole_wall:8.1f} {areas_wall:8.1f} "
        f"{areas_wall / whole_wall:7.2f} {whole_cpu:9.1f} {areas_cpu:9.1f} "
        f"{areas_cpu / whole_cpu:6.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
