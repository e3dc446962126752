"""A grpclib channel that connects in explicit phases and remembers how it went."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from grpclib.client import Channel, Handler
from grpclib.config import Configuration
from grpclib.protocol import H2Protocol

from pytest_talos.coalesce import CoalescingTransport
from pytest_talos.errors import ConnectError
from pytest_talos.talos_api import join_host_port
from pytest_talos.transport._errors import (
    ConnectPhase,
    connect_failure,
    not_talos_message,
)


@dataclass
class Session:
    """What one TCP+TLS connection went through (for error classification and closing)."""

    server_spoke: bool = False
    lost_error: BaseException | None = None
    transport: asyncio.Transport | None = None
    peer_certificate: bytes | None = None  # DER of the server's leaf certificate
    lost: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_closed(self, grace: float) -> None:
        """Give the TLS close a moment to finish, then cut the connection."""
        if self.transport is None:
            return
        try:
            await asyncio.wait_for(self.lost.wait(), grace)
        except TimeoutError:
            self.transport.abort()
            await asyncio.sleep(0)  # let asyncio release the socket


class _TrackingProtocol(H2Protocol):
    """grpclib's HTTP/2 protocol, noting whether the server ever spoke and why it hung up."""

    def __init__(self, session: Session, *args: Any) -> None:
        super().__init__(*args)
        self._session = session

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tls = cast(asyncio.Transport, transport)
        self._session.transport = tls
        # grpclib writes frame by frame; a loop turn's frames go out as one TLS record
        super().connection_made(CoalescingTransport(tls, asyncio.get_running_loop()))

    def data_received(self, data: bytes) -> None:
        self._session.server_spoke = True
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._session.lost_error = exc
        self._session.lost.set()
        super().connection_lost(exc)


class TalosChannel(Channel):
    """A grpclib channel that connects in explicit phases so failures can be explained.

    grpclib hands host, port and TLS to one ``create_connection`` call; splitting DNS,
    TCP and TLS tells "refused" from "not TLS" from "handshake stalled".
    """

    def __init__(
        self, host: str, port: int, ssl_context: ssl.SSLContext, server_hostname: str | None
    ) -> None:
        config = Configuration(ssl_target_name_override=server_hostname)
        super().__init__(host, port, ssl=ssl_context, config=config)
        self._tls = ssl_context
        self._server_name = server_hostname or host
        self.phase: ConnectPhase = "idle"
        self.session = Session(server_spoke=True)

    async def _create_connection(self) -> H2Protocol:
        loop = asyncio.get_running_loop()
        host, port = self._host, self._port
        self.phase = "resolve"
        try:
            infos = await resolve(host, port)
            self.phase = "tcp"
            sock = await _connect_any(loop, infos, self._connected_too_late)
            self.phase = "tls"
            protocol = await self._handshake(loop, sock)
        except (OSError, EOFError) as exc:  # ssl.SSLError and socket.gaierror are OSErrors
            raise connect_failure(
                exc, host, port, self.phase, server_name=self._server_name
            ) from None
        self.phase = "ready"
        return protocol

    def _connected_too_late(self) -> None:
        self.phase = "connected"

    async def _handshake(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> H2Protocol:
        session = Session()
        try:
            transport, protocol = await loop.create_connection(
                lambda: _TrackingProtocol(session, Handler(), self._config, self._h2_config),
                sock=sock,
                ssl=self._tls,
                server_hostname=self._server_name,
            )
        except (OSError, EOFError):
            await asyncio.sleep(0)  # let asyncio finish closing its half-built transport
            sock.close()
            raise
        except BaseException:
            sock.close()
            raise
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if ssl_object is not None:
            session.peer_certificate = ssl_object.getpeercert(binary_form=True)
        if alpn != "h2":  # grpc-go servers such as apid always negotiate h2 by ALPN
            transport.close()
            endpoint = join_host_port(self._host, self._port)
            offered = f"offers {alpn!r}" if alpn else "negotiates no application protocol"
            raise ConnectError(not_talos_message(endpoint, f"it speaks TLS but {offered}"))
        self.session = session
        return protocol


async def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
    """``getaddrinfo`` that never holds up Ctrl-C or the process's exit.

    An address literal resolves at once. A name is looked up on a daemon thread of its own,
    not on the loop's default executor: when the call's deadline passes first, the thread is
    simply left behind, whereas the interpreter joins executor threads at exit, so a blocked
    lookup (30 s of resolver retries) would hold the process long after the deadline.
    """
    with contextlib.suppress(socket.gaierror):
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    loop = asyncio.get_running_loop()
    found: asyncio.Future[list[tuple[Any, ...]]] = loop.create_future()

    def lookup() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (
                socket.getaddrinfo(host, port, type=socket.SOCK_STREAM),
                None,
            )
        except Exception as exc:  # a gaierror, or anything the resolver raised
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, found, outcome)

    threading.Thread(target=lookup, name=f"pytest-talos resolve {host}", daemon=True).start()
    return await found


def _settle(found: asyncio.Future[Any], outcome: tuple[Any, BaseException | None]) -> None:
    if found.done():  # the deadline or a Ctrl-C cancelled the wait
        return
    result, error = outcome
    if error is not None:
        found.set_exception(error)
    else:
        found.set_result(result)


async def _connect_any(
    loop: asyncio.AbstractEventLoop,
    infos: Sequence[tuple[Any, ...]],
    connected_too_late: Callable[[], None],
) -> socket.socket:
    """Connect to the first address that accepts; re-raise the first failure otherwise.

    Cancelled (the call's deadline) while the kernel had in fact connected the socket, the
    loop just had not run since: ``connected_too_late`` is called, so that the deadline's
    message blames this busy process, not the network.
    """
    first_error: OSError | None = None
    for family, type_, proto, _, address in infos:
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            first_error = first_error or exc
            continue
        except BaseException:
            if _peer_connected(sock):
                connected_too_late()
            sock.close()
            raise
        return sock
    raise first_error or OSError("no address to connect to")


def _peer_connected(sock: socket.socket) -> bool:
    """Whether the kernel has finished the socket's TCP handshake (it has a peer)."""
    try:
        sock.getpeername()
    except OSError:  # ENOTCONN: still connecting, or it failed
        return False
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
