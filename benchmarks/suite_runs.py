"""A suite run of the project's tests: a plain ``python -m pytest`` subprocess against one
forked from the tests' fork server (``tests/conformance/forkserver.py``).

    python benchmarks/suite_runs.py [--rounds 5]

Each round runs three kinds of suite run, once each way, alternating:

- a fault's targeted run (``logs-broken`` over ``conformance/services``);
- the whole suite against a healthy emulator;
- a run that stops at a bad option (startup alone).

It prints the median wall and CPU seconds of each way and their ratios (forked / plain), and
checks that both ways give the same exit status and the same checks' outcomes. The CPU of a
plain run is this process's ``RUSAGE_CHILDREN``; a forked child reports its own. The fork
server starts before the first timed run (its imports are paid once per test process, not
per run). Runs go one at a time so they do not compete.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conformance.forkserver import OFF_SWITCH  # noqa: E402
from tests.conformance.suite_runner import MATRIX_ARGS, SUITE, SuiteRun, run_suite  # noqa: E402

EMULATOR = ("--talos-emulator", "--talos-allow", "disruptive", *MATRIX_ARGS)
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # name: (paths, arguments)
    "targeted fault run": (
        (str(SUITE / "services"),),
        (*EMULATOR, "--talos-emulator-fault", "logs-broken"),
    ),
    "whole suite, healthy": ((str(SUITE),), EMULATOR),
    "startup only (bad option)": ((str(SUITE),), ("--talos-observe", "-1")),
}
PLAIN = {OFF_SWITCH: "0"}


@dataclass(frozen=True)
class Timed:
    wall: float
    cpu: float
    returncode: int
    outcomes: dict[str, set[str]]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(kind: str, *, forked: bool, scratch: Path) -> Timed:
    paths, args = KINDS[kind]
    report = Path(tempfile.mkdtemp(dir=scratch)) / "report"
    cpu = _children_cpu()
    run: SuiteRun = run_suite(args, report, paths=paths, env=None if forked else PLAIN)
    used = run.cpu_seconds if forked else _children_cpu() - cpu
    if used is None:
        raise SystemExit(f"{kind}: the forked run did not report its CPU\n{run.describe()}")
    return Timed(run.seconds, used, run.returncode, run.outcomes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args(argv)
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-suite-runs-") as tmp:
        scratch = Path(tmp)
        run_once("startup only (bad option)", forked=True, scratch=scratch)  # starts the server
        print(
            f"{'run':28} {'plain s':>8} {'forked s':>9} {'wall x':>7} {'CPU plain':>10} "
            f"{'CPU forked':>11} {'CPU x':>6}  same result"
        )
        for kind in KINDS:
            plain: list[Timed] = []
            forked: list[Timed] = []
            for _ in range(options.rounds):
                plain.append(run_once(kind, forked=False, scratch=scratch))
                forked.append(run_once(kind, forked=True, scratch=scratch))
            same = all(
                (p.returncode, p.outcomes) == (f.returncode, f.outcomes)
                for p, f in zip(plain, forked, strict=True)
            )
            _print_row(kind, plain, forked, same)
    return 0


def _print_row(kind: str, plain: list[Timed], forked: list[Timed], same: bool) -> None:
    wall_p = statistics.median(t.wall for t in plain)
    wall_f = statistics.median(t.wall for t in forked)
    cpu_p = statistics.median(t.cpu for t in plain)
    cpu_f = statistics.median(t.cpu for t in forked)
    print(
        f"{kind:28} {wall_p:8.2f} {wall_f:9.2f} {wall_f / wall_p:7.2f} {cpu_p:10.2f} "
        f"{cpu_f:11.2f} {cpu_f / cpu_p:6.2f}  {'yes' if same else 'NO'}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
