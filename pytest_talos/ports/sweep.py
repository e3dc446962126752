"""The scan engine: non-blocking connects in batches, pending ones watched with a deadline.

See the :mod:`pytest_talos.ports` docstring ("Speed") for why it works this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import struct
import sys
from collections import deque
from collections.abc import Sequence

from pytest_talos.errors import ConnectError
from pytest_talos.ports.results import PortState
from pytest_talos.ports.targets import SockAddr, Target

# The bare C socket type (``socket.SocketType``): socket.socket's Python wrapper (its
# __init__ and the close() bookkeeping for makefile()) adds a third to a loopback sweep.
_RawSocket = socket.SocketType

# Probes started between two turns of the event loop: big enough to amortise the turn,
# small enough that other tasks on the same loop are not held up for long.
BATCH = 256
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


# On Linux a second connect() on the same socket reports the outcome of the first (0 or
# EISCONN: connected; EALREADY: still pending; otherwise the error), and a socket whose
# connect was refused that way can be connected again. Reusing refused sockets saves a
# socket() and a close() per closed port, about 40% of a loopback sweep. Elsewhere the
# portable way is used: SO_ERROR, then getpeername(), and a fresh socket per probe.
LINUX_CONNECT = sys.platform.startswith("linux")
# A connect that reached the very socket making it (see connected_code).
SELF_CONNECTED = -1


def state_for(code: int) -> PortState:
    # A reset after the handshake (ECONNRESET) still means something accepted the connection.
    if code in (0, errno.ECONNRESET):
        return "open"
    if code in (errno.ECONNREFUSED, SELF_CONNECTED):
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


class ProbeBudget:
    """The probes waiting for an answer, bounded; shared by the sweeps of one event loop
    that scan several addresses at once (:func:`~pytest_talos.ports.scan_many_async`), so
    that together they hold no more sockets than one sweep would."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def free(self) -> int:
        return self.limit - self.pending

    def take(self) -> None:
        self.pending += 1

    def give(self) -> None:
        self.pending -= 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until some probe of any sweep sharing the budget has its answer."""
        waiter = loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)


class Sweep:
    """Probe a list of ports on one address, at most ``concurrency`` pending at a time
    (or, given a shared ``budget``, at most what it has free; ``spares`` then bounds the
    refused sockets this sweep keeps for reuse, so that the sweeps sharing the budget
    keep no more than one sweep alone)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        target: Target,
        *,
        timeout: float,
        concurrency: int,
        budget: ProbeBudget | None = None,
        spares: int = BATCH,
    ) -> None:
        self._loop = loop
        self._target = target
        self._timeout = timeout
        self._budget = ProbeBudget(concurrency) if budget is None else budget
        self._max_spares = max(0, min(spares, BATCH))
        self._linux = LINUX_CONNECT
        self._states: dict[int, PortState] = {}
        self._watched: dict[int, _Probe] = {}  # by file descriptor
        self._spares: list[_RawSocket] = []  # refused sockets ready for another port
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
                    try:
                        # One turn of the loop: loopback answers arrive meanwhile, and other
                        # tasks sharing this loop get to run.
                        await asyncio.sleep(0)
                    finally:  # even when cancelled: every socket is then watched or closed
                        self._settle(started, deadline)
                starved = short and not issued
                starved_rounds = starved_rounds + 1 if starved else 0
                if starved_rounds > _MAX_STARVED_ROUNDS:
                    raise ConnectError(
                        f"cannot open more TCP connections to {self._target.address}: this "
                        "machine is out of sockets or local ports; lower the concurrency"
                    )
                if self._watched and (not queue or self._capacity() == 0 or starved):
                    await self._budget.wait(self._loop)
                elif queue and self._capacity() <= 0:
                    await self._budget.wait(self._loop)  # the other sweeps hold the budget
                elif starved:
                    await asyncio.sleep(_STARVED_PAUSE)
        finally:
            self._abandon_all()
        return self._states

    def _capacity(self) -> int:
        return self._budget.free

    def _start_batch(self, queue: deque[int]) -> tuple[list[_Probe], float, int, bool]:
        """Issue up to a batch of connects: (still pending, their deadline, how many were
        issued, whether the machine ran short of sockets or local ports)."""
        started: list[_Probe] = []
        deadline = self._loop.time() + self._timeout
        room = min(BATCH, self._capacity())
        issued = 0
        while queue and issued < BATCH and len(started) < room:
            port = queue.popleft()
            try:
                probe = self._start(port)
            except _LocalShortage:
                queue.appendleft(port)
                return started, deadline, issued, True
            except BaseException:
                self._drop(started)
                raise
            issued += 1
            if probe is not None:
                self._budget.take()  # pending: counted until its answer is recorded
                started.append(probe)
        return started, deadline, issued, False

    def _drop(self, started: list[_Probe]) -> None:
        """Close the pending probes of a batch that failed, and give back their budget."""
        for probe in started:
            _close(probe.sock, connected=False)
            self._budget.give()

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
        self._record(probe, connected_code(probe.sock) if code == 0 else code)
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
                self._budget.give()

    def _outcome(self, probe: _Probe) -> int | None:
        """An errno-style outcome of a pending connect, or ``None`` while it is pending."""
        sock = probe.sock
        if self._linux:
            code = sock.connect_ex(probe.addr)
            if code in _PENDING:
                return None
            return connected_code(sock) if code in (0, errno.EISCONN) else code
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            return code
        try:
            sock.getpeername()
        except OSError:
            return None  # not connected yet (ENOTCONN)
        return connected_code(sock)

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
        self._budget.give()  # wakes this sweep (and any other waiting for room)

    def _unwatch(self, fd: int, probe: _Probe) -> None:
        self._loop.remove_writer(fd)
        if probe.timer is not None:
            probe.timer.cancel()

    def _record(self, probe: _Probe, code: int) -> None:
        self._states[probe.port] = state_for(code)
        if code == errno.ECONNREFUSED and self._linux and len(self._spares) < self._max_spares:
            self._spares.append(probe.sock)  # refused: reusable for the next port
        else:
            _close(probe.sock, connected=code in (0, SELF_CONNECTED))

    def _abandon_all(self) -> None:
        """Close every socket still held (the sweep ended, was cancelled or failed)."""
        for fd, probe in list(self._watched.items()):
            self._unwatch(fd, probe)
            _close(probe.sock, connected=False)
            self._budget.give()
        self._watched.clear()
        self._close_spares()

    def _close_spares(self) -> None:
        for sock in self._spares:
            sock.close()
        self._spares.clear()


def connected_code(sock: _RawSocket) -> int:
    """0 for a real connection; ``SELF_CONNECTED`` if the kernel joined the socket to
    itself (source = destination, possible on loopback in the ephemeral port range:
    nobody listens there)."""
    try:
        if sock.getpeername() == sock.getsockname():
            return SELF_CONNECTED
    except OSError:
        return errno.ECONNRESET  # the handshake completed, then the peer reset it
    return 0


def _close(sock: _RawSocket, *, connected: bool) -> None:
    if connected:
        # Reset rather than FIN: no TIME_WAIT left behind, nothing sent to the service.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    sock.close()
