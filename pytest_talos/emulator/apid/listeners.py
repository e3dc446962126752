"""The real TCP sockets of an emulated node, opened on its own loopback address.

apid (50000) is :mod:`.server` and the Kubernetes API (6443) is :mod:`..kubeapi`; the other
reachable sockets of :func:`~..node.host.sockets.listeners_for` (trustd 50001, etcd 2379/2380,
kubelet 10250, kube-proxy's healthz 10256 unless ``cluster.proxy.disabled``) accept a TCP connection
and close it. Fault ``ssh-open`` adds port 22 with an OpenSSH banner, fault ``extra-port``
port 8080 with an HTTP answer. Sockets a real node binds to 127.0.0.1, 127.0.0.53 or
169.254.116.108, and UDP sockets, exist only in Netstat: a TCP scan of the node's address
therefore finds exactly what it would find on a real node.

Beside a local Kubernetes (k3s, a kubelet on the host) something listens on 10250 or 6443 on
every address (``0.0.0.0`` or ``[::]``), and Linux then lets no one listen on that port on
any single address. The node cannot leave such a port to the other program: the kit's scanner
subtracts what answers on the cluster's vacant address (a host's wildcard listener), so the
node's port would read as closed and a check would fail a healthy node. The start stops
first, with one paragraph naming every taken port and what to do (:func:`check_served_ports`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random
import socket
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from pytest_talos.emulator.apid.latency import Latency
from pytest_talos.emulator.errors import CannotListen, ListenerError
from pytest_talos.emulator.node.host.sockets import EXTRA_PORT, SSH_PORT, Listener

__all__ = [
    "SERVED_PORTS",
    "ExtraListeners",
    "ListenerError",
    "cannot_listen",
    "check_served_ports",
]

# Ports served by something richer than accept-and-close.
SERVED_ELSEWHERE = frozenset({50000, 6443})
# The TCP ports a node serves on its own address (sockets.listeners_for), kube-proxy's included.
SERVED_PORTS = (
    (50000, "apid"),
    (50001, "trustd"),
    (6443, "kube-apiserver"),
    (2379, "etcd"),
    (2380, "etcd peers"),
    (10250, "kubelet"),
    (10256, "kube-proxy healthz"),
)
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
                raise cannot_listen(exc, self.address, port) from None
            self._servers.append(server)

    async def stop(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)


def _taken_text(ports: Sequence[tuple[int, str]], where: str) -> str:
    named = ", ".join(f"{port} ({what})" if what else str(port) for port, what in ports)
    first = ports[0][0]
    plural = len(ports) > 1
    return (
        f"{'ports' if plural else 'port'} {named} {'are' if plural else 'is'} taken: another "
        f"program listens on {'them' if plural else 'it'} {where}, so the emulated nodes "
        f"cannot serve {'them' if plural else 'it'} on their own loopback addresses as real "
        "nodes do. A local Kubernetes (k3s, a kubelet on this host) listens on 6443 and 10250 "
        f"this way (`ss -ltnp 'sport = :{first}'` shows which program). Stop that program, or "
        "run the emulator in a network namespace of its own, where nothing else listens: "
        "unshare --net --map-root-user sh -c 'ip link set lo up && talos-emulator ...' "
        "(the same for talos-conformance or pytest with --talos-emulator)"
    )


def cannot_listen(exc: OSError, address: str, port: int, what: str = "") -> ListenerError:
    """One paragraph: which port of the node could not be opened, why, and what to do."""
    served = f" ({what})" if what else ""
    if exc.errno == errno.EADDRINUSE:
        text = _taken_text([(port, what)], f"on every address or on {address}")
    elif exc.errno == errno.EACCES and port < 1024:
        text = (
            f"cannot listen on {address}:{port}{served}: ports below 1024 (fault ssh-open) "
            "need root or net.ipv4.ip_unprivileged_port_start=0"
        )
    else:
        text = f"cannot listen on {address}:{port}{served} ({exc.strerror or exc})"
    return ListenerError(exc.errno or errno.EADDRINUSE, text)


def check_served_ports(probe_address: str | None = None) -> None:
    """Raise :class:`CannotListen` (one paragraph naming them all) when ports of
    :data:`SERVED_PORTS` are taken on every address: binding them on an unused loopback
    address fails."""
    address = probe_address or f"127.{random.randint(16, 254)}.{random.randint(0, 255)}.250"
    taken = []
    for port, what in SERVED_PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    taken.append((port, what))
    if taken:
        where = "on every address (" + ", ".join(f"0.0.0.0:{p}" for p, _ in taken) + " or [::])"
        reason = _taken_text(taken, where)
        raise CannotListen(f"cannot start the emulated cluster: {reason}")


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
