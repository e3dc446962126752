"""The wire: grpclib over a stdlib ``ssl`` context, and the table of what its failures mean.

Why grpclib and not grpcio: Talos signs its API certificates with Ed25519, which grpcio's
BoringSSL refuses while verifying a server; Python's ``ssl`` (OpenSSL 3) handles it.

The seam (httpx's ``BaseTransport`` / ``MockTransport``): :class:`Transport` is a protocol
with two siblings, :class:`GrpcTransport` (one HTTP/2 connection to one endpoint) and
:class:`FakeTransport` (a Python function, no socket). A transport only moves a call, with
the metadata and deadline it is handed, and raises what its wire raised. The policy over it
(default deadlines, ``runtime``/``context``/``node`` metadata, the mapping below, the DEBUG
log of every call) is written once, in the client's ``Connection``
(:mod:`pytest_talos.client`), for both.

This package is the only part of the client side that touches grpclib, ``ssl`` errors and
raw sockets. :func:`classify_error` turns every wire failure (grpclib, h2, OS, TLS,
timeouts, a fake's :class:`FakeStatus`) into a :class:`~pytest_talos.errors.TalosError`
carrying ``.node`` and ``.method``; anything else (a bug, ours or a library's) is left to be
re-raised as it is::

    DNS failure                     -> ConnectError        "cannot resolve ..."
    TCP refused / unreachable       -> ConnectError        "... refused: is apid listening on ...?"
    TCP or TLS handshake too slow   -> DeadlineExceeded    says which phase stalled
    server certificate rejected     -> AuthenticationError "wrong CA in talosconfig? SANs?"
    client certificate rejected     -> AuthenticationError "expired? another cluster's CA?"
    endpoint does not speak TLS     -> ConnectError        "not a TLS/Talos API endpoint"
    non-OK gRPC status              -> APIError subclass   PermissionDenied names the roles
    connection lost / stream reset  -> TransportError
    per-node error in fan-out reply -> NodeError           (see :func:`node_error`)

Node targeting works as with talosctl: ``node`` metadata proxies one-to-one through the
endpoint's apid, ``nodes`` fans out and apid tags every reply element with the node.

Layout: this module is the public surface; ``_call`` (what a call names: :class:`Rpc`,
:class:`Target`), ``_base`` (the :class:`Transport` protocol, :class:`WireState`), ``_tls``
(the client TLS context), ``_grpc`` (:class:`GrpcTransport`), ``_channel`` (the phased
connection), ``_errors`` (the classification above, pure functions), ``_fake`` (what a
FakeTransport handler receives and may raise) and ``_faketransport`` (:class:`FakeTransport`).
Endpoints are :class:`~pytest_talos.endpoint.Endpoint` values, parsed where their text
enters; the transport reads no talosconfig.

The seam for tests: ``TalosClient.from_transport(transport)`` (and
``AsyncTalosClient.from_transport``) builds a client on any Transport; a
:class:`FakeTransport` answers from a Python function, with no socket at all.
"""

from pytest_talos.endpoint import Endpoint
from pytest_talos.talos_api import certificate_roles
from pytest_talos.transport._base import Metadata, Transport, WireState
from pytest_talos.transport._call import NO_TARGET, Rpc, Target, check_positive
from pytest_talos.transport._errors import (
    DEFAULT_STREAM_TIMEOUT,
    DEFAULT_TIMEOUT,
    CallInfo,
    ConnectPhase,
    api_error,
    classify_error,
    connect_failure,
    idle_expired,
    node_error,
    with_context,
)
from pytest_talos.transport._fake import FakeRequest, FakeStatus, Handler
from pytest_talos.transport._faketransport import FakeTransport
from pytest_talos.transport._grpc import GrpcTransport
from pytest_talos.transport._peer import read_peer_certificate
from pytest_talos.transport._tls import build_ssl_context, shared_ssl_context, split_endpoint

__all__ = [
    "DEFAULT_STREAM_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "NO_TARGET",
    "CallInfo",
    "ConnectPhase",
    "Endpoint",
    "FakeRequest",
    "FakeStatus",
    "FakeTransport",
    "GrpcTransport",
    "Handler",
    "Metadata",
    "Rpc",
    "Target",
    "Transport",
    "WireState",
    "api_error",
    "build_ssl_context",
    "certificate_roles",
    "check_positive",
    "classify_error",
    "connect_failure",
    "idle_expired",
    "node_error",
    "read_peer_certificate",
    "shared_ssl_context",
    "split_endpoint",
    "with_context",
]
