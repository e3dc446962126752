"""Crash safety for config changes: a lock per node and a journal, in a state directory.

The state directory (``--talos-state-dir``, ini ``talos_state_dir``, ``$TALOS_STATE_DIR``;
default ``$XDG_STATE_HOME/pytest-talos``, i.e. ``~/.local/state/pytest-talos``) has mode 0700::

    locks/<key>.lock      one per node; a guard holds it (flock) from its first change to the
                          node until the node has its original config back
    journal/<key>.json    one per changed node, mode 0600, written before the first change

A journal holds the node's **original machine config, which contains the cluster's secrets**
(CA keys, bootstrap tokens): treat the directory like a talosconfig. A clean restore removes
it. One left behind means a run was killed in the middle of a change; ``talos-recover`` (or
``pytest --talos-recover``, or the next run allowed to change nodes) puts the node back, but
only while it still runs a config this kit left there.

The lock is what keeps pytest-xdist workers (and parallel runs sharing the state directory)
from snapshotting a node while another one's change is live. The kernel drops a ``flock``
when its process dies, so a stale lock never blocks: a journal whose lock is free belongs to
a dead run. This module has no pytest and no network in it.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import socket
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from pytest_talos.errors import TalosError

__all__ = [
    "JOURNAL_FORMAT",
    "STATE_DIR_ENV",
    "Change",
    "JournalRecord",
    "NodeBusy",
    "NodeLock",
    "default_state_dir",
    "journal_dir",
    "journal_path",
    "journals",
    "new_record",
    "node_key",
    "read_journal",
    "remove_journal",
    "sha256",
    "write_journal",
]

STATE_DIR_ENV = "TALOS_STATE_DIR"
JOURNAL_FORMAT = 1
_POLL = 0.1  # seconds between tries of a busy lock


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def default_state_dir(env: Mapping[str, str] = os.environ) -> Path:
    """``$TALOS_STATE_DIR``, else ``$XDG_STATE_HOME/pytest-talos``, else ~/.local/state/…"""
    if env.get(STATE_DIR_ENV, "").strip():
        return Path(os.path.expanduser(env[STATE_DIR_ENV].strip()))
    xdg = env.get("XDG_STATE_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "pytest-talos"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "state" / "pytest-talos"


def _private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make sure only its owner can enter it."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)
    return path


def journal_dir(state_dir: Path) -> Path:
    return state_dir / "journal"


def node_key(node_id: str, address: str) -> str:
    """A file-name-safe key: the node's address (readable) and a hash of its identity."""
    readable = "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in address)[:40]
    return f"{readable}-{sha256(f'{node_id}|{address}'.encode())[:16]}"


# --------------------------------------------------------------------------- the lock


class NodeBusy(TalosError):
    """Another holder kept the node's lock for longer than the lock timeout."""


class NodeLock:
    """An exclusive lock on one node for every process that uses the same state directory.

    An ``flock`` on ``locks/<key>.lock``, waited for up to ``timeout`` seconds. One process
    takes a node's lock once (the guard module shares it between its guards).
    """

    def __init__(self, state_dir: Path, key: str, *, label: str = "") -> None:
        self.path = state_dir / "locks" / f"{key}.lock"
        self.key = key
        self.label = label
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self, timeout: float, node: str) -> None:
        """Take the lock, polling until ``timeout``; NodeBusy names the holder if it stays."""
        handle = self._open()
        deadline = time.monotonic() + timeout
        try:
            while not _try_flock(handle):
                if time.monotonic() >= deadline:
                    raise NodeBusy(
                        f"node {node} is being changed by {self.holder() or 'another run'} and "
                        f"its lock ({self.path}) was not free within {timeout:g}s; wait for "
                        "that run to finish, or raise --talos-lock-timeout",
                        node=node,
                    )
                time.sleep(_POLL)
        except BaseException:
            handle.close()
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(
            f"pid {os.getpid()} on {socket.gethostname()}"
            + (f" ({self.label})" if self.label else "")
            + "\n"
        )
        handle.flush()
        self._handle = handle

    def try_acquire(self, node: str) -> bool:
        """Take the lock only if it is free right now."""
        try:
            self.acquire(0.0, node)
        except NodeBusy:
            return False
        return True

    def _open(self) -> IO[str]:
        _private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return os.fdopen(fd, "r+", encoding="utf-8")

    def holder(self) -> str:
        """Who holds the lock, as the holder wrote it (empty if unknown)."""
        try:
            return self.path.read_text(encoding="utf-8").strip()
        except OSError:
            return ""

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        with contextlib.suppress(OSError):
            handle.truncate(0)
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()


def _try_flock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# --------------------------------------------------------------------------- the journal


@dataclass
class Change:
    """One apply the guard let through: the sha256 of the bytes sent, and how far it got."""

    sha256: str
    mode: str
    state: str = "sent"  # "sent": the reply never came back; "applied": the node accepted it
    try_timeout: float | None = None
    at: str = field(default_factory=lambda: _now())


@dataclass
class JournalRecord:
    """What a guard writes before its first change to a node (JSON, mode 0600)."""

    key: str
    node: str  # hostname (or address)
    address: str  # the node as the endpoint reaches it
    endpoint: str
    original: str = field(repr=False)  # base64 of the exact original active config: SECRETS
    original_sha256: str = ""
    original_version: int = 0
    persistent: str | None = field(default=None, repr=False)  # base64, where the node keeps one
    talos_version: str = ""
    talosconfig: str | None = None
    context: str | None = None
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    started: str = field(default_factory=lambda: _now())
    run: str = ""  # e.g. the test that made the change
    changes: list[Change] = field(default_factory=list)
    format: int = JOURNAL_FORMAT

    @property
    def original_bytes(self) -> bytes:
        return base64.b64decode(self.original)

    @property
    def persistent_bytes(self) -> bytes | None:
        return None if self.persistent is None else base64.b64decode(self.persistent)

    def describe(self) -> str:
        """One line on what happened, without any config content."""
        last = self.changes[-1] if self.changes else None
        doing = (
            f"its last change ({last.mode}, sha256 {last.sha256[:12]}) was "
            + ("accepted" if last.state == "applied" else "in flight (no reply seen)")
            if last
            else "no change had been sent yet"
        )
        return (
            f"node {self.node} ({self.address} via {self.endpoint}, Talos "
            f"{self.talos_version or '?'}): a run (pid {self.pid} on {self.host}, started "
            f"{self.started}{', ' + self.run if self.run else ''}) stopped before restoring its "
            f"original config (version {self.original_version}, sha256 "
            f"{self.original_sha256[:12]}); {len(self.changes)} change(s) sent, {doing}"
        )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def new_record(
    key: str,
    *,
    node: str,
    address: str,
    endpoint: str,
    original: bytes,
    version: int,
    persistent: bytes | None,
    **extra: Any,
) -> JournalRecord:
    return JournalRecord(
        key=key,
        node=node,
        address=address,
        endpoint=endpoint,
        original=base64.b64encode(original).decode("ascii"),
        original_sha256=sha256(original),
        original_version=version,
        persistent=None if persistent is None else base64.b64encode(persistent).decode("ascii"),
        **extra,
    )


def journal_path(state_dir: Path, key: str) -> Path:
    return journal_dir(state_dir) / f"{key}.json"


def write_journal(state_dir: Path, record: JournalRecord) -> Path:
    """Write (or replace) the record atomically and durably, mode 0600 in a 0700 dir."""
    directory = _private_dir(journal_dir(state_dir))
    _private_dir(state_dir)
    path = directory / f"{record.key}.json"
    temporary = directory / f".{record.key}.{os.getpid()}.tmp"
    data = json.dumps(asdict(record), indent=1).encode()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    _fsync_dir(directory)
    return path


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_journal(path: Path) -> JournalRecord:
    """Parse one journal file; TalosError if it is not one this kit wrote."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        changes = [Change(**change) for change in raw.pop("changes", [])]
        record = JournalRecord(**raw, changes=changes)
    except (OSError, ValueError, TypeError) as exc:
        raise TalosError(f"{path}: not a readable pytest-talos journal ({exc})") from None
    if record.format != JOURNAL_FORMAT:
        raise TalosError(f"{path}: journal format {record.format} is not {JOURNAL_FORMAT}")
    return record


def remove_journal(state_dir: Path, key: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        journal_path(state_dir, key).unlink()
        _fsync_dir(journal_dir(state_dir))


def journals(state_dir: Path) -> Iterator[Path]:
    directory = journal_dir(state_dir)
    if directory.is_dir():
        yield from sorted(directory.glob("*.json"))
