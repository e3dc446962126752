"""ConfigGuard: every change to a node's machine config is undone, whatever stops the run.

A guard snapshots a node's exact config before its first change and puts it back at the
end. Around that promise sit four safety nets, so that a config is never lost:

* **One changer per node.** Before the snapshot the guard takes the node's lock
  (:class:`~pytest_talos.journal.NodeLock`), shared by every process using the same state
  directory: pytest-xdist workers and parallel runs wait for each other instead of
  snapshotting a node while another one's change is live. A second guard in the same
  process shares the lock only if the node still runs the first guard's original config;
  otherwise the snapshot is refused.
* **A journal.** Before the first change the guard writes the original config, the node,
  its Talos version and each change in flight to a 0600 file in the state directory (see
  :mod:`pytest_talos.journal`; it holds the cluster's secrets). A restore removes it; a run
  killed with SIGKILL leaves it for :func:`recover_record` (``talos-recover``).
* **A shielded restore.** While the guard restores, SIGINT and SIGTERM print
  ``restoring <node>, please wait`` and are deferred until the config is back.
* **Explicit try-mode undo.** After a try-mode change the guard re-applies the original
  itself, even if the node's timer already reverted it: a pending timer is cancelled by
  that apply (``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go``
  ApplyConfiguration cancels a pending rollback for every non-try mode).

::

    with ConfigGuard() as guard:            # restores every touched node on exit
        node.apply_patch(patch, guard=guard)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Literal, cast

from pytest_talos import models
from pytest_talos.client import TalosClient
from pytest_talos.errors import ConfigRestoreError, FailedPrecondition, NotFound, TalosError
from pytest_talos.journal import (
    Change,
    JournalRecord,
    NodeLock,
    default_state_dir,
    journal_path,
    new_record,
    node_key,
    read_journal,
    remove_journal,
    sha256,
    write_journal,
)
from pytest_talos.node import TalosNode
from pytest_talos.restarts import note_guarded_change
from pytest_talos.wait import MACHINE_CONFIG_RESOURCE, config_summary

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "ConfigGuard",
    "ConfigRestoreError",
    "GuardConflict",
    "JournalOrigin",
    "Recovery",
    "SignalShield",
    "Terminated",
    "judge_recovery",
    "node_key_of",
    "recover_record",
    "set_announcer",
]

DEFAULT_LOCK_TIMEOUT = 600.0  # seconds a guard waits for another changer of the same node
_RESTORE_ATTEMPTS = 3
_IDENTITY = ("Identities.cluster.talos.dev", "local", "cluster")


class GuardConflict(TalosError):
    """A snapshot was refused: another change to the node is in flight."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the test stops, every node is restored, the run exits."""


@dataclass(frozen=True)
class JournalOrigin:
    """How a later recovery reaches the node: the talosconfig and context the run used."""

    talosconfig: str | None = None
    context: str | None = None


# --------------------------------------------------------------------------- signals

_announce: Callable[[str], None] | None = None
_shield_active = threading.Event()


def set_announcer(announce: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """Where deferred-signal notices go (default: stderr); returns the one it replaces.

    The pytest plugin sets its own (past pytest's output capture) and puts the previous back.
    """
    global _announce
    previous, _announce = _announce, announce
    return previous


def _say(text: str) -> None:
    if _announce is not None:
        with contextlib.suppress(Exception):
            _announce(text)
            return
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class SignalShield:
    """Defers SIGINT and SIGTERM while a restore runs (main thread only; nests as one).

    Each deferred signal prints ``talos: restoring <nodes>, please wait``. When the shield
    ends with a signal deferred and ``reraise`` is set, it raises KeyboardInterrupt (or
    :class:`Terminated`) so that the run still stops, after the nodes are back.
    """

    def __init__(self, nodes: Callable[[], Sequence[str]], *, reraise: bool = True) -> None:
        self._nodes = nodes
        self.reraise = reraise
        self.deferred: list[int] = []
        self._previous: dict[int, Any] = {}
        self._owner = False

    def __enter__(self) -> SignalShield:
        if threading.current_thread() is not threading.main_thread() or _shield_active.is_set():
            return self
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._defer)
        except (ValueError, OSError):  # not allowed here: no shield, but no harm
            self._put_back()
            return self
        self._owner = True
        _shield_active.set()
        return self

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        self.deferred.append(signum)
        nodes = ", ".join(self._nodes()) or "the changed nodes"
        _say(
            f"talos: restoring {nodes}, please wait ({signal.Signals(signum).name} deferred "
            "until the original config is back; SIGKILL would leave only the journal, for "
            "talos-recover)"
        )

    def _put_back(self) -> None:
        for signum, handler in self._previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler)
        self._previous.clear()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
        if self.deferred and self.reraise and exc_type is None:
            if signal.SIGTERM in self.deferred:
                raise Terminated("SIGTERM received during the restore (deferred until it ended)")
            raise KeyboardInterrupt

    def close(self) -> None:
        """End the shield without re-raising (the plugin's shutdown shield ends this way)."""
        if self._owner:
            self._owner = False
            self._put_back()
            _shield_active.clear()


# --------------------------------------------------------------------------- snapshots


@dataclass
class _Claim:
    """This process's hold on one node: its lock, journal and the original config."""

    key: str
    state_dir: Path
    lock: NodeLock | None
    record: JournalRecord | None
    original: bytes = field(repr=False)
    users: int = 1
    tried: bool = False  # a try-mode change went through (timers may still be armed)


_CLAIMS: dict[str, _Claim] = {}
_CLAIMS_LOCK = threading.RLock()


@dataclass
class _Snapshot:
    node: TalosNode
    client: TalosClient  # the node's own client (not the recording wrapper)
    raw: bytes = field(repr=False)  # the active config; holds secrets: never printed
    version: int
    persistent: bytes | None = field(default=None, repr=False)  # None: none kept
    claim: _Claim | None = None
    tried: bool = False  # a try-mode change went through: always re-apply on restore


def _persistent_config(client: TalosClient) -> bytes | None:
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


class _RecordingClient:
    """The node's client, journaling every apply the guard lets through (before and after)."""

    def __init__(self, inner: TalosClient, guard: ConfigGuard, snapshot: _Snapshot) -> None:
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
        self._snapshots: dict[str, _Snapshot] = {}

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
            client = _unwrapped(node.client)
            snapshot = self._snapshot(node, client)
            self._snapshots[node.address] = snapshot
        if not isinstance(node.client, _RecordingClient) or node.client._snapshot is not snapshot:
            node.client = cast(TalosClient, _RecordingClient(snapshot.client, self, snapshot))

    def _snapshot(self, node: TalosNode, client: TalosClient) -> _Snapshot:
        key = node_key_of(client, node.address)
        with _CLAIMS_LOCK:
            claim = _CLAIMS.get(key)
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
            persistent = _persistent_config(client)
            record = self._write_record(node, client, key, config, persistent)
        except OSError as exc:
            lock.release()
            raise _state_dir_error(self.state_dir, node, exc) from None
        except BaseException:
            lock.release()
            raise
        claim = _Claim(key, self.state_dir, lock, record, config.raw)
        with _CLAIMS_LOCK:
            _CLAIMS[key] = claim
        return _Snapshot(node, client, config.raw, config.version, persistent, claim)

    def _share(self, node: TalosNode, client: TalosClient, claim: _Claim) -> _Snapshot:
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
        return _Snapshot(
            node, client, config.raw, config.version, _persistent_config(client), claim
        )

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

    def _note(self, snapshot: _Snapshot, change: Change, *, update: bool = False) -> None:
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
            changed = _restore(snapshot)
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
                    if _restore(snapshot):
                        restored.append(snapshot.node.name)
                except ConfigRestoreError as exc:
                    failures.append(str(exc))
                    continue
                self._release(address, snapshot)
        if failures:
            raise ConfigRestoreError("\n".join(failures))
        return restored

    def _release(self, address: str, snapshot: _Snapshot) -> None:
        """The node has its original config: drop the snapshot, the journal and the lock."""
        del self._snapshots[address]
        node = snapshot.node
        if isinstance(node.client, _RecordingClient) and node.client._snapshot is snapshot:
            node.client = snapshot.client
        claim = snapshot.claim
        if claim is None:
            return
        with _CLAIMS_LOCK:
            claim.users -= 1
            if claim.users > 0:
                return
            _CLAIMS.pop(claim.key, None)
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


def _unwrapped(client: TalosClient) -> TalosClient:
    while isinstance(client, _RecordingClient):
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


def _restore(snapshot: _Snapshot, *, force: bool = False) -> bool:
    """Put back the active config (and the staged one, where kept); True if anything changed."""
    client = snapshot.client
    force = force or snapshot.tried or (snapshot.claim is not None and snapshot.claim.tried)
    try:
        if not force and _matches(client, snapshot):
            return False
        _apply_original(client, snapshot.raw, "no-reboot")  # sets active and persistent
        note_guarded_change(client, snapshot, mode="no-reboot", restore=True)
        if snapshot.persistent is not None and snapshot.persistent != snapshot.raw:
            _apply_original(client, snapshot.persistent, "staged")  # a change staged before us
        after = client.machine_config()
        staged_back = (
            snapshot.persistent is None or _persistent_config(client) == snapshot.persistent
        )
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


def _matches(client: TalosClient, snapshot: _Snapshot) -> bool:
    if client.machine_config().raw != snapshot.raw:
        return False
    return snapshot.persistent is None or _persistent_config(client) == snapshot.persistent


def _apply_original(client: TalosClient, raw: bytes, mode: models.ApplyMode) -> None:
    """Apply ``raw``, retrying while another apply is still in progress."""
    for attempt in range(_RESTORE_ATTEMPTS):
        try:
            client.apply_configuration(raw, mode)
            return
        except FailedPrecondition as exc:
            if "already in progress" not in exc.details or attempt == _RESTORE_ATTEMPTS - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def _restore_failure(snapshot: _Snapshot, why: str) -> ConfigRestoreError:
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


@contextlib.contextmanager
def _guarding(node: TalosNode, guard: ConfigGuard | None) -> Iterator[ConfigGuard]:
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


# --------------------------------------------------------------------------- recovery

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
    client = _unwrapped(node.client)
    active = client.machine_config()
    persistent = _persistent_config(client)
    verdict = judge_recovery(record, active.raw, active.version, persistent)
    if verdict.verdict != "restore" or not apply:
        return verdict
    snapshot = _Snapshot(
        node, client, record.original_bytes, record.original_version, record.persistent_bytes
    )
    with SignalShield(lambda: [node.name]):
        _restore(snapshot, force=True)
    return replace(
        verdict, restored=True, message=f"{verdict.message}; its original config is back"
    )
