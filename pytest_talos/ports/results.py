"""What a scan found: one :class:`PortResult` per port, gathered in a :class:`ScanResult`."""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

PortState: TypeAlias = Literal["open", "closed", "filtered"]


@dataclass(frozen=True, slots=True)
class PortResult:
    """What one port did."""

    port: int
    state: PortState


class ScanResult:
    """The outcome of one scan; ``results`` is sorted by port.

    ``address`` is the address actually scanned (``host`` resolved). ``shared`` lists the
    ports that were open on ``host`` *and* on the baseline host, i.e. wildcard listeners
    that do not belong to the node; ``passing`` the ports open on ``host`` once that,
    probed again, answered neither on the baseline nor on ``host`` (a wildcard listener of
    this machine that came and went). Both are reported ``closed`` in ``results``.

    Immutable. A full scan holds 65535 ports, nearly all closed: the result keeps the ports
    scanned and the state of those not closed, and builds the :class:`PortResult` of every
    port only when ``results`` is read (the checks read the open ports and a few states;
    building 65535 objects per scan cost more CPU than the rest of the result together).
    """

    __slots__ = (
        "_closed",
        "_not_closed",
        "_ports",
        "_results",
        "address",
        "baseline_host",
        "elapsed",
        "host",
        "passing",
        "shared",
    )
    host: str
    elapsed: float
    shared: tuple[int, ...]
    address: str
    baseline_host: str | None
    passing: tuple[int, ...]
    _ports: tuple[int, ...]
    _not_closed: dict[int, PortState]  # the ports not closed, in the order scanned
    _closed: tuple[int, ...] | None  # built on first use
    _results: tuple[PortResult, ...] | None  # built on first use

    def __init__(
        self,
        host: str,
        results: Iterable[PortResult],
        elapsed: float,
        shared: tuple[int, ...] = (),
        address: str = "",
        baseline_host: str | None = None,
        passing: tuple[int, ...] = (),
    ) -> None:
        facts = {
            "host": host,
            "elapsed": elapsed,
            "shared": tuple(shared),
            "address": address,
            "baseline_host": baseline_host,
            "passing": tuple(passing),
        }
        for name, value in facts.items():
            object.__setattr__(self, name, value)
        given = tuple(results)
        self._set_ports(tuple(r.port for r in given), {r.port: r.state for r in given}, given)

    @classmethod
    def from_states(
        cls,
        host: str,
        ports: Sequence[int],
        states: Mapping[int, PortState],
        *,
        elapsed: float,
        shared: tuple[int, ...] = (),
        address: str = "",
        baseline_host: str | None = None,
        passing: tuple[int, ...] = (),
    ) -> ScanResult:
        """The result of scanning ``ports`` (in that order) where ``states`` gives each
        port's state; a port it does not name was closed."""
        result = cls(host, (), elapsed, shared, address, baseline_host, passing)
        result._set_ports(tuple(ports), states, None)
        return result

    def _set_ports(
        self,
        ports: tuple[int, ...],
        states: Mapping[int, PortState],
        results: tuple[PortResult, ...] | None,
    ) -> None:
        """The ports scanned, the states of those not closed, and (if built) every result."""
        not_closed = {p: s for p, s in states.items() if s != "closed"}
        object.__setattr__(self, "_ports", ports)
        object.__setattr__(self, "_not_closed", _in_scan_order(ports, not_closed))
        object.__setattr__(self, "_closed", None)
        object.__setattr__(self, "_results", results)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a ScanResult is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a ScanResult is immutable: cannot delete {name!r}")

    @property
    def results(self) -> tuple[PortResult, ...]:
        """Every scanned port's result, in the order scanned (by port)."""
        if self._results is None:
            states = self._not_closed
            built = tuple(PortResult(p, states.get(p, "closed")) for p in self._ports)
            object.__setattr__(self, "_results", built)
            return built
        return self._results

    @property
    def open_ports(self) -> tuple[int, ...]:
        return self._ports_in("open")

    @property
    def closed(self) -> tuple[int, ...]:
        if self._closed is None:
            states = self._not_closed
            closed = tuple(p for p in self._ports if p not in states)
            object.__setattr__(self, "_closed", closed)
            return closed
        return self._closed

    @property
    def filtered(self) -> tuple[int, ...]:
        return self._ports_in("filtered")

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.host,
            self.results,
            self.elapsed,
            self.shared,
            self.address,
            self.baseline_host,
            self.passing,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScanResult):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        # Short on purpose: a full scan holds 65535 results, and this repr shows up in
        # pytest failure reports (and, via asyncio, in reprs of the task that made it).
        return (
            f"ScanResult(host={self.host!r}, address={self.address!r}, "
            f"open_ports={self.open_ports!r}, closed={self._closed_count()}, "
            f"filtered={len(self.filtered)}, shared={self.shared!r}, passing={self.passing!r}, "
            f"baseline_host={self.baseline_host!r}, elapsed={self.elapsed:.3f})"
        )

    def state_of(self, port: int) -> PortState:
        """The state of one scanned port; ``KeyError`` if it was not scanned."""
        state = self._not_closed.get(port)
        if state is not None:
            return state
        if port in self._ports:
            return "closed"
        raise KeyError(port)

    def summary(self) -> str:
        """One line: counts per state, time taken, and the shared ports if any."""
        where = self.host if self.address in ("", self.host) else f"{self.host} ({self.address})"
        text = (
            f"{where}: {len(self.open_ports)} open, {self._closed_count()} closed, "
            f"{len(self.filtered)} filtered of {len(self._ports)} ports in {self.elapsed:.2f}s"
        )
        if self.baseline_host is not None:
            ports = ",".join(map(str, self.shared)) or "none"
            baseline = self._bracketed(self.baseline_host)
            text += f"; open on baseline {baseline} too, so not the host's: {ports}"
            if self.passing:
                gone = ",".join(map(str, self.passing))
                text += f"; open once, then on neither (a listener here that came and went): {gone}"
        return text

    def _closed_count(self) -> int:
        return len(self._ports) - len(self._not_closed)

    def _ports_in(self, state: PortState) -> tuple[int, ...]:
        return tuple(p for p, s in self._not_closed.items() if s == state)

    @staticmethod
    def _bracketed(host: str) -> str:
        return f"[{host}]" if ":" in host else host


def _in_scan_order(
    ports: tuple[int, ...], not_closed: Mapping[int, PortState]
) -> dict[int, PortState]:
    """``not_closed`` in the order of ``ports``; ValueError unless each port was scanned
    once and every port of ``not_closed`` is one of them. The kit scans ports in ascending
    order (``normalise_ports``), which is checked without building a set of them."""
    if all(map(operator.lt, ports, ports[1:])):  # ascending, so each port once
        for port in not_closed:
            at = bisect.bisect_left(ports, port)
            if at == len(ports) or ports[at] != port:
                raise ValueError(f"port {port} has a state but was not scanned")
        return {p: not_closed[p] for p in sorted(not_closed)}
    scanned = {p: i for i, p in enumerate(ports)}
    if len(scanned) != len(ports):
        raise ValueError("a scan result holds each scanned port once")
    unscanned = set(not_closed) - scanned.keys()
    if unscanned:
        raise ValueError(f"port {min(unscanned)} has a state but was not scanned")
    return {p: not_closed[p] for p in sorted(not_closed, key=scanned.__getitem__)}
