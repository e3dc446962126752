"""A fast TCP connect scanner (asyncio, standard library only).

Each port gets one non-blocking ``connect()`` and nothing else: no byte is ever sent.

=========  ==================================================================
state      meaning
=========  ==================================================================
open       the handshake completed (the socket is then reset at once)
closed     the host answered with a reset (``ECONNREFUSED``)
filtered   no answer within ``timeout``, or an ICMP-style error such as
           ``EHOSTUNREACH``, ``ENETUNREACH`` or ``EACCES``
=========  ==================================================================

Speed. Probes are started in batches of a few hundred straight from the event loop; on
loopback nearly every answer is already there after one turn of the loop, so those probes
cost a few system calls and no event-loop registration; on Linux a refused socket is
even reused for the next port, which saves a socket() and a close() per closed port (any
surprise from the kernel turns that off). Only probes still pending are
watched (``add_writer``) with a per-probe deadline; at most ``concurrency`` of those are in
flight. Before a scan the soft ``RLIMIT_NOFILE`` is raised toward the hard limit when the
requested concurrency needs it, for the time of the scan only (the old limit is put back
when the last running scan ends), and the concurrency is capped below whatever the limit
allows. Open ports are closed with ``SO_LINGER`` 0 (a reset instead of a FIN), so a scan
leaves no ``TIME_WAIT`` sockets behind. A connection the kernel made to itself (source
address and port equal to the destination's, possible when scanning ``127.0.0.1`` in the
ephemeral range) is not a listener and counts as closed.

Loopback proof (``baseline_host``). Emulated Talos nodes live on their own loopback
addresses (``127.0.0.N``). An unrelated program listening on the wildcard address
(``0.0.0.0:2024``) answers on every ``127.0.0.N`` as well, so an open port on a node
address proves nothing by itself. With ``baseline_host`` set to an address where no node
lives (say ``127.0.0.254``), the ports found open on the node are probed again there; a
port that answers on both belongs to a wildcard listener, not to the node: it is reported
``closed`` for the node and listed in :attr:`ScanResult.shared`. A node that itself
listens on a wildcard address cannot be told apart this way; its ports show up as shared.

The scanner needs a selector-based event loop (``add_writer``): the default on Linux
and macOS, not Windows' proactor loop.

Hosts may be IPv4 or IPv6 addresses (``::1`` and ``[::1]`` both work) or names; a name is
resolved once, before the scan, and the first address returned is scanned.

Command line::

    python -m pytest_talos.ports HOST [--ports 1-65535] [--timeout S] [--concurrency N]
                                      [--baseline HOST]

prints the open ports one per line (sorted) on stdout and a one-line summary on stderr;
exit status 0, or 2 with a one-line error for bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import errno
import math
import os
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, TypeAlias

from pytest_talos.errors import ConfigError, ConnectError

try:
    import resource
except ImportError:  # not a Unix
    resource = None  # type: ignore[assignment]

# The bare C socket type (``socket.SocketType``): socket.socket's Python wrapper (its
# __init__ and the close() bookkeeping for makefile()) adds a third to a loopback sweep.
_RawSocket = socket.SocketType

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PORTS",
    "DEFAULT_TIMEOUT",
    "PortResult",
    "PortState",
    "ScanResult",
    "main",
    "parse_ports",
    "scan",
    "scan_async",
]

PortState: TypeAlias = Literal["open", "closed", "filtered"]
SockAddr: TypeAlias = tuple[str, int] | tuple[str, int, int, int]

DEFAULT_PORTS = "1-65535"
DEFAULT_TIMEOUT = 1.0
DEFAULT_CONCURRENCY = 2048
RESOLVE_TIMEOUT = 5.0

MIN_PORT, MAX_PORT = 1, 65535
# Probes started between two turns of the event loop: big enough to amortise the turn,
# small enough that other tasks on the same loop are not held up for long.
_BATCH = 256
# File descriptors left for everything else in the process while a scan runs, on top of
# the refused sockets a sweep keeps for reuse (at most one batch of them).
_FD_RESERVE = 64 + _BATCH
# Consecutive rounds without a free local socket or port before giving up.
_MAX_STARVED_ROUNDS = 50
_STARVED_PAUSE = 0.01

# connect() outcomes that say "this machine is out of something", not "the port is ...".
_LOCAL_SHORTAGE = frozenset(
    {errno.EADDRNOTAVAIL, errno.EAGAIN, errno.ENOBUFS, errno.ENOMEM, errno.EMFILE, errno.ENFILE}
)
# connect() outcomes that would be the same for every port: the target itself is unusable.
_TARGET_UNUSABLE = frozenset({errno.EINVAL, errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT})
_PENDING = frozenset({errno.EINPROGRESS, errno.EALREADY})
# What a reused socket's first connect() may say; anything else and reuse is turned off.
_REUSE_OK = frozenset({errno.EINPROGRESS, errno.ECONNREFUSED, 0})

_LINGER_RESET = struct.pack("ii", 1, 0)


# --------------------------------------------------------------------------- results


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
    that do not belong to the node; they are reported ``closed`` in ``results``.
    """

    host: str
    results: tuple[PortResult, ...]
    elapsed: float
    shared: tuple[int, ...] = ()
    address: str = ""
    baseline_host: str | None = None

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
            f"filtered={len(self.filtered)}, shared={self.shared!r}, "
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
        return text

    def _ports_in(self, state: PortState) -> tuple[int, ...]:
        return tuple(r.port for r in self.results if r.state == state)

    @staticmethod
    def _bracketed(host: str) -> str:
        return f"[{host}]" if ":" in host else host


# --------------------------------------------------------------------------- port specs


def parse_ports(spec: str) -> list[int]:
    """Parse ``1-65535``, ``22,80,6443`` or ``1-1024,50000-50001`` into sorted unique ports.

    As in nmap, ``-1024`` means ``1-1024``, ``50000-`` means ``50000-65535`` and ``-`` alone
    means every port. Raises :class:`ConfigError` naming the token it could not read.
    """
    if not spec.strip():
        raise ConfigError(
            "the port list is empty; give ports like 22,80,6443 or ranges like 1-1024"
        )
    ports: set[int] = set()
    for raw_token in spec.split(","):
        first, last = _parse_port_token(raw_token.strip(), spec)
        ports.update(range(first, last + 1))
    return sorted(ports)


def _parse_port_token(token: str, spec: str) -> tuple[int, int]:
    if not token:
        _bad_token(token, spec, "an empty entry (two commas in a row, or a trailing comma)")
    if "-" not in token:
        port = _port_number(token, spec)
        return port, port
    low_text, _, high_text = token.partition("-")
    low = _port_number(low_text.strip(), spec) if low_text.strip() else MIN_PORT
    high = _port_number(high_text.strip(), spec) if high_text.strip() else MAX_PORT
    if low > high:
        _bad_token(token, spec, f"a range that runs backwards; write {high}-{low}")
    return low, high


def _port_number(text: str, spec: str) -> int:
    if not text.isascii() or not text.isdigit():
        _bad_token(text, spec, "not a port number")
    port = int(text)
    if not MIN_PORT <= port <= MAX_PORT:
        _bad_token(text, spec, f"outside {MIN_PORT}-{MAX_PORT}")
    return port


def _bad_token(token: str, spec: str, why: str) -> NoReturn:
    raise ConfigError(
        f"bad port entry {token!r} in {spec!r}: {why}. "
        f"Use port numbers {MIN_PORT}-{MAX_PORT}, ranges like 1-1024, separated by commas"
    )


def _normalise_ports(ports: str | Iterable[int]) -> list[int]:
    if isinstance(ports, str):
        return parse_ports(ports)
    unique: set[int] = set()
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int):
            raise ConfigError(f"bad port {port!r}: ports must be integers {MIN_PORT}-{MAX_PORT}")
        if not MIN_PORT <= port <= MAX_PORT:
            raise ConfigError(f"bad port {port}: outside {MIN_PORT}-{MAX_PORT}")
        unique.add(port)
    if not unique:
        raise ConfigError("no ports to scan; give at least one port")
    return sorted(unique)


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    family: socket.AddressFamily
    sockaddr: SockAddr

    @property
    def address(self) -> str:
        return self.sockaddr[0]

    def sockaddr_for(self, port: int) -> SockAddr:
        if len(self.sockaddr) == 4:
            return (self.sockaddr[0], port, self.sockaddr[2], self.sockaddr[3])
        return (self.sockaddr[0], port)


def _strip_brackets(host: str) -> str:
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1].strip()
    return host


async def _resolve(host: str) -> _Target:
    """Resolve ``host`` once; numeric addresses never touch the resolver."""
    name = _strip_brackets(host)
    if not name:
        raise ConfigError("no host given; give an IP address or a host name to scan")
    infos: Sequence[tuple[Any, ...]]
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        infos = await _resolve_name(name)
    for family, _type, _proto, _canon, sockaddr in infos:
        if family == socket.AF_INET:
            return _Target(name, family, (str(sockaddr[0]), int(sockaddr[1])))
        if family == socket.AF_INET6:
            return _Target(name, family, (str(sockaddr[0]), 0, sockaddr[2], sockaddr[3]))
    raise ConnectError(
        f"cannot resolve host {name!r}: it has no IPv4 or IPv6 address; "
        "check the name or give an IP address"
    )


async def _resolve_name(name: str) -> Sequence[tuple[Any, ...]]:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            return await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConnectError(
            f"cannot resolve host {name!r}: {exc.strerror}; check the name or give an IP address"
        ) from None
    except TimeoutError:
        raise ConnectError(
            f"cannot resolve host {name!r}: no answer within {RESOLVE_TIMEOUT:g}s; "
            "check the DNS setup or give an IP address"
        ) from None


# --------------------------------------------------------------------------- limits


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ConfigError(f"bad timeout {timeout!r}: give a number of seconds, e.g. 1.0")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ConfigError(f"bad timeout {timeout!r}: it must be a positive number of seconds")
    return float(timeout)


def _check_concurrency(concurrency: int) -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(
            f"bad concurrency {concurrency!r}: give a whole number of probes in flight, e.g. 2048"
        )
    return concurrency


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
    is left alone). Scans may run at once on several threads and loops; a lock keeps count.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._original: int | None = None  # the soft limit before we raised it
        self._raised_to: int | None = None

    def acquire(self, wanted: int) -> int:
        """Register a scan wanting ``wanted`` probes in flight; returns the usable number."""
        with self._lock:
            self._users += 1
            try:
                return self._usable(wanted)
            except BaseException:
                self._release_locked()
                raise

    def release(self) -> None:
        with self._lock:
            self._release_locked()

    def _usable(self, wanted: int) -> int:
        if resource is None:  # not a Unix: no limit we can see or move
            return wanted
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return wanted
        in_use = _open_fd_count()
        needed = in_use + wanted + _FD_RESERVE
        if soft < needed:
            target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
            if target > soft and self._raise(soft, target, hard):
                soft = target
        return max(1, min(wanted, soft - in_use - _FD_RESERVE))

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

    def _release_locked(self) -> None:
        self._users -= 1
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
def _file_limit_for(wanted: int) -> Iterator[int]:
    """The usable concurrency, with the soft file limit raised only inside the block."""
    usable = _FILE_LIMIT.acquire(wanted)
    try:
        yield usable
    finally:
        _FILE_LIMIT.release()


# --------------------------------------------------------------------------- the sweep

# On Linux a second connect() on the same socket reports the outcome of the first (0 or
# EISCONN: connected; EALREADY: still pending; otherwise the error), and a socket whose
# connect was refused that way can be connected again. Reusing refused sockets saves a
# socket() and a close() per closed port, about 40% of a loopback sweep. Elsewhere the
# portable way is used: SO_ERROR, then getpeername(), and a fresh socket per probe.
_LINUX_CONNECT = sys.platform.startswith("linux")
# A connect that reached the very socket making it (see _connected_code).
_SELF_CONNECTED = -1


def _state_for(code: int) -> PortState:
    # A reset after the handshake (ECONNRESET) still means something accepted the connection.
    if code in (0, errno.ECONNRESET):
        return "open"
    if code in (errno.ECONNREFUSED, _SELF_CONNECTED):
        return "closed"
    return "filtered"


class _LocalShortage(Exception):
    """No socket or local port could be had right now; retry once others are freed."""


class _Probe:
    """One connect attempt in flight; owns its socket until the sweep records it."""

    __slots__ = ("addr", "port", "sock", "timer")

    def __init__(self, port: int, sock: _RawSocket, addr: SockAddr) -> None:
        self.port = port
        self.sock = sock
        self.addr = addr
        self.timer: asyncio.TimerHandle | None = None


class _Sweep:
    """Probe a list of ports on one address, at most ``concurrency`` pending at a time."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        target: _Target,
        *,
        timeout: float,
        concurrency: int,
    ) -> None:
        self._loop = loop
        self._target = target
        self._timeout = timeout
        self._concurrency = concurrency
        self._linux = _LINUX_CONNECT
        self._states: dict[int, PortState] = {}
        self._watched: dict[int, _Probe] = {}  # by file descriptor
        self._spares: list[_RawSocket] = []  # refused sockets ready for another port
        self._wakeup: asyncio.Future[None] | None = None
        # Born non-blocking where the OS allows it: saves a system call per probe.
        self._born_nonblocking = hasattr(socket, "SOCK_NONBLOCK")
        self._sock_type = socket.SOCK_STREAM | getattr(socket, "SOCK_NONBLOCK", 0)

    async def run(self, ports: Sequence[int]) -> dict[int, PortState]:
        queue = deque(ports)
        starved_rounds = 0
        try:
            while queue or self._watched:
                issued, short = 0, False
                if queue and self._capacity() > 0:
                    started, deadline, issued, short = self._start_batch(queue)
                    # One turn of the loop: loopback answers arrive meanwhile, and other
                    # tasks sharing this loop get to run.
                    await asyncio.sleep(0)
                    self._settle(started, deadline)
                starved = short and not issued
                starved_rounds = starved_rounds + 1 if starved else 0
                if starved_rounds > _MAX_STARVED_ROUNDS:
                    raise ConnectError(
                        f"cannot open more TCP connections to {self._target.address}: this "
                        "machine is out of sockets or local ports; lower the concurrency"
                    )
                if self._watched and (not queue or self._capacity() == 0 or starved):
                    await self._wait_for_a_finish()
                elif starved:
                    await asyncio.sleep(_STARVED_PAUSE)
        finally:
            self._abandon_all()
        return self._states

    def _capacity(self) -> int:
        return self._concurrency - len(self._watched)

    def _start_batch(self, queue: deque[int]) -> tuple[list[_Probe], float, int, bool]:
        """Issue up to a batch of connects: (still pending, their deadline, how many were
        issued, whether the machine ran short of sockets or local ports)."""
        started: list[_Probe] = []
        deadline = self._loop.time() + self._timeout
        room = min(_BATCH, self._capacity())
        issued = 0
        while queue and issued < _BATCH and len(started) < room:
            port = queue.popleft()
            try:
                probe = self._start(port)
            except _LocalShortage:
                queue.appendleft(port)
                return started, deadline, issued, True
            issued += 1
            if probe is not None:
                started.append(probe)
        return started, deadline, issued, False

    def _start(self, port: int) -> _Probe | None:
        """Begin one connect; returns the probe if its outcome is not known yet."""
        reused = bool(self._spares)
        probe = _Probe(port, self._socket(), self._target.sockaddr_for(port))
        code = probe.sock.connect_ex(probe.addr)
        if reused and code not in _REUSE_OK:
            # The kernel did not take the socket back as expected: stop reusing, start over.
            probe.sock.close()
            self._linux = False
            self._close_spares()
            return self._start(port)
        if code in _PENDING:
            return probe
        if code in _LOCAL_SHORTAGE:
            probe.sock.close()
            raise _LocalShortage
        if code in _TARGET_UNUSABLE:
            probe.sock.close()
            raise ConnectError(
                f"cannot connect to {self._target.address}: {os.strerror(code)}; "
                "check the address (an IPv6 link-local address needs a %interface suffix)"
            )
        self._record(probe, _connected_code(probe.sock) if code == 0 else code)
        return None

    def _socket(self) -> _RawSocket:
        if self._spares:
            return self._spares.pop()
        try:
            sock = _RawSocket(self._target.family, self._sock_type)
        except OSError as exc:
            if exc.errno in _LOCAL_SHORTAGE:
                raise _LocalShortage from None
            raise ConnectError(f"cannot create a TCP socket: {exc.strerror}") from None
        if not self._born_nonblocking:
            sock.setblocking(False)
        return sock

    def _settle(self, started: list[_Probe], deadline: float) -> None:
        for probe in started:
            code = self._outcome(probe)
            if code is None:
                self._watch(probe, deadline)
            else:
                self._record(probe, code)

    def _outcome(self, probe: _Probe) -> int | None:
        """An errno-style outcome of a pending connect, or ``None`` while it is pending."""
        sock = probe.sock
        if self._linux:
            code = sock.connect_ex(probe.addr)
            if code in _PENDING:
                return None
            return _connected_code(sock) if code in (0, errno.EISCONN) else code
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            return code
        try:
            sock.getpeername()
        except OSError:
            return None  # not connected yet (ENOTCONN)
        return _connected_code(sock)

    def _watch(self, probe: _Probe, deadline: float) -> None:
        fd = probe.sock.fileno()
        self._watched[fd] = probe
        self._loop.add_writer(fd, self._on_writable, fd)
        probe.timer = self._loop.call_at(deadline, self._on_deadline, fd)

    def _on_writable(self, fd: int) -> None:
        probe = self._watched.get(fd)
        if probe is None:
            return
        code = self._outcome(probe)
        if code is not None:
            self._finish(fd, code)

    def _on_deadline(self, fd: int) -> None:
        if fd in self._watched:
            self._finish(fd, errno.ETIMEDOUT)

    def _finish(self, fd: int, code: int) -> None:
        probe = self._watched.pop(fd)
        self._unwatch(fd, probe)
        self._record(probe, code)
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _unwatch(self, fd: int, probe: _Probe) -> None:
        self._loop.remove_writer(fd)
        if probe.timer is not None:
            probe.timer.cancel()

    def _record(self, probe: _Probe, code: int) -> None:
        self._states[probe.port] = _state_for(code)
        if code == errno.ECONNREFUSED and self._linux and len(self._spares) < _BATCH:
            self._spares.append(probe.sock)  # refused: reusable for the next port
        else:
            _close(probe.sock, connected=code in (0, _SELF_CONNECTED))

    async def _wait_for_a_finish(self) -> None:
        self._wakeup = self._loop.create_future()
        try:
            await self._wakeup
        finally:
            self._wakeup = None

    def _abandon_all(self) -> None:
        """Close every socket still held (the sweep ended, was cancelled or failed)."""
        for fd, probe in list(self._watched.items()):
            self._unwatch(fd, probe)
            _close(probe.sock, connected=False)
        self._watched.clear()
        self._close_spares()

    def _close_spares(self) -> None:
        for sock in self._spares:
            sock.close()
        self._spares.clear()


def _connected_code(sock: _RawSocket) -> int:
    """0 for a real connection; ``_SELF_CONNECTED`` if the kernel joined the socket to
    itself (source = destination, possible on loopback in the ephemeral port range:
    nobody listens there)."""
    try:
        if sock.getpeername() == sock.getsockname():
            return _SELF_CONNECTED
    except OSError:
        return errno.ECONNRESET  # the handshake completed, then the peer reset it
    return 0


def _close(sock: _RawSocket, *, connected: bool) -> None:
    if connected:
        # Reset rather than FIN: no TIME_WAIT left behind, nothing sent to the service.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    sock.close()


# --------------------------------------------------------------------------- public API


async def scan_async(
    host: str,
    ports: str | Iterable[int],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    baseline_host: str | None = None,
) -> ScanResult:
    """TCP-connect scan ``ports`` (a spec such as ``"1-1024"`` or an iterable) on ``host``.

    ``timeout`` bounds every single probe (seconds); ``concurrency`` bounds the probes
    waiting for an answer at once (capped below the file descriptor limit). With
    ``baseline_host``, ports that are also open there are reported closed and listed in
    :attr:`ScanResult.shared` (see the module docstring).
    """
    started = time.perf_counter()
    port_list = _normalise_ports(ports)
    timeout = _check_timeout(timeout)
    wanted = _check_concurrency(concurrency)
    target = await _resolve(host)
    baseline = await _resolve_baseline(baseline_host, target)
    with _file_limit_for(wanted) as usable:
        states, shared = await _sweep_with_baseline(
            target, baseline, port_list, timeout=timeout, concurrency=usable
        )
    return ScanResult(
        host=target.host,
        results=tuple(PortResult(port, states[port]) for port in port_list),
        elapsed=time.perf_counter() - started,
        shared=shared,
        address=target.address,
        baseline_host=None if baseline is None else baseline.address,
    )


async def _sweep_with_baseline(
    target: _Target,
    baseline: _Target | None,
    port_list: Sequence[int],
    *,
    timeout: float,
    concurrency: int,
) -> tuple[dict[int, PortState], tuple[int, ...]]:
    """Every port's state on ``target``, and the open ones that are open on ``baseline``
    too (those are set to closed)."""
    loop = asyncio.get_running_loop()
    states = await _Sweep(loop, target, timeout=timeout, concurrency=concurrency).run(port_list)
    if baseline is None:
        return states, ()
    open_here = [port for port in port_list if states[port] == "open"]
    if not open_here:
        return states, ()
    there = await _Sweep(loop, baseline, timeout=timeout, concurrency=concurrency).run(open_here)
    shared = tuple(port for port in open_here if there[port] == "open")
    for port in shared:
        states[port] = "closed"
    return states, shared


async def _resolve_baseline(baseline_host: str | None, target: _Target) -> _Target | None:
    if baseline_host is None:
        return None
    baseline = await _resolve(baseline_host)
    if baseline.family != target.family:
        raise ConfigError(
            f"baseline host {baseline_host!r} and host {target.host!r} are of different "
            "address families; give a baseline of the same family (e.g. 127.0.0.254 for IPv4)"
        )
    if baseline.address == target.address:
        raise ConfigError(
            f"baseline host {baseline_host!r} is the scanned address itself; give an address "
            "where no node lives (e.g. 127.0.0.254)"
        )
    return baseline


def scan(
    host: str,
    ports: str | Iterable[int],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    baseline_host: str | None = None,
) -> ScanResult:
    """Blocking :func:`scan_async`; also works while an event loop runs in this thread."""

    def run() -> ScanResult:
        return asyncio.run(
            scan_async(
                host, ports, concurrency=concurrency, timeout=timeout, baseline_host=baseline_host
            )
        )

    if not _loop_running_here():
        return run()
    # A loop already runs here and cannot be re-entered: scan on a private thread.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="talos-portscan") as pool:
        return pool.submit(run).result()


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# --------------------------------------------------------------------------- CLI

_PROG = "python -m pytest_talos.ports"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block; main() prints it and exits 2.
        raise _UsageError(message)


def _build_parser() -> _Parser:
    parser = _Parser(
        prog=_PROG,
        description="TCP connect scan of one host; prints the open ports, one per line.",
    )
    parser.add_argument("host", help="IPv4/IPv6 address (brackets allowed) or host name")
    parser.add_argument(
        "--ports", default=DEFAULT_PORTS, help="ports and ranges, e.g. 22,80,6443 or 1-1024"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per probe")
    parser.add_argument(
        "--concurrency", type=int, default=DEFAULT_CONCURRENCY, help="probes in flight at most"
    )
    parser.add_argument(
        "--baseline",
        metavar="HOST",
        help="an address where no node lives; ports open there too are not the host's",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        args = _build_parser().parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    try:
        result = scan(
            args.host,
            args.ports,
            timeout=args.timeout,
            concurrency=args.concurrency,
            baseline_host=args.baseline,
        )
    except (ConfigError, ConnectError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 130
    for port in result.open_ports:
        print(port)
    print(result.summary(), file=sys.stderr)
    return 0


def _fail(message: str) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
