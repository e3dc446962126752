#!/usr/bin/env python3
"""Soak: the emulator (its own process, from its CLI) under 200 mixed clients for 10 minutes.

Usage:
    python benchmarks/soak.py [--seconds 600] [--clients 200] [--call-log-size N]

Starts ``python -m pytest_talos.emulator`` (1 control plane, 1 worker) on a free loopback
/24, then runs ``--clients`` concurrent mutual-TLS clients (pytest-talos's asyncio client,
each its own connection) for ``--seconds``. Each client loops over a weighted mix: Version,
Hostname, ServiceList, the MachineConfig (COSI Get), List, Logs, a dry-run apply, an Events
stream and a COSI Watch opened and closed, and *aborted* clients: one that drops its
connection mid-stream without a TLS goodbye, one that sends half a TLS hello and resets.

Reported: calls per operation, latency percentiles, every error by kind, the emulator's
resident memory over time (it must level off: the call log is a ring buffer), and any line
the emulator wrote to stderr (there should be none). Exits 1 on an error or a stderr line.
Every request has a 30 s deadline and every loop stops at the end of the run; all traffic
goes to 127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_talos.client import AsyncTalosClient  # noqa: E402
from pytest_talos.errors import TalosError  # noqa: E402

DEADLINE = 30.0
WORKER = "talos-default-worker-1"


class Stats:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = collections.defaultdict(list)
        self.errors: collections.Counter[str] = collections.Counter()

    def record(self, op: str, seconds: float) -> None:
        self.latency[op].append(seconds)

    def fail(self, op: str, exc: BaseException) -> None:
        text = str(exc).split("\n", 1)[0][:140]
        self.errors[f"{op}: {type(exc).__name__}: {text}"] += 1


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_emulator(
    directory: Path, call_log_size: int | None
) -> tuple[subprocess.Popen[str], dict[str, str], Path]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    if call_log_size:
        env["TALOS_EMULATOR_CALL_LOG_SIZE"] = str(call_log_size)
    stderr = directory / "emulator.stderr"
    with stderr.open("w") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest_talos.emulator",
                "--talosconfig",
                str(directory / "talosconfig"),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
    nodes: dict[str, str] = {}
    assert process.stdout is not None
    while len(nodes) < 2:
        line = process.stdout.readline()
        if not line:
            raise SystemExit(f"the emulator did not start: {stderr.read_text()}")
        hostname, _, address = line.split()
        nodes[hostname] = address
    return process, nodes, stderr


async def _stream_some(stream: Any, count: int) -> None:
    try:
        for _ in range(count):
            await asyncio.wait_for(anext(stream), DEADLINE)
    except StopAsyncIteration:
        pass
    finally:
        await stream.aclose()


def operations(
    client: AsyncTalosClient, config: bytes
) -> list[tuple[str, int, Callable[[], Awaitable[Any]]]]:
    return [
        ("version", 6, client.version),
        ("hostname", 3, client.hostname),
        ("services", 3, client.services),
        ("machine_config", 3, client.machine_config),
        ("list", 2, lambda: client.list("/etc")),
        ("logs", 2, lambda: client.logs("kubelet", tail=20)),
        ("dry_run_apply", 1, lambda: client.apply_configuration(config, "no-reboot", dry_run=True)),
        ("events_stream", 1, lambda: _stream_some(client.events(tail_events=3), 2)),
        (
            "watch_stream",
            1,
            lambda: _stream_some(
                client.watch("MachineConfigs.config.talos.dev", "v1alpha1", "config"), 1
            ),
        ),
    ]


async def aborted_stream(talosconfig: Path, endpoint: str, node: str) -> None:
    """A client that opens an Events stream, then vanishes (no TLS close, no HTTP/2 goaway)."""
    client = AsyncTalosClient.from_talosconfig(
        talosconfig, endpoint=endpoint, node=node, timeout=DEADLINE
    )
    stream = client.events(tail_events=1)
    await asyncio.wait_for(anext(stream), DEADLINE)
    client._transport.close()  # the abrupt cut a killed process leaves behind


async def half_hello(endpoint: str) -> None:
    """Half a TLS ClientHello, then a TCP reset."""
    host, port = endpoint.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (host, int(port))), DEADLINE)
        await loop.sock_sendall(sock, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    finally:
        sock.close()


async def one_client(
    index: int,
    talosconfig: Path,
    endpoint: str,
    worker: str,
    end: float,
    stats: Stats,
    config: bytes,
) -> None:
    rng = random.Random(index)
    client = AsyncTalosClient.from_talosconfig(
        talosconfig, endpoint=endpoint, node=worker, timeout=DEADLINE
    )
    ops = operations(client, config)
    extra: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("aborted_client", lambda: aborted_stream(talosconfig, endpoint, worker)),
        ("half_tls_hello", lambda: half_hello(endpoint)),
    ]
    weights = [weight for _, weight, _ in ops]
    try:
        while time.monotonic() < end:
            if rng.random() < 0.02:
                name, call = rng.choice(extra)
            else:
                name, _, call = rng.choices(ops, weights)[0]
            started = time.monotonic()
            try:
                await asyncio.wait_for(call(), DEADLINE + 5)
            except (TalosError, OSError, TimeoutError) as exc:
                stats.fail(name, exc)
            else:
                stats.record(name, time.monotonic() - started)
    finally:
        await client.close()


async def load(
    args: argparse.Namespace,
    talosconfig: Path,
    nodes: dict[str, str],
    stats: Stats,
    pid: int,
    memory: list[tuple[float, int]],
) -> None:
    endpoint = next(a for h, a in nodes.items() if "controlplane" in h)
    worker = nodes[WORKER].rsplit(":", 1)[0]
    probe = AsyncTalosClient.from_talosconfig(talosconfig, endpoint=endpoint, node=worker)
    config = (await probe.machine_config()).raw
    await probe.close()
    start = time.monotonic()
    end = start + args.seconds

    async def sample() -> None:
        while time.monotonic() < end:
            memory.append((time.monotonic() - start, _rss_kib(pid)))
            await asyncio.sleep(min(5.0, max(args.seconds / 20, 0.5)))

    sampler = asyncio.create_task(sample())
    await asyncio.gather(
        *(
            one_client(i, talosconfig, endpoint, worker, end, stats, config)
            for i in range(args.clients)
        )
    )
    memory.append((time.monotonic() - start, _rss_kib(pid)))
    sampler.cancel()


def report(
    args: argparse.Namespace,
    stats: Stats,
    memory: list[tuple[float, int]],
    stderr_lines: list[str],
    elapsed: float,
) -> int:
    total = sum(len(v) for v in stats.latency.values())
    errors = sum(stats.errors.values())
    print(
        f"soak: {args.clients} clients for {elapsed:.0f}s: {total} calls ok "
        f"({total / elapsed:.0f}/s), {errors} errors"
    )
    for op, values in sorted(stats.latency.items()):
        values.sort()
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        print(
            f"  {op:15} {len(values):7} calls  p50 {statistics.median(values) * 1000:7.1f} ms"
            f"  p99 {p99 * 1000:7.1f} ms"
        )
    for text, count in stats.errors.most_common(20):
        print(f"  ERROR x{count}: {text}")
    if memory:
        first = memory[min(1, len(memory) - 1)][1]
        peak = max(kib for _, kib in memory)
        print(
            f"emulator RSS: {memory[0][1] / 1024:.0f} MiB at the start, {first / 1024:.0f} MiB "
            f"after warm-up, {peak / 1024:.0f} MiB peak, {memory[-1][1] / 1024:.0f} MiB at "
            f"the end ({len(memory)} samples)"
        )
        print("  " + ", ".join(f"{t:.0f}s {kib / 1024:.0f}" for t, kib in memory))
    print(f"emulator stderr: {len(stderr_lines)} lines")
    for line in stderr_lines[:10]:
        print(f"  {line}")
    return 1 if errors or stderr_lines else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument(
        "--call-log-size",
        type=int,
        default=None,
        help="the emulator's call log ring size (default: its own, 20000)",
    )
    args = parser.parse_args()
    stats = Stats()
    memory: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory(prefix="soak-") as directory:
        process, nodes, stderr = start_emulator(Path(directory), args.call_log_size)
        started = time.monotonic()
        try:
            asyncio.run(
                load(args, Path(directory) / "talosconfig", nodes, stats, process.pid, memory)
            )
        finally:
            elapsed = time.monotonic() - started
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        lines = [line for line in stderr.read_text().splitlines() if line.strip()]
    return report(args, stats, memory, lines, elapsed)


if __name__ == "__main__":
    sys.exit(main())
