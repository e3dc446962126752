"""What to scan: port specs (``1-1024,6443``) and the host, resolved once before the scan."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

from pytest_talos.errors import ConfigError, ConnectError

SockAddr: TypeAlias = tuple[str, int] | tuple[str, int, int, int]

MIN_PORT, MAX_PORT = 1, 65535
RESOLVE_TIMEOUT = 5.0


# --------------------------------------------------------------------------- port specs


def parse_ports(spec: str) -> list[int]:
    """Parse ``1-65535``, ``22,80,6443`` or ``1-1024,50000-50001`` into sorted unique ports.

    As in nmap, ``-1024`` means ``1-1024``, ``50000-`` means ``50000-65535`` and ``-`` alone
    means every port. Raises :class:`ConfigError` naming the token it could not read.
    """
    if not spec.strip():
        raise ConfigError(
            "the port list is empty; give ports like 22,80,6443 or ranges like 1-1024"
        )
    ports: set[int] = set()
    for raw_token in spec.split(","):
        first, last = _parse_port_token(raw_token.strip(), spec)
        ports.update(range(first, last + 1))
    return sorted(ports)


def _parse_port_token(token: str, spec: str) -> tuple[int, int]:
    if not token:
        _bad_token(token, spec, "an empty entry (two commas in a row, or a trailing comma)")
    if "-" not in token:
        port = _port_number(token, spec)
        return port, port
    low_text, _, high_text = token.partition("-")
    low = _port_number(low_text.strip(), spec) if low_text.strip() else MIN_PORT
    high = _port_number(high_text.strip(), spec) if high_text.strip() else MAX_PORT
    if low > high:
        _bad_token(token, spec, f"a range that runs backwards; write {high}-{low}")
    return low, high


def _port_number(text: str, spec: str) -> int:
    if not text.isascii() or not text.isdigit():
        _bad_token(text, spec, "not a port number")
    port = int(text)
    if not MIN_PORT <= port <= MAX_PORT:
        _bad_token(text, spec, f"outside {MIN_PORT}-{MAX_PORT}")
    return port


def _bad_token(token: str, spec: str, why: str) -> NoReturn:
    raise ConfigError(
        f"bad port entry {token!r} in {spec!r}: {why}. "
        f"Use port numbers {MIN_PORT}-{MAX_PORT}, ranges like 1-1024, separated by commas"
    )


def normalise_ports(ports: str | Iterable[int]) -> list[int]:
    if isinstance(ports, str):
        return parse_ports(ports)
    unique: set[int] = set()
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int):
            raise ConfigError(f"bad port {port!r}: ports must be integers {MIN_PORT}-{MAX_PORT}")
        if not MIN_PORT <= port <= MAX_PORT:
            raise ConfigError(f"bad port {port}: outside {MIN_PORT}-{MAX_PORT}")
        unique.add(port)
    if not unique:
        raise ConfigError("no ports to scan; give at least one port")
    return sorted(unique)


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    family: socket.AddressFamily
    sockaddr: SockAddr

    @property
    def address(self) -> str:
        return self.sockaddr[0]

    def sockaddr_for(self, port: int) -> SockAddr:
        if len(self.sockaddr) == 4:
            return (self.sockaddr[0], port, self.sockaddr[2], self.sockaddr[3])
        return (self.sockaddr[0], port)


def _strip_brackets(host: str) -> str:
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1].strip()
    return host


async def resolve(host: str) -> Target:
    """Resolve ``host`` once; numeric addresses never touch the resolver."""
    name = _strip_brackets(host)
    if not name:
        raise ConfigError("no host given; give an IP address or a host name to scan")
    infos: Sequence[tuple[Any, ...]]
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        infos = await _resolve_name(name)
    for family, _type, _proto, _canon, sockaddr in infos:
        if family == socket.AF_INET:
            return Target(name, family, (str(sockaddr[0]), int(sockaddr[1])))
        if family == socket.AF_INET6:
            return Target(name, family, (str(sockaddr[0]), 0, sockaddr[2], sockaddr[3]))
    raise ConnectError(
        f"cannot resolve host {name!r}: it has no IPv4 or IPv6 address; "
        "check the name or give an IP address"
    )


async def _resolve_name(name: str) -> Sequence[tuple[Any, ...]]:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            return await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConnectError(
            f"cannot resolve host {name!r}: {exc.strerror}; check the name or give an IP address"
        ) from None
    except TimeoutError:
        raise ConnectError(
            f"cannot resolve host {name!r}: no answer within {RESOLVE_TIMEOUT:g}s; "
            "check the DNS setup or give an IP address"
        ) from None
