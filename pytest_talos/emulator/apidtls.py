"""apid's client authentication on an emulated node: who a connection's certificate says the
caller is, and the TLS rules apid adds to Go's handshake.

Right after the handshake the leaf certificate's ExtKeyUsage must be exactly ``[ClientAuth]``
(apid's ``verifyExtKeyUsage``), otherwise the connection is dropped; roles come from the
certificate's Organization (``internal/app/apid/pkg/provider/provider.go``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from grpclib.const import Handler
from grpclib.protocol import H2Protocol
from grpclib.server import Server

from pytest_talos.emulator.faults import Quirk
from pytest_talos.emulator.tls import (
    ext_key_usage_acceptable,
    ignore_validity_period,
    trust_also,
)
from pytest_talos.talos_api import ADMIN

__all__ = [
    "CheckedServer",
    "Identity",
    "PeerBook",
    "apply_tls_faults",
    "certificate_identity",
]


@dataclass(frozen=True)
class Identity:
    roles: frozenset[str]
    serial: str
    forwarded: bool


@dataclass
class PeerBook:
    """The open connections of one apid and the identity each one's certificate gave."""

    lax_eku: Callable[[], bool]  # Quirk.APID_SKIPS_EKU_RULE
    transports: set[asyncio.Transport] = field(default_factory=set)
    peers: dict[Any, Identity] = field(default_factory=dict)

    def clear(self) -> None:
        """Close every open connection."""
        for transport in list(self.transports):
            transport.abort()
        self.transports.clear()
        self.peers.clear()


def _normal_serial(text: str) -> str:
    """Lower-case hex without leading zeros (``getpeercert`` pads to whole bytes)."""
    try:
        return format(int(text, 16), "x")
    except ValueError:
        return text.lower()


def certificate_identity(cert: Mapping[str, Any] | None) -> Identity:
    """Roles (Organization values) and serial of a verified client certificate."""
    if not cert:  # only possible when client certificates are optional
        return Identity(frozenset({ADMIN}), "", False)
    roles = frozenset(
        value
        for rdn in cert.get("subject", ())
        for key, value in rdn
        if key == "organizationName" and value
    )
    return Identity(roles, _normal_serial(str(cert.get("serialNumber", ""))), False)


def _kubernetes_ca_pem(config: bytes) -> bytes | None:
    """``cluster.ca.crt`` of a machine config (base64 PEM), for Quirk.APID_TRUSTS_KUBERNETES_CA."""
    for doc in yaml.safe_load_all(config):
        cluster = doc.get("cluster") if isinstance(doc, dict) else None
        ca = cluster.get("ca") if isinstance(cluster, dict) else None
        crt = ca.get("crt") if isinstance(ca, dict) else None
        if isinstance(crt, str) and crt:
            with contextlib.suppress(ValueError):
                return base64.b64decode(crt)
    return None


def apply_tls_faults(tls: ssl.SSLContext, quirk: Callable[[Quirk], bool], config: bytes) -> None:
    """Faults of apid's client-certificate verification (healthy apid: Go crypto/tls with
    the Talos OS CA as the only client CA, internal/app/apid/pkg/provider/provider.go)."""
    if quirk(Quirk.APID_IGNORES_CERT_VALIDITY):
        ignore_validity_period(tls)
    if quirk(Quirk.APID_TRUSTS_KUBERNETES_CA):
        kube_ca = _kubernetes_ca_pem(config)
        if kube_ca is not None:
            trust_also(tls, kube_ca)


class _CheckedProtocol(H2Protocol):
    """grpclib's HTTP/2 protocol, refusing clients whose certificate EKU apid rejects.

    It also reads the client certificate once per connection (roles, serial) and files it
    under the peer address in the :class:`PeerBook`, where the server finds it for each call.
    """

    book: PeerBook

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not self.book.lax_eku() and not ext_key_usage_acceptable(der):
            self._refused = True
            transport.abort()
            return
        self._refused = False
        self._transport = transport
        self._peer = transport.get_extra_info("peername")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        self.book.transports.add(transport)
        self.book.peers[self._peer] = certificate_identity(cert)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not getattr(self, "_refused", True):
            super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if getattr(self, "_refused", True):
            return
        self.book.transports.discard(self._transport)
        self.book.peers.pop(self._peer, None)
        super().connection_lost(exc)


class _Routes:
    def __init__(self, mapping: dict[str, Handler]) -> None:
        self._mapping = mapping

    def __mapping__(self) -> dict[str, Handler]:
        return self._mapping


class CheckedServer(Server):
    """A grpclib server whose connections go through apid's certificate rules."""

    def __init__(self, book: PeerBook, mapping: Mapping[str, Handler]) -> None:
        self._book = book
        super().__init__([_Routes(dict(mapping))])

    def _protocol_factory(self) -> H2Protocol:
        base = super()._protocol_factory()
        protocol = _CheckedProtocol(base.handler, base.config, base.h2_config)
        protocol.book = self._book
        return protocol
