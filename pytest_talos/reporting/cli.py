"""``talos-report merge DIR... [--out DIR]``: one report and verdict from the shards of a run;
``talos-report render results.json [--out DIR]``: the reports of a saved run, written again.

Each DIR is the ``--talos-report`` directory of one shard (``--talos-shard I/N``); the merge
writes ``results.json``, ``report.md`` and ``report.html`` into ``--out`` and exits with the
merged verdict's status (0 PASSED, 1 FAILED, 6 INCOMPLETE, 7 UNREACHABLE), or 4 when the
inputs are not the shards of one run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_talos.errors import ConfigError
from pytest_talos.reporting.merge import load_shard, merge_shards
from pytest_talos.reporting.records import CheckRecord, RunInfo
from pytest_talos.reporting.results import RESULTS_FORMAT, build_results, write_reports
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
    render = commands.add_parser(
        "render",
        help="write report.md and report.html again from a saved results.json",
        description="Re-render the reports (and results.json) of a saved run.",
    )
    render.add_argument("results", metavar="RESULTS", help="a results.json (or its directory)")
    render.add_argument(
        "--out",
        "-o",
        default=None,
        metavar="DIR",
        help="where to write the reports (default: the directory of RESULTS)",
    )
    return parser


def _load_results(path: str) -> tuple[Path, dict[str, Any]]:
    file = Path(path)
    if file.is_dir():
        file = file / "results.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read it ({exc.strerror})", path=str(file)) from None
    except ValueError as exc:
        raise ConfigError(f"not JSON: {exc}", path=str(file)) from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ConfigError(
            f"not a conformance results.json (format {RESULTS_FORMAT}); give the "
            "results.json a --talos-report directory holds",
            path=str(file),
        )
    return file, data


def _render(path: str, out: str | None) -> int:
    file, data = _load_results(path)
    try:
        records = [CheckRecord.from_json(check) for check in data.get("checks") or ()]
        run = RunInfo.from_json(data["run"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"a field is missing or malformed ({exc})", path=str(file)) from None
    written = write_reports(out or file.parent, records, run)
    results = build_results(records, run)
    print("talos-report: report written: " + ", ".join(str(p) for p in written.values()))
    reasons = results["verdict_reasons"]
    why = f": {'; '.join(reasons)}" if reasons else ""
    code = results["exit_code"]
    print(f"talos-report: verdict {results['verdict']} (exit {code}){why}")
    return int(code) if code is not None else EXIT_CODES["INCOMPLETE"]


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
        if args.command == "render":
            return _render(args.results, args.out)
        return _merge(args.shards, args.out)
    except ConfigError as exc:
        print(f"talos-report: error: {exc}", file=sys.stderr)
        return EXIT_CODES["USAGE"]


if __name__ == "__main__":
    sys.exit(main())
