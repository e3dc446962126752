"""The public scan: :func:`scan_async` and its blocking twin :func:`scan`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
from collections.abc import Iterable, Sequence

from pytest_talos.errors import ConfigError
from pytest_talos.ports.filelimit import file_limit_for
from pytest_talos.ports.results import PortResult, PortState, ScanResult
from pytest_talos.ports.sweep import Sweep
from pytest_talos.ports.targets import Target, normalise_ports, resolve

DEFAULT_PORTS = "1-65535"
DEFAULT_TIMEOUT = 1.0
DEFAULT_CONCURRENCY = 2048


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
    target: Target,
    baseline: Target | None,
    port_list: Sequence[int],
    *,
    timeout: float,
    concurrency: int,
) -> tuple[dict[int, PortState], tuple[int, ...]]:
    """Every port's state on ``target``, and the open ones that are open on ``baseline``
    too (those are set to closed)."""
    loop = asyncio.get_running_loop()
    states = await Sweep(loop, target, timeout=timeout, concurrency=concurrency).run(port_list)
    if baseline is None:
        return states, ()
    open_here = [port for port in port_list if states[port] == "open"]
    if not open_here:
        return states, ()
    there = await Sweep(loop, baseline, timeout=timeout, concurrency=concurrency).run(open_here)
    shared = tuple(port for port in open_here if there[port] == "open")
    for port in shared:
        states[port] = "closed"
    return states, shared


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
