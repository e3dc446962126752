"""``python -m pytest_talos.emulator``: start, print the nodes, serve, stop on SIGTERM."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from google.protobuf import empty_pb2

import pytest_talos
from pytest_talos.emulator import FAULTS

from .conftest import RawClient, tls_from_talosconfig

TIMEOUT = 30.0
LINE = re.compile(r"^(\S+) (controlplane|worker) (127\.\d+\.\d+\.\d+):50000$")


def _env() -> dict[str, str]:
    root = str(Path(pytest_talos.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_talos.emulator", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_list_faults() -> None:
    result = _run("--list-faults")
    assert result.returncode == 0
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert names == sorted(FAULTS)


def test_talosconfig_is_required() -> None:
    result = _run("--workers", "0")
    assert result.returncode == 2
    assert "--talosconfig PATH is required" in result.stderr


def test_unknown_fault_is_refused() -> None:
    result = _run("--talosconfig", "/nonexistent/x", "--fault", "no-such-fault")
    assert result.returncode == 2
    assert "no-such-fault" in result.stderr


def test_runs_in_the_foreground_and_stops_on_sigterm(tmp_path: Path) -> None:
    talosconfig = tmp_path / "talosconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_talos.emulator",
            "--controlplanes",
            "1",
            "--workers",
            "2",
            "--talosconfig",
            str(talosconfig),
            "--time-scale",
            "5",
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        printed = [lines.get(timeout=TIMEOUT).rstrip("\n") for _ in range(3)]
        matches = [LINE.match(line) for line in printed]
        assert all(matches), printed
        roles = [match.group(2) for match in matches if match]
        assert roles == ["controlplane", "worker", "worker"]
        client = RawClient(tls_from_talosconfig(talosconfig.read_bytes()))
        try:
            address = matches[0].group(3) if matches[0] else ""
            reply = client.call(address, "/machine.MachineService/Hostname", empty_pb2.Empty())
            assert reply.messages[0].hostname == printed[0].split()[0]
        finally:
            client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT) == 0


def test_a_latency_that_is_no_round_trip_time_is_refused() -> None:
    result = _run("--talosconfig", "/nonexistent/x", "--latency", "slow")
    assert result.returncode == 2
    assert "'slow' is not a round-trip time" in result.stderr
