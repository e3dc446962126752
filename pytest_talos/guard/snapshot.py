"""A node's snapshot (its original config and this process's claim on it) and the restore.

The restore re-applies the original bytes and reads them back; it is shared by
:class:`~pytest_talos.guard.ConfigGuard` and by recovery from a dead run's journal.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_talos import models
from pytest_talos.client import TalosClient
from pytest_talos.errors import ConfigRestoreError, FailedPrecondition, NotFound, TalosError
from pytest_talos.journal import (
    JournalRecord,
    NodeLock,
    journal_path,
    node_key,
)
from pytest_talos.node import TalosNode
from pytest_talos.restarts import note_guarded_change
from pytest_talos.wait import MACHINE_CONFIG_RESOURCE, config_summary

_RESTORE_ATTEMPTS = 3
_IDENTITY = ("Identities.cluster.talos.dev", "local", "cluster")


@dataclass
class Claim:
    """This process's hold on one node: its lock, journal and the original config."""

    key: str
    state_dir: Path
    lock: NodeLock | None
    record: JournalRecord | None
    original: bytes = field(repr=False)
    users: int = 1
    tried: bool = False  # a try-mode change went through (timers may still be armed)


CLAIMS: dict[str, Claim] = {}
CLAIMS_LOCK = threading.RLock()


@dataclass
class Snapshot:
    node: TalosNode
    client: TalosClient  # the node's own client (not the recording wrapper)
    raw: bytes = field(repr=False)  # the active config; holds secrets: never printed
    version: int
    persistent: bytes | None = field(default=None, repr=False)  # None: none kept
    claim: Claim | None = None
    tried: bool = False  # a try-mode change went through: always re-apply on restore


def persistent_config(client: TalosClient) -> bytes | None:
    """The config staged for the next boot (``persistent``); None where the node keeps none."""
    kind, _, namespace = MACHINE_CONFIG_RESOURCE
    try:
        found = client.get(kind, "persistent", namespace)
    except NotFound:
        return None
    spec = found.typed_spec
    return spec.yaml if isinstance(spec, models.MachineConfigSpec) else None


def node_key_of(client: TalosClient, address: str) -> str:
    """The lock/journal key of a node: its Talos node identity and address."""
    kind, ident, namespace = _IDENTITY
    try:
        spec = client.get(kind, ident, namespace).spec
        node_id = str(spec.get("nodeId", "")) if isinstance(spec, dict) else ""
    except TalosError:
        node_id = ""
    return node_key(node_id or client.endpoint, address)


def restore_snapshot(snapshot: Snapshot, *, force: bool = False) -> bool:
    """Put back the active config (and the staged one, where kept); True if anything changed."""
    client = snapshot.client
    force = force or snapshot.tried or (snapshot.claim is not None and snapshot.claim.tried)
    try:
        if not force and _matches(client, snapshot):
            return False
        apply_original(client, snapshot.raw, "no-reboot")  # sets active and persistent
        snapshot.node.forget_kubernetes_name()  # it follows the config (registerWithFQDN)
        note_guarded_change(client, snapshot, mode="no-reboot", restore=True)
        if snapshot.persistent is not None and snapshot.persistent != snapshot.raw:
            apply_original(client, snapshot.persistent, "staged")  # a change staged before us
        after = client.machine_config()
        staged_back = _persistent_back(client, snapshot)
    except TalosError as exc:
        raise _restore_failure(snapshot, f"the restore call failed: {exc}") from exc
    if after.raw != snapshot.raw or not staged_back:
        raise _restore_failure(
            snapshot,
            f"after re-applying it the node runs {config_summary(after.raw, after.version)}, "
            f"not the original {config_summary(snapshot.raw, snapshot.version)}"
            + ("" if staged_back else ", and its staged (persistent) config differs"),
        )
    return True


def _matches(client: TalosClient, snapshot: Snapshot) -> bool:
    if client.machine_config().raw != snapshot.raw:
        return False
    return _persistent_back(client, snapshot)


def _persistent_back(client: TalosClient, snapshot: Snapshot) -> bool:
    """The config the next boot loads is the original: the one staged before, or, where
    the node kept none, none or the original bytes. (Every apply but TRY writes
    ``persistent``, v1alpha1_server.go ApplyConfiguration, and nothing removes it, so a
    node that kept none can at best be given the original bytes there.)"""
    now = persistent_config(client)
    if snapshot.persistent is None:
        return now is None or now == snapshot.raw
    return now == snapshot.persistent


def apply_original(client: TalosClient, raw: bytes, mode: models.ApplyMode) -> None:
    """Apply ``raw``, retrying while another apply is still in progress."""
    for attempt in range(_RESTORE_ATTEMPTS):
        try:
            client.apply_configuration(raw, mode)
            return
        except FailedPrecondition as exc:
            if "already in progress" not in exc.details or attempt == _RESTORE_ATTEMPTS - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def _restore_failure(snapshot: Snapshot, why: str) -> ConfigRestoreError:
    node = snapshot.node
    claim = snapshot.claim
    if claim is not None and claim.record is not None:
        keep = (
            f"Its original config stays in the journal {journal_path(claim.state_dir, claim.key)}"
            f" (0600; it holds the cluster's secrets): talos-recover --state-dir "
            f"{claim.state_dir} retries the restore."
        )
    else:
        keep = (
            f"Re-apply your own copy of its config (talosctl -n {node.host} apply-config "
            "--mode no-reboot --file <config>); no journal was kept for this node."
        )
    return ConfigRestoreError(
        f"could not restore the original machine config of node {node.name} ({node.address}): "
        f"{why}. The node may still run a changed config. {keep}"
    )
