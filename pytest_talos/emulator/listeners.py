"""The real TCP sockets of an emulated node, opened on its own loopback address.

apid (50000) is :mod:`.server` and the Kubernetes API (6443) is :mod:`.kubeapi`; the other
reachable sockets of :func:`.sockets.listeners_for` (trustd 50001, etcd 2379/2380, kubelet
10250, kube-proxy's healthz 10256 unless ``cluster.proxy.disabled``) accept a TCP connection
and close it. Fault ``ssh-open`` adds port 22 with an OpenSSH banner, fault ``extra-port``
port 8080 with an HTTP answer. Sockets a real node binds to 127.0.0.1, 127.0.0.53 or
169.254.116.108, and UDP sockets, exist only in Netstat: a TCP scan of the node's address
therefore finds exactly what it would find on a real node.

Beside a local Kubernetes (k3s, a kubelet on the host) something listens on 10250 or 6443 on
every address (``0.0.0.0`` or ``[::]``), and Linux then lets no one listen on that port on
any single address: a node's accept-and-close listener whose port such a program already
answers on the node's address is left out (the port is open there all the same, which is
all those sockets are for); a port the node must serve itself (apid, the Kubernetes API, a
fault's greeting) stops the start with one paragraph naming the port and what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random
import socket
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from pytest_talos.emulator.errors import CannotListen, ListenerError
from pytest_talos.emulator.sockets import EXTRA_PORT, SSH_PORT, Listener

__all__ = [
    "SERVED_PORTS",
    "ExtraListeners",
    "ListenerError",
    "answers_elsewhere",
    "cannot_listen",
    "check_served_ports",
]

# Ports served by something richer than accept-and-close.
SERVED_ELSEWHERE = frozenset({50000, 6443})
# What every node (apid) or every control plane (the Kubernetes API) must serve itself.
SERVED_PORTS = ((50000, "apid"), (6443, "kube-apiserver"))
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

    def __init__(self, address: str, listeners: Iterable[Listener]) -> None:
        self.address = address
        self.ports = sorted(
            {
                item.port
                for item in listeners
                if item.reachable and item.port not in SERVED_ELSEWHERE
            }
        )
        self._servers: list[asyncio.Server] = []
        # Ports another program's wildcard listener answers on this address (module docs).
        self.answered_elsewhere: list[int] = []

    async def start(self) -> None:
        self.answered_elsewhere = []
        for port in self.ports:
            greeting = _GREETINGS.get(port, b"")
            try:
                server = await asyncio.start_server(
                    _closer(greeting), self.address, port, reuse_address=True
                )
            except OSError as exc:
                if not greeting and await answers_elsewhere(exc, self.address, port):
                    self.answered_elsewhere.append(port)
                    continue
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


async def answers_elsewhere(exc: OSError, address: str, port: int) -> bool:
    """Whether ``address:port`` is taken (``exc``) by a program that accepts connections
    on it: a listener on every address, since the node's own address is new."""
    if exc.errno != errno.EADDRINUSE:
        return False
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), 2.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 2.0)
    return True


def cannot_listen(
    exc: OSError, address: str, port: int, what: str = "", *, everywhere: bool = False
) -> ListenerError:
    """One paragraph: which port of the node could not be opened, why, and what to do.
    ``everywhere``: ``address`` was an unused loopback address (a wildcard listener)."""
    served = f" ({what})" if what else ""
    if exc.errno == errno.EADDRINUSE:
        holder = (
            f"another program listens on 0.0.0.0:{port} or [::]:{port}, so no emulated node "
            f"can serve port {port} on its own loopback address"
            if everywhere
            else f"another program listens on it on every address (0.0.0.0:{port} or "
            f"[::]:{port}) or on the node's address, so the node cannot serve {address}:{port}"
        )
        text = (
            f"port {port}{served} is taken: {holder} as a real node does. A local Kubernetes "
            "(k3s, a kubelet on this host) listens on 6443 and 10250 this way "
            f"(`ss -ltnp 'sport = :{port}'` shows which program). Stop that program, or run "
            "the emulator in a network namespace of its own, where nothing else listens: "
            "unshare --net --map-root-user sh -c 'ip link set lo up && talos-emulator ...' "
            "(the same for pytest ... --talos-emulator)"
        )
    elif exc.errno == errno.EACCES and port < 1024:
        text = (
            f"cannot listen on {address}:{port}{served}: ports below 1024 (fault ssh-open) "
            "need root or net.ipv4.ip_unprivileged_port_start=0"
        )
    else:
        text = f"cannot listen on {address}:{port}{served} ({exc.strerror or exc})"
    return ListenerError(exc.errno or errno.EADDRINUSE, text)


def check_served_ports(probe_address: str | None = None) -> None:
    """Raise :class:`CannotListen` (one paragraph) when a port of :data:`SERVED_PORTS` is
    taken on every address: binding it on an unused loopback address fails."""
    address = probe_address or f"127.{random.randint(16, 254)}.{random.randint(0, 255)}.250"
    for port, what in SERVED_PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    reason = cannot_listen(exc, address, port, what, everywhere=True).strerror
                    raise CannotListen(f"cannot start the emulated cluster: {reason}") from None


def _closer(greeting: bytes) -> ConnectionHandler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            if greeting:
                writer.write(greeting)
                await writer.drain()
            writer.close()
            await writer.wait_closed()

    return handle
