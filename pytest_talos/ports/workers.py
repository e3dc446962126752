"""Long scans in worker processes, off this process's GIL.

A scan's every ``connect()`` lets go of the GIL and takes it back. Beside other busy threads
of the same process (a second scan, the client's event loop, an emulator run in process)
each of those hand-overs waits its turn: on 2 CPUs two full scans in two threads of one
process took 2.07 s of CPU (0.8 s in two processes), and a scan beside a thread running
Python took 306 s instead of 0.4 s (``benchmarks/portscan_threads.py``). A worker process
runs nothing but its scan, and scans in several workers use several cores.

:func:`scan_in_worker` hands a scan to one of at most :data:`WORKERS` worker processes
(``python -m pytest_talos.ports._worker``, started when first needed and kept for the next
scan), one scan each at a time, and returns its result, or ``None`` when no worker can be
had (the caller then scans in its own process). A worker that does not answer within the
scan's deadline is killed (:class:`~pytest_talos.errors.DeadlineExceeded`). Workers ignore
Ctrl-C (the process that started them decides) and end when their stdin closes: at exit,
or when that process dies.

The exchange is one JSON line each way: the request (host, ports, timeout, concurrency,
baseline), then the result with only the open and filtered ports listed (a full scan is
mostly closed ports), or the error the scan raised (its class and message; only errors
of :mod:`pytest_talos.errors` and ``OSError`` cross back as themselves).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from pytest_talos import errors
from pytest_talos.errors import DeadlineExceeded, TalosError
from pytest_talos.ports.results import PortState, ScanResult

__all__ = [
    "IN_WORKER_FROM",
    "WORKERS",
    "WORKER_COMMAND",
    "encode_failure",
    "encode_result",
    "scan_in_worker",
    "shutdown_workers",
]

# Scans of at least this many ports go to a worker; a probe of a few ports costs less here
# than the hand-over.
IN_WORKER_FROM = 1024
# Worker processes at most: one per CPU (scans on loopback are CPU-bound), at most four.
WORKERS = max(1, min(4, os.cpu_count() or 1))
# Seconds a worker may take on top of its scan's worst case (start-up, import, a busy CPU).
_GRACE = 30.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# How a worker is started (the tests start stand-ins that hang or die).
WORKER_COMMAND = [sys.executable, "-m", "pytest_talos.ports._worker"]


def _deadline(port_count: int, timeout: float, concurrency: int) -> float:
    """The longest a healthy scan can take: every probe waits its whole ``timeout``, at most
    ``concurrency`` at once, three sweeps over (the node's, the baseline's re-probe of its
    open ports, and the node's second probe of those open there alone)."""
    rounds = math.ceil(port_count / max(1, concurrency))
    return 3 * (rounds + 1) * timeout + _GRACE


class _Worker:
    """One worker process and its pipes; used by one scan at a time."""

    def __init__(self) -> None:
        env = dict(os.environ)
        # The same pytest_talos as this process, wherever it was imported from.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p
        )
        self.process = subprocess.Popen(
            WORKER_COMMAND,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )

    @property
    def pipes(self) -> tuple[IO[str], IO[str]]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None  # both pipes were asked for
        assert stdout is not None
        return stdin, stdout

    def ask(self, request: dict[str, Any], deadline: float) -> dict[str, Any] | None:
        """The worker's answer to ``request``, or None when it died or broke the exchange
        (it is then stopped); DeadlineExceeded when it took longer than ``deadline``."""
        stdin, stdout = self.pipes
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.process.kill()

        timer = threading.Timer(deadline, expire)
        timer.daemon = True
        timer.start()
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            line = stdout.readline()
        except OSError:
            line = ""
        finally:
            timer.cancel()
        answer = _parsed(line)
        if answer is None:
            self.stop()
        if expired.is_set():
            raise DeadlineExceeded(
                f"the port scan of {request['host']} did not finish within {deadline:.3g}s "
                "(its worker process was stopped)",
                timeout=deadline,
            )
        return answer

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


class _Pool:
    """Idle workers, and how many exist: a scan takes an idle one, or starts one while fewer
    than :data:`WORKERS` exist, or waits for one to come back."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._count = 0
        self._usable = True
        self._changed = threading.Condition()

    def take(self) -> _Worker | None:
        with self._changed:
            while self._usable:
                if self._idle:
                    return self._idle.pop()
                if self._count < WORKERS:
                    self._count += 1
                    break
                self._changed.wait()
            else:
                return None
        try:
            return _Worker()
        except OSError:  # no process can be started here: scan in process from now on
            with self._changed:
                self._count -= 1
                self._usable = False
                self._changed.notify_all()
            return None

    def give_back(self, worker: _Worker, *, healthy: bool) -> None:
        with self._changed:
            if healthy and self._usable and worker.process.poll() is None:
                self._idle.append(worker)
            else:
                self._count -= 1
                worker.stop()
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._usable = False
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._changed.notify_all()
        for worker in idle:
            worker.stop()


_POOL = _Pool()


def shutdown_workers() -> None:
    """Stop the idle workers (those still scanning stop when done); later scans start new
    ones. Called at exit."""
    global _POOL
    closing, _POOL = _POOL, _Pool()
    closing.close()


@atexit.register
def _at_exit() -> None:
    _POOL.close()  # and none started after this: scans at interpreter exit run here


def scan_in_worker(
    host: str,
    port_list: Sequence[int],
    *,
    timeout: float,
    concurrency: int,
    baseline_host: str | None,
) -> ScanResult | None:
    """The scan of ``port_list`` on ``host``, made by a worker process; None when none can
    be had. Raises what the scan raised (ConfigError, ConnectError, ...)."""
    worker = _POOL.take()
    if worker is None:
        return None
    request = {
        "host": host,
        "ports": list(port_list),
        "timeout": timeout,
        "concurrency": concurrency,
        "baseline_host": baseline_host,
    }
    healthy = False
    try:
        answer = worker.ask(request, _deadline(len(port_list), timeout, concurrency))
        healthy = answer is not None
    finally:
        _POOL.give_back(worker, healthy=healthy)
    if answer is None:
        return None
    if "error" in answer:
        raise _failure(str(answer["error"]), str(answer.get("message", "")))
    return _decoded(answer, port_list)


def _parsed(line: str) -> dict[str, Any] | None:
    if not line:
        return None
    try:
        answer = json.loads(line)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def encode_result(result: ScanResult) -> dict[str, Any]:
    """A scan's result as the worker sends it: only its open and filtered ports listed."""
    return {
        "host": result.host,
        "address": result.address,
        "baseline_host": result.baseline_host,
        "elapsed": result.elapsed,
        "shared": list(result.shared),
        "passing": list(result.passing),
        "open": list(result.open_ports),
        "filtered": list(result.filtered),
    }


def encode_failure(exc: BaseException) -> dict[str, Any]:
    """What a failed scan raised, as the worker sends it."""
    return {"error": type(exc).__name__, "message": getattr(exc, "message", str(exc))}


def _decoded(answer: dict[str, Any], port_list: Sequence[int]) -> ScanResult | None:
    """The result a worker sent, or None when it is not one (the scan is then made here)."""
    states: dict[int, PortState] = {}
    try:
        for port in answer["open"]:
            states[int(port)] = "open"
        for port in answer["filtered"]:
            states[int(port)] = "filtered"
        return ScanResult.from_states(
            str(answer["host"]),
            port_list,
            states,
            elapsed=float(answer["elapsed"]),
            shared=tuple(int(p) for p in answer["shared"]),
            address=str(answer["address"]),
            baseline_host=answer["baseline_host"],
            passing=tuple(int(p) for p in answer["passing"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _failure(name: str, message: str) -> Exception:
    """The error a worker's scan raised, as the same class where it is one of ours."""
    found = getattr(errors, name, None)
    if isinstance(found, type) and issubclass(found, TalosError):
        with contextlib.suppress(TypeError):  # a class that needs more than a message
            return found(message)
        return TalosError(message)
    if name in ("OSError", "ValueError"):
        return OSError(message) if name == "OSError" else ValueError(message)
    return TalosError(f"the port scan failed in its worker process: {name}: {message}")
