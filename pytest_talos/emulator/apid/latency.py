"""The network delay of a remote site, added per hop as apid sees it (``--latency 20ms``).

On loopback every round trip is nearly free, so a run against the emulator cannot show what
a remote fleet costs in round trips. :class:`Latency` adds one round-trip time (RTT) per hop,
in real seconds (a network is not sped up by the emulator's time scale), with asyncio timers
only (no CPU is spent waiting):

* **a call** arriving at a node's apid (runner → endpoint, and endpoint → node for a
  forwarded call) is served one RTT after its request arrived: a unary call's reply, a
  stream's first frame, come one RTT later than on loopback (later frames of a stream are
  pipelined, as on a real link);
* **a new apid connection** holds its first bytes for two RTTs after the handshake (TCP's
  SYN/SYN-ACK and TLS 1.3's one round trip);
* **a greeting** of the other listeners (an SSH or HTTP banner) is sent one RTT after the
  connection is accepted.

What it does not cover (the kernel answers these on loopback, before any user code runs):
the TCP handshake of a plain port (a scan's connect to an open port completes at once), the
reset of a closed port, the Kubernetes API's requests, bandwidth and loss.
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass

from pytest_talos.errors import ConfigError

__all__ = ["MAX_LATENCY", "Latency", "parse_latency"]

MAX_LATENCY = 5.0  # seconds: more than any real link, and more would outlast call deadlines
# ms = milliseconds, s = seconds; a bare number is milliseconds (as ping shows it).
_LATENCY = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)?\s*", re.IGNORECASE)
# Round trips a new connection costs before its first request: TCP's, then TLS 1.3's.
SETUP_ROUND_TRIPS = 2


def parse_latency(text: str) -> float:
    """``"20ms"``, ``"0.02s"`` or ``"20"`` (milliseconds) as seconds; ValueError naming
    what to write otherwise."""
    match = _LATENCY.fullmatch(str(text))
    seconds = -1.0
    if match is not None:
        value = float(match[1])
        seconds = value if (match[2] or "ms").lower() == "s" else value / 1000.0
    if not (math.isfinite(seconds) and 0.0 <= seconds <= MAX_LATENCY):
        raise ValueError(
            f"{text!r} is not a round-trip time between 0 and {MAX_LATENCY:g} s; write it as "
            "milliseconds or seconds, e.g. 20ms or 0.02s"
        )
    return seconds


@dataclass(frozen=True)
class Latency:
    """One round-trip time per hop (0: loopback as it is)."""

    rtt: float = 0.0  # seconds

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rtt) and 0.0 <= self.rtt <= MAX_LATENCY):
            raise ConfigError(
                f"latency must be a round-trip time between 0 and {MAX_LATENCY:g} seconds, "
                f"not {self.rtt!r}"
            )

    def __bool__(self) -> bool:
        return self.rtt > 0.0

    @property
    def setup(self) -> float:
        """Seconds a new connection waits before its first request is read."""
        return self.rtt * SETUP_ROUND_TRIPS

    async def hop(self) -> None:
        """One round trip of one hop (a timer; returns at once without latency)."""
        if self.rtt > 0.0:
            await asyncio.sleep(self.rtt)

    def hold(self, transport: asyncio.Transport) -> None:
        """Hold a new connection's first bytes for its set-up round trips."""
        if self.rtt <= 0.0:
            return
        transport.pause_reading()
        asyncio.get_running_loop().call_later(self.setup, _resume, transport)


def _resume(transport: asyncio.Transport) -> None:
    if not transport.is_closing():
        transport.resume_reading()
