"""Ports that never answer, for the scanner's tests and benchmarks/portscan_many.py.

``listen(0)`` admits one connection; once that one sits in the accept queue, Linux drops
further SYNs (with ``tcp_abort_on_overflow`` 0), so a connect neither succeeds nor is
refused until the client gives up. The queue is checked through TCP_INFO, not assumed.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from pathlib import Path

__all__ = ["SilentPortsUnavailable", "make_silent_port", "why_no_silent_ports"]

_OVERFLOW = Path("/proc/sys/net/ipv4/tcp_abort_on_overflow")


class SilentPortsUnavailable(Exception):
    """This machine cannot make a port that never answers (the message says why)."""


def why_no_silent_ports() -> str | None:
    """Why this machine cannot make silent ports, or None if it can."""
    if not sys.platform.startswith("linux") or not _OVERFLOW.exists():
        return "needs Linux accept-queue behaviour to make a port that never answers"
    if _OVERFLOW.read_text().strip() != "0":
        return "tcp_abort_on_overflow is set: a full accept queue answers with a reset"
    return None


def _accept_queue(listener: socket.socket) -> int:
    """Connections waiting in a Linux listener's accept queue (TCP_INFO tcpi_unacked)."""
    info = listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int(struct.unpack_from("I", info, 24)[0])


def make_silent_port(host: str, opened: list[socket.socket]) -> int:
    """A port on ``host`` whose SYNs are dropped; its sockets are added to ``opened`` (the
    caller closes them). Raises SilentPortsUnavailable if the queue would not fill."""
    listener = socket.socket()
    opened.append(listener)
    listener.bind((host, 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    opened.append(socket.create_connection((host, port), timeout=5))
    deadline = time.monotonic() + 5
    while _accept_queue(listener) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    if _accept_queue(listener) < 1:
        raise SilentPortsUnavailable("could not fill an accept queue")
    return port
