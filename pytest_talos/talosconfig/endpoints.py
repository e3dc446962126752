"""Endpoint normalization for talosconfig values.

The parser is :class:`~pytest_talos.endpoint.Endpoint`, one level down, shared with the
transport and the client.
"""

from __future__ import annotations

from pytest_talos.endpoint import DEFAULT_API_PORT, Endpoint

__all__ = ["DEFAULT_API_PORT", "normalize_endpoint"]


def normalize_endpoint(text: str, *, path: str | None = None, key: str | None = None) -> str:
    """``host[:port]`` with the default port 50000, IPv6 in brackets, ``https://h`` -> ``h:443``."""
    return Endpoint.parse(text, path=path, key=key).address
