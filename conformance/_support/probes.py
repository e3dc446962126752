"""Probes the API checks need beyond the regular client: connecting without a client
certificate, with a certificate from a foreign CA, and attempting COSI writes.

Each returns what it saw as data; the checks decide. Nothing here prints key material.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from pytest_talos._proto.v1alpha1 import resource_pb2, state_pb2
from pytest_talos.client import TalosClient
from pytest_talos.emulator.pki import CertificateAuthority, issue_client_cert
from pytest_talos.errors import APIError, TalosError, TransportError
from pytest_talos.talosconfig import Context
from pytest_talos.transport import Rpc, Target, Transport, build_ssl_context

__all__ = ["Attempt", "connect_without_certificate", "foreign_ca_attempt", "write_attempts"]

APID_PORT = 50000
# The HTTP/2 client preface and an empty SETTINGS frame: what any gRPC client sends first.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
_WRITE_PROBE_ID = "pytest-talos-write-probe"
_PROBE_TYPE = ("Versions.runtime.talos.dev", "runtime")


@dataclass(frozen=True)
class Attempt:
    """The outcome of one probe: ``accepted`` means the node let it through."""

    what: str
    accepted: bool
    detail: str


def _tls_context(ca_pem: bytes) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    ctx.load_verify_locations(cadata=ca_pem.decode("ascii"))
    return ctx


def connect_without_certificate(host: str, ca_pem: bytes, timeout: float) -> Attempt:
    """Open TLS to apid with no client certificate and speak HTTP/2.

    apid requires a client certificate: it aborts the handshake (TLS 1.2) or sends an alert
    / hangs up right after it (TLS 1.3) without a single HTTP/2 byte. A server that answers
    with HTTP/2 frames accepted the connection. The node's own certificate is verified
    against the talosconfig CA, so a wrong CA is an error, not a verdict.
    """
    what = "TLS connection without a client certificate"
    context = _tls_context(ca_pem)
    try:
        with (socket.create_connection((host, APID_PORT), timeout=timeout) as raw,
              context.wrap_socket(raw, server_hostname=host) as tls):
            tls.sendall(_H2_PREFACE)
            data = tls.recv(64)
    except ssl.SSLCertVerificationError as exc:
        raise TransportError(
            f"cannot verify the node's certificate on {host}:{APID_PORT} ({exc.verify_message});"
            " check the ca of the talosconfig context", node=host) from None
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as exc:
        return Attempt(what, accepted=False, detail=f"refused: {exc}")
    except TimeoutError:
        return Attempt(what, accepted=False, detail=f"no answer within {timeout:g}s")
    except OSError as exc:
        raise TransportError(f"cannot connect to {host}:{APID_PORT}: {exc}", node=host) from None
    if not data:
        return Attempt(what, accepted=False, detail="the node hung up after the handshake")
    return Attempt(what, accepted=True,
                   detail=f"the node answered with {len(data)} bytes of HTTP/2 (frame type "
                   f"{data[3] if len(data) > 3 else '?'})")


def foreign_ca_attempt(host: str, ca_pem: bytes, timeout: float) -> Attempt:
    """Call Version with an ``os:admin`` certificate from a CA the cluster does not know."""
    what = "Version with an os:admin certificate from a foreign CA"
    foreign = CertificateAuthority.generate(organization="talos")
    cert = issue_client_cert(foreign, roles=["os:admin"])
    client = TalosClient(f"{host}:{APID_PORT}", ca_pem, cert.cert_pem, cert.key_pem,
                         timeout=timeout)
    try:
        version = client.version()
    except TransportError as exc:
        return Attempt(what, accepted=False, detail=f"refused: {exc}")
    except APIError as exc:
        # TLS let the certificate through; only authorization stopped the call.
        return Attempt(what, accepted=True, detail=f"TLS accepted it, then {exc.code}: "
                       f"{exc.details}")
    finally:
        client.close()
    return Attempt(what, accepted=True, detail=f"answered: Talos {version.tag}")


# --------------------------------------------------------------------------- COSI writes

_STATE = "/cosi.resource.State/"
_CREATE = Rpc(_STATE + "Create", state_pb2.CreateRequest, state_pb2.CreateResponse)
_UPDATE = Rpc(_STATE + "Update", state_pb2.UpdateRequest, state_pb2.UpdateResponse)
_DESTROY = Rpc(_STATE + "Destroy", state_pb2.DestroyRequest, state_pb2.DestroyResponse)


def _probe_resource() -> resource_pb2.Resource:
    kind, namespace = _PROBE_TYPE
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(namespace=namespace, type=kind, id=_WRITE_PROBE_ID,
                                       version="1", phase="running"),
        spec=resource_pb2.Spec(yaml_spec="version: pytest-talos-probe\n"),
    )


def _verdict(what: str, exc: APIError | None) -> Attempt:
    if exc is None:
        return Attempt(what, accepted=True, detail="the node carried it out")
    if exc.code == "PERMISSION_DENIED":
        return Attempt(what, accepted=False, detail=f"refused: {exc.details}")
    # NotFound and the like mean the write got past the access policy.
    return Attempt(what, accepted=True, detail=f"not refused by policy: {exc.code}: "
                   f"{exc.details}")


async def _writes(transport: Transport, node: str) -> list[Attempt]:
    target = Target(node=node)
    kind, namespace = _PROBE_TYPE
    attempts = []
    calls: tuple[tuple[str, Rpc[Any, Any], Message], ...] = (
        ("Destroy of a resource that does not exist", _DESTROY,
         state_pb2.DestroyRequest(namespace=namespace, type=kind, id=_WRITE_PROBE_ID)),
        ("Update of a resource that does not exist", _UPDATE,
         state_pb2.UpdateRequest(new_resource=_probe_resource())),
        ("Create of a probe resource", _CREATE,
         state_pb2.CreateRequest(resource=_probe_resource())),
    )
    for what, rpc, request in calls:
        try:
            await transport.unary(rpc, request, target)
            attempts.append(_verdict(what, None))
        except APIError as exc:
            attempts.append(_verdict(what, exc))
    if attempts[-1].accepted:  # the probe resource exists now: take it away again
        cleanup = state_pb2.DestroyRequest(namespace=namespace, type=kind, id=_WRITE_PROBE_ID)
        with contextlib.suppress(TalosError):
            await transport.unary(_DESTROY, cleanup, target)
    return attempts


def write_attempts(cluster_client: TalosClient, context: Context, node: str,
                   timeout: float) -> list[Attempt]:
    """Try Destroy, Update and Create through the COSI API of ``node``; each must be refused.

    Uses its own connection (the client has no write methods, on purpose). A Destroy or
    Update of a resource that does not exist changes nothing even where writes are open; a
    Create that succeeds is destroyed again.
    """
    ssl_context = build_ssl_context(context.ca_pem, context.crt_pem, context.key_pem)

    async def run() -> list[Attempt]:
        transport = Transport(cluster_client.endpoint, ssl_context, timeout=timeout)
        try:
            return await _writes(transport, node)
        finally:
            transport.close()

    return asyncio.run(run())
