"""HTTP/1.1 for the emulated API server: TLS context and one connection's requests and replies.

The protocol itself (request parsing, keep-alive, chunked framing) is h11's; this module only
turns h11's events into the few things the server needs: the next GET, a JSON reply and a
chunked stream of watch events.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import h11

from pytest_talos.emulator.kubeapi.objects import Object
from pytest_talos.keyfile import load_chain

_MAX_BODY = 1 << 20  # request bodies are read and dropped (the server is read-only)
_READ_SIZE = 64 * 1024
_COMMON_HEADERS = [("Cache-Control", "no-cache, private"), ("Content-Type", "application/json")]


class BadRequest(Exception):
    pass


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]


def status_object(code: int, message: str, reason: str, details: Object | None = None) -> Object:
    status: Object = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        status["details"] = details
    return status


def server_ssl_context(*, cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes) -> ssl.SSLContext:
    """A TLS server context that requires a client certificate signed by ``client_ca_pem``.

    The key is loaded by the one in-memory loader, :func:`pytest_talos.keyfile.load_chain`.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=client_ca_pem.decode("ascii"))
    context.set_alpn_protocols(["http/1.1"])  # no HTTP/2 here: Go clients must not try it
    load_chain(context, cert_pem, key_pem, name="kubeapi-server-cert")
    return context


class Connection:
    """One client connection: requests in, replies out, keep-alive decided by h11."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._h11 = h11.Connection(h11.SERVER)

    async def next_request(self) -> Request | None:
        """The next request with its body read and dropped; ``None`` once the client is gone.

        A request h11 cannot parse, or one with a body over 1 MiB, raises :class:`BadRequest`.
        """
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
        event = await self._next_event()
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not isinstance(event, h11.Request):
            raise BadRequest(f"expected a request, got {type(event).__name__}")
        await self._drop_body()
        split = urlsplit(event.target.decode("latin-1"))
        query = {key: values[-1] for key, values in parse_qs(split.query).items()}
        return Request(event.method.decode("ascii").upper(), unquote(split.path), query)

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may serve another request after the current reply."""
        return self._h11.our_state is not h11.MUST_CLOSE and self._h11.their_state not in (
            h11.MUST_CLOSE,
            h11.CLOSED,
            h11.ERROR,
        )

    @property
    def can_reply(self) -> bool:
        """Whether a reply may still be sent for the current (perhaps unparseable) request."""
        return self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE)

    async def send_json(self, code: int, body: Object) -> None:
        payload = json.dumps(body).encode("utf-8")
        headers = [*_COMMON_HEADERS, ("Content-Length", str(len(payload)))]
        self._send(h11.Response(status_code=code, headers=headers))
        self._send(h11.Data(data=payload))
        self._send(h11.EndOfMessage())
        await self._writer.drain()

    def start_stream(self, code: int) -> None:
        """Begin a chunked reply; :meth:`send_chunks` adds to it and :meth:`end_stream` ends it."""
        headers = [*_COMMON_HEADERS, ("Transfer-Encoding", "chunked")]
        self._send(h11.Response(status_code=code, headers=headers))

    async def send_chunks(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self._send(h11.Data(data=chunk))
        await self._writer.drain()

    async def end_stream(self) -> None:
        self._send(h11.EndOfMessage())
        await self._writer.drain()

    def _send(self, event: h11.Event) -> None:
        data = self._h11.send(event)
        if data:
            self._writer.write(data)

    async def _next_event(self) -> h11.Event:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise BadRequest(f"malformed request: {exc}") from None
            if event is h11.NEED_DATA:
                self._h11.receive_data(await self._reader.read(_READ_SIZE))
            elif event is h11.PAUSED:  # not reached: a cycle ends before the next request
                raise BadRequest("request received before the previous reply ended")
            else:
                assert isinstance(event, h11.Event)
                return event

    async def _drop_body(self) -> None:
        received = 0
        while True:
            event = await self._next_event()
            if isinstance(event, h11.EndOfMessage):
                return
            if isinstance(event, h11.ConnectionClosed):
                raise BadRequest("connection closed inside a request body")
            if isinstance(event, h11.Data):
                received += len(event.data)
                if received > _MAX_BODY:
                    raise BadRequest("request body too large")
