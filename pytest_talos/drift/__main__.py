"""``python -m pytest_talos.drift``: compare every node with the desired state in git.

Prints, per node, whether its active config matches the desired one (and where it does not,
each document and path, secret values masked) and whether a change is waiting in its
persistent config. Exit status: 0 in sync, 1 drift or a waiting change, 2 the run could not
compare (bad options, an unreadable directory, an unreachable cluster).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pytest_talos.cluster import TalosCluster
from pytest_talos.drift.desired import load_desired
from pytest_talos.drift.nodes import NodeDrift, check_nodes
from pytest_talos.errors import TalosError
from pytest_talos.reporting import redact

__all__ = ["main"]

IN_SYNC, DRIFT, CANNOT_COMPARE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_talos.drift",
        description="Compare every node's machine config with the desired state (base "
        "configs, patches and talos-desired.yaml in a directory). Secrets are masked.",
    )
    parser.add_argument(
        "--desired",
        required=True,
        metavar="DIR",
        help="the desired-state directory (see docs/conformance.md)",
    )
    parser.add_argument(
        "--talosconfig",
        metavar="PATH",
        help="talosconfig (default as talosctl: $TALOSCONFIG, ~/.talos/config)",
    )
    parser.add_argument("--context", metavar="NAME", help="talosconfig context")
    parser.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="HOST",
        help="Talos API endpoint (repeatable; default: the context's)",
    )
    parser.add_argument(
        "--nodes",
        action="append",
        default=[],
        metavar="HOST",
        help="nodes to compare (repeatable; default: the context's, else the cluster's members)",
    )
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument(
        "--json", action="store_true", help="print the result as JSON (masked, like the reports)"
    )
    return parser


def _split(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _print(drifts: Sequence[NodeDrift], as_json: bool) -> None:
    if as_json:
        print(json.dumps(redact([drift.to_json() for drift in drifts]), indent=2))
        return
    for drift in drifts:
        print("\n".join(drift.lines()))
    drifted = [d.node for d in drifts if not d.matches_desired]
    staged = [d.node for d in drifts if d.staged]
    print(
        f"drift: {len(drifted)} of {len(drifts)} node(s) differ from the desired state"
        + (f" ({', '.join(drifted)})" if drifted else "")
        + (f"; a change is waiting on {', '.join(staged)}" if staged else "")
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        desired = load_desired(args.desired)
        with TalosCluster.connect(
            args.talosconfig,
            context=args.context,
            endpoints=_split(args.endpoint),
            nodes=_split(args.nodes),
            timeout=args.timeout,
        ) as cluster:
            unreachable = [n for n in cluster.nodes if n not in cluster.reachable]
            drifts = check_nodes(cluster.reachable, desired)
    except TalosError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return CANNOT_COMPARE
    _print(drifts, args.json)
    for node in unreachable:
        print(f"error: {node.address} could not be reached; it was not compared", file=sys.stderr)
    if unreachable or not drifts:
        return CANNOT_COMPARE
    return IN_SYNC if all(drift.in_sync for drift in drifts) else DRIFT


if __name__ == "__main__":
    sys.exit(main())
