"""The record of every RPC the nodes of an emulated cluster received."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["CallLog", "CallRecord"]


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


class CallLog:
    """Every call every node of a cluster received, in order (thread-safe to read)."""

    def __init__(self) -> None:
        self._records: list[CallRecord] = []

    def append(self, record: CallRecord) -> None:
        self._records.append(record)

    def snapshot(self) -> list[CallRecord]:
        return list(self._records)

    def clear(self) -> None:
        self._records.clear()

    def __len__(self) -> int:
        return len(self._records)
