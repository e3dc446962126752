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
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from grpclib.const import Handler
from grpclib.protocol import H2Protocol
from grpclib.server import Server

from pytest_talos.coalesce import CoalescingTransport
from pytest_talos.emulator.apid.latency import Latency
from pytest_talos.emulator.apid.tls import (
    certificate_expired,
    ext_key_usage_acceptable,
    ext_key_usage_lacks_server_auth,
    ignore_validity_period,
    trust_also,
)
from pytest_talos.emulator.faults import AuthenticationQuirk, Quirk
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

    lax_eku: Callable[[], bool]  # AuthenticationQuirk.APID_SKIPS_EKU_RULE
    latency: Latency = field(default_factory=Latency)  # a new connection's set-up round trips
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
    """``cluster.ca.crt`` of a machine config (base64 PEM), for the quirk
    AuthenticationQuirk.APID_TRUSTS_KUBERNETES_CA."""
    for doc in yaml.safe_load_all(config):
        cluster = doc.get("cluster") if isinstance(doc, dict) else None
        ca = cluster.get("ca") if isinstance(cluster, dict) else None
        crt = ca.get("crt") if isinstance(ca, dict) else None
        if isinstance(crt, str) and crt:
            with contextlib.suppress(ValueError):
                return base64.b64decode(crt)
    return None


# The node's quirks by its listener's SSL context (filed by apply_tls_faults): the rules a
# connection's certificate meets after the handshake depend on some of them.
_NODE_QUIRKS: weakref.WeakKeyDictionary[ssl.SSLContext, Callable[[Quirk], bool]] = (
    weakref.WeakKeyDictionary()
)


def apply_tls_faults(tls: ssl.SSLContext, quirk: Callable[[Quirk], bool], config: bytes) -> None:
    """Faults of apid's client-certificate verification (healthy apid: Go crypto/tls with
    the Talos OS CA as the only client CA, internal/app/apid/pkg/provider/provider.go)."""
    _NODE_QUIRKS[tls] = quirk
    if quirk(AuthenticationQuirk.APID_IGNORES_CERT_VALIDITY) or quirk(
        AuthenticationQuirk.APID_IGNORES_NOT_BEFORE
    ):
        ignore_validity_period(tls)  # NotAfter alone is then judged after the handshake
    if quirk(AuthenticationQuirk.APID_TRUSTS_KUBERNETES_CA):
        kube_ca = _kubernetes_ca_pem(config)
        if kube_ca is not None:
            trust_also(tls, kube_ca)


def _no_quirk(_quirk: Quirk) -> bool:
    return False


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
        quirk = _NODE_QUIRKS.get(ssl_object.context) if ssl_object is not None else None
        if not self._acceptable(der, quirk or _no_quirk):
            self._refused = True
            transport.abort()
            return
        self._refused = False
        self._transport = transport
        self._peer = transport.get_extra_info("peername")
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        self.book.transports.add(transport)
        self.book.peers[self._peer] = certificate_identity(cert)
        # apid sends the frames ready together at once (grpc-go v1.82.1 controlbuf.go)
        super().connection_made(CoalescingTransport(transport, asyncio.get_running_loop()))
        self.book.latency.hold(transport)

    def _acceptable(self, der: bytes | None, quirk: Callable[[Quirk], bool]) -> bool:
        """apid's ``verifyExtKeyUsage`` (or a fault's weaker rule), and for fault
        ``not-yet-valid-certs-accepted`` the NotAfter check its TLS no longer makes."""
        if not self.book.lax_eku():
            weak = quirk(AuthenticationQuirk.APID_EKU_RULE_ONLY_REFUSES_SERVER_AUTH)
            rule = ext_key_usage_lacks_server_auth if weak else ext_key_usage_acceptable
            if not rule(der):
                return False
        only_not_after = quirk(AuthenticationQuirk.APID_IGNORES_NOT_BEFORE)
        return not (
            only_not_after
            and not quirk(AuthenticationQuirk.APID_IGNORES_CERT_VALIDITY)
            and certificate_expired(der)
        )

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
