"""``talos-report merge DIR... [--out DIR]``: one report and verdict from the shards of a run.

Each DIR is the ``--talos-report`` directory of one shard (``--talos-shard I/N``); the merge
writes ``results.json``, ``report.md`` and ``report.html`` into ``--out`` and exits with the
merged verdict's status (0 PASSED, 1 FAILED, 6 INCOMPLETE, 7 UNREACHABLE), or 4 when the
inputs are not the shards of one run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_talos.errors import ConfigError
from pytest_talos.reporting.merge import load_shard, merge_shards
from pytest_talos.reporting.results import build_results, write_reports
from pytest_talos.reporting.verdict import EXIT_CODES

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="talos-report", description="Work with pytest-talos conformance reports."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser(
        "merge",
        help="combine the reports of a sharded run (--talos-shard I/N) into one",
        description="Combine the results.json of every shard of one run into one report "
        "and verdict.",
    )
    merge.add_argument(
        "shards",
        nargs="+",
        metavar="DIR",
        help="a shard's --talos-report directory (or its results.json)",
    )
    merge.add_argument(
        "--out",
        "-o",
        default="talos-report",
        metavar="DIR",
        help="where to write the merged report (default: talos-report)",
    )
    return parser


def _merge(shards: Sequence[str], out: str) -> int:
    loaded = [load_shard(path) for path in shards]
    records, run = merge_shards(loaded)
    results = build_results(records, run)
    written = write_reports(out, records, run)
    print(
        "talos-report: merged report written: " + ", ".join(str(path) for path in written.values())
    )
    reasons = results["verdict_reasons"]
    why = f": {'; '.join(reasons)}" if reasons else ""
    print(f"talos-report: verdict {results['verdict']} (exit {results['exit_code']}){why}")
    return int(results["exit_code"])


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _merge(args.shards, args.out)
    except ConfigError as exc:
        print(f"talos-report: error: {exc}", file=sys.stderr)
        return EXIT_CODES["USAGE"]


if __name__ == "__main__":
    sys.exit(main())
