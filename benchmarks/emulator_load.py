#!/usr/bin/env python3
"""Load on the emulated cluster: start time of 50 nodes, and calls/s under 200 mTLS clients.

Usage:
    python benchmarks/emulator_load.py [--clients 200] [--calls 50] [--nodes 50]

1. Starts a 50-node cluster in this process and reports how long ``start()`` took.
2. Runs the emulator as ``python -m pytest_talos.emulator`` (its own process, like a user
   would) with the same size, and reports the time until every node line was printed.
3. Opens ``--clients`` concurrent clients (each its own mutual-TLS connection, raw grpclib
   stubs, spread over all nodes) and has each make ``--calls`` calls, cycling through
   Version, Hostname, ServiceList and a COSI Get. Reports calls/s, latency percentiles and
   errors (the run fails on any error). Every call has a 30 s deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from google.protobuf import empty_pb2  # noqa: E402
from grpclib.client import Channel  # noqa: E402

from pytest_talos._proto.machine import machine_grpc  # noqa: E402
from pytest_talos._proto.v1alpha1 import state_grpc, state_pb2  # noqa: E402
from pytest_talos.emulator import EmulatedCluster  # noqa: E402
from pytest_talos.emulator.apid.tls import load_cert_chain  # noqa: E402

DEADLINE = 30.0


def _tls(talosconfig: bytes) -> ssl.SSLContext:
    document = yaml.safe_load(talosconfig)
    context = document["contexts"][document["context"]]
    ca, crt, key = (base64.b64decode(context[k]) for k in ("ca", "crt", "key"))
    key = re.sub(rb"(BEGIN|END) ED25519 PRIVATE KEY", rb"\1 PRIVATE KEY", key)
    tls = ssl.create_default_context(cadata=ca.decode())
    load_cert_chain(tls, crt, key)
    tls.set_alpn_protocols(["h2"])
    return tls


async def _in_process_start(nodes: int) -> float:
    cluster = EmulatedCluster(controlplanes=3, workers=nodes - 3)
    started = time.perf_counter()
    await cluster.start()
    elapsed = time.perf_counter() - started
    await cluster.stop()
    return elapsed


def _start_cli(nodes: int, talosconfig: Path) -> tuple[subprocess.Popen[str], float, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_talos.emulator",
            "--controlplanes",
            "3",
            "--workers",
            str(nodes - 3),
            "--talosconfig",
            str(talosconfig),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    addresses = []
    for _ in range(nodes):
        line = process.stdout.readline()
        if not line:
            raise SystemExit("the emulator exited before all nodes were serving")
        addresses.append(line.split()[2].rsplit(":", 1)[0])
    return process, time.perf_counter() - started, addresses


async def _client(
    index: int,
    tls: ssl.SSLContext,
    addresses: list[str],
    calls: int,
    latencies: list[float],
    errors: list[str],
) -> None:
    address = addresses[index % len(addresses)]
    channel = Channel(address, 50000, ssl=tls)
    machine = machine_grpc.MachineServiceStub(channel)
    cosi = state_grpc.StateStub(channel)
    get = state_pb2.GetRequest(namespace="runtime", type="Versions.runtime.talos.dev", id="version")
    requests: list[tuple[Any, Any]] = [
        (machine.Version, empty_pb2.Empty()),
        (machine.Hostname, empty_pb2.Empty()),
        (machine.ServiceList, empty_pb2.Empty()),
        (cosi.Get, get),
    ]
    try:
        for number in range(calls):
            method, request = requests[(index + number) % len(requests)]
            began = time.perf_counter()
            try:
                await method(request, timeout=DEADLINE)
            except Exception as exc:  # counted and reported, never hidden
                errors.append(f"{address}: {type(exc).__name__}: {exc}")
            latencies.append(time.perf_counter() - began)
    finally:
        channel.close()


async def _load(
    tls: ssl.SSLContext, addresses: list[str], clients: int, calls: int
) -> tuple[float, list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    await asyncio.gather(
        *(_client(i, tls, addresses, calls, latencies, errors) for i in range(clients))
    )
    return time.perf_counter() - started, latencies, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=50)
    args = parser.parse_args()

    in_process = asyncio.run(_in_process_start(args.nodes))
    print(f"in-process start of {args.nodes} nodes: {in_process:.2f} s")

    with tempfile.TemporaryDirectory() as directory:
        talosconfig = Path(directory) / "talosconfig"
        process, cli_start, addresses = _start_cli(args.nodes, talosconfig)
        try:
            print(f"CLI start of {args.nodes} nodes (interpreter included): {cli_start:.2f} s")
            tls = _tls(talosconfig.read_bytes())
            elapsed, latencies, errors = asyncio.run(
                _load(tls, addresses, args.clients, args.calls)
            )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)

    total = args.clients * args.calls
    ordered = sorted(latencies)
    print(
        f"{args.clients} clients x {args.calls} calls = {total} calls in {elapsed:.2f} s: "
        f"{total / elapsed:.0f} calls/s"
    )
    print(
        f"latency p50 {statistics.median(ordered) * 1000:.1f} ms, "
        f"p99 {ordered[int(len(ordered) * 0.99) - 1] * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms"
    )
    print(f"errors: {len(errors)}")
    for error in errors[:10]:
        print(f"  {error}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
