#!/usr/bin/env python3
"""How much does TalosClient add on top of a bare grpclib stub call?

Both go over the same mTLS (Ed25519) HTTP/2 connection to the apid of an emulated control
plane, in the same run, interleaved round by round so drift hits both alike:

* bare   - ``MachineServiceStub(channel).Version(Empty())`` awaited on the client's loop
* async  - ``await AsyncTalosClient.version()`` on the same loop (our code, no thread hop)
* sync   - ``TalosClient.version()`` from the main thread (what users call)
* bare+hop - the bare stub call submitted from the main thread (isolates the thread hop)

The server runs in a child process so it does not compete for this process's GIL.
Goal: sync / bare <= 1.3.

    python benchmarks/client_overhead.py [--calls 500] [--rounds 7]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from google.protobuf import empty_pb2  # noqa: E402

from pytest_talos._proto.machine import machine_grpc  # noqa: E402
from pytest_talos.client import TalosClient  # noqa: E402
from pytest_talos.transport import GrpcTransport  # noqa: E402


def _serve(queue: Any, stop: Any) -> None:
    """Child process: run one emulated control plane, hand back endpoint and credentials."""
    from pytest_talos.emulator import EmulatedCluster
    from pytest_talos.pki import issue_client_cert

    with EmulatedCluster(controlplanes=1, workers=0) as cluster:
        admin = issue_client_cert(cluster.ca, roles=["os:admin"])
        queue.put((cluster.endpoint, cluster.ca.cert_pem, admin.cert_pem, admin.key_pem_talos))
        stop.wait()


def _per_call(seconds: float, calls: int) -> float:
    return seconds / calls * 1e6  # microseconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per round and kind")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    ctx = multiprocessing.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_serve, args=(queue, stop), daemon=True)
    child.start()
    try:
        endpoint, ca_pem, crt_pem, key_pem = queue.get(timeout=60)
        with TalosClient(endpoint, ca_pem, crt_pem, key_pem) as client:
            results = _measure(client, args.calls, args.rounds)
    finally:
        stop.set()
        child.join(10)
    _report(results, endpoint, args.calls, args.rounds)


def _measure(client: TalosClient, calls: int, rounds: int) -> dict[str, list[float]]:
    core = client.async_client
    run = client._runner.run  # the client's own loop thread (benchmark-only access)
    wire = core._transport
    assert isinstance(wire, GrpcTransport)  # a client built from credentials
    channel = wire.channel()  # the very connection version() uses
    stub = machine_grpc.MachineServiceStub(channel)
    metadata = [("runtime", "Talos")]  # what our client sends without node targeting
    timeout = client.timeout

    async def bare_call() -> Any:
        return await stub.Version(empty_pb2.Empty(), timeout=timeout, metadata=metadata)

    async def bare_loop() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            await bare_call()
        return time.perf_counter() - start

    async def async_loop() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            await core.version()
        return time.perf_counter() - start

    def sync_loop() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            client.version()
        return time.perf_counter() - start

    def bare_hop_loop() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            run(bare_call())
        return time.perf_counter() - start

    kinds: dict[str, Callable[[], float]] = {
        "bare": lambda: run(bare_loop()),
        "async": lambda: run(async_loop()),
        "sync": sync_loop,
        "bare+hop": bare_hop_loop,
    }
    assert client.version().tag  # warm up the connection and both code paths
    for measure in kinds.values():
        measure()
    results: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for round_ in range(rounds):
        for kind in order[round_ % len(order) :] + order[: round_ % len(order)]:
            results[kind].append(_per_call(kinds[kind](), calls))
    return results


def _report(results: dict[str, list[float]], endpoint: str, calls: int, rounds: int) -> None:
    median = {kind: statistics.median(values) for kind, values in results.items()}
    print(f"Version() over Ed25519 mTLS to {endpoint}, {rounds} rounds x {calls} calls per kind")
    print(f"{'kind':<10} {'median us/call':>15} {'min':>9} {'max':>9}")
    for kind, values in results.items():
        print(f"{kind:<10} {median[kind]:>15.1f} {min(values):>9.1f} {max(values):>9.1f}")
    sync_ratio = median["sync"] / median["bare"]
    print(f"async / bare     = {median['async'] / median['bare']:.2f}x  (our code in the loop)")
    print(f"sync  / bare     = {sync_ratio:.2f}x  (TalosClient.version(); goal <= 1.30x)")
    print(f"sync  / bare+hop = {median['sync'] / median['bare+hop']:.2f}x  (same thread hop)")
    best = {kind: min(values) for kind, values in results.items()}
    print(
        f"best-round ratios: async/bare {best['async'] / best['bare']:.2f}x, "
        f"sync/bare {best['sync'] / best['bare']:.2f}x (less sensitive to a busy machine)"
    )
    print("goal met" if sync_ratio <= 1.3 else "goal NOT met")


if __name__ == "__main__":
    main()
