"""The soft ``RLIMIT_NOFILE``, raised toward the hard limit for the time of a scan only."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from pytest_talos.ports.sweep import BATCH

try:
    import resource
except ImportError:  # not a Unix
    resource = None  # type: ignore[assignment]

# File descriptors left for everything else in the process while a scan runs, on top of
# the refused sockets the sweeps keep for reuse (``kept``: at most one batch per sweep).
_FD_RESERVE = 64


def _open_fd_count() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 64  # a guess: nothing tells how many are open


class _FileLimit:
    """The soft ``RLIMIT_NOFILE``, raised for as long as at least one scan needs it.

    A library call must not change its process for good: the first scan that needs more
    file descriptors raises the soft limit toward the hard one, and the last scan to end
    puts the old value back (unless something else moved the limit meanwhile: then it
    is left alone). Scans may run at once on several threads and loops; a lock keeps count,
    and each scan is granted room beside what the scans still running were granted (their
    probes and kept sockets), so that together they stay within the limit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._original: int | None = None  # the soft limit before we raised it
        self._raised_to: int | None = None
        self._granted = 0  # descriptors the running scans may still open (probes + kept)

    def acquire(self, wanted: int, kept: int = BATCH) -> tuple[int, int]:
        """Register a scan wanting ``wanted`` probes in flight, keeping up to ``kept``
        refused sockets for reuse besides: (the usable number of probes, the grant to
        hand back to :meth:`release`)."""
        with self._lock:
            self._users += 1
            try:
                usable = self._usable(wanted, self._granted + _FD_RESERVE + kept)
            except BaseException:
                self._release_locked(0)
                raise
            self._granted += usable + kept
            return usable, usable + kept

    def release(self, grant: int) -> None:
        with self._lock:
            self._release_locked(grant)

    def _usable(self, wanted: int, reserve: int) -> int:
        if resource is None:  # not a Unix: no limit we can see or move
            return wanted
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return wanted
        in_use = _open_fd_count()  # counts the running scans' open sockets twice: room to spare
        needed = in_use + wanted + reserve
        if soft < needed:
            target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
            if target > soft and self._raise(soft, target, hard):
                soft = target
        return max(1, min(wanted, soft - in_use - reserve))

    def _raise(self, soft: int, target: int, hard: int) -> bool:
        assert resource is not None
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return False  # keep the old limit and scan with fewer probes in flight
        if self._original is None:
            self._original = soft
        self._raised_to = target
        return True

    def _release_locked(self, grant: int) -> None:
        self._users -= 1
        self._granted -= grant
        if self._users or self._original is None or resource is None:
            return
        original, raised_to = self._original, self._raised_to
        self._original = self._raised_to = None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == raised_to:  # nobody else changed it meanwhile
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (original, hard))


_FILE_LIMIT = _FileLimit()


@contextlib.contextmanager
def file_limit_for(wanted: int, kept: int = BATCH) -> Iterator[int]:
    """The usable concurrency, with the soft file limit raised only inside the block;
    ``kept``: the refused sockets the scan's sweeps may keep for reuse (one batch each)."""
    usable, grant = _FILE_LIMIT.acquire(wanted, kept)
    try:
        yield usable
    finally:
        _FILE_LIMIT.release(grant)
