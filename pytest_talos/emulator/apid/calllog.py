"""The record of the RPCs the nodes of an emulated cluster received: a bounded ring buffer.

A long-running emulator (``python -m pytest_talos.emulator``, a soak test) must not grow
without end, so only the newest ``maxlen`` records are kept (default 20 000, about 11 MB;
``$TALOS_EMULATOR_CALL_LOG_SIZE`` or ``CallLog(maxlen=...)`` / ``.maxlen = n`` changes it).
Records are numbered from 0 for the cluster's lifetime: :attr:`CallLog.total` is the number
ever received and :meth:`CallLog.since` returns those from a number on, so "the calls this
test sent" stays right after older records were dropped.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from dataclasses import dataclass, field

__all__ = ["DEFAULT_CALL_LOG_SIZE", "SIZE_ENV", "CallLog", "CallRecord"]

DEFAULT_CALL_LOG_SIZE = 20_000  # about 540 bytes a record
SIZE_ENV = "TALOS_EMULATOR_CALL_LOG_SIZE"


@dataclass(frozen=True)
class CallRecord:
    """One RPC an emulated node received."""

    node: str  # hostname of the node that received it
    address: str
    method: str  # full gRPC path, e.g. /machine.MachineService/Version
    roles: tuple[str, ...]
    mutating: bool
    forwarded: bool = False  # received from a control plane proxying a client's call
    targets: tuple[str, ...] = ()  # node/nodes metadata it carried
    client_serial: str = ""  # serial number of the client certificate (hex)
    time: float = field(default_factory=time.time)


def _size_from_env() -> int:
    text = os.environ.get(SIZE_ENV, "").strip()
    if not text:
        return DEFAULT_CALL_LOG_SIZE
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"${SIZE_ENV}={text!r} is not a positive number of records")
    return int(text)


class CallLog:
    """The newest ``maxlen`` calls every node of a cluster received, in order (thread-safe)."""

    def __init__(self, maxlen: int | None = None) -> None:
        size = maxlen if maxlen is not None else _size_from_env()
        if size < 1:
            raise ValueError(f"maxlen must be at least 1, not {size}")
        self._records: collections.deque[CallRecord] = collections.deque(maxlen=size)
        self._lock = threading.Lock()
        self.total = 0  # records ever appended (the number of the next one)

    @property
    def maxlen(self) -> int:
        return self._records.maxlen or 0

    @maxlen.setter
    def maxlen(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"maxlen must be at least 1, not {size}")
        with self._lock:
            self._records = collections.deque(self._records, maxlen=size)

    @property
    def dropped(self) -> int:
        """How many old records the ring buffer has let go."""
        return self.total - len(self._records)

    def append(self, record: CallRecord) -> None:
        with self._lock:
            self._records.append(record)
            self.total += 1

    def snapshot(self) -> list[CallRecord]:
        with self._lock:
            return list(self._records)

    def since(self, number: int) -> list[CallRecord]:
        """The records numbered ``number`` and later that are still kept."""
        with self._lock:
            first = self.total - len(self._records)
            skip = max(0, number - first)
            return list(self._records)[skip:]

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        return len(self._records)
