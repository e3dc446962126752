"""The machine config changes this kit made, timed by the node's own clock.

The config guard records each change it lets through (:func:`note_guarded_change`, through
:func:`record_kit_change`) with the node's time of it: the ``updated`` timestamp of the
MachineConfig resource right after the apply. The changes are kept in memory
(:data:`KIT_CHANGES`) and, where the guard journals, appended to ``changes.jsonl`` in its
state directory, so that the next run (or another pytest-xdist worker) knows them too. That
file holds no config content. :func:`kit_windows` turns them into the spans of node time a
restart is put down to the kit.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from pytest_talos import models
from pytest_talos.restarts.history import XID_SLACK, clock_text, unix_seconds

__all__ = [
    "CHANGES_FILE",
    "KIT_CHANGES",
    "KIT_SETTLE",
    "ChangeLog",
    "KitChange",
    "kit_windows",
    "note_guarded_change",
    "record_kit_change",
]

# Node seconds after the kit undid its change (or a try-mode change reverted itself) during
# which a restart is still put down to it: the controllers react within a second or two, and
# a crash-looping kubelet is stopped and started again at once (kubelet_service.go).
KIT_SETTLE = 30.0
CHANGES_FILE = "changes.jsonl"
_KEEP_FILE_ENTRIES = 86400.0  # node seconds: older kit changes are dropped from the file
_MAX_FILE_BYTES = 1 << 20
_MACHINE_CONFIG = ("MachineConfigs.config.talos.dev", "v1alpha1", "config")


@dataclass(frozen=True)
class KitChange:
    """One machine config change this kit made (no config content)."""

    node: str  # the address the kit reached the node at
    hostname: str
    at: float  # node time (Unix seconds): MachineConfig `updated` right after the apply
    version: int  # the MachineConfig v1alpha1 version it produced
    mode: str
    session: str  # the guarded change it belongs to (from the first change to the restore)
    try_timeout: float | None = None
    restore: bool = False  # the guard putting the original config back

    @property
    def ends(self) -> float:
        """When the node stops being changed by it (a try-mode change reverts by itself)."""
        if self.mode == "try":
            return self.at + (self.try_timeout if self.try_timeout is not None else 60.0)
        return self.at

    def describe(self) -> str:
        what = "restore of the original config" if self.restore else f"{self.mode} change"
        return f"the kit's {what} (MachineConfig version {self.version}) at {clock_text(self.at)}"


class ChangeLog:
    """The kit's config changes: in memory, and appended to a JSON-lines file when given."""

    def __init__(self) -> None:
        self._changes: list[KitChange] = []
        self._lock = threading.Lock()

    def add(self, change: KitChange, state_dir: Path | None = None) -> None:
        with self._lock:
            self._changes.append(change)
        if state_dir is not None:
            with contextlib.suppress(OSError):
                _append(state_dir / CHANGES_FILE, change)

    def clear(self) -> None:
        with self._lock:
            self._changes.clear()

    def for_node(self, node: str, state_dir: Path | None = None) -> list[KitChange]:
        """Every change known for ``node`` (this process's and the state directory's)."""
        with self._lock:
            found = {c for c in self._changes if c.node == node}
        if state_dir is not None:
            found |= {c for c in _read(state_dir / CHANGES_FILE) if c.node == node}
        return sorted(found, key=lambda c: (c.at, c.version))


KIT_CHANGES = ChangeLog()


def _append(path: Path, change: KitChange) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists() and path.stat().st_size > _MAX_FILE_BYTES:
        _prune(path, change.at)
    line = json.dumps(asdict(change), sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> list[KitChange]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        with contextlib.suppress(ValueError, TypeError):
            found.append(KitChange(**json.loads(line)))
    return found


def _prune(path: Path, now: float) -> None:
    kept = [c for c in _read(path) if now - c.at < _KEEP_FILE_ENTRIES]
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text("".join(json.dumps(asdict(c), sort_keys=True) + "\n" for c in kept))
    os.replace(temporary, path)


class _ResourceReader(Protocol):
    def get(self, kind: str, ident: str, namespace: str | None = None) -> models.Resource: ...


def record_kit_change(
    client: _ResourceReader,
    *,
    node: str,
    hostname: str,
    mode: str,
    session: str,
    try_timeout: float | None = None,
    restore: bool = False,
    state_dir: Path | None = None,
    log: ChangeLog = KIT_CHANGES,
) -> KitChange | None:
    """Note a config change the kit just applied, timed by the node's own clock.

    Reads the MachineConfig resource (its ``updated`` time and version). Never raises: a
    change it cannot time is not recorded (its restarts then count as the node's).
    """
    kind, ident, namespace = _MACHINE_CONFIG
    try:
        resource = client.get(kind, ident, namespace)
    except Exception:  # an observer: whatever goes wrong, the change itself stands
        return None
    at = unix_seconds(resource.metadata.updated)
    if at is None:
        return None
    change = KitChange(node, hostname, at, resource.version, mode, session, try_timeout, restore)
    log.add(change, state_dir)
    return change


_SESSIONS: dict[int, tuple[weakref.ref[object], str]] = {}
_SESSIONS_LOCK = threading.Lock()


def _session_of(snapshot: object) -> str:
    """A token for one guarded change of one node (one guard snapshot), unique per run."""
    with _SESSIONS_LOCK:
        for key in [k for k, (ref, _) in _SESSIONS.items() if ref() is None]:
            del _SESSIONS[key]
        known = _SESSIONS.get(id(snapshot))
        if known is not None and known[0]() is snapshot:
            return known[1]
        token = uuid.uuid4().hex
        _SESSIONS[id(snapshot)] = (weakref.ref(snapshot), token)
        return token


def note_guarded_change(
    client: _ResourceReader,
    snapshot: object,
    *,
    mode: str,
    try_timeout: float | None = None,
    restore: bool = False,
) -> None:
    """What the config guard calls after each apply it made (``snapshot``: its record of
    the node: ``.node``, and ``.claim.state_dir`` when it journals)."""
    node = getattr(snapshot, "node", None)
    claim = getattr(snapshot, "claim", None)
    journaled = claim is not None and getattr(claim, "record", None) is not None
    record_kit_change(
        client,
        node=str(getattr(node, "address", "")),
        hostname=str(getattr(node, "name", "")),
        mode=mode,
        session=_session_of(snapshot),
        try_timeout=try_timeout,
        restore=restore,
        state_dir=Path(claim.state_dir) if journaled and claim is not None else None,
    )


def kit_windows(changes: Sequence[KitChange]) -> list[tuple[float, float, KitChange, KitChange]]:
    """Per guarded change: from its first apply to the end of its last one (+ settle)."""
    sessions: dict[str, list[KitChange]] = {}
    for change in changes:
        sessions.setdefault(change.session, []).append(change)
    windows = []
    for members in sessions.values():
        first = min(members, key=lambda c: c.at)
        last = max(members, key=lambda c: c.ends)
        windows.append((first.at - XID_SLACK, last.ends + KIT_SETTLE, first, last))
    return windows
