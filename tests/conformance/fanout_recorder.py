"""A plugin that records every fan-out the suite makes (loaded with ``-p``): which read, on
how many nodes, on which thread each read ran, and each read's start and end. It writes
them as JSON to ``$FANOUT_RECORD`` when the run ends."""

from __future__ import annotations

import json
import os
import threading
import time
from functools import partial
from typing import Any

from conformance._support import fanout

_LOCK = threading.Lock()
_ROUNDS: list[dict[str, Any]] = []
_READS: list[dict[str, Any]] = []


def _name(read: Any) -> str:
    """The check id of a checked fan-out's read, else the read function's name."""
    if isinstance(read, partial) and read.func is fanout.run_checked:
        return str(read.args[1])
    return str(getattr(read, "__qualname__", repr(read)))


_fan_out = fanout.FanOut._fan_out
_timed = fanout.FanOut._timed


def _recorded_fan_out(self: Any, first: str) -> None:
    _fan_out(self, first)
    with _LOCK:
        _ROUNDS.append({"read": _name(self._read), "nodes": self.round_sizes[-1]})


def _recorded_timed(self: Any, node: Any) -> Any:
    began = time.monotonic()
    try:
        return _timed(self, node)
    finally:
        with _LOCK:
            _READS.append(
                {
                    "read": _name(self._read),
                    "node": node.address,
                    "thread": threading.current_thread().name,
                    "began": began,
                    "ended": time.monotonic(),
                }
            )


fanout.FanOut._fan_out = _recorded_fan_out  # type: ignore[method-assign]
fanout.FanOut._timed = _recorded_timed  # type: ignore[method-assign]


def pytest_unconfigure(config: Any) -> None:
    path = os.environ.get("FANOUT_RECORD")
    if path:
        with _LOCK:
            record = {"rounds": _ROUNDS, "reads": _READS}
        with open(path, "w", encoding="utf-8") as out:
            json.dump(record, out)
