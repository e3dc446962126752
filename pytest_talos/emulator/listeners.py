"""The real TCP sockets of an emulated node, opened on its own loopback address.

apid (50000) is :mod:`.server` and the Kubernetes API (6443) is :mod:`.kubeapi`; the other
reachable sockets of :func:`.sockets.listeners_for` (trustd 50001, etcd 2379/2380, kubelet
10250, kube-proxy's healthz 10256 unless ``cluster.proxy.disabled``) accept a TCP connection
and close it. Fault ``ssh-open`` adds port 22 with an OpenSSH banner, fault ``extra-port``
port 8080 with an HTTP answer. Sockets a real node binds to 127.0.0.1, 127.0.0.53 or
169.254.116.108, and UDP sockets, exist only in Netstat: a TCP scan of the node's address
therefore finds exactly what it would find on a real node.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from pytest_talos.emulator.errors import ListenerError
from pytest_talos.emulator.latency import Latency
from pytest_talos.emulator.sockets import EXTRA_PORT, SSH_PORT, Listener

__all__ = ["ExtraListeners", "ListenerError"]

# Ports served by something richer than accept-and-close.
SERVED_ELSEWHERE = frozenset({50000, 6443})
_GREETINGS = {
    SSH_PORT: b"SSH-2.0-OpenSSH_9.6\r\n",
    EXTRA_PORT: (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
        b"Connection: close\r\n\r\nok\n"
    ),
}


ConnectionHandler = Callable[
    [asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]
]


class ExtraListeners:
    """Accept-and-close TCP listeners of one node."""

    def __init__(
        self, address: str, listeners: Iterable[Listener], latency: Latency | None = None
    ) -> None:
        self.address = address
        self._latency = latency or Latency()
        self.ports = sorted(
            {
                item.port
                for item in listeners
                if item.reachable and item.port not in SERVED_ELSEWHERE
            }
        )
        self._servers: list[asyncio.Server] = []

    async def start(self) -> None:
        for port in self.ports:
            greeting = _GREETINGS.get(port, b"")
            try:
                server = await asyncio.start_server(
                    _closer(greeting, self._latency), self.address, port, reuse_address=True
                )
            except OSError as exc:
                await self.stop()
                raise ListenerError(
                    exc.errno,
                    f"cannot listen on {self.address}:{port} ({exc.strerror}); ports below "
                    "1024 (fault ssh-open) need root or net.ipv4.ip_unprivileged_port_start=0",
                ) from None
            self._servers.append(server)

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)


def _closer(greeting: bytes, latency: Latency) -> ConnectionHandler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            if greeting:
                await latency.hop()  # the banner reaches the caller one round trip later
                writer.write(greeting)
                await writer.drain()
            writer.close()
            await writer.wait_closed()

    return handle
