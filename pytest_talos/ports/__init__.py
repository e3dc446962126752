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

Several hosts (:func:`scan_many`). The hosts are scanned a few at a time on one event loop,
their sweeps taking turns batch by batch and sharing one bound on the probes waiting for
an answer (so the file-descriptor limit is respected exactly as for one scan); each sweep
keeps its own batch of refused sockets for reuse when the limit allows it, else one batch
is shared out among them. Results come back in the order the hosts were given.

Loopback proof (``baseline_host``). Emulated Talos nodes live on their own loopback
addresses (``127.0.0.N``). An unrelated program listening on the wildcard address
(``0.0.0.0:2024``) answers on every ``127.0.0.N`` as well, so an open port on a node
address proves nothing by itself. With ``baseline_host`` set to an address where no node
lives (say ``127.0.0.254``), the ports found open on the node are probed again there; a
port that answers on both belongs to a wildcard listener, not to the node: it is reported
``closed`` for the node and listed in :attr:`ScanResult.shared`. A node that itself
listens on a wildcard address cannot be told apart this way; its ports show up as shared.
The baseline is probed after the node's sweep: a port open on the node but not on the
baseline is probed on the node once more, and one closed by then (a wildcard listener
that came and went in between) is reported ``closed`` and listed in
:attr:`ScanResult.passing`.

The scanner needs a selector-based event loop (``add_writer``): the default on Linux
and macOS, not Windows' proactor loop.

Hosts may be IPv4 or IPv6 addresses (``::1`` and ``[::1]`` both work) or names; a name is
resolved once, before the scan, and the first address returned is scanned.

From Python::

    from pytest_talos.ports import scan, scan_many

    scan("10.5.0.2", "1-65535").open_ports           # (50000, 50001, 6443, ...)
    for result in scan_many(["10.5.0.2", "10.5.0.3", "10.5.0.4"], "1-65535"):
        print(result.summary())                        # in the order given

:func:`scan_many` scans ``hosts_at_once`` hosts (default 4) at a time; ``concurrency`` is
then the bound for all of them together. Against real nodes, whose answers take a network
round trip (and whose firewalls may never answer), that overlaps the waiting. On loopback
it gains little: the cost is the kernel's work per port, on this machine's CPUs
(``benchmarks/portscan_many.py`` measures both).

Worker processes. Each connect() lets go of the GIL and takes it back, so a scan made
beside other busy threads of its process (another scan, a client's event loop, an
emulator run in process) waits at every port for their turn. :func:`scan` therefore hands
a scan of 1024 ports or more to a worker process (``workers``, one per CPU up to four,
started when first needed and kept) whenever other threads run in the calling process;
``in_worker=True``/``False`` decides it outright. Two full scans in two threads cost 2.2 s
of CPU here against 1.05 s in workers, and a scan beside a thread running Python took
306 s against 0.6 s (``benchmarks/portscan_threads.py``). A worker that does not answer
within its scan's deadline is killed; where no worker can be started, the scan is made in
the calling process.

Command line::

    python -m pytest_talos.ports HOST [--ports 1-65535] [--timeout S] [--concurrency N]
                                      [--baseline HOST]

prints the open ports one per line (sorted) on stdout and a one-line summary on stderr;
exit status 0, or 2 with a one-line error for bad input.

Layout: ``results`` (:class:`PortResult`, :class:`ScanResult`), ``targets`` (port specs,
host resolution), ``sweep`` (the connect engine), ``filelimit`` (the file-descriptor limit
for the time of a scan), ``scanner`` (:func:`scan_async`, :func:`scan`, and
:func:`scan_many_async`, :func:`scan_many` for several hosts at once), ``cli`` (the
``talos-portscan`` command line), ``workers`` and ``_worker`` (scans in worker processes,
each side of the pipe).
"""

from pytest_talos.ports.cli import main
from pytest_talos.ports.results import PortResult, PortState, ScanResult
from pytest_talos.ports.scanner import (
    DEFAULT_CONCURRENCY,
    DEFAULT_HOSTS_AT_ONCE,
    DEFAULT_PORTS,
    DEFAULT_TIMEOUT,
    scan,
    scan_async,
    scan_many,
    scan_many_async,
)
from pytest_talos.ports.targets import parse_ports

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_HOSTS_AT_ONCE",
    "DEFAULT_PORTS",
    "DEFAULT_TIMEOUT",
    "PortResult",
    "PortState",
    "ScanResult",
    "main",
    "parse_ports",
    "scan",
    "scan_async",
    "scan_many",
    "scan_many_async",
]
