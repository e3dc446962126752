"""Fixtures for the client integration tests: the emulated Talos cluster
(``emulated_cluster``) every client test talks to over real Ed25519 mutual TLS, client
certificates issued from its CA per session, and misbehaving endpoints (silent, refusing,
plain text).

Everything listens on 127.0.0.0/8 only. No key is ever written except inside the
talosconfig files under the session's tmp directory (mode 0600).
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.pki import CertAndKey, CertificateAuthority, issue_client_cert

# A TEST-NET-1 address (RFC 5737): apid cannot dial it, as a node that is down.
DOWN_NODE = "192.0.2.13"
# The emulated cluster's clock runs 20x: a 4 s try-mode window lasts 0.2 s, a 5 s reboot 0.25 s.
EMULATOR_TIME_SCALE = 20.0


@dataclass(frozen=True)
class Pki:
    """Client certificates for the emulated cluster (and one from a CA it does not know)."""

    ca: CertificateAuthority
    admin: CertAndKey
    reader: CertAndKey
    operator: CertAndKey
    expired: CertAndKey
    foreign_ca: CertificateAuthority
    foreign_admin: CertAndKey  # issued by foreign_ca


@pytest.fixture(scope="session")
def pki(emulated_cluster: EmulatedCluster) -> Pki:
    ca = emulated_cluster.ca
    foreign_ca = CertificateAuthority.generate()
    now = dt.datetime.now(dt.UTC)
    return Pki(
        ca=ca,
        admin=issue_client_cert(ca, roles=["os:admin"]),
        reader=issue_client_cert(ca, roles=["os:reader"]),
        operator=issue_client_cert(ca, roles=["os:operator"]),
        expired=issue_client_cert(
            ca,
            roles=["os:admin"],
            not_before=now - dt.timedelta(days=30),
            not_after=now - dt.timedelta(days=1),
        ),
        foreign_ca=foreign_ca,
        foreign_admin=issue_client_cert(foreign_ca, roles=["os:admin"]),
    )


MakeClient = Callable[..., TalosClient]


@pytest.fixture
def make_client(pki: Pki) -> Iterator[MakeClient]:
    """``make_client(endpoint, cert=pki.admin, ca_pem=pki.ca.cert_pem, **options)``."""
    made: list[TalosClient] = []

    def make(
        endpoint: str,
        cert: CertAndKey | None = None,
        ca_pem: bytes | None = None,
        **options: object,
    ) -> TalosClient:
        chosen = cert or pki.admin
        talos = TalosClient(
            endpoint,
            ca_pem or pki.ca.cert_pem,
            chosen.cert_pem,
            chosen.key_pem_talos,
            **options,  # type: ignore[arg-type]
        )
        made.append(talos)
        return talos

    yield make
    for talos in made:
        talos.close()


# --------------------------------------------------------------------------- bad endpoints


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """Completes the TCP handshake (kernel backlog) and never says a word."""
    with socket.create_server(("127.0.0.1", 0), backlog=8) as listener:
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def closed_port() -> str:
    """A port nothing listens on (connections are refused)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


class _PlainServer:
    """Answers every connection with plain-text HTTP/1.1 (no TLS) and hangs up."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()


@pytest.fixture
def plaintext_endpoint() -> Iterator[str]:
    server = _PlainServer()
    yield server.endpoint
    server.close()


# --------------------------------------------------------------------------- emulated cluster


@pytest.fixture(scope="session")
def emulated_cluster() -> Iterator[EmulatedCluster]:
    """One control plane and one worker on their own 127.x.y.0/24, Ed25519 mTLS, time sped up.

    Shared by the whole session: tests that change a node must leave it as they found it
    (see ``test_client_emulator_machine.py`` and ``test_client_emulator_resources.py``).
    """
    with EmulatedCluster(
        controlplanes=1, workers=1, time_scale=EMULATOR_TIME_SCALE, platform="container"
    ) as cluster:
        yield cluster
