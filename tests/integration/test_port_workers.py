"""Scans in worker processes (pytest_talos/ports/workers.py) against real listeners on
loopback: they find what a scan in this process finds, long scans beside other threads go
there by themselves, errors come back as themselves, a hung worker is killed at its
deadline, and where no worker can run the scan is made here."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_talos.errors import ConfigError, DeadlineExceeded
from pytest_talos.ports import ScanResult, scan, scanner, workers

BASELINE = "127.0.0.254"
# A stand-in worker that answers with JSON that is not a result (no host, no ports).
BROKEN_RESULT = 'import json, sys; sys.stdin.readline(); print(json.dumps({"open": 1}))'
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A new pool for the test, stopped afterwards; the hand-overs to it recorded (their
    hosts)."""
    workers.shutdown_workers()
    handed: list[str] = []
    real = workers.scan_in_worker

    def recorded(host: str, *args: Any, **kwargs: Any) -> ScanResult | None:
        handed.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(scanner, "scan_in_worker", recorded)
    yield handed
    workers.shutdown_workers()


@pytest.fixture
def listeners() -> Iterator[tuple[str, list[int], int]]:
    """Two listeners on 127.0.0.121 and a wildcard one (open on the baseline too):
    (host, its own ports, the wildcard's)."""
    host = "127.0.0.121"
    opened = []
    for address in (host, host, "0.0.0.0"):
        sock = socket.socket()
        sock.bind((address, 0))
        sock.listen(8)
        opened.append(sock)
    ports = [int(s.getsockname()[1]) for s in opened]
    yield host, sorted(ports[:2]), ports[2]
    for sock in opened:
        sock.close()


def _same(a: ScanResult, b: ScanResult) -> None:
    assert a.results == b.results
    assert (a.host, a.address, a.shared, a.baseline_host) == (
        b.host,
        b.address,
        b.shared,
        b.baseline_host,
    )


def test_a_scan_in_a_worker_finds_what_a_scan_here_finds(
    fresh_workers: list[str], listeners: tuple[str, list[int], int]
) -> None:
    host, own, wildcard = listeners
    there = scan(host, "1-65535", baseline_host=BASELINE, in_worker=True)
    here = scan(host, "1-65535", baseline_host=BASELINE, in_worker=False)
    _same(there, here)
    assert list(there.open_ports) == own
    assert wildcard in there.shared
    assert len(there.results) == 65535
    assert fresh_workers == [host]  # the in_worker=False scan was not handed over


def test_a_long_scan_beside_a_busy_thread_goes_to_a_worker_and_a_short_one_stays(
    fresh_workers: list[str], listeners: tuple[str, list[int], int]
) -> None:
    # A thread running Python takes the GIL at each of the scan's connects: here, such a
    # scan took 306 s instead of 0.4 s. In a worker it is not slowed at all.
    host, own, _ = listeners
    stop = threading.Event()
    busy = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    busy.start()
    try:
        long_scan = scan(host, "1-65535", baseline_host=BASELINE)
        short_scan = scan(host, own)
    finally:
        stop.set()
        busy.join()
    assert list(long_scan.open_ports) == own
    assert list(short_scan.open_ports) == own
    assert fresh_workers == [host]  # the 2-port scan was made here


def test_the_scan_alone_in_its_process_is_made_here(
    fresh_workers: list[str], listeners: tuple[str, list[int], int]
) -> None:
    host, own, _ = listeners
    if threading.active_count() > 1:
        pytest.skip("other threads run in this test process (pytest-xdist's)")
    assert list(scan(host, "1-65535", baseline_host=BASELINE).open_ports) == own
    assert fresh_workers == []


def test_a_workers_error_is_the_error_a_scan_here_raises(fresh_workers: list[str]) -> None:
    # The baseline is checked in the worker, once the host is resolved there.
    with pytest.raises(ConfigError) as there:
        scan("127.0.0.122", "1-2000", baseline_host="::1", in_worker=True)
    with pytest.raises(ConfigError) as here:
        scan("127.0.0.122", "1-2000", baseline_host="::1", in_worker=False)
    assert str(there.value) == str(here.value)
    assert "different address families" in str(there.value)
    assert fresh_workers == ["127.0.0.122"]


def test_a_worker_that_hangs_is_stopped_at_the_deadline(
    fresh_workers: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hang = "import sys, time\nsys.stdin.readline()\ntime.sleep(120)"
    monkeypatch.setattr(workers, "WORKER_COMMAND", [sys.executable, "-c", hang])
    monkeypatch.setattr(workers, "_deadline", lambda *_args: 0.5)
    with pytest.raises(DeadlineExceeded) as caught:
        scan("127.0.0.123", "1-2000", in_worker=True)
    assert str(caught.value) == (
        "the port scan of 127.0.0.123 did not finish within 0.5s (its worker process was stopped)"
    )
    assert caught.value.timeout == 0.5


@pytest.mark.parametrize(
    "command",
    [
        ["/nonexistent/python"],
        [sys.executable, "-c", "pass"],
        [sys.executable, "-c", "print(1)"],
        [sys.executable, "-c", BROKEN_RESULT],
    ],
    ids=["cannot-start", "exits-at-once", "answers-nonsense", "answers-a-broken-result"],
)
def test_without_a_working_worker_the_scan_is_made_here(
    command: list[str],
    fresh_workers: list[str],
    monkeypatch: pytest.MonkeyPatch,
    listeners: tuple[str, list[int], int],
) -> None:
    host, own, _ = listeners
    monkeypatch.setattr(workers, "WORKER_COMMAND", command)
    found = scan(host, "1-65535", baseline_host=BASELINE, in_worker=True)
    assert list(found.open_ports) == own
    assert fresh_workers == [host]


def _worker() -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest_talos.ports._worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )


def test_a_worker_ignores_ctrl_c_and_ends_when_its_input_closes(
    listeners: tuple[str, list[int], int],
) -> None:
    host, own, _ = listeners
    worker = _worker()
    assert worker.stdin is not None
    assert worker.stdout is not None
    request = {"host": host, "ports": own, "timeout": 1.0, "concurrency": 8}
    worker.stdin.write(json.dumps({**request, "baseline_host": None}) + "\n")
    worker.stdin.flush()
    assert json.loads(worker.stdout.readline())["open"] == own  # started, and answering
    os.kill(worker.pid, signal.SIGINT)
    worker.stdin.write(json.dumps({**request, "baseline_host": None}) + "\n")
    worker.stdin.flush()
    assert json.loads(worker.stdout.readline())["open"] == own
    worker.stdin.close()
    assert worker.wait(timeout=10) == 0
    worker.stdout.close()
