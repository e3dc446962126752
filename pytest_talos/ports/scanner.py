"""The public scans: :func:`scan_async` and its blocking twin :func:`scan` (one host), and
:func:`scan_many_async` / :func:`scan_many` (several hosts at once on one event loop)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from pytest_talos.errors import ConfigError
from pytest_talos.ports.filelimit import file_limit_for
from pytest_talos.ports.results import PortState, ScanResult
from pytest_talos.ports.sweep import BATCH, ProbeBudget, Sweep
from pytest_talos.ports.targets import Target, normalise_ports, resolve
from pytest_talos.ports.workers import IN_WORKER_FROM, scan_in_worker

T = TypeVar("T")

DEFAULT_PORTS = "1-65535"
DEFAULT_TIMEOUT = 1.0
DEFAULT_CONCURRENCY = 2048
DEFAULT_HOSTS_AT_ONCE = 4


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
    port_list = normalise_ports(ports)
    timeout = _check_timeout(timeout)
    wanted = _check_concurrency(concurrency)
    target = await resolve(host)
    baseline = await _resolve_baseline(baseline_host, target)
    with file_limit_for(wanted) as usable:
        states, shared, passing = await _sweep_with_baseline(
            target, baseline, port_list, timeout=timeout, concurrency=usable
        )
    return ScanResult.from_states(
        target.host,
        port_list,
        states,
        elapsed=time.perf_counter() - started,
        shared=shared,
        address=target.address,
        baseline_host=None if baseline is None else baseline.address,
        passing=passing,
    )


async def _sweep_with_baseline(
    target: Target,
    baseline: Target | None,
    port_list: Sequence[int],
    *,
    timeout: float,
    concurrency: int,
    budget: ProbeBudget | None = None,
    spares: int = BATCH,
) -> tuple[dict[int, PortState], tuple[int, ...], tuple[int, ...]]:
    """Every port's state on ``target``; the open ones that are open on ``baseline`` too;
    and the open ones that, probed again, answer neither there nor on ``target`` (both
    kinds are set to closed). ``budget`` and ``spares``: see :class:`Sweep`.

    The baseline is probed after the target's sweep: a wildcard listener of this machine
    that came and went in between (another program's, on a port the kernel picked) was
    open on the target alone. Probed once more, such a port is closed on the target too;
    a port of the target's own stays open."""
    loop = asyncio.get_running_loop()

    def sweep(where: Target) -> Sweep:
        return Sweep(
            loop, where, timeout=timeout, concurrency=concurrency, budget=budget, spares=spares
        )

    states = await sweep(target).run(port_list)
    if baseline is None:
        return states, (), ()
    open_here = [port for port in port_list if states[port] == "open"]
    if not open_here:
        return states, (), ()
    there = await sweep(baseline).run(open_here)
    shared = tuple(port for port in open_here if there[port] == "open")
    alone = [port for port in open_here if there[port] != "open"]
    again = await sweep(target).run(alone) if alone else {}
    passing = tuple(port for port in alone if again[port] != "open")
    for port in (*shared, *passing):
        states[port] = "closed"
    return states, shared, passing


async def _resolve_baseline(baseline_host: str | None, target: Target) -> Target | None:
    if baseline_host is None:
        return None
    baseline = await resolve(baseline_host)
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
    in_worker: bool | None = None,
) -> ScanResult:
    """Blocking :func:`scan_async`; also works while an event loop runs in this thread.

    ``in_worker``: make the scan in a worker process (:mod:`pytest_talos.ports.workers`),
    off this process's GIL. None (the default) does so where it pays: a scan of
    :data:`~pytest_talos.ports.workers.IN_WORKER_FROM` ports or more while other threads
    run here (each would wait on the scan's every connect, and it on them). Where no worker
    can be started, the scan is made here.
    """
    port_list = normalise_ports(ports)
    timeout = _check_timeout(timeout)
    wanted = _check_concurrency(concurrency)
    if _worth_a_worker(in_worker, len(port_list)):
        found = scan_in_worker(
            host, port_list, timeout=timeout, concurrency=wanted, baseline_host=baseline_host
        )
        if found is not None:
            return found

    def run() -> ScanResult:
        return asyncio.run(
            scan_async(
                host, port_list, concurrency=wanted, timeout=timeout, baseline_host=baseline_host
            )
        )

    return _run_blocking(run)


def _worth_a_worker(asked: bool | None, port_count: int) -> bool:
    if asked is not None:
        return asked
    return port_count >= IN_WORKER_FROM and threading.active_count() > 1


def _check_hosts_at_once(hosts_at_once: int) -> int:
    if isinstance(hosts_at_once, bool) or not isinstance(hosts_at_once, int) or hosts_at_once < 1:
        raise ConfigError(
            f"bad hosts_at_once {hosts_at_once!r}: give a whole number of hosts to scan at "
            f"once, e.g. {DEFAULT_HOSTS_AT_ONCE}"
        )
    return hosts_at_once


async def scan_many_async(
    hosts: Iterable[str],
    ports: str | Iterable[int],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    baseline_host: str | None = None,
    hosts_at_once: int = DEFAULT_HOSTS_AT_ONCE,
) -> list[ScanResult]:
    """:func:`scan_async` of each of ``hosts``, up to ``hosts_at_once`` of them at a time on
    this event loop; the results in the order of ``hosts``.

    ``concurrency`` bounds the probes waiting for an answer across all the hosts together
    (capped below the file descriptor limit exactly as for one scan): the scans share it,
    so a call holds no more sockets in flight than one :func:`scan_async` would (besides a
    batch of refused sockets per host at once, kept for reuse). ``timeout`` bounds
    every probe; ``baseline_host`` serves every host (of its address family). Every host is
    resolved, and checked against the baseline, before any is scanned: a bad one raises
    the :class:`~pytest_talos.errors.ConfigError` (or ConnectError) its own scan would,
    and nothing is scanned. Each result's ``elapsed`` is its own host's scan, from the
    moment its turn came.

    Against real hosts, whose answers take a network round trip, scanning several at once
    saves most of the waiting; on loopback the answers come at once and the cost is the
    connect() system calls, so one loop gains little over scanning one host after another.
    """
    port_list = normalise_ports(ports)
    timeout = _check_timeout(timeout)
    wanted = _check_concurrency(concurrency)
    at_once = _check_hosts_at_once(hosts_at_once)
    targets = [await resolve(host) for host in hosts]
    baselines = [await _resolve_baseline(baseline_host, target) for target in targets]
    if not targets:
        return []
    at_once = min(at_once, len(targets))
    turns = asyncio.Semaphore(at_once)

    async def one(
        target: Target, baseline: Target | None, budget: ProbeBudget, spares: int
    ) -> ScanResult:
        async with turns:
            started = time.perf_counter()
            states, shared, passing = await _sweep_with_baseline(
                target,
                baseline,
                port_list,
                timeout=timeout,
                concurrency=budget.limit,
                budget=budget,
                spares=spares,
            )
            return ScanResult.from_states(
                target.host,
                port_list,
                states,
                elapsed=time.perf_counter() - started,
                shared=shared,
                address=target.address,
                baseline_host=None if baseline is None else baseline.address,
                passing=passing,
            )

    with contextlib.ExitStack() as limit:
        usable, spares = _budget_within_limit(limit, wanted, at_once)
        budget = ProbeBudget(usable)
        tasks = [
            asyncio.ensure_future(one(target, baseline, budget, spares))
            for target, baseline in zip(targets, baselines, strict=True)
        ]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:  # one failed: the others end too (their sockets closed)
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _budget_within_limit(limit: contextlib.ExitStack, wanted: int, at_once: int) -> tuple[int, int]:
    """(probes in flight, refused sockets each sweep keeps) for ``at_once`` sweeps, with the
    file limit raised in ``limit``: a batch of spares each (reuse saves a socket() and a
    close() per closed port) where the limit allows it, else one batch shared among them,
    which is what a single scan keeps."""
    usable = limit.enter_context(file_limit_for(wanted, kept=at_once * BATCH))
    if at_once == 1 or usable >= min(wanted, BATCH):
        return usable, BATCH
    limit.close()  # too tight for a batch each
    return limit.enter_context(file_limit_for(wanted)), BATCH // at_once


def scan_many(
    hosts: Iterable[str],
    ports: str | Iterable[int],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    baseline_host: str | None = None,
    hosts_at_once: int = DEFAULT_HOSTS_AT_ONCE,
) -> list[ScanResult]:
    """Blocking :func:`scan_many_async`; also works while an event loop runs in this thread."""
    host_list = list(hosts)

    def run() -> list[ScanResult]:
        return asyncio.run(
            scan_many_async(
                host_list,
                ports,
                concurrency=concurrency,
                timeout=timeout,
                baseline_host=baseline_host,
                hosts_at_once=hosts_at_once,
            )
        )

    return _run_blocking(run)


def _run_blocking(run: Callable[[], T]) -> T:
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
