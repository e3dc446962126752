"""``talos-recover`` (``python -m pytest_talos.recover``): finish what a killed run left.

A run that was killed (SIGKILL, a crashed runner, a lost CI machine) while a node's config
was changed leaves a journal in the state directory (see :mod:`pytest_talos.journal`). For
each journal whose run is gone, this command says what happened, connects to the node the
way the run did (its talosconfig, context and endpoint, unless given here) and restores the
original config **only if the node still runs a config this kit left there**; if someone
changed the node since, it refuses and explains. A restored node's journal is removed.

Exit status: 0 when nothing is left to do, 1 when a journal stays (refused or failed),
2 for a usage error. ``pytest --talos-recover`` runs the same thing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_talos.client import TalosClient
from pytest_talos.errors import TalosError
from pytest_talos.guard import recover_record
from pytest_talos.journal import (
    JournalRecord,
    NodeLock,
    default_state_dir,
    journal_dir,
    journals,
    read_journal,
    remove_journal,
)
from pytest_talos.node import TalosNode

__all__ = ["connect_as_recorded", "main", "recover_all", "recover_journal"]

Say = Callable[[str], None]
NodeFor = Callable[[JournalRecord], TalosNode]


def connect_as_recorded(
    *,
    talosconfig: str | None = None,
    context: str | None = None,
    endpoint: str | None = None,
    timeout: float = 10.0,
) -> NodeFor:
    """A factory reaching a journal's node as its run did; arguments given here win."""

    def node_for(record: JournalRecord) -> TalosNode:
        client = TalosClient.from_talosconfig(
            talosconfig or record.talosconfig,
            context=context or record.context,
            endpoint=endpoint or record.endpoint,
            node=record.address,
            timeout=timeout,
        )
        return TalosNode(client, record.address, hostname=record.node)

    return node_for


def recover_journal(
    state_dir: Path, path: Path, node_for: NodeFor, say: Say, *, dry_run: bool = False
) -> bool:
    """Recover one journal under its node's lock; False if it has to stay."""
    lock = NodeLock(state_dir, path.stem, label="talos-recover")
    if not lock.try_acquire(path.stem):
        say(f"talos-recover: {path.name}: its run is still going ({lock.holder()}); left alone")
        return True
    node: TalosNode | None = None
    try:
        if not path.exists():
            return True  # its run finished meanwhile
        record = read_journal(path)
        say(f"talos-recover: {record.describe()}")
        node = node_for(record)
        result = recover_record(node, record, apply=not dry_run)
        say(f"talos-recover: node {record.node}: {result.message}")
        if result.verdict == "refuse" or (dry_run and result.verdict == "restore"):
            say(f"talos-recover: journal kept: {path}")
            return result.verdict != "refuse"
        if not dry_run:
            remove_journal(state_dir, path.stem)
        return True
    except TalosError as exc:
        say(f"talos-recover: {path.name}: could not recover: {exc}; journal kept: {path}")
        return False
    finally:
        if node is not None:
            node.client.close()
        lock.release()


def recover_all(
    state_dir: Path, node_for: NodeFor, say: Say = print, *, dry_run: bool = False
) -> int:
    """Recover every journal in ``state_dir``; the exit status (0 done, 1 some left)."""
    paths = list(journals(state_dir))
    if not paths:
        say(f"talos-recover: no journal in {journal_dir(state_dir)}: nothing to recover")
        return 0
    results = [recover_journal(state_dir, path, node_for, say, dry_run=dry_run) for path in paths]
    return 0 if all(results) else 1


def _find(state_dir: Path, which: str) -> Path:
    path = Path(which)
    if path.is_file():
        return path
    matches = [
        p for p in journals(state_dir) if which in (p.stem, p.name) or p.stem.startswith(which)
    ]
    if len(matches) != 1:
        listed = ", ".join(p.stem for p in journals(state_dir)) or "none"
        raise SystemExit(f"talos-recover: no single journal matches {which!r} (journals: {listed})")
    return matches[0]


def _extract(state_dir: Path, which: str, output: str) -> int:
    record = read_journal(_find(state_dir, which))
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(record.original_bytes)
    print(
        f"talos-recover: wrote the original config of node {record.node} to {output} (0600; "
        "it holds the cluster's secrets: delete it when done)"
    )
    return 0


def _discard(state_dir: Path, which: str) -> int:
    path = _find(state_dir, which)
    lock = NodeLock(state_dir, path.stem, label="talos-recover")
    if not lock.try_acquire(path.stem):
        print(f"talos-recover: {path.name}: its run is still going ({lock.holder()})")
        return 1
    try:
        remove_journal(state_dir, path.stem)
    finally:
        lock.release()
    print(f"talos-recover: removed {path} (the node was not touched)")
    return 0


def _list(state_dir: Path) -> int:
    paths = list(journals(state_dir))
    for path in paths:
        try:
            print(f"{path.stem}: {read_journal(path).describe()}")
        except TalosError as exc:
            print(f"{path.stem}: {exc}")
    if not paths:
        print(f"talos-recover: no journal in {journal_dir(state_dir)}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="talos-recover",
        description="Restore nodes whose config a killed pytest-talos run left changed.",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the runs' state directory (default: $TALOS_STATE_DIR, else "
        "$XDG_STATE_HOME/pytest-talos)",
    )
    parser.add_argument(
        "--talosconfig",
        metavar="PATH",
        help="talosconfig to use instead of the one each run recorded",
    )
    parser.add_argument("--context", metavar="NAME", help="talosconfig context to use")
    parser.add_argument("--endpoint", metavar="HOST", help="endpoint to use")
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="deadline of each API call (default 10)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be done, change nothing"
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list the journals and exit")
    action.add_argument(
        "--extract-original",
        metavar="JOURNAL",
        help="write a journal's original config to --output (0600)",
    )
    action.add_argument(
        "--discard", metavar="JOURNAL", help="remove a journal without touching its node"
    )
    parser.add_argument("--output", metavar="PATH", help="file for --extract-original")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    if args.list:
        return _list(state_dir)
    if args.extract_original:
        if not args.output:
            print("talos-recover: --extract-original needs --output PATH", file=sys.stderr)
            return 2
        return _extract(state_dir, args.extract_original, args.output)
    if args.discard:
        return _discard(state_dir, args.discard)
    node_for = connect_as_recorded(
        talosconfig=args.talosconfig,
        context=args.context,
        endpoint=args.endpoint,
        timeout=args.timeout,
    )
    return recover_all(state_dir, node_for, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
