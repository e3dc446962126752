"""One Talos API endpoint, parsed once where its text enters: :class:`Endpoint`.

A leaf: it imports only :mod:`pytest_talos.errors` and :mod:`pytest_talos.talos_api`, so
the talosconfig loader, the transport and the client share one parser and one value.
The text forms are those talosctl accepts::

    host                ->  host:50000          (a name or an IPv4 address)
    host:port           ->  host:port
    fd00::2, [fd00::2]  ->  [fd00::2]:50000     (IPv6, brackets optional without a port)
    [fd00::2]:port      ->  [fd00::2]:port
    https://host[:port] ->  host:443 / host:port
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from pytest_talos.errors import ConfigError
from pytest_talos.talos_api import APID_PORT, join_host_port, split_host_port

__all__ = ["DEFAULT_API_PORT", "Endpoint"]

DEFAULT_API_PORT = APID_PORT
_HTTPS_PORT = 443
_HOSTNAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)
_ENDPOINT_FORMS = "use host, host:port, [ipv6]:port or https://host[:port]"


class _BadEndpoint(ValueError):
    pass


@dataclass(frozen=True)
class Endpoint:
    """Where apid listens: ``host`` (a name, an IPv4 or a bare IPv6 address) and ``port``.

    ``server_name`` is the name the TLS handshake verifies instead of ``host`` (None: the
    host itself), for an endpoint reached by an address its certificate does not name.
    ``str()`` gives ``host:port`` with an IPv6 address in brackets.
    """

    host: str
    port: int = DEFAULT_API_PORT
    server_name: str | None = None

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        server_name: str | None = None,
        path: str | None = None,
        key: str | None = None,
    ) -> Endpoint:
        """The endpoint ``text`` names (see the module docstring for the forms).

        Bad text is a :class:`~pytest_talos.errors.ConfigError` that quotes it, says what is
        wrong and lists the accepted forms; ``path`` and ``key`` name where it was read.
        """
        try:
            host, port = _parse(text)
        except _BadEndpoint as exc:
            reason = str(exc)
        else:
            return cls(host, port, server_name)
        raise ConfigError(
            f"{text!r} is not a valid endpoint: {reason}; {_ENDPOINT_FORMS}", path=path, key=key
        )

    @property
    def address(self) -> str:
        """``host:port``, IPv6 in brackets: the form talosctl prints."""
        return join_host_port(self.host, self.port)

    def __str__(self) -> str:
        return self.address


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


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    try:
        host, port_text = split_host_port(text)
    except ValueError as exc:
        raise _BadEndpoint(str(exc)) from None
    port = _parse_port(port_text) if port_text is not None else default_port
    if text.startswith("[") or ":" in host:  # bracketed, or a bare IPv6 address (no port)
        return _parse_ipv6(host), port
    return _check_host(host), port


def _from_url(text: str) -> tuple[str, int]:
    parts = urlsplit(text)
    if parts.scheme.lower() != "https":
        raise _BadEndpoint(f"scheme {parts.scheme!r} is not supported (only https://)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise _BadEndpoint("a URL endpoint may hold only https://host[:port]")
    return _host_port(parts.netloc, _HTTPS_PORT)


def _parse(text: str) -> tuple[str, int]:
    text = text.strip()
    if not text:
        raise _BadEndpoint("it is empty")
    return _from_url(text) if "://" in text else _host_port(text, DEFAULT_API_PORT)
