"""HTTP/1.1 for the emulated API server: TLS context, request reading, JSON and chunked replies."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

from pytest_talos.emulator.kubeapi.objects import Object
from pytest_talos.keyfile import load_chain

_MAX_HEADER_LINES = 100
_MAX_BODY = 1 << 20


class _BadRequest(Exception):
    pass


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    query: dict[str, str]
    keep_alive: bool


def _status(code: int, message: str, reason: str, details: Object | None = None) -> Object:
    status: Object = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
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



async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    line = await reader.readline()
    if not line:
        return None
    try:
        method, target, version = line.decode("latin-1").split()
    except ValueError:
        raise _BadRequest("malformed request line") from None
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADER_LINES):
        raw = (await reader.readline()).decode("latin-1").strip()
        if not raw:
            break
        name, _, value = raw.partition(":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise _BadRequest("too many header lines")
    await _skip_body(reader, headers)
    split = urlsplit(target)
    query = {key: values[-1] for key, values in parse_qs(split.query).items()}
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    return _Request(method.upper(), unquote(split.path), query, keep_alive)


async def _skip_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise _BadRequest("chunked request bodies are not supported")
    length = int(headers.get("content-length", "0") or 0)
    if length > _MAX_BODY:
        raise _BadRequest("request body too large")
    if length:
        await reader.readexactly(length)


def _head(code: int, extra: Sequence[tuple[str, str]], keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {code} {HTTPStatus(code).phrase}", "Cache-Control: no-cache, private",
             "Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in extra]
    lines.append(f"Connection: {'keep-alive' if keep_alive else 'close'}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send_json(
    writer: asyncio.StreamWriter, code: int, body: Object, keep_alive: bool
) -> None:
    payload = json.dumps(body).encode("utf-8")
    writer.write(_head(code, [("Content-Length", str(len(payload)))], keep_alive) + payload)
    await writer.drain()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n"
