"""Deferring SIGINT and SIGTERM while a node's config is put back, and where the notice goes."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the test stops, every node is restored, the run exits."""


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
