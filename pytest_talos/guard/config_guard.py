"""ConfigGuard: lock, journal and snapshot a node before its first change; restore it after."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from pytest_talos import models
from pytest_talos.client import TalosClient
from pytest_talos.errors import ConfigRestoreError, TalosError
from pytest_talos.guard.signals import SignalShield
from pytest_talos.guard.snapshot import (
    CLAIMS,
    CLAIMS_LOCK,
    Claim,
    Snapshot,
    node_key_of,
    persistent_config,
    restore_snapshot,
)
from pytest_talos.journal import (
    Change,
    JournalRecord,
    NodeLock,
    default_state_dir,
    journal_path,
    new_record,
    read_journal,
    remove_journal,
    sha256,
    write_journal,
)
from pytest_talos.node import TalosNode
from pytest_talos.restarts import note_guarded_change
from pytest_talos.wait import config_summary

DEFAULT_LOCK_TIMEOUT = 600.0  # seconds a guard waits for another changer of the same node


class GuardConflict(TalosError):
    """A snapshot was refused: another change to the node is in flight."""


@dataclass(frozen=True)
class JournalOrigin:
    """How a later recovery reaches the node: the talosconfig and context the run used."""

    talosconfig: str | None = None
    context: str | None = None


class RecordingClient:
    """The node's client, journaling every apply the guard lets through (before and after)."""

    def __init__(self, inner: TalosClient, guard: ConfigGuard, snapshot: Snapshot) -> None:
        self._inner = inner
        self._guard = guard
        self._snapshot = snapshot

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Transparent to monkeypatching: a patched client method is what the guard calls too.
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        elif getattr(value, "__self__", None) is self:  # putting our own method back
            self._inner.__dict__.pop(name, None)
        else:
            setattr(self._inner, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._inner, name)

    def __repr__(self) -> str:
        return f"{self._inner!r} (changes journaled)"

    def apply_configuration(
        self,
        data: bytes | str,
        mode: models.ApplyMode = "no-reboot",
        *,
        dry_run: bool = False,
        try_timeout: float | dt.timedelta | None = None,
    ) -> models.ApplyResult:
        if dry_run:
            return self._inner.apply_configuration(
                data, mode, dry_run=True, try_timeout=try_timeout
            )
        raw = data.encode() if isinstance(data, str) else data
        seconds = (
            try_timeout.total_seconds() if isinstance(try_timeout, dt.timedelta) else try_timeout
        )
        change = Change(sha256(raw), mode, try_timeout=seconds)
        self._guard._note(self._snapshot, change)
        reply = self._inner.apply_configuration(raw, mode, try_timeout=try_timeout)
        self._guard._note(self._snapshot, replace(change, state="applied"), update=True)
        # the node's time of it: restarts it causes are the kit's, not the node's
        note_guarded_change(self._inner, self._snapshot, mode=mode, try_timeout=seconds)
        return reply


class ConfigGuard:
    """Snapshots each node's exact machine config before its first change; restores it.

    :meth:`restore` re-applies the original bytes with ``no-reboot`` wherever the active
    config differs (always after a try-mode change), then reads the config back and
    requires the bytes to be equal. Anything else raises :class:`ConfigRestoreError` naming
    the node and what to do. Nodes whose config is already the original (a rejected patch)
    are left alone.

    ``state_dir`` holds the node locks and journals (default
    :func:`~pytest_talos.journal.default_state_dir`); ``journal=False`` writes none (for a
    cluster that dies with the process, such as an in-process emulator). ``lock_timeout``
    bounds the wait for another changer of the same node. The journal is the only place
    config bytes are ever written: 0600, in a 0700 directory, removed once restored.
    """

    def __init__(
        self,
        *,
        settle_timeout: float = 30.0,
        state_dir: str | Path | None = None,
        journal: bool = True,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        origin: JournalOrigin | None = None,
        label: str = "",
    ) -> None:
        self.settle_timeout = settle_timeout
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.journal = journal
        self.lock_timeout = lock_timeout
        self.origin = origin or JournalOrigin()
        self.label = label
        self._snapshots: dict[str, Snapshot] = {}

    def __repr__(self) -> str:
        return f"ConfigGuard(protecting={self.protected!r})"

    @property
    def protected(self) -> list[str]:
        """Names of the nodes with a snapshot not yet restored."""
        return [snapshot.node.name for snapshot in self._snapshots.values()]

    def journal_of(self, node: TalosNode) -> Path | None:
        """Where ``node``'s journal is while this guard protects it (None: no journal)."""
        snapshot = self._snapshots.get(node.address)
        if snapshot is None or snapshot.claim is None or snapshot.claim.record is None:
            return None
        return journal_path(snapshot.claim.state_dir, snapshot.claim.key)

    def protect(self, node: TalosNode) -> None:
        """Lock ``node``, journal and snapshot its config, unless this guard already holds it.

        Raises :class:`GuardConflict` when another change to the node is in flight in this
        process, or a killed run left a journal for it, and NodeBusy when another process
        keeps the node's lock past ``lock_timeout``.
        """
        snapshot = self._snapshots.get(node.address)
        if snapshot is None:
            client = unwrapped(node.client)
            snapshot = self._snapshot(node, client)
            self._snapshots[node.address] = snapshot
        if not isinstance(node.client, RecordingClient) or node.client._snapshot is not snapshot:
            node.client = cast(TalosClient, RecordingClient(snapshot.client, self, snapshot))

    def _snapshot(self, node: TalosNode, client: TalosClient) -> Snapshot:
        key = node_key_of(client, node.address)
        with CLAIMS_LOCK:
            claim = CLAIMS.get(key)
            if claim is not None:
                return self._share(node, client, claim)
        lock = NodeLock(self.state_dir, key, label=self.label)
        try:
            lock.acquire(self.lock_timeout, node.name)
        except OSError as exc:
            raise _state_dir_error(self.state_dir, node, exc) from None
        try:
            _refuse_stale_journal(self.state_dir, key, node)
            config = client.machine_config()
            persistent = persistent_config(client)
            record = self._write_record(node, client, key, config, persistent)
        except OSError as exc:
            lock.release()
            raise _state_dir_error(self.state_dir, node, exc) from None
        except BaseException:
            lock.release()
            raise
        claim = Claim(key, self.state_dir, lock, record, config.raw)
        with CLAIMS_LOCK:
            CLAIMS[key] = claim
        return Snapshot(node, client, config.raw, config.version, persistent, claim)

    def _share(self, node: TalosNode, client: TalosClient, claim: Claim) -> Snapshot:
        config = client.machine_config()
        if config.raw != claim.original:
            raise GuardConflict(
                f"another guard in this run changed node {node.name} and has not restored it "
                f"yet (it runs {config_summary(config.raw, config.version)}, not the original "
                f"{config_summary(claim.original)}): a snapshot now would record that change "
                "as the original. Make this change through the same guard (talos_config_guard, "
                "or the node's own guard), or restore the first guard before using another",
                node=node.name,
            )
        claim.users += 1
        return Snapshot(node, client, config.raw, config.version, persistent_config(client), claim)

    def _write_record(
        self,
        node: TalosNode,
        client: TalosClient,
        key: str,
        config: models.MachineConfig,
        persistent: bytes | None,
    ) -> JournalRecord | None:
        if not self.journal:
            return None
        try:
            tag = client.version().tag
        except TalosError:
            tag = ""
        record = new_record(
            key,
            node=node.name,
            address=node.address,
            endpoint=client.endpoint,
            original=config.raw,
            version=config.version,
            persistent=persistent,
            talos_version=tag,
            talosconfig=self.origin.talosconfig,
            context=self.origin.context,
            run=self.label,
        )
        write_journal(self.state_dir, record)
        return record

    def _note(self, snapshot: Snapshot, change: Change, *, update: bool = False) -> None:
        """Journal a change before it is sent (and again once the node accepted it)."""
        claim = snapshot.claim
        if change.mode == "try":
            snapshot.tried = True
            if claim is not None:
                claim.tried = True
        if claim is None or claim.record is None:
            return
        if update and claim.record.changes:
            claim.record.changes[-1] = change
        else:
            claim.record.changes.append(change)
        write_journal(claim.state_dir, claim.record)

    def original(self, node: TalosNode) -> bytes | None:
        """The snapshotted bytes for ``node`` (``None`` if not protected)."""
        snapshot = self._snapshots.get(node.address)
        return snapshot.raw if snapshot else None

    def restore_node(self, node: TalosNode) -> bool:
        """Restore one node now; True if a change had to be undone."""
        snapshot = self._snapshots.get(node.address)
        if snapshot is None:
            return False
        with SignalShield(lambda: [snapshot.node.name]):
            changed = restore_snapshot(snapshot)
            self._release(node.address, snapshot)
        return changed

    def restore(self, *, reraise_deferred: bool = True) -> list[str]:
        """Restore every protected node; the names of those that needed it.

        Every node is attempted even if one fails; then one ConfigRestoreError lists all
        failures. Nodes that failed stay protected (locked and journaled), so a later call
        retries them. SIGINT/SIGTERM wait until the end (see :class:`SignalShield`);
        ``reraise_deferred=False`` swallows them (the run is stopping anyway).
        """
        if not self._snapshots:
            return []
        restored, failures = [], []
        with SignalShield(lambda: self.protected, reraise=reraise_deferred):
            for address, snapshot in list(self._snapshots.items()):
                try:
                    if restore_snapshot(snapshot):
                        restored.append(snapshot.node.name)
                except ConfigRestoreError as exc:
                    failures.append(str(exc))
                    continue
                self._release(address, snapshot)
        if failures:
            raise ConfigRestoreError("\n".join(failures))
        return restored

    def _release(self, address: str, snapshot: Snapshot) -> None:
        """The node has its original config: drop the snapshot, the journal and the lock."""
        del self._snapshots[address]
        node = snapshot.node
        if isinstance(node.client, RecordingClient) and node.client._snapshot is snapshot:
            node.client = snapshot.client
        claim = snapshot.claim
        if claim is None:
            return
        with CLAIMS_LOCK:
            claim.users -= 1
            if claim.users > 0:
                return
            CLAIMS.pop(claim.key, None)
        if claim.record is not None:
            remove_journal(claim.state_dir, claim.key)
        if claim.lock is not None:
            claim.lock.release()

    def __enter__(self) -> ConfigGuard:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()


def unwrapped(client: TalosClient) -> TalosClient:
    while isinstance(client, RecordingClient):
        client = client._inner
    return client


def _state_dir_error(state_dir: Path, node: TalosNode, exc: OSError) -> TalosError:
    return TalosError(
        f"cannot lock and journal node {node.name} in the state directory {state_dir} "
        f"({exc.strerror or exc}); no change was made. Point --talos-state-dir (or "
        "$TALOS_STATE_DIR) at a directory this user can write",
        node=node.name,
    )


def _refuse_stale_journal(state_dir: Path, key: str, node: TalosNode) -> None:
    """Holding the lock: a journal still there was left by a run that died mid-change."""
    path = journal_path(state_dir, key)
    if not path.exists():
        return
    try:
        what = read_journal(path).describe()
    except TalosError as exc:
        what = str(exc)
    raise GuardConflict(
        f"node {node.name} may still run a config a killed run left on it: {what}. Its "
        f"journal is {path}. Recover it first (talos-recover --state-dir {state_dir}, or "
        "pytest --talos-recover); the guard refuses to take that config as the original",
        node=node.name,
    )


@contextlib.contextmanager
def guarding(node: TalosNode, guard: ConfigGuard | None) -> Iterator[ConfigGuard]:
    """The guard a changing helper uses, restoring at the end only if it is private.

    The node is locked and snapshotted on entry, before the helper reads its "before"
    config: read outside the lock, that could be another worker's change in flight.
    """
    if guard is not None:
        _hold(node, guard)
        yield guard
        return
    if isinstance(node.guard, ConfigGuard):
        _hold(node, node.guard)
        yield node.guard
        return
    private = ConfigGuard()
    try:
        _hold(node, private)
        yield private
    finally:
        private.restore()


def _hold(node: TalosNode, guard: ConfigGuard) -> None:
    """What a change does first, in the same order: the node's own guard, then ``guard``."""
    for chosen in dict.fromkeys(g for g in (node.guard, guard) if g is not None):
        chosen.protect(node)


@contextlib.contextmanager
def unchanged_while(
    node: TalosNode, *, state_dir: str | Path | None = None, timeout: float = DEFAULT_LOCK_TIMEOUT
) -> Iterator[None]:
    """Hold ``node``'s lock for a read that must not see a change in flight (a config
    compared with another, mid try window or mid restore): waits for any other worker or
    run that is changing the node, and keeps them waiting meanwhile. Nothing is journaled.
    Where this process already holds the node (a guard of its own), or the lock cannot be
    taken (an unwritable state directory), the read goes ahead unlocked."""
    client = unwrapped(node.client)
    key = node_key_of(client, node.address)
    with CLAIMS_LOCK:
        held_here = key in CLAIMS
    if held_here:
        yield
        return
    where = Path(state_dir) if state_dir is not None else default_state_dir()
    lock = NodeLock(where, key, label="a read that waits for changes")
    try:
        lock.acquire(timeout, node.name)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        lock.release()
