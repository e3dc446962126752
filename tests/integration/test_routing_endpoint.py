"""How connect() targets nodes through its endpoint (internal/app/apid/pkg/director/director.go):
a worker endpoint cannot forward, and says so in a way that tells the user what to do; with no
node given and no Members, the endpoint's own node is targeted by one of its own addresses,
so an endpoint reached through another address (a DNS name, a load balancer, a NAT) works."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import yaml

from pytest_talos.cluster import WORKER_ENDPOINT, TalosCluster
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.errors import PermissionDenied

CONTROL_PLANE = "talos-default-controlplane-1"
WORKER = "talos-default-worker-1"


def test_a_worker_endpoint_says_to_use_a_control_plane() -> None:
    with EmulatedCluster(1, 1) as cluster:
        worker = cluster.nodes[1].address
        with TalosCluster.connect(cluster.talosconfig_path, endpoints=[worker], env={}) as talos:
            by_role = {node.role: node for node in talos.nodes}
    assert by_role["worker"].reachable
    unreachable = by_role["unknown"].unreachable
    assert isinstance(unreachable, PermissionDenied)
    assert unreachable.details == (
        "no request forwarding: this endpoint is a worker; use a control-plane endpoint "
        "(a worker's apid serves only itself)"
    )
    assert WORKER_ENDPOINT in str(unreachable)


@contextlib.contextmanager
def _forwarder(target: tuple[str, int]) -> Iterator[str]:
    """A TCP port on 127.0.0.1 that forwards to ``target`` (a NAT or a load balancer)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port: list[int] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def serve() -> asyncio.Server:
        server = await asyncio.start_server(accept, "127.0.0.1", 0, family=socket.AF_INET)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        return server

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    ready.wait(10)
    try:
        yield f"127.0.0.1:{port[0]}"
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def _without_nodes(talosconfig: Path, into: Path) -> Path:
    """The talosconfig with no ``nodes`` in any context (as talosctl writes it by default)."""
    doc = yaml.safe_load(talosconfig.read_text())
    for context in doc["contexts"].values():
        context.pop("nodes", None)
    into.write_text(yaml.safe_dump(doc))
    return into


def test_the_lone_endpoint_node_is_targeted_by_its_own_address(tmp_path: Path) -> None:
    with EmulatedCluster(1, 1, variants=["discovery-disabled"]) as cluster:
        worker = cluster.nodes[1].address
        config = _without_nodes(Path(cluster.talosconfig_path), tmp_path / "talosconfig")
        with (
            _forwarder((worker, 50000)) as endpoint,
            TalosCluster.connect(config, endpoints=[endpoint], env={}) as talos,
        ):
            (node,) = talos.nodes
            assert node.reachable, node.unreachable
            assert (node.address, node.name, node.role) == (worker, WORKER, "worker")
            assert node.version.tag == "v1.13.9"
