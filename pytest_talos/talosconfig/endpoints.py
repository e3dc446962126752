"""Endpoint normalization: ``host[:port]``, ``[ipv6]:port``, ``https://host[:port]``."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from pytest_talos.errors import ConfigError
from pytest_talos.talos_api import APID_PORT, split_host_port

DEFAULT_API_PORT = APID_PORT
_HTTPS_PORT = 443
_HOSTNAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)
_ENDPOINT_FORMS = "use host, host:port, [ipv6]:port or https://host[:port]"


class _BadEndpoint(ValueError):
    pass


def _parse_port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _BadEndpoint(f"port {text!r} is not a number between 1 and 65535")
    return int(text)


def _parse_ipv6(text: str) -> str:
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        raise _BadEndpoint(f"{text!r} is not a valid IPv6 address") from None


def _check_host(host: str) -> str:
    if not host:
        raise _BadEndpoint("the host is empty")
    if re.fullmatch(r"[0-9.]+", host):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise _BadEndpoint(f"{host!r} is not a valid IPv4 address") from None
    if not _HOSTNAME.fullmatch(host):
        raise _BadEndpoint(f"{host!r} is not a valid host name")
    return host


def _host_port(text: str, default_port: int) -> str:
    try:
        host, port_text = split_host_port(text)
    except ValueError as exc:
        raise _BadEndpoint(str(exc)) from None
    port = _parse_port(port_text) if port_text is not None else default_port
    if text.startswith("[") or ":" in host:  # bracketed, or a bare IPv6 address (no port)
        return f"[{_parse_ipv6(host)}]:{port}"
    return f"{_check_host(host)}:{port}"


def _from_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme.lower() != "https":
        raise _BadEndpoint(f"scheme {parts.scheme!r} is not supported (only https://)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise _BadEndpoint("a URL endpoint may hold only https://host[:port]")
    return _host_port(parts.netloc, _HTTPS_PORT)


def _normalize(text: str) -> str:
    text = text.strip()
    if not text:
        raise _BadEndpoint("it is empty")
    return _from_url(text) if "://" in text else _host_port(text, DEFAULT_API_PORT)


def normalize_endpoint(text: str, *, path: str | None = None, key: str | None = None) -> str:
    """``host[:port]`` with the default port 50000, IPv6 in brackets, ``https://h`` -> ``h:443``."""
    try:
        return _normalize(text)
    except _BadEndpoint as exc:
        reason = str(exc)
    raise ConfigError(
        f"{text!r} is not a valid endpoint: {reason}; {_ENDPOINT_FORMS}", path=path, key=key
    )
