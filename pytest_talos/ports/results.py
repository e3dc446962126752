"""What a scan found: one :class:`PortResult` per port, gathered in a :class:`ScanResult`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

PortState: TypeAlias = Literal["open", "closed", "filtered"]


@dataclass(frozen=True, slots=True)
class PortResult:
    """What one port did."""

    port: int
    state: PortState


@dataclass(frozen=True, slots=True, repr=False)
class ScanResult:
    """The outcome of one scan; ``results`` is sorted by port.

    ``address`` is the address actually scanned (``host`` resolved). ``shared`` lists the
    ports that were open on ``host`` *and* on the baseline host, i.e. wildcard listeners
    that do not belong to the node; ``passing`` the ports open on ``host`` once that,
    probed again, answered neither on the baseline nor on ``host`` (a wildcard listener of
    this machine that came and went). Both are reported ``closed`` in ``results``.
    """

    host: str
    results: tuple[PortResult, ...]
    elapsed: float
    shared: tuple[int, ...] = ()
    address: str = ""
    baseline_host: str | None = None
    passing: tuple[int, ...] = ()

    @property
    def open_ports(self) -> tuple[int, ...]:
        return self._ports_in("open")

    @property
    def closed(self) -> tuple[int, ...]:
        return self._ports_in("closed")

    @property
    def filtered(self) -> tuple[int, ...]:
        return self._ports_in("filtered")

    def __repr__(self) -> str:
        # Short on purpose: a full scan holds 65535 results, and this repr shows up in
        # pytest failure reports (and, via asyncio, in reprs of the task that made it).
        return (
            f"ScanResult(host={self.host!r}, address={self.address!r}, "
            f"open_ports={self.open_ports!r}, closed={len(self.closed)}, "
            f"filtered={len(self.filtered)}, shared={self.shared!r}, passing={self.passing!r}, "
            f"baseline_host={self.baseline_host!r}, elapsed={self.elapsed:.3f})"
        )

    def state_of(self, port: int) -> PortState:
        """The state of one scanned port; ``KeyError`` if it was not scanned."""
        for result in self.results:
            if result.port == port:
                return result.state
        raise KeyError(port)

    def summary(self) -> str:
        """One line: counts per state, time taken, and the shared ports if any."""
        where = self.host if self.address in ("", self.host) else f"{self.host} ({self.address})"
        text = (
            f"{where}: {len(self.open_ports)} open, {len(self.closed)} closed, "
            f"{len(self.filtered)} filtered of {len(self.results)} ports in {self.elapsed:.2f}s"
        )
        if self.baseline_host is not None:
            ports = ",".join(map(str, self.shared)) or "none"
            baseline = self._bracketed(self.baseline_host)
            text += f"; open on baseline {baseline} too, so not the host's: {ports}"
            if self.passing:
                gone = ",".join(map(str, self.passing))
                text += f"; open once, then on neither (a listener here that came and went): {gone}"
        return text

    def _ports_in(self, state: PortState) -> tuple[int, ...]:
        return tuple(r.port for r in self.results if r.state == state)

    @staticmethod
    def _bracketed(host: str) -> str:
        return f"[{host}]" if ":" in host else host
