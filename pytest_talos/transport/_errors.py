"""Classify everything that can go wrong on the wire into the pytest-talos error tree.

Pure functions over exceptions and a :class:`CallInfo`; the table is in the docstring of
:mod:`pytest_talos.transport`.
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar

import h2.exceptions
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from pytest_talos._proto.common import common_pb2
from pytest_talos.errors import (
    APIError,
    AuthenticationError,
    ConnectError,
    DeadlineExceeded,
    NodeError,
    NotInRelease,
    NotSupportedInMode,
    PermissionDenied,
    StatusCode,
    TalosError,
    TransportError,
    api_error_for_code,
)
from pytest_talos.releases import RELEASES, lacking
from pytest_talos.talos_api import join_host_port, unsupported_mode
from pytest_talos.transport._fake import FakeStatus

# grpc-go server.go handleStream: a method machined does not register (apid proxies all).
_UNKNOWN_METHOD = re.compile(r"^unknown (service \S+|method \S+ for service \S+)$")

DEFAULT_TIMEOUT = 10.0  # seconds, unary calls and the idle gap of finite streams
DEFAULT_STREAM_TIMEOUT = 120.0  # seconds, total limit of finite streams (read, list, logs)

# "connected": the kernel finished the TCP handshake, but the deadline passed before this
# process got to go on with it (a machine too busy to run the client's event loop in time).
ConnectPhase = Literal["idle", "resolve", "tcp", "connected", "tls", "ready"]

_CHECK_CREDS = "check the ca/crt/key of the talosconfig context (talosctl config info)"
# OpenSSL reasons that mean "the bytes coming back are not TLS at all".
_NOT_TLS_REASONS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "RECORD_LAYER_FAILURE",
        "PACKET_LENGTH_TOO_LONG",
        "HTTP_REQUEST",
        "HTTPS_PROXY_REQUEST",
        "UNKNOWN_PROTOCOL",
        "RECORD_LENGTH_MISMATCH",
        "UNEXPECTED_EOF_WHILE_READING",
        "UNEXPECTED_RECORD",
    }
)
# X509_V_ERR_* codes with a more specific hint than "certificate verify failed".
_HOSTNAME_MISMATCH = frozenset({62, 64})  # HOSTNAME_MISMATCH, IP_ADDRESS_MISMATCH
_UNKNOWN_ISSUER = frozenset({2, 18, 19, 20, 21})  # issuer not found / self-signed / untrusted
_EXPIRED = frozenset({9, 10})  # not yet valid, expired


@dataclass(frozen=True)
class CallInfo:
    """Everything the error mapping needs to say what failed and what to check."""

    method: str
    endpoint: str
    node: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    phase: ConnectPhase = "ready"
    required_roles: tuple[str, ...] = ()
    client_roles: tuple[str, ...] = ()
    streaming: bool = False
    server_spoke: bool = True  # did the server send any byte on the last connection?
    lost_error: BaseException | None = field(default=None, compare=False)


# --------------------------------------------------------------------------- error mapping


def _verify_failure(exc: ssl.SSLCertVerificationError, host: str, endpoint: str) -> str:
    code = exc.verify_code
    detail = exc.verify_message or exc.reason or "certificate verify failed"
    if code in _HOSTNAME_MISMATCH:
        return (
            f"the server certificate of {endpoint} does not list {host!r} in its SANs "
            f"({detail}): connect through an address the certificate lists, add {host} to "
            "machine.certSANs, or set server_hostname to a name it lists"
        )
    if code in _UNKNOWN_ISSUER:
        return (
            f"the server certificate of {endpoint} is not signed by the CA in the talosconfig "
            f"({detail}): wrong CA in talosconfig (a talosconfig of another cluster?), or "
            "the endpoint is not this cluster's apid"
        )
    if code in _EXPIRED:
        return (
            f"the server certificate of {endpoint} is outside its validity period ({detail}): "
            "check the clocks of this machine and of the node"
        )
    return (
        f"the server certificate of {endpoint} was rejected ({detail}): wrong CA in "
        "talosconfig? server cert SANs?"
    )


def _rejected_us(reason: str) -> bool:
    """Whether a TLS alert reason says the server refused our client certificate."""
    if "ALERT" not in reason:
        return False
    return any(word in reason for word in ("CERTIFICATE", "UNKNOWN_CA", "ACCESS_DENIED"))


def _alert_text(reason: str) -> str:
    for prefix in ("SSLV3_ALERT_", "TLSV13_ALERT_", "TLSV1_ALERT_"):
        if reason.startswith(prefix):
            return reason[len(prefix) :].replace("_", " ").lower()
    return reason.replace("_", " ").lower()


def _client_cert_rejected(endpoint: str, why: str) -> str:
    return (
        f"{endpoint} rejected the client certificate ({why}): is it expired, issued by "
        f"another cluster's CA, or not a client certificate? {_CHECK_CREDS}"
    )


def not_talos_message(endpoint: str, why: str) -> str:
    return (
        f"{endpoint} is not a Talos API endpoint ({why}; apid serves gRPC over HTTP/2, "
        "offered as h2 in the TLS handshake): check the host and port (apid listens on 50000)"
    )


def not_tls_message(endpoint: str, why: str) -> str:
    return (
        f"{endpoint} is not a TLS/Talos API endpoint ({why}): check the host and port "
        "(apid listens on 50000 with TLS)"
    )


def _ssl_failure(exc: ssl.SSLError, host: str, endpoint: str) -> TransportError:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return AuthenticationError(_verify_failure(exc, host, endpoint))
    reason = exc.reason or type(exc).__name__
    if _rejected_us(reason):
        return AuthenticationError(
            _client_cert_rejected(endpoint, f"TLS alert: {_alert_text(reason)}")
        )
    if reason in _NOT_TLS_REASONS or isinstance(exc, ssl.SSLEOFError):
        return ConnectError(not_tls_message(endpoint, f"TLS error {reason}"))
    return AuthenticationError(
        f"the TLS handshake with {endpoint} failed ({reason}): the server and this client share "
        f"no protocol version, cipher or signature algorithm, or one side refused the other's "
        f"certificate; {_CHECK_CREDS}"
    )


def connect_failure(
    exc: OSError | EOFError,
    host: str,
    port: int,
    phase: ConnectPhase,
    *,
    server_name: str | None = None,
) -> TalosError:
    """Classify an OS, TLS or end-of-file error raised while resolving, connecting or
    handshaking (the channel lets anything else, such as a bug of ours, pass unchanged)."""
    endpoint = join_host_port(host, port)
    if isinstance(exc, socket.gaierror):
        return ConnectError(
            f"cannot resolve {host!r} ({exc.strerror}): check the endpoint in the talosconfig "
            "and this machine's DNS"
        )
    if isinstance(exc, ssl.SSLError):  # the name verified is server_hostname when one is set
        return _ssl_failure(exc, server_name or host, endpoint)
    if isinstance(exc, ConnectionRefusedError):
        return ConnectError(f"connection to {endpoint} refused: is apid listening on {endpoint}?")
    if phase == "tls" and isinstance(exc, ConnectionError | EOFError):
        return ConnectError(
            f"{endpoint} closed the connection during the TLS handshake: it is not a "
            "TLS/Talos API endpoint, or it refused the client certificate; check the host "
            f"and port, and {_CHECK_CREDS}"
        )
    if isinstance(exc, OSError):
        why = exc.strerror or str(exc) or type(exc).__name__
        return ConnectError(
            f"cannot connect to {endpoint} ({why}): check the address, routing and firewall"
        )
    return ConnectError(f"{endpoint} closed the connection while it was being made")


def _code_name(code: int) -> StatusCode:
    return StatusCode.of(code)


def _role_hint(info: CallInfo) -> str:
    carried = ", ".join(info.client_roles) or "no roles"
    needed = ", ".join(info.required_roles)
    if not needed:
        return f"the client certificate carries {carried}"
    short = _short_on(info)
    if short:  # a role one release admits and an older one lacks (os:meta:writer on v1.12)
        return (
            f"{info.method} needs one of {needed}, but on Talos {', '.join(short)} the client "
            f"certificate's {carried} is not enough{_by_release(info.method)}"
        )
    if set(info.client_roles) & set(info.required_roles):
        return (
            f"{info.method} allows {needed} and the client certificate carries {carried}, but "
            "this request needs more (sensitive resources such as MachineConfig need os:admin)"
        )
    return (
        f"{info.method} needs one of {needed}; the client certificate carries {carried}: "
        f"use a talosconfig with one of those roles{_by_release(info.method)}"
    )


def _short_on(info: CallInfo) -> list[str]:
    """The known releases whose rule for the method admits none of the client's roles,
    where its default rule does admit one of them."""
    carried = set(info.client_roles)
    if not carried & set(info.required_roles):
        return []
    return [
        release.line
        for release in RELEASES.values()
        if release.has_method(info.method) and not carried & set(release.roles_needed(info.method))
    ]


def _by_release(method: str) -> str:
    """What ``method`` needs on each known release, where that differs between them
    (MetaWrite: os:meta:writer exists from v1.13 on); empty where all agree."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for release in RELEASES.values():
        if release.has_method(method):
            groups.setdefault(release.roles_needed(method), []).append(release.line)
    if len(groups) < 2:
        return ""
    each = (f"Talos {', '.join(lines)}: {', '.join(roles)}" for roles, lines in groups.items())
    return f" (by release: {'; '.join(each)})"


def _not_in_release(details: str, code_name: StatusCode, info: CallInfo) -> NotInRelease:
    """An Unimplemented ``unknown service/method``: which known releases lack the method."""
    lines = tuple(release.line for release in lacking(info.method))
    if lines:
        known = f"not supported on Talos {', '.join(lines)} (the kit's release table)"
    else:
        known = f"every Talos release this kit knows ({', '.join(RELEASES)}) serves it"
    error = NotInRelease(
        details, releases=lines, code=code_name, node=info.node, method=info.method
    )
    hint = f"the node's Talos release does not serve {info.method}: {known}"
    return _with_hint(error, hint)


_E = TypeVar("_E", bound=TalosError)


def _with_hint(error: _E, hint: str) -> _E:
    error.message = f"{error.message} ({hint})"
    error.args = (error.message,)
    return error


def api_error(code_name: StatusCode, details: str, info: CallInfo) -> TalosError:
    """The TalosError for a non-OK gRPC status."""
    if code_name is StatusCode.DEADLINE_EXCEEDED:
        return DeadlineExceeded(
            f"the server reports the deadline of {info.timeout:g}s exceeded ({details})",
            timeout=info.timeout,
            node=info.node,
            method=info.method,
        )
    mode = unsupported_mode(details) if code_name is StatusCode.FAILED_PRECONDITION else None
    if mode is not None:
        return NotSupportedInMode(
            details, mode=mode, code=code_name, node=info.node, method=info.method
        )
    if code_name is StatusCode.UNIMPLEMENTED and _UNKNOWN_METHOD.match(details):
        return _not_in_release(details, code_name, info)
    cls = api_error_for_code(code_name)
    error: APIError = cls(details, code=code_name, node=info.node, method=info.method)
    if isinstance(error, PermissionDenied) and "not authorized" in details:
        return _with_hint(error, _role_hint(info))
    return error


def _deadline(info: CallInfo) -> DeadlineExceeded:
    where = info.endpoint
    texts = {
        "resolve": f"resolving the host of {where} took longer than {info.timeout:g}s: check DNS",
        "tcp": (
            f"no TCP connection to {where} within {info.timeout:g}s: is the host reachable, "
            "or does a firewall drop the packets?"
        ),
        "connected": (
            f"{where} accepted the TCP connection, but this process was too busy to start "
            f"the TLS handshake within {info.timeout:g}s: the machine running the kit is "
            "overloaded; retry, or pass a larger timeout"
        ),
        "tls": (
            f"{where} accepted the TCP connection but finished no TLS handshake within "
            f"{info.timeout:g}s: it is not a TLS/Talos API endpoint, or it is stuck"
        ),
    }
    if info.streaming:
        default = (
            f"the stream did not finish within {info.timeout:g}s (its total time limit); "
            "pass a larger timeout if that much data or waiting is expected"
        )
    else:
        default = f"no reply within {info.timeout:g}s (deadline); the node may be busy or stuck"
    return DeadlineExceeded(
        texts.get(info.phase, default), timeout=info.timeout, node=info.node, method=info.method
    )


def _connection_lost(exc: BaseException, info: CallInfo) -> TalosError:
    lost = info.lost_error
    if isinstance(lost, ssl.SSLError) and _rejected_us(lost.reason or ""):
        why = f"TLS alert: {_alert_text(lost.reason or '')}"
        return AuthenticationError(_client_cert_rejected(info.endpoint, why))
    if not info.server_spoke:
        # TLS 1.3 servers check the client certificate after the handshake, then hang up;
        # the alert itself is often lost with the connection reset.
        return AuthenticationError(
            _client_cert_rejected(
                info.endpoint, "it hung up right after the TLS handshake without a reply"
            )
        )
    reason = str(exc) or type(exc).__name__
    return TransportError(
        f"the connection to {info.endpoint} broke during the call ({reason}): the node may "
        "be rebooting or apid restarting"
    )


def classify_error(exc: BaseException, info: CallInfo) -> TalosError | None:
    """Map an exception raised by a call into the pytest-talos error tree.

    Only what a transport raises is mapped: our own errors, grpclib's, h2's, the OS's, TLS,
    timeouts and a fake's :class:`FakeStatus`. Anything else is None: a bug (ours, a
    library's or a test handler's), which the caller re-raises unchanged, with its
    traceback, instead of dressing it up as a TransportError.
    """
    if isinstance(exc, TalosError):
        exc.node = exc.node or info.node
        exc.method = exc.method or info.method
        return exc
    if isinstance(exc, GRPCError):
        return api_error(StatusCode.of(exc.status.value), exc.message or "", info)
    if isinstance(exc, FakeStatus):  # a FakeTransport handler's status, mapped as a real one
        return api_error(exc.code, exc.details, info)
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError
        return _deadline(info)
    if isinstance(exc, StreamTerminatedError | ConnectionError | EOFError):
        return _connection_lost(exc, info)
    if isinstance(exc, ProtocolError | h2.exceptions.ProtocolError):
        return TransportError(
            f"HTTP/2 protocol error talking to {info.endpoint} ({exc}): is it a Talos API "
            "endpoint?",
            node=info.node,
            method=info.method,
        )
    if isinstance(exc, OSError):  # ssl.SSLError included: the connection failed mid-call
        return _connection_lost(exc, info)
    return None


def with_context(error: TalosError, info: CallInfo) -> TalosError:
    error.node = error.node or info.node
    error.method = error.method or info.method
    return error


def node_error(
    metadata: common_pb2.Metadata, info: CallInfo, fallback_node: str | None = None
) -> NodeError | None:
    """The NodeError a reply element carries in its metadata, or None if it succeeded."""
    status_code = metadata.status.code if metadata.HasField("status") else 0
    if not metadata.error and status_code == 0:
        return None
    node = metadata.hostname or fallback_node or info.node or info.endpoint
    node_info = replace(info, node=node)
    text = metadata.error or metadata.status.message
    cause = None
    if status_code:
        error = api_error(_code_name(status_code), metadata.status.message or text, node_info)
        if isinstance(error, APIError):
            cause = error
            text = error.message
    return NodeError(node, text, cause=cause, method=info.method)


def idle_expired(info: CallInfo, idle_timeout: float) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"the stream from {info.endpoint} sent nothing for {idle_timeout:g}s (idle timeout)",
        timeout=idle_timeout,
    )
