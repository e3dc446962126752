"""How transport failures map into the error tree (no sockets: exceptions are built here)."""

from __future__ import annotations

import errno
import socket
import ssl

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from pytest_talos._proto.common import common_pb2
from pytest_talos.client import Connection
from pytest_talos.errors import (
    APIError,
    AuthenticationError,
    ConfigError,
    ConnectError,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NodeError,
    NotFound,
    NotSupportedInMode,
    PermissionDenied,
    TalosError,
    TransportError,
    Unavailable,
    Unimplemented,
)
from pytest_talos.pki import CertificateAuthority, issue_client_cert
from pytest_talos.transport import (
    CallInfo,
    ConnectPhase,
    GrpcTransport,
    Target,
    build_ssl_context,
    certificate_roles,
    classify_error,
    connect_failure,
    node_error,
    shared_ssl_context,
    split_endpoint,
)
from pytest_talos.transport._channel import Session

READ = "/machine.MachineService/Read"
INFO = CallInfo(
    method=READ,
    endpoint="10.5.0.2:50000",
    node="10.5.0.3",
    timeout=2.5,
    required_roles=("os:admin",),
    client_roles=("os:reader",),
)


def _ssl_error(reason: str, cls: type[ssl.SSLError] = ssl.SSLError) -> ssl.SSLError:
    error = cls(1, f"[SSL: {reason}] {reason.lower()}")
    error.reason = reason
    return error


def _verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    error.verify_code = code
    error.verify_message = message
    return error


# --------------------------------------------------------------------------- gRPC statuses


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (Status.INVALID_ARGUMENT, InvalidArgument),
        (Status.NOT_FOUND, NotFound),
        (Status.FAILED_PRECONDITION, FailedPrecondition),
        (Status.UNIMPLEMENTED, Unimplemented),
        (Status.UNAVAILABLE, Unavailable),
        (Status.PERMISSION_DENIED, PermissionDenied),
    ],
)
def test_grpc_status_becomes_its_api_error(status: Status, cls: type[APIError]) -> None:
    error = classify_error(GRPCError(status, "it went wrong"), INFO)

    assert type(error) is cls
    assert isinstance(error, APIError)
    assert error.code == status.name
    assert error.details == "it went wrong"
    assert (error.node, error.method) == ("10.5.0.3", READ)
    assert str(error) == f"[node 10.5.0.3, {READ}] {status.name}: it went wrong"


def test_status_without_a_subclass_keeps_its_code() -> None:
    error = classify_error(GRPCError(Status.DATA_LOSS, "bits fell out"), INFO)

    assert type(error) is APIError
    assert error.code == "DATA_LOSS"


@pytest.mark.parametrize(
    "text",
    [
        "method is not supported in container mode",  # machined checkSupported
        "upgrade is not supported in container mode",  # lifecycle service
        "installation is not supported in container mode",
    ],
)
def test_a_container_mode_refusal_is_its_own_failed_precondition(text: str) -> None:
    error = classify_error(GRPCError(Status.FAILED_PRECONDITION, text), INFO)

    assert isinstance(error, NotSupportedInMode)
    assert isinstance(error, FailedPrecondition)
    assert (error.mode, error.details, error.code) == ("container", text, "FAILED_PRECONDITION")


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (Status.FAILED_PRECONDITION, "machine is not ready"),
        (Status.FAILED_PRECONDITION, "not supported in docker mode"),  # no such Talos mode
        (Status.INVALID_ARGUMENT, "method is not supported in container mode"),
    ],
)
def test_other_refusals_are_not_a_mode_refusal(status: Status, text: str) -> None:
    error = classify_error(GRPCError(status, text), INFO)

    assert not isinstance(error, NotSupportedInMode)
    assert isinstance(error, APIError)
    assert error.code == status.name


def test_server_side_deadline_is_a_deadline_exceeded() -> None:
    error = classify_error(GRPCError(Status.DEADLINE_EXCEEDED, "context deadline exceeded"), INFO)

    assert isinstance(error, DeadlineExceeded)
    assert error.timeout == 2.5


def test_permission_denied_names_needed_and_carried_roles() -> None:
    error = classify_error(GRPCError(Status.PERMISSION_DENIED, "not authorized"), INFO)

    assert isinstance(error, PermissionDenied)
    assert error.details == "not authorized"
    assert str(error).endswith(
        f"PERMISSION_DENIED: not authorized ({READ} needs one of os:admin; the client "
        "certificate carries os:reader: use a talosconfig with one of those roles)"
    )


def test_permission_denied_with_an_allowed_role_points_at_sensitive_resources() -> None:
    info = CallInfo(
        method="/cosi.resource.State/Get",
        endpoint="e:50000",
        required_roles=("os:admin", "os:operator", "os:reader"),
        client_roles=("os:reader",),
    )

    error = classify_error(GRPCError(Status.PERMISSION_DENIED, "not authorized"), info)

    assert "sensitive resources such as MachineConfig need os:admin" in str(error)


def test_other_permission_denied_texts_get_no_role_hint() -> None:
    error = classify_error(GRPCError(Status.PERMISSION_DENIED, "write access is not allowed"), INFO)

    assert str(error).endswith("PERMISSION_DENIED: write access is not allowed")


def test_talos_errors_pass_through_and_gain_context() -> None:
    original = ConnectError("cannot resolve 'x'")

    mapped = classify_error(original, INFO)

    assert mapped is original
    assert (mapped.node, mapped.method) == ("10.5.0.3", READ)


# --------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize(
    ("phase", "streaming", "text"),
    [
        ("resolve", False, "resolving the host of 10.5.0.2:50000 took longer than 2.5s"),
        ("tcp", False, "no TCP connection to 10.5.0.2:50000 within 2.5s"),
        ("connected", False, "but this process was too busy to start the TLS handshake"),
        ("tls", False, "accepted the TCP connection but finished no TLS handshake within 2.5s"),
        ("ready", False, "no reply within 2.5s (deadline)"),
        ("ready", True, "the stream did not finish within 2.5s"),
    ],
)
def test_timeouts_say_which_phase_stalled(phase: ConnectPhase, streaming: bool, text: str) -> None:
    info = CallInfo(
        method=READ,
        endpoint="10.5.0.2:50000",
        timeout=2.5,
        phase=phase,
        streaming=streaming,
    )

    error = classify_error(TimeoutError(), info)

    assert isinstance(error, DeadlineExceeded)
    assert error.timeout == 2.5
    assert text in str(error)


# --------------------------------------------------------------------------- connection loss


def test_hang_up_right_after_the_handshake_means_our_certificate_was_refused() -> None:
    info = CallInfo(method=READ, endpoint="e:50000", server_spoke=False)

    error = classify_error(StreamTerminatedError("Connection lost"), info)

    assert isinstance(error, AuthenticationError)
    assert "e:50000 rejected the client certificate" in str(error)
    assert "talosctl config info" in str(error)


def test_tls_alert_after_the_handshake_is_reported() -> None:
    alert = _ssl_error("SSLV3_ALERT_CERTIFICATE_EXPIRED")
    info = CallInfo(method=READ, endpoint="e:50000", lost_error=alert)

    error = classify_error(StreamTerminatedError("Connection lost"), info)

    assert isinstance(error, AuthenticationError)
    assert "TLS alert: certificate expired" in str(error)


def test_connection_lost_mid_call_is_a_transport_error() -> None:
    error = classify_error(ConnectionResetError(errno.ECONNRESET, "reset"), INFO)

    assert type(error) is TransportError
    assert "the connection to 10.5.0.2:50000 broke during the call" in str(error)


def test_protocol_errors_never_escape_raw() -> None:
    assert type(classify_error(ProtocolError("bad frame"), INFO)) is TransportError


def test_what_the_wire_does_not_raise_is_not_classified() -> None:
    # A KeyError or TypeError is a bug (ours or a library's), not a transport failure.
    assert classify_error(KeyError("what"), INFO) is None
    assert classify_error(TypeError("bad argument"), INFO) is None


class _BrokenChannel:
    """A channel whose request() hits a bug, as our own code might."""

    phase = "ready"
    session = Session(server_spoke=True)

    def request(self, *args: object, **kwargs: object) -> object:
        raise KeyError("a bug of ours")


@pytest.mark.parametrize("streaming", [False, True])
def test_the_transport_re_raises_a_bug_unchanged(streaming: bool) -> None:
    import asyncio

    from pytest_talos._proto.machine import machine_pb2
    from pytest_talos.transport import Rpc

    version = Rpc("/machine.MachineService/Version", common_pb2.Data, machine_pb2.VersionResponse)
    wire = GrpcTransport("10.5.0.2", ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    wire._channel = _BrokenChannel()  # type: ignore[assignment]
    transport = Connection(wire)  # the policy over the wire is what decides to re-raise

    async def call() -> None:
        if streaming:
            async for _ in transport.stream(version, common_pb2.Data()):
                pass
        else:
            await transport.unary(version, common_pb2.Data())

    with pytest.raises(KeyError, match="a bug of ours") as caught:
        asyncio.run(call())
    assert caught.value.__context__ is None  # the bug itself, not a TransportError around it


# --------------------------------------------------------------------------- connecting


def test_dns_failure() -> None:
    error = connect_failure(
        socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
        "apid.invalid",
        50000,
        "resolve",
    )

    assert isinstance(error, ConnectError)
    assert str(error).startswith("cannot resolve 'apid.invalid' (Name or service not known)")


def test_refused() -> None:
    error = connect_failure(
        ConnectionRefusedError(errno.ECONNREFUSED, "x"), "10.5.0.2", 50000, "tcp"
    )

    assert isinstance(error, ConnectError)
    assert str(error) == (
        "connection to 10.5.0.2:50000 refused: is apid listening on 10.5.0.2:50000?"
    )


def test_unreachable_and_ipv6_endpoint_text() -> None:
    error = connect_failure(
        OSError(errno.EHOSTUNREACH, "No route to host"), "fd00::1", 50000, "tcp"
    )

    assert isinstance(error, ConnectError)
    assert "cannot connect to [fd00::1]:50000 (No route to host)" in str(error)


@pytest.mark.parametrize(
    ("code", "message", "text"),
    [
        (64, "IP address mismatch", "does not list '10.5.0.2' in its SANs"),
        (62, "Hostname mismatch", "add 10.5.0.2 to machine.certSANs"),
        (19, "self-signed certificate in certificate chain", "not signed by the CA in the talos"),
        (20, "unable to get local issuer certificate", "wrong CA in talosconfig"),
        (10, "certificate has expired", "outside its validity period"),
        (7, "certificate signature failure", "wrong CA in talosconfig? server cert SANs?"),
    ],
)
def test_server_certificate_rejections(code: int, message: str, text: str) -> None:
    error = connect_failure(_verify_error(code, message), "10.5.0.2", 50000, "tls")

    assert isinstance(error, AuthenticationError)
    assert text in str(error)
    assert message in str(error)


@pytest.mark.parametrize(
    "reason",
    [
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    ],
)
def test_client_certificate_rejections(reason: str) -> None:
    error = connect_failure(_ssl_error(reason), "10.5.0.2", 50000, "tls")

    assert isinstance(error, AuthenticationError)
    assert "10.5.0.2:50000 rejected the client certificate (TLS alert:" in str(error)


@pytest.mark.parametrize(
    "reason",
    ["WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"],
)
def test_non_tls_endpoints(reason: str) -> None:
    error = connect_failure(_ssl_error(reason), "10.5.0.2", 80, "tls")

    assert isinstance(error, ConnectError)
    assert "10.5.0.2:80 is not a TLS/Talos API endpoint" in str(error)


def test_eof_during_handshake() -> None:
    eof = _ssl_error("UNEXPECTED_EOF_WHILE_READING", ssl.SSLEOFError)
    assert "not a TLS/Talos API endpoint" in str(connect_failure(eof, "h", 1, "tls"))
    reset = connect_failure(ConnectionResetError(errno.ECONNRESET, "reset"), "h", 1, "tls")
    assert isinstance(reset, ConnectError)
    assert "closed the connection during the TLS handshake" in str(reset)


def test_other_handshake_failures() -> None:
    error = connect_failure(_ssl_error("NO_SHARED_CIPHER"), "h", 1, "tls")

    assert isinstance(error, AuthenticationError)
    assert "the TLS handshake with h:1 failed (NO_SHARED_CIPHER)" in str(error)


# --------------------------------------------------------------------------- per-node errors


def test_reply_without_error_is_not_a_node_error() -> None:
    assert node_error(common_pb2.Metadata(hostname="10.5.0.3"), INFO) is None


def test_node_error_from_status_keeps_the_typed_cause() -> None:
    metadata = common_pb2.Metadata(
        hostname="10.5.0.7", error="rpc error: code = PermissionDenied desc = not authorized"
    )
    metadata.status.code = Status.PERMISSION_DENIED.value
    metadata.status.message = "not authorized"

    error = node_error(metadata, INFO)

    assert isinstance(error, NodeError)
    assert error.node == "10.5.0.7"
    assert error.method == READ
    assert isinstance(error.cause, PermissionDenied)
    assert error.cause.node == "10.5.0.7"
    assert "needs one of os:admin" in str(error)


def test_node_error_from_text_only_uses_the_fallback_node() -> None:
    metadata = common_pb2.Metadata(error='log "x" was not registered')

    error = node_error(metadata, INFO, fallback_node="10.5.0.9")

    assert isinstance(error, NodeError)
    assert error.cause is None
    assert str(error) == f'[node 10.5.0.9, {READ}] log "x" was not registered'


# --------------------------------------------------------------------------- plumbing


def test_target_metadata() -> None:
    assert Target().metadata() == []
    assert Target(node="a").metadata() == [("node", "a")]
    assert Target(nodes=("a", "b")).metadata() == [("nodes", "a"), ("nodes", "b")]
    assert Target(nodes=("a", "b")).label == "a,b"
    with pytest.raises(ValueError, match="either one node or a list"):
        Target(node="a", nodes=("b",))


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("10.5.0.2", ("10.5.0.2", 50000)),
        ("10.5.0.2:123", ("10.5.0.2", 123)),
        ("[fd00::1]:50001", ("fd00::1", 50001)),
        ("cp.example.com", ("cp.example.com", 50000)),
    ],
)
def test_split_endpoint(endpoint: str, expected: tuple[str, int]) -> None:
    assert split_endpoint(endpoint) == expected


def test_bad_endpoint_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a valid endpoint"):
        split_endpoint("10.5.0.2:notaport")


def test_connection_rejects_non_positive_timeouts() -> None:
    wire = GrpcTransport("10.5.0.2", ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        Connection(wire, timeout=0)
    with pytest.raises(ValueError, match="stream_timeout must be a positive number"):
        Connection(wire, stream_timeout=-1)


def test_ssl_context_accepts_the_talos_ed25519_key_label() -> None:
    ca = CertificateAuthority.generate()
    client = issue_client_cert(ca, roles=["os:admin", "os:etcd:backup"])
    assert b"ED25519 PRIVATE KEY" in client.key_pem_talos

    ctx = build_ssl_context(ca.cert_pem, client.cert_pem, client.key_pem_talos)

    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert certificate_roles(client.cert_pem) == ("os:admin", "os:etcd:backup")


def test_bad_ca_or_key_is_a_config_error_without_key_material() -> None:
    ca = CertificateAuthority.generate()
    client = issue_client_cert(ca, roles=["os:admin"])
    other = issue_client_cert(ca, roles=["os:admin"])

    with pytest.raises(ConfigError, match="CA certificate is not a usable PEM"):
        build_ssl_context(b"not a certificate", client.cert_pem, client.key_pem)
    with pytest.raises(ConfigError) as caught:
        build_ssl_context(ca.cert_pem, client.cert_pem, other.key_pem)
    assert isinstance(caught.value, TalosError)
    assert other.key_pem.decode().splitlines()[1] not in str(caught.value)


def test_one_ssl_context_is_shared_per_identity() -> None:
    ca = CertificateAuthority.generate()
    admin = issue_client_cert(ca, roles=["os:admin"])
    reader = issue_client_cert(ca, roles=["os:reader"])

    first = shared_ssl_context(ca.cert_pem, admin.cert_pem, admin.key_pem)
    assert shared_ssl_context(ca.cert_pem, admin.cert_pem, admin.key_pem) is first
    assert shared_ssl_context(ca.cert_pem, reader.cert_pem, reader.key_pem) is not first
    # a key that does not belong to the certificate is refused, never served from the cache
    with pytest.raises(ConfigError):
        shared_ssl_context(ca.cert_pem, admin.cert_pem, reader.key_pem)


def test_closed_transport_refuses_new_calls() -> None:
    transport = GrpcTransport("10.5.0.2", ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    transport.close()
    transport.close()

    assert transport.closed
    with pytest.raises(TransportError, match="is closed"):
        transport.channel()


def test_status_codes_are_typed_and_numbered_as_grpc_numbers_them() -> None:
    """One enum for the client's errors, the emulator's refusals and the fake's statuses;
    its numbers are grpclib's (the wire's)."""
    from grpclib.const import Status

    from pytest_talos.errors import StatusCode

    assert [code.name for code in StatusCode] == [status.name for status in Status]
    assert all(StatusCode(status.name).number == status.value for status in Status)
    assert StatusCode.of(5) is StatusCode.NOT_FOUND
    assert StatusCode.of(99) is StatusCode.UNKNOWN  # grpc-go maps an unknown code so
