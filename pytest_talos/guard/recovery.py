"""Recovery from a dead run's journal: judge what the node runs now, restore it if safe."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pytest_talos.guard.config_guard import unwrapped
from pytest_talos.guard.signals import SignalShield
from pytest_talos.guard.snapshot import Snapshot, persistent_config, restore_snapshot
from pytest_talos.journal import (
    JournalRecord,
    sha256,
)
from pytest_talos.node import TalosNode
from pytest_talos.wait import config_summary

Verdict = Literal["clean", "restore", "refuse"]


@dataclass(frozen=True)
class Recovery:
    """What recovering one journal found and did."""

    verdict: Verdict
    message: str
    restored: bool = False


def judge_recovery(
    record: JournalRecord, active: bytes, active_version: int, persistent: bytes | None
) -> Recovery:
    """Whether the node may be put back: only if it runs the original or a config we sent."""
    original_persistent = record.persistent_bytes
    known = {record.original_sha256, *(change.sha256 for change in record.changes)}
    if original_persistent is not None:
        known.add(sha256(original_persistent))
    tried = any(change.mode == "try" for change in record.changes)
    persistent_back = original_persistent is None or persistent == original_persistent
    if sha256(active) == record.original_sha256 and persistent_back and not tried:
        return Recovery("clean", "it already runs its original config: nothing to restore")
    persistent_ours = persistent is None or sha256(persistent) in known
    if sha256(active) in known and persistent_ours:
        return Recovery("restore", "it still runs a config this kit left there")
    return Recovery(
        "refuse",
        f"it now runs {config_summary(active, active_version)}, which is neither its original "
        f"config ({config_summary(record.original_bytes, record.original_version)}) nor one "
        f"of the {len(record.changes)} this kit applied"
        + ("" if persistent_ours else ", and its staged config is not one of them either")
        + ": someone changed the node since, so it is not restored (that would undo their "
        "change). Compare it with the original by hand (talos-recover --extract-original), "
        "then remove the journal with talos-recover --discard",
    )


def recover_record(node: TalosNode, record: JournalRecord, *, apply: bool = True) -> Recovery:
    """Judge the node against a dead run's journal and restore it if that is safe.

    The caller holds the node's lock and removes the journal unless the verdict is
    ``refuse``. Raises ConfigRestoreError if the restore itself fails.
    """
    client = unwrapped(node.client)
    active = client.machine_config()
    persistent = persistent_config(client)
    verdict = judge_recovery(record, active.raw, active.version, persistent)
    if verdict.verdict != "restore" or not apply:
        return verdict
    snapshot = Snapshot(
        node, client, record.original_bytes, record.original_version, record.persistent_bytes
    )
    with SignalShield(lambda: [node.name]):
        restore_snapshot(snapshot, force=True)
    return replace(
        verdict, restored=True, message=f"{verdict.message}; its original config is back"
    )
