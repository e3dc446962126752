"""The transport over real TCP + mTLS on loopback, against the emulated cluster: targeting,
certificates, deadlines, failure mapping, talosconfig loading.

What the client sends (metadata) and how it converts replies is tested without a socket in
``tests/unit/test_fake_transport.py`` and ``tests/unit/test_client_*.py``; here only what
needs the wire: real handshakes, real refusals, real streams.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.client import Connection, TalosClient, TalosConfigWarning
from pytest_talos.client import _rpcs as rpcs
from pytest_talos.emulator import EmulatedCluster, NodeInfo
from pytest_talos.errors import (
    APIError,
    AuthenticationError,
    ConnectError,
    DeadlineExceeded,
    NodeError,
    PermissionDenied,
    TransportError,
    Unavailable,
    Unknown,
)
from pytest_talos.keyfile import load_chain
from pytest_talos.models import Version
from pytest_talos.pki import (
    CertificateAuthority,
    KeyType,
    issue_client_cert,
    issue_server_cert,
    write_talosconfig,
)
from pytest_talos.transport import Target, build_ssl_context, node_error
from tests.integration.conftest import DOWN_NODE, MakeClient, Pki
from tests.integration.emulator_support import (
    cp,
    cp_node,
    reader_path,
    talos,
    with_transport,
    worker,
    worker_node,
)

__all__ = ["cp", "cp_node", "reader_path", "talos", "worker", "worker_node"]

TALOS_TAG = "v1.13.9"


# --------------------------------------------------------------------------- happy paths


def test_ed25519_mtls_from_talosconfig(
    emulated_cluster: EmulatedCluster, cp_node: NodeInfo
) -> None:
    path = emulated_cluster.talosconfig_path
    with TalosClient.from_talosconfig(path, node=cp_node.address, env={}) as client:
        version = client.version()

        assert isinstance(version, Version)
        assert version.tag == TALOS_TAG
        assert version.platform_mode == "container"
        assert client.roles == ("os:admin",)
        assert client.peer_certificate is not None  # the handshake verified apid's cert


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_client_certificates_of_other_key_types_work(
    key_type: KeyType, make_client: MakeClient, pki: Pki, cp_node: NodeInfo
) -> None:
    cert = issue_client_cert(pki.ca, roles=["os:admin"], key_type=key_type)

    talos = make_client(f"{cp_node.address}:50000", cert)

    assert talos.hostname() == cp_node.hostname


class _TlsServer:
    """A stdlib TLS server on loopback: one handshake per connection, client cert required."""

    def __init__(self, ca: CertificateAuthority, key_type: KeyType) -> None:
        server = issue_server_cert(ca, hostname="node-1", ips=["127.0.0.1"], key_type=key_type)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.load_verify_locations(cadata=ca.cert_pem.decode())
        self.context.set_alpn_protocols(["h2"])
        load_chain(self.context, server.cert_pem, server.key_pem)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.client_subjects: list[object] = []
        self._thread = threading.Thread(target=self._serve_one, daemon=True)
        self._thread.start()

    def _serve_one(self) -> None:
        conn, _ = self.listener.accept()
        with self.context.wrap_socket(conn, server_side=True) as tls:
            peer = tls.getpeercert()
            assert peer is not None  # CERT_REQUIRED: a handshake without one fails first
            self.client_subjects.append(peer["subject"])
            tls.recv(1)

    def close(self) -> None:
        self._thread.join(5)
        self.listener.close()


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_the_tls_context_verifies_and_presents_other_key_types(key_type: KeyType) -> None:
    # apid certificates are Ed25519 by default, and the emulator issues only those; a
    # cluster whose CA is ECDSA or RSA must work too: the handshake of the client's context.
    ca = CertificateAuthority.generate(key_type=key_type)
    client = issue_client_cert(ca, roles=["os:admin"], key_type=key_type)
    server = _TlsServer(ca, key_type)
    context = build_ssl_context(ca.cert_pem, client.cert_pem, client.key_pem_talos)
    try:
        port = server.listener.getsockname()[1]
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.selected_alpn_protocol() == "h2"
            peer = tls.getpeercert()
            assert peer is not None
            assert peer["subject"] == ((("commonName", "node-1"),),)
            tls.sendall(b"x")
    finally:
        server.close()
    assert server.client_subjects  # the server got and verified our certificate


def test_with_node_targets_another_node_over_the_same_connection(
    talos: TalosClient, worker_node: NodeInfo
) -> None:
    other = talos.with_node(worker_node.address)

    assert other.version().node == worker_node.address
    assert other.hostname() == worker_node.hostname
    assert other.async_client._transport is talos.async_client._transport


def test_fanout_keeps_other_replies_when_a_node_is_down(
    talos: TalosClient, cp_node: NodeInfo, worker_node: NodeInfo
) -> None:
    results = talos.fanout_version([cp_node.address, worker_node.address, DOWN_NODE])

    for node in (cp_node, worker_node):
        reply = results[node.address]
        assert isinstance(reply, Version)
        assert (reply.tag, reply.node) == (TALOS_TAG, node.address)
    failed = results[DOWN_NODE]
    assert isinstance(failed, NodeError)
    assert failed.node == DOWN_NODE
    assert isinstance(failed.cause, Unavailable)
    assert "no route to host" in str(failed)


def test_generic_fanout_converts_each_node(
    talos: TalosClient, cp_node: NodeInfo, worker_node: NodeInfo
) -> None:
    results = talos.fanout("hostname", [cp_node.address, worker_node.address])

    assert results == {cp_node.address: cp_node.hostname, worker_node.address: worker_node.hostname}


def test_single_node_call_to_a_down_node_raises_unavailable(talos: TalosClient) -> None:
    with pytest.raises(Unavailable) as caught:
        talos.with_node(DOWN_NODE).version()

    assert caught.value.node == DOWN_NODE
    assert caught.value.method == "/machine.MachineService/Version"


def test_several_default_nodes_need_with_node_for_single_node_calls(
    make_client: MakeClient,
    emulated_cluster: EmulatedCluster,
    cp_node: NodeInfo,
    worker_node: NodeInfo,
) -> None:
    talos = make_client(emulated_cluster.endpoint, nodes=[cp_node.address, worker_node.address])

    with pytest.raises(APIError, match=r"with_node"):
        talos.version()
    assert set(talos.fanout_version()) == {cp_node.address, worker_node.address}


def test_server_hostname_override_is_the_name_verified(
    make_client: MakeClient, cp_node: NodeInfo, worker_node: NodeInfo
) -> None:
    endpoint = f"{cp_node.address}:50000"

    # apid's certificate lists the node's hostname (api_cert_sans.go): that name verifies...
    assert make_client(endpoint, server_hostname=cp_node.hostname).hostname() == cp_node.hostname
    # ...and another node's name does not, though the address it connects to is listed.
    with pytest.raises(AuthenticationError) as caught:
        make_client(endpoint, server_hostname=worker_node.hostname).hostname()
    assert f"does not list {worker_node.hostname!r} in its SANs" in str(caught.value)
    assert "machine.certSANs" in str(caught.value)


def test_close_is_idempotent_and_later_calls_fail_clearly(
    emulated_cluster: EmulatedCluster, worker_node: NodeInfo
) -> None:
    client = TalosClient.from_talosconfig(emulated_cluster.talosconfig_path, env={})
    derived = client.with_node(worker_node.address)
    assert derived.hostname() == worker_node.hostname

    client.close()
    client.close()
    derived.close()

    assert client.closed
    with pytest.raises(TransportError, match="closed"):
        client.version()
    with pytest.raises(TransportError, match="closed"):
        derived.version()


# --------------------------------------------------------------------------- certificates


def test_foreign_ca_in_talosconfig_is_an_authentication_error(
    emulated_cluster: EmulatedCluster, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(emulated_cluster.endpoint, ca_pem=pki.foreign_ca.cert_pem)

    with pytest.raises(AuthenticationError) as caught:
        talos.version()

    message = str(caught.value)
    assert "not signed by the CA in the talosconfig" in message
    assert "wrong CA in talosconfig" in message
    assert caught.value.method == "/machine.MachineService/Version"


def test_client_cert_from_a_foreign_ca_is_rejected(
    emulated_cluster: EmulatedCluster, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(emulated_cluster.endpoint, pki.foreign_admin)

    with pytest.raises(AuthenticationError, match="rejected the client certificate"):
        talos.version()


def test_expired_client_cert_is_rejected(
    emulated_cluster: EmulatedCluster, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(emulated_cluster.endpoint, pki.expired)

    with pytest.raises(AuthenticationError) as caught:
        talos.version()

    assert "rejected the client certificate" in str(caught.value)
    assert "expired" in str(caught.value)
    assert "PRIVATE" + " KEY" not in str(caught.value)


def test_reader_calling_an_admin_method_is_told_which_role_is_needed(
    make_client: MakeClient, pki: Pki, cp_node: NodeInfo
) -> None:
    reader = make_client(f"{cp_node.address}:50000", pki.reader)
    assert reader.hostname() == cp_node.hostname  # reading is fine

    with pytest.raises(PermissionDenied) as caught:
        reader.read("/etc/os-release")

    error = caught.value
    assert error.details == "not authorized"
    assert "/machine.MachineService/Read needs one of os:admin" in str(error)
    assert "the client certificate carries os:reader" in str(error)


def test_operator_may_restart_but_not_apply(
    make_client: MakeClient, pki: Pki, worker_node: NodeInfo
) -> None:
    operator = make_client(f"{worker_node.address}:50000", pki.operator)

    with pytest.raises(Unknown, match="doesn't support restart operation via API"):
        operator.service_restart("apid")  # past the role check: machined's own refusal
    with pytest.raises(PermissionDenied, match="carries os:operator"):
        operator.apply_configuration(b"version: v1alpha1\n")


# --------------------------------------------------------------------------- unreachable


def test_dns_failure(make_client: MakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real lookup of an unresolvable name would send a DNS query off this machine, and our
    # tests only ever talk to loopback. So the resolver answers "no such name" for this one
    # host, exactly as glibc does, and the test checks how the transport reports it.
    real_getaddrinfo = socket.getaddrinfo

    def fake_getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host == "apid.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    talos = make_client("apid.invalid:50000", timeout=5.0)

    with pytest.raises(ConnectError, match=r"cannot resolve 'apid\.invalid'"):
        talos.version()


def test_refused_port(make_client: MakeClient, closed_port: str) -> None:
    talos = make_client(closed_port)

    with pytest.raises(ConnectError) as caught:
        talos.version()

    assert str(caught.value).endswith(f"refused: is apid listening on {closed_port}?")


def test_endpoint_that_never_answers_fails_within_the_deadline(
    make_client: MakeClient, silent_endpoint: str
) -> None:
    talos = make_client(silent_endpoint, timeout=0.5)

    with pytest.raises(DeadlineExceeded) as caught:
        talos.version()

    assert caught.value.timeout == 0.5
    # On a machine too busy to run the client's loop in time, the deadline can pass before
    # the TLS handshake starts: then the message says so (the next test), never "no TCP".
    message = str(caught.value)
    assert "no TCP connection" not in message
    assert (
        "accepted the TCP connection but finished no TLS handshake" in message
        or "too busy to start the TLS handshake" in message
    )


def test_a_process_too_busy_to_go_on_after_the_tcp_handshake_is_not_blamed_on_the_network(
    make_client: MakeClient, silent_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel connects the socket, but the client's loop does not run again before the
    deadline (a starved CPU): the message names this process, not a firewall."""

    async def connect_then_stall(
        self: asyncio.AbstractEventLoop, sock: socket.socket, address: tuple[str, int]
    ) -> None:
        sock.setblocking(True)
        sock.connect(address)  # loopback: the kernel's handshake completes at once
        sock.setblocking(False)
        await asyncio.sleep(3600)  # the loop never gets back to this connection in time

    monkeypatch.setattr(
        asyncio.selector_events.BaseSelectorEventLoop, "sock_connect", connect_then_stall
    )
    talos = make_client(silent_endpoint, timeout=0.5)

    with pytest.raises(DeadlineExceeded) as caught:
        talos.version()

    assert "accepted the TCP connection, but this process was too busy" in str(caught.value)
    assert "firewall" not in str(caught.value)


def test_plain_tcp_endpoint_is_not_tls(make_client: MakeClient, plaintext_endpoint: str) -> None:
    talos = make_client(plaintext_endpoint)

    with pytest.raises(ConnectError, match="not a TLS/Talos API endpoint"):
        talos.version()


# --------------------------------------------------------------------------- streams


def test_a_stream_error_surfaces_at_iteration_wrapped(worker: TalosClient) -> None:
    # Read of a directory: machined refuses it with a plain error (code Unknown) while the
    # stream is being iterated (v1alpha1_server.go Read).
    with pytest.raises(Unknown, match="path must be a regular file") as caught:
        worker.read("/etc")

    assert caught.value.method == "/machine.MachineService/Read"


def test_streamed_node_error_in_metadata(
    emulated_cluster: EmulatedCluster, worker: TalosClient, worker_node: NodeInfo
) -> None:
    # One-to-one (``node``), apid relays the node's status; one-to-many (``nodes``), it
    # wraps the error into a message's metadata (director.go), which becomes a NodeError.
    with pytest.raises(Unknown, match='log "nosuchservice" was not registered'):
        worker.logs("nosuchservice")

    async def fan_out(transport: Connection) -> list[NodeError | None]:
        target = Target(nodes=(worker_node.address,))
        request = m.LogsRequest(id="nosuchservice", namespace="system")
        info = transport.call_info(rpcs.LOGS, target, 10.0, streaming=True)
        return [
            node_error(message.metadata, info)
            async for message in transport.stream(rpcs.LOGS, request, target)
        ]

    (error,) = asyncio.run(with_transport(emulated_cluster.talosconfig_path, fan_out))
    assert isinstance(error, NodeError)
    assert error.node == worker_node.address
    assert isinstance(error.cause, Unknown)
    assert 'log "nosuchservice" was not registered' in str(error)


def test_stream_idle_timeout(emulated_cluster: EmulatedCluster, worker_node: NodeInfo) -> None:
    # A followed event stream: the hello event, then nothing while the node is idle.
    async def follow(transport: Connection) -> int:
        received = 0
        async for _ in transport.stream(
            rpcs.EVENTS,
            m.EventsRequest(tail_events=0),
            Target(node=worker_node.address),
            idle_timeout=0.5,
        ):
            received += 1
        return received

    with pytest.raises(DeadlineExceeded, match=r"sent nothing for 0\.5s \(idle timeout\)"):
        asyncio.run(with_transport(emulated_cluster.talosconfig_path, follow))


def test_event_stream_total_limit(worker: TalosClient) -> None:
    events = worker.events(tail_events=0, timeout=0.3)

    with pytest.raises(DeadlineExceeded, match=r"did not finish within 0\.3s"):
        next(events)


# --------------------------------------------------------------------------- talosconfig


def _write_config(path: Path, cluster: EmulatedCluster, pki: Pki, **options: object) -> Path:
    client_cert = options.pop("client", pki.admin)
    write_talosconfig(
        path,
        context="ctx",
        endpoints=[cluster.endpoint],
        ca_pem=pki.ca.cert_pem,
        client=client_cert,  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )
    return path


def test_talosconfig_nodes_and_node_override(
    tmp_path: Path,
    emulated_cluster: EmulatedCluster,
    pki: Pki,
    cp_node: NodeInfo,
    worker_node: NodeInfo,
) -> None:
    nodes = [cp_node.address, worker_node.address]
    path = _write_config(tmp_path / "config", emulated_cluster, pki, nodes=nodes)

    with TalosClient.from_talosconfig(path, env={}) as client:
        assert client.nodes == tuple(nodes)
        assert set(client.fanout("hostname").values()) == {cp_node.hostname, worker_node.hostname}
    with TalosClient.from_talosconfig(path, node=worker_node.address, timeout=3.0, env={}) as one:
        assert (one.node, one.nodes, one.timeout) == (worker_node.address, (), 3.0)
        assert one.hostname() == worker_node.hostname


def test_talosconfig_from_the_environment_and_endpoint_override(
    tmp_path: Path,
    emulated_cluster: EmulatedCluster,
    pki: Pki,
    monkeypatch: pytest.MonkeyPatch,
    closed_port: str,
) -> None:
    path = _write_config(tmp_path / "config", emulated_cluster, pki)
    monkeypatch.setenv("TALOSCONFIG", str(path))

    with TalosClient.from_talosconfig(endpoint=closed_port, timeout=2.0) as client:
        assert client.endpoint == closed_port
        with pytest.raises(ConnectError, match="refused"):
            client.version()


def test_talosconfig_with_a_soon_expiring_cert_warns(
    tmp_path: Path, emulated_cluster: EmulatedCluster, pki: Pki, cp_node: NodeInfo
) -> None:
    soon = issue_client_cert(pki.ca, roles=["os:admin"], validity=dt.timedelta(days=2))
    path = _write_config(tmp_path / "config", emulated_cluster, pki, client=soon)

    with (
        pytest.warns(TalosConfigWarning, match="expires on"),
        TalosClient.from_talosconfig(path, env={}) as client,
    ):
        assert client.hostname() == cp_node.hostname
