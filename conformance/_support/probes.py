"""Probes the API checks need beyond the regular client: connecting without a client
certificate or with certificates apid must refuse (foreign CA, expired, without client-auth
usage, from the Kubernetes CA), an os:reader asking for what only os:admin may have, and
attempting COSI writes (judged by the state afterwards, not only by the reply).

Each returns what it saw as data; the checks decide. Nothing here prints key material.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID
from google.protobuf.message import Message

from pytest_talos import models
from pytest_talos._proto.v1alpha1 import resource_pb2, state_pb2
from pytest_talos.client import TalosClient
from pytest_talos.emulator.pki import CertificateAuthority, issue_client_cert
from pytest_talos.errors import (
    APIError,
    AuthenticationError,
    ConnectError,
    DeadlineExceeded,
    FailedPrecondition,
    TalosError,
    TransportError,
)
from pytest_talos.node import TalosNode
from pytest_talos.talos_api import APID_PORT, join_host_port
from pytest_talos.talosconfig import Context
from pytest_talos.transport import Rpc, Target, Transport, build_ssl_context, certificate_roles

__all__ = [
    "APPLY_BUSY",
    "BUSY_TRIES",
    "KNOWN_SENSITIVE",
    "Attempt",
    "certificate_attempt",
    "connect_without_certificate",
    "eku_attempts",
    "expired_credentials",
    "foreign_ca_attempt",
    "kubernetes_ca_attempt",
    "not_tested",
    "reader_admin_attempts",
    "reader_apply",
    "sensitive_read_attempts",
    "signer_from_config",
    "write_attempts",
]

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


def not_tested(host: str, why: object) -> ConnectError:
    """The error of a probe that never reached apid: nothing was tested, so no verdict."""
    endpoint = join_host_port(host, APID_PORT)
    return ConnectError(
        f"nothing was tested: this machine could not reach apid on {endpoint} directly "
        f"({why}); the probe needs its own TLS connection to port {APID_PORT} of the node",
        node=host,
    )


def _connect(host: str, timeout: float) -> socket.socket:
    """TCP to apid; not reaching it (refused, no route, timed out) is :func:`not_tested`."""
    try:
        return socket.create_connection((host, APID_PORT), timeout=timeout)
    except TimeoutError:
        raise not_tested(host, f"no TCP connection within {timeout:g}s") from None
    except OSError as exc:
        raise not_tested(host, exc.strerror or exc) from None


def connect_without_certificate(host: str, ca_pem: bytes, timeout: float) -> Attempt:
    """Open TLS to apid with no client certificate and speak HTTP/2.

    apid requires a client certificate: it aborts the handshake (TLS 1.2) or sends an alert
    / hangs up right after it (TLS 1.3) without a single HTTP/2 byte. A server that answers
    with HTTP/2 frames accepted the connection. The node's own certificate is verified
    against the talosconfig CA, so a wrong CA is an error, not a verdict; so is a node this
    machine cannot open a TCP connection to (:func:`not_tested`).
    """
    what = "TLS connection without a client certificate"
    context = _tls_context(ca_pem)
    endpoint = join_host_port(host, APID_PORT)
    try:
        with _connect(host, timeout) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(_H2_PREFACE)
            data = tls.recv(64)
    except ssl.SSLCertVerificationError as exc:
        raise TransportError(
            f"cannot verify the node's certificate on {endpoint} ({exc.verify_message});"
            " check the ca of the talosconfig context",
            node=host,
        ) from None
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as exc:
        return Attempt(what, accepted=False, detail=f"refused: {exc}")
    except TimeoutError:  # TCP is up: the node took the connection but answered nothing
        return Attempt(what, accepted=False, detail=f"no answer within {timeout:g}s")
    except OSError as exc:
        raise TransportError(f"cannot connect to {endpoint}: {exc}", node=host) from None
    if not data:
        return Attempt(what, accepted=False, detail="the node hung up after the handshake")
    return Attempt(
        what,
        accepted=True,
        detail=f"the node answered with {len(data)} bytes of HTTP/2 (frame type "
        f"{data[3] if len(data) > 3 else '?'})",
    )


def foreign_ca_attempt(host: str, ca_pem: bytes, timeout: float) -> Attempt:
    """Call Version with an ``os:admin`` certificate from a CA the cluster does not know."""
    foreign = CertificateAuthority.generate(organization="talos")
    cert = issue_client_cert(foreign, roles=["os:admin"])
    return certificate_attempt(
        host,
        ca_pem,
        cert.cert_pem,
        cert.key_pem,
        timeout,
        "Version with an os:admin certificate from a foreign CA",
    )


# How the transport words a server certificate this client rejected
# (pytest_talos/transport/_errors.py _verify_failure): the probe's own check failed, the
# node refused nothing.
_SERVER_CERT_REJECTED = "the server certificate of "


def certificate_attempt(
    host: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, timeout: float, what: str
) -> Attempt:
    """Call Version on ``host`` presenting ``cert_pem``: refused means TLS turned it away.

    Only the node's refusal counts: a TLS alert, or a hang-up right after the handshake
    (what Go's ``RequireAndVerifyClientCert`` and apid's ``verifyExtKeyUsage`` do,
    internal/app/apid/service.go), which the transport reports as an AuthenticationError.
    A node this machine cannot reach (connection refused, no route, TCP or TLS timeout) or
    whose certificate this client rejects tested nothing: :func:`not_tested`, never a pass.
    A PermissionDenied after the handshake counts as accepted: apid let the certificate
    in, and only the roles in it stopped the call.
    """
    client = TalosClient(
        join_host_port(host, APID_PORT), ca_pem, cert_pem, key_pem, timeout=timeout
    )
    try:
        version = client.version()
    except AuthenticationError as exc:
        if exc.message.startswith(_SERVER_CERT_REJECTED):
            raise not_tested(host, exc.message) from None
        return Attempt(what, accepted=False, detail=f"refused: {exc}")
    except TransportError as exc:
        raise not_tested(host, exc.message) from None
    except APIError as exc:
        # TLS let the certificate through; only authorization stopped the call.
        return Attempt(
            what, accepted=True, detail=f"TLS accepted it, then {exc.code}: {exc.details}"
        )
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
        metadata=resource_pb2.Metadata(
            namespace=namespace, type=kind, id=_WRITE_PROBE_ID, version="1", phase="running"
        ),
        spec=resource_pb2.Spec(yaml_spec="version: pytest-talos-probe\n"),
    )


def _verdict(what: str, exc: APIError | None) -> Attempt:
    if exc is None:
        return Attempt(what, accepted=True, detail="the node carried it out")
    if exc.code == "PERMISSION_DENIED":
        return Attempt(what, accepted=False, detail=f"refused: {exc.details}")
    # NotFound and the like mean the write got past the access policy.
    return Attempt(what, accepted=True, detail=f"not refused by policy: {exc.code}: {exc.details}")


_GET = Rpc(_STATE + "Get", state_pb2.GetRequest, state_pb2.GetResponse)


async def _probe_exists(transport: Transport, target: Target) -> bool | None:
    """Whether the probe resource exists (None: the node did not say)."""
    kind, namespace = _PROBE_TYPE
    request = state_pb2.GetRequest(namespace=namespace, type=kind, id=_WRITE_PROBE_ID)
    try:
        await transport.unary(_GET, request, target)
    except APIError as exc:
        return False if exc.code == "NOT_FOUND" else None
    return True


async def _writes(transport: Transport, node: str) -> list[Attempt]:
    """Each write is judged by its reply and by the state afterwards: a node that answers
    PermissionDenied but carried the write out is caught by the Get that follows it."""
    target = Target(node=node)
    kind, namespace = _PROBE_TYPE
    attempts = []
    if await _probe_exists(transport, target):
        attempts.append(
            Attempt(
                "the probe resource before any write",
                accepted=True,
                detail=f"{kind} {namespace}/{_WRITE_PROBE_ID} exists already "
                "(an earlier write got through)",
            )
        )
    calls: tuple[tuple[str, Rpc[Any, Any], Message], ...] = (
        (
            "Destroy of a resource that does not exist",
            _DESTROY,
            state_pb2.DestroyRequest(namespace=namespace, type=kind, id=_WRITE_PROBE_ID),
        ),
        (
            "Update of a resource that does not exist",
            _UPDATE,
            state_pb2.UpdateRequest(new_resource=_probe_resource()),
        ),
        (
            "Create of a probe resource",
            _CREATE,
            state_pb2.CreateRequest(resource=_probe_resource()),
        ),
    )
    left_behind = False
    for what, rpc, request in calls:
        try:
            await transport.unary(rpc, request, target)
            verdict = _verdict(what, None)
        except APIError as exc:
            verdict = _verdict(what, exc)
        exists = await _probe_exists(transport, target)
        if exists and rpc is not _DESTROY:
            left_behind = True
            verdict = Attempt(
                what,
                accepted=True,
                detail=f"{verdict.detail}; afterwards {kind} {namespace}/{_WRITE_PROBE_ID} exists",
            )
        attempts.append(verdict)
    if left_behind or attempts[-1].accepted:  # take the probe resource away again
        cleanup = state_pb2.DestroyRequest(namespace=namespace, type=kind, id=_WRITE_PROBE_ID)
        with contextlib.suppress(TalosError):
            await transport.unary(_DESTROY, cleanup, target)
        if await _probe_exists(transport, target):
            attempts.append(
                Attempt(
                    "clean-up of the probe resource",
                    accepted=True,
                    detail=f"{kind} {namespace}/{_WRITE_PROBE_ID} could not "
                    "be destroyed: it stays on the node",
                )
            )
    return attempts


def write_attempts(
    cluster_client: TalosClient, context: Context, node: str, timeout: float
) -> list[Attempt]:
    """Try Destroy, Update and Create through the COSI API of ``node``; each must be refused
    and leave no probe resource behind.

    Uses its own connection (the client has no write methods, on purpose). A Destroy or
    Update of a resource that does not exist changes nothing even where writes are open; a
    probe resource that a write left is destroyed again (and reported if it cannot be).
    """
    ssl_context = build_ssl_context(context.ca_pem, context.crt_pem, context.key_pem)

    async def run() -> list[Attempt]:
        transport = Transport(cluster_client.endpoint, ssl_context, timeout=timeout)
        try:
            return await _writes(transport, node)
        finally:
            transport.close()

    return asyncio.run(run())


# --------------------------------------------------------------------------- certificates


def signer_from_config(raw: bytes, section: str) -> CertificateAuthority | None:
    """The CA (certificate and key) of ``<section>.ca`` in a machine config, if it has a key.

    A control plane's config holds the Talos OS CA (``machine.ca``) and the Kubernetes CA
    (``cluster.ca``) with their keys (pkg/machinery/config/types/v1alpha1); a worker's has
    no key. None when there is no usable key.
    """
    try:
        docs = list(yaml.safe_load_all(raw))
    except yaml.YAMLError:
        return None
    for doc in docs:
        part = doc.get(section) if isinstance(doc, dict) else None
        ca = part.get("ca") if isinstance(part, dict) else None
        if not isinstance(ca, dict) or not ca.get("crt") or not ca.get("key"):
            continue
        try:
            cert = x509.load_pem_x509_certificate(base64.b64decode(ca["crt"]))
            # Talos labels an Ed25519 PKCS#8 key "ED25519 PRIVATE KEY" (siderolabs/crypto).
            key_pem = base64.b64decode(ca["key"]).replace(b"ED25519 PRIVATE KEY", b"PRIVATE KEY")
            key = load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError):
            return None
        return CertificateAuthority(cert, key)  # type: ignore[arg-type]
    return None


def expired_credentials(admin: TalosClient) -> tuple[bytes, bytes, str]:
    """An os:reader certificate of the cluster's own CA that has expired, its key, and what
    it is.

    The kit has no CA key against a real cluster, so the certificate comes from
    GenerateClientConfiguration (os:admin) with a TTL of one second; this waits until it has
    expired. Minting a certificate changes nothing on the node.
    """
    creds = admin.generate_client_configuration(["os:reader"], 1)
    cert = x509.load_pem_x509_certificate(creds.crt_pem)
    left = (cert.not_valid_after_utc - dt.datetime.now(dt.UTC)).total_seconds()
    if left > 10:
        raise TransportError(
            f"GenerateClientConfiguration with a 1s TTL returned a certificate "
            f"valid for another {left:.0f}s"
        )
    time.sleep(max(0.0, left) + 1.5)
    what = (
        f"Version with an os:reader certificate that expired at "
        f"{cert.not_valid_after_utc:%H:%M:%S} UTC"
    )
    return creds.crt_pem, creds.key_pem, what


def eku_attempts(
    host: str, ca_pem: bytes, signer: CertificateAuthority, timeout: float
) -> list[Attempt]:
    """Certificates of the cluster's CA whose ExtKeyUsage is not exactly ``[ClientAuth]``.

    apid's ``verifyExtKeyUsage`` (internal/app/apid/service.go) refuses both: Go's TLS lets a
    certificate without the extension through (no EKU means any), and one that also allows
    ServerAuth, so only apid's own rule stops them.
    """
    shapes: tuple[tuple[str, tuple[x509.ObjectIdentifier, ...]], ...] = (
        ("without ExtKeyUsage", ()),
        (
            "with ExtKeyUsage [ClientAuth, ServerAuth]",
            (ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH),
        ),
    )
    attempts = []
    for label, usages in shapes:
        cert = issue_client_cert(signer, roles=["os:reader"], ext_key_usage=usages)
        attempts.append(
            certificate_attempt(
                host,
                ca_pem,
                cert.cert_pem,
                cert.key_pem,
                timeout,
                f"Version with an os:reader certificate of the Talos CA {label}",
            )
        )
    return attempts


def _kubeconfig_client(kubeconfig: bytes) -> tuple[bytes, bytes] | None:
    """The client certificate and key of the first user of a kubeconfig."""
    doc = yaml.safe_load(kubeconfig)
    users = doc.get("users") if isinstance(doc, dict) else None
    for entry in users or ():
        user = entry.get("user") if isinstance(entry, dict) else None
        if isinstance(user, dict) and user.get("client-certificate-data"):
            return (
                base64.b64decode(user["client-certificate-data"]),
                base64.b64decode(user.get("client-key-data", "")),
            )
    return None


def kubernetes_ca_attempt(
    host: str, ca_pem: bytes, kubeconfig: bytes, timeout: float
) -> Attempt | None:
    """Version presenting the admin kubeconfig's client certificate (Kubernetes CA, O =
    system:masters). None when the kubeconfig holds no client certificate."""
    found = _kubeconfig_client(kubeconfig)
    if found is None:
        return None
    cert_pem, key_pem = found
    return certificate_attempt(
        host,
        ca_pem,
        cert_pem,
        key_pem,
        timeout,
        "Version with the admin kubeconfig's client certificate (Kubernetes CA)",
    )


# --------------------------------------------------------------------------- os:reader

# Sensitive types (Sensitivity: meta.Sensitive) of pkg/machinery/resources/config/
# machine_config.go and pkg/machinery/resources/secrets/*.go; the node's own resource
# definitions name the rest.
KNOWN_SENSITIVE = frozenset(
    {
        "MachineConfigs.config.talos.dev",
        "ApiCertificates.secrets.talos.dev",
        "CertSANs.secrets.talos.dev",
        "EncryptionSalts.secrets.talos.dev",
        "EtcdSecrets.secrets.talos.dev",
        "EtcdRootSecrets.secrets.talos.dev",
        "KubeletSecrets.secrets.talos.dev",
        "KubernetesSecrets.secrets.talos.dev",
        "KubernetesDynamicCerts.secrets.talos.dev",
        "KubernetesRootSecrets.secrets.talos.dev",
        "MaintenanceRootSecrets.secrets.talos.dev",
        "OSRootSecrets.secrets.talos.dev",
        "TrustdCertificates.secrets.talos.dev",
    }
)
_ABSENT_ID = "pytest-talos-absent"
_WATCH_SECONDS = 2.0


def _reader_verdict(what: str, call: Callable[[], str]) -> Attempt:
    try:
        detail = call()
    except APIError as exc:
        if exc.code == "PERMISSION_DENIED":
            return Attempt(what, accepted=False, detail=f"refused: {exc.details}")
        return Attempt(
            what, accepted=True, detail=f"past the access policy: {exc.code}: {exc.details}"
        )
    return Attempt(what, accepted=True, detail=detail)


def _watched(reader: TalosClient, kind: str, namespace: str) -> str:
    with reader.watch(kind, namespace=namespace, bootstrap=True, timeout=_WATCH_SECONDS) as events:
        seen = 0
        with contextlib.suppress(DeadlineExceeded):
            for event in events:
                if event.type == "bootstrapped":
                    break
                seen += 1
    return f"the watch was set up and delivered {seen} resource(s)"


def _reader_reads(reader: TalosClient, kind: str, namespace: str, ids: list[str]) -> list[Attempt]:
    def get(id_: str) -> Callable[[], str]:
        return lambda: f"read version {reader.get(kind, id_, namespace).version}"

    attempts = [_reader_verdict(f"Get {kind} {namespace}/{id_}", get(id_)) for id_ in ids]
    attempts.append(
        _reader_verdict(
            f"List {kind}",
            lambda: f"listed {len(reader.list_resources(kind, namespace))} resource(s)",
        )
    )
    attempts.append(_reader_verdict(f"Watch {kind}", lambda: _watched(reader, kind, namespace)))
    return attempts


def sensitive_read_attempts(
    admin: TalosClient, reader: TalosClient
) -> tuple[list[Attempt], list[str]]:
    """Get, List and Watch of every sensitive type the node serves, as os:reader.

    Sensitive = marked so in the node's resource definitions, or known so upstream
    (:data:`KNOWN_SENSITIVE`). Gets ask for the ids the admin sees (at most two a type),
    or an absent id: the access policy refuses before any lookup
    (internal/app/resources/access.go), so NotFound is a finding too. Returns the attempts
    and the known-sensitive types the node does not serve.
    """
    definitions = admin.resource_definitions(refresh=True)
    served = {d.resource_type: d for d in definitions}
    targets = [d for d in definitions if d.sensitive or d.resource_type in KNOWN_SENSITIVE]
    attempts = []
    for definition in sorted(targets, key=lambda d: d.resource_type):
        kind, namespace = definition.resource_type, definition.default_namespace
        try:
            ids = [r.id for r in admin.list_resources(kind, namespace)][:2]
        except APIError:
            ids = []
        attempts += _reader_reads(reader, kind, namespace, ids or [_ABSENT_ID])
    return attempts, sorted(KNOWN_SENSITIVE - set(served))


def reader_admin_attempts(reader: TalosClient) -> dict[str, Attempt]:
    """The Kubeconfig RPC, and GenerateClientConfiguration asking for os:admin, as os:reader.

    Both are os:admin only (internal/app/machined/pkg/system/services/machined.go); the
    authorizer refuses before the handler, so a worker's Unimplemented is a finding too.
    Neither changes the node.
    """

    def kubeconfig() -> str:
        return f"returned a kubeconfig of {len(reader.kubeconfig())} bytes"

    def mint() -> str:
        creds = reader.generate_client_configuration(["os:admin"], 60)
        roles = ", ".join(certificate_roles(creds.crt_pem)) or "none"
        return f"minted a client certificate with roles {roles}"

    return {
        "kubeconfig": _reader_verdict("Kubeconfig as os:reader", kubeconfig),
        "mint": _reader_verdict("GenerateClientConfiguration(os:admin) as os:reader", mint),
    }


# machined takes its apply lock before it looks at the caller's roles (v1alpha1_server.go
# ApplyConfiguration: TryLock, then the admin check), so a reader's apply while another
# apply runs on the node (another run, another worker's config check) is refused as busy.
APPLY_BUSY = "another apply configuration is already in progress"
BUSY_TRIES = 6


def reader_apply(
    node: TalosNode, reader: TalosClient, raw: bytes, *, dry_run: bool
) -> models.ApplyResult:
    """The reader's apply, tried again while the node is busy with another apply."""
    for attempt in range(BUSY_TRIES):
        try:
            return reader.apply_configuration(raw, "no-reboot", dry_run=dry_run)
        except FailedPrecondition as exc:
            if APPLY_BUSY not in exc.details:
                raise
            time.sleep(0.25 * (attempt + 1))
    raise TalosError(
        f"not measured: the node answered '{APPLY_BUSY}' to every one of {BUSY_TRIES} tries "
        "(its apply lock is taken before the caller's roles are looked at); run the check "
        "again when nothing else changes the node",
        node=node.name,
    )
