"""Probes the API checks need beyond the regular client: connecting without a client
certificate or with certificates apid must refuse (foreign CA, expired, without client-auth
usage, not yet valid, from the Kubernetes CA), an os:reader or os:operator asking for what
its role may not have (sensitive resources, admin and operator methods, each sent so that it
changes nothing if let through), and attempting COSI writes (judged by the state
afterwards, not only by the reply).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2, message_factory
from google.protobuf.message import Message

from pytest_talos import models
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2
from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.resource.definitions.runtime import runtime_pb2
from pytest_talos._proto.v1alpha1 import resource_pb2, state_pb2
from pytest_talos.client import Connection, TalosClient
from pytest_talos.errors import (
    APIError,
    AuthenticationError,
    ConnectError,
    DeadlineExceeded,
    FailedPrecondition,
    StatusCode,
    TalosError,
    TransportError,
)
from pytest_talos.node import TalosNode
from pytest_talos.pki import CertAndKey, CertificateAuthority, issue_client_cert
from pytest_talos.releases import V1_13, Release
from pytest_talos.talos_api import APID_PORT, join_host_port
from pytest_talos.talosconfig import Context
from pytest_talos.transport import (
    GrpcTransport,
    Rpc,
    Target,
    build_ssl_context,
    certificate_roles,
    shared_ssl_context,
)

__all__ = [
    "ADMIN_ONLY_READS",
    "APPLY_BUSY",
    "BUSY_TRIES",
    "CHANGING_CALLS",
    "DISRUPTIVE_CALLS",
    "KNOWN_SENSITIVE",
    "NOT_YET_VALID_BY",
    "PRIVILEGED_READS",
    "PROBE_BACKDATE",
    "Attempt",
    "MethodCall",
    "RoleCalls",
    "certificate_attempt",
    "connect_without_certificate",
    "control_attempt",
    "eku_attempts",
    "expired_credentials",
    "foreign_ca_attempt",
    "kubernetes_ca_attempt",
    "method_attempts",
    "not_tested",
    "not_yet_valid_attempts",
    "reader_admin_attempts",
    "reader_apply",
    "role_attempts",
    "sensitive_read_attempts",
    "served_by",
    "signer_from_config",
    "write_attempts",
]

# The HTTP/2 client preface and an empty SETTINGS frame: what any gRPC client sends first.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
_WRITE_PROBE_ID = "pytest-talos-write-probe"
_PROBE_TYPE = ("Versions.runtime.talos.dev", "runtime")


@dataclass(frozen=True)
class Attempt:
    """The outcome of one probe: ``accepted`` means the node let it through. A ``control``
    is a positive control, a certificate the node must accept: evidence, never a finding."""

    what: str
    accepted: bool
    detail: str
    control: bool = False


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


# Writes of an absent id in other namespaces: Talos's access filter refuses every non-read
# verb before it looks at the type or namespace (internal/app/resources/access.go), so a
# filter that opens one namespace (config, network) is caught too. A Destroy or Update of an
# id that does not exist changes nothing even where writes are open (cosi answers NotFound).
_OTHER_WRITE_TYPES = (
    ("MachineConfigs.config.talos.dev", "config"),
    ("AddressSpecs.net.talos.dev", "network"),
)


# A v1alpha1 config document the node's config loader decodes (configloader.NewFromBytes:
# the machine key marks a v1alpha1 document; nothing is validated on decode).
_PROBE_CONFIG = b"version: v1alpha1\nmachine:\n  type: worker\n"
_PROBE_VERSION = "v0.0.0-pytest-talos-probe"


def _probe_spec(kind: str) -> resource_pb2.Spec:
    """A real spec of ``kind``, encoded as Talos encodes it, with its YAML beside it.

    cosi's State server decodes a written resource (protobuf.UnmarshalResource, the type's
    own decoder) before Talos's access filter sees the write
    (cosi-project/runtime v1.14.1 pkg/state/protobuf/server/server.go, Create and Update),
    so a resource the node cannot decode is answered "Unknown" and never reaches the policy
    this probe is about. MachineConfigs decode their config bytes
    (pkg/machinery/resources/config/machine_config.go UnmarshalProto: no document is
    "config not found"); the other types decode their protoenc spec
    (runtime/version.go, network/address_spec.go)."""
    if kind == "MachineConfigs.config.talos.dev":
        config = config_pb2.MachineConfigSpec(yaml_marshalled=_PROBE_CONFIG)
        return resource_pb2.Spec(
            proto_spec=config.SerializeToString(), yaml_spec=_PROBE_CONFIG.decode()
        )
    if kind == "AddressSpecs.net.talos.dev":
        # link lo, family inet4 (2), scope host (254), layer configuration (4)
        spec = _WIRE["AddressSpecSpec"](link_name="lo", family=2, scope=254, config_layer=4)
        yaml_spec = "linkName: lo\nfamily: inet4\nscope: host\nlayer: configuration\n"
        return resource_pb2.Spec(proto_spec=spec.SerializeToString(), yaml_spec=yaml_spec)
    version = runtime_pb2.VersionSpec(version=_PROBE_VERSION, name="pytest-talos")
    return resource_pb2.Spec(
        proto_spec=version.SerializeToString(),
        yaml_spec=f"name: pytest-talos\nversion: {_PROBE_VERSION}\n",
    )


def _probe_resource(
    kind: str = _PROBE_TYPE[0], namespace: str = _PROBE_TYPE[1]
) -> resource_pb2.Resource:
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(
            namespace=namespace, type=kind, id=_WRITE_PROBE_ID, version="1", phase="running"
        ),
        spec=_probe_spec(kind),
    )


def _undecoded(what: str, exc: APIError) -> TalosError:
    """A write the node could not decode never reached the access policy: not judged."""
    return TalosError(
        f"not measured: the node could not decode the probe's resource for the {what} "
        f"({exc.code}: {exc.details}); cosi decodes a written resource before Talos's access "
        "policy runs, so the policy was never asked. The probe's spec no longer matches this "
        "Talos version's: report it to pytest-talos"
    )


def _verdict(what: str, exc: APIError | None) -> Attempt:
    if exc is None:
        return Attempt(what, accepted=True, detail="the node carried it out")
    if exc.code is StatusCode.PERMISSION_DENIED:
        return Attempt(what, accepted=False, detail=f"refused: {exc.details}")
    # NotFound and the like mean the write got past the access policy.
    return Attempt(what, accepted=True, detail=f"not refused by policy: {exc.code}: {exc.details}")


_GET = Rpc(_STATE + "Get", state_pb2.GetRequest, state_pb2.GetResponse)


async def _probe_exists(
    transport: Connection, target: Target, kind_ns: tuple[str, str] = _PROBE_TYPE
) -> bool | None:
    """Whether the probe resource exists (None: the node did not say)."""
    kind, namespace = kind_ns
    request = state_pb2.GetRequest(namespace=namespace, type=kind, id=_WRITE_PROBE_ID)
    try:
        await transport.unary(_GET, request, target)
    except APIError as exc:
        return False if exc.code is StatusCode.NOT_FOUND else None
    return True


async def _writes(transport: Connection, node: str) -> list[Attempt]:
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
        verdict = await _sent_write(transport, rpc, request, target, what)
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
    for other in _OTHER_WRITE_TYPES:
        attempts += await _absent_writes(transport, target, other)
    return attempts


async def _sent_write(
    transport: Connection, rpc: Rpc[Any, Any], request: Message, target: Target, what: str
) -> Attempt:
    """One COSI write, judged by its reply (refused or not)."""
    try:
        await transport.unary(rpc, request, target)
    except APIError as exc:
        if exc.code is StatusCode.UNKNOWN and rpc is not _DESTROY:
            raise _undecoded(what, exc) from None
        return _verdict(what, exc)
    return _verdict(what, None)


async def _absent_writes(
    transport: Connection, target: Target, kind_ns: tuple[str, str]
) -> list[Attempt]:
    """Destroy and Update of an absent id of ``kind_ns``, each judged by its reply and by a
    Get afterwards (a node that answers PermissionDenied but wrote is caught)."""
    kind, namespace = kind_ns
    calls: tuple[tuple[str, Rpc[Any, Any], Message], ...] = (
        (
            f"Destroy of an absent {kind} in {namespace}",
            _DESTROY,
            state_pb2.DestroyRequest(namespace=namespace, type=kind, id=_WRITE_PROBE_ID),
        ),
        (
            f"Update of an absent {kind} in {namespace}",
            _UPDATE,
            state_pb2.UpdateRequest(new_resource=_probe_resource(kind, namespace)),
        ),
    )
    attempts = []
    for what, rpc, request in calls:
        verdict = await _sent_write(transport, rpc, request, target, what)
        if await _probe_exists(transport, target, kind_ns):
            verdict = Attempt(
                what,
                accepted=True,
                detail=f"{verdict.detail}; afterwards {kind} {namespace}/{_WRITE_PROBE_ID} "
                "exists (destroy it by hand)",
            )
        attempts.append(verdict)
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
        transport = Connection(GrpcTransport(cluster_client.endpoint, ssl_context), timeout=timeout)
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
    received = time.monotonic()
    cert = x509.load_pem_x509_certificate(creds.crt_pem)
    # The node minted it at its own clock (secrets/ca.go NewAdminCertificateAndKey:
    # NotBefore now, NotAfter now + TTL) before it answered: waiting the certificate's own
    # lifetime from the reply lets it expire on the node whatever this machine's clock says.
    lifetime = (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds()
    if lifetime > 10:
        raise TransportError(
            f"GenerateClientConfiguration with a 1s TTL returned a certificate "
            f"valid for {lifetime:.0f}s"
        )
    time.sleep(max(0.0, received + lifetime + 1.5 - time.monotonic()))
    what = (
        f"Version with an os:reader certificate that expired at "
        f"{cert.not_valid_after_utc:%H:%M:%S} UTC"
    )
    return creds.crt_pem, creds.key_pem, what


# Probe certificates start this long before this machine's clock, as Talos backdates the
# admin kubeconfig's certificate by allowedTimeSkew (pkg/kubeconfig/generate.go, 10 s);
# siderolabs/crypto itself starts a certificate at the signer's now (x509/options.go
# NewDefaultOptions, v0.6.4). A node whose clock is behind this machine's by less than this
# still judges the probes by their usage, not as "not yet valid"; the control certificate
# (:func:`control_attempt`) proves it before any refusal counts.
PROBE_BACKDATE = dt.timedelta(seconds=10)
_PROBE_LIFETIME = dt.timedelta(hours=1)


def _runner_now() -> dt.datetime:
    """This machine's clock, which probe certificates are minted at (a test seam)."""
    return dt.datetime.now(dt.UTC)


def _reader_cert(
    signer: CertificateAuthority,
    usages: tuple[x509.ObjectIdentifier, ...] = (ExtendedKeyUsageOID.CLIENT_AUTH,),
    not_before: dt.datetime | None = None,
) -> CertAndKey:
    now = _runner_now()
    start = not_before if not_before is not None else now - PROBE_BACKDATE
    return issue_client_cert(
        signer,
        roles=["os:reader"],
        ext_key_usage=usages,
        not_before=start,
        not_after=max(start, now) + _PROBE_LIFETIME,
    )


def control_attempt(
    host: str, ca_pem: bytes, signer: CertificateAuthority, timeout: float
) -> Attempt:
    """The positive control: an os:reader certificate of the same signer, backdated like the
    probes, with exactly ``[ClientAuth]``, which apid must accept. When apid refuses it, a
    refusal of any probe proves nothing (the node may not trust the signer, or judge every
    probe not yet valid because its clock is behind): the probe raises, it never passes."""
    cert = _reader_cert(signer)
    attempt = certificate_attempt(
        host,
        ca_pem,
        cert.cert_pem,
        cert.key_pem,
        timeout,
        "the control: Version with an os:reader certificate of the Talos CA with ExtKeyUsage "
        f"[ClientAuth], valid from {PROBE_BACKDATE.total_seconds():g}s before this machine's "
        "clock",
    )
    if not attempt.accepted:
        raise TalosError(
            f"not measured: apid refused the control certificate ({attempt.detail}), one it "
            "must accept: exactly [ClientAuth], from the same CA as the probes, valid from "
            f"{PROBE_BACKDATE.total_seconds():g}s before this machine's clock. Until it is "
            "accepted a refused probe proves nothing; check that the node's clock is within "
            f"{PROBE_BACKDATE.total_seconds():g}s of this machine's and that the CA key is the "
            "node's own (machine.ca)",
            node=host,
        )
    return Attempt(attempt.what, accepted=True, detail=attempt.detail, control=True)


def eku_attempts(
    host: str, ca_pem: bytes, signer: CertificateAuthority, timeout: float
) -> list[Attempt]:
    """Certificates of the cluster's CA whose ExtKeyUsage is not exactly ``[ClientAuth]``,
    after the :func:`control_attempt` (the first attempt returned; raises when refused).

    apid's ``verifyExtKeyUsage`` (internal/app/apid/service.go) refuses every one: it
    requires ``slices.Equal(cert.ExtKeyUsage, [ClientAuth])`` of each non-CA certificate.
    Go's own chain verification lets each through (no extension means any usage;
    anyExtendedKeyUsage and a list holding ClientAuth satisfy a ClientAuth request), so only
    apid's rule stops them; a rule that only looks for ServerAuth misses the last two. Each
    is backdated as the control is, so only its usage differs from the control's.
    """
    shapes: tuple[tuple[str, tuple[x509.ObjectIdentifier, ...]], ...] = (
        ("without ExtKeyUsage", ()),
        (
            "with ExtKeyUsage [ClientAuth, ServerAuth]",
            (ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH),
        ),
        ("with ExtKeyUsage [anyExtendedKeyUsage]", (ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,)),
        (
            "with ExtKeyUsage [ClientAuth, CodeSigning]",
            (ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.CODE_SIGNING),
        ),
    )
    attempts = [control_attempt(host, ca_pem, signer, timeout)]
    for label, usages in shapes:
        cert = _reader_cert(signer, usages)
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


# How far in the future the probe certificate's validity starts: far beyond any clock skew
# a node that keeps time (Talos syncs NTP) could have, and far beyond the skew the control
# tolerates (PROBE_BACKDATE).
NOT_YET_VALID_BY = dt.timedelta(days=2)


def not_yet_valid_attempts(
    host: str, ca_pem: bytes, signer: CertificateAuthority, timeout: float
) -> list[Attempt]:
    """The :func:`control_attempt`, then Version with an os:reader certificate of the
    cluster's CA whose NotBefore lies two days ahead: Go's chain verification (crypto/x509
    ``isValid``, run by apid's ``RequireAndVerifyClientCert``) refuses a certificate outside
    NotBefore..NotAfter, so a node that checks only NotAfter is caught. Minting needs the CA
    key, nothing on the node changes."""
    control = control_attempt(host, ca_pem, signer, timeout)
    start = _runner_now() + NOT_YET_VALID_BY
    cert = _reader_cert(signer, not_before=start)
    probe = certificate_attempt(
        host,
        ca_pem,
        cert.cert_pem,
        cert.key_pem,
        timeout,
        f"Version with an os:reader certificate of the Talos CA not valid before "
        f"{start:%Y-%m-%d %H:%M} UTC",
    )
    return [control, probe]


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

# Every sensitive type of the node's release with its default namespace (the release table,
# pytest_talos.releases Release.sensitive_types: ``Sensitivity: meta.Sensitive`` in
# pkg/machinery/resources/** at each tag). Each is probed whether or not the node lists it in
# its ResourceDefinitions: Talos's access filter (internal/app/resources/access.go) answers a
# type it does not define with PermissionDenied ("resource type ... is not supported") and a
# sensitive one with PermissionDenied ("not authorized") to anyone without os:admin, whatever
# the verb, namespace or id; so a node that hides a type from its definitions but serves it
# is caught as well.
_SENSITIVE_NAMESPACES: Mapping[str, str] = V1_13.sensitive_types
KNOWN_SENSITIVE = frozenset(_SENSITIVE_NAMESPACES)
_ABSENT_ID = "pytest-talos-absent"


@dataclass(frozen=True)
class MethodCall:
    """One call a role must be refused, with arguments that change nothing if it is not."""

    what: str
    rpc: Rpc[Any, Any]
    request: Message
    streaming: bool = False


def _wire_messages() -> dict[str, type[Message]]:
    """Requests of methods outside the kit's proto subset (and the AddressSpec spec the write
    probe sends), built at run time with only the fields a probe sets, numbered as in
    api/machine/machine.proto, api/machine/image.proto and
    api/resource/definitions/network/network.proto (the wire format knows numbers, not
    names)."""
    string, uint64, uint32 = (
        descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
        descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    )
    shapes = {
        "PacketCaptureRequest": (("interface", 1, string),),
        "ImageServiceRemoveRequest": (("image_ref", 2, string),),
        "EtcdRemoveMemberByIDRequest": (("member_id", 1, uint64),),
        # api/resource/definitions/network/network.proto (the enums are varints on the wire)
        "AddressSpecSpec": (
            ("link_name", 2, string),
            ("family", 3, uint32),
            ("scope", 4, uint32),
            ("config_layer", 7, uint32),
        ),
    }
    proto = descriptor_pb2.FileDescriptorProto(
        name="pytest_talos_probes.proto", package="pytest_talos.probes", syntax="proto3"
    )
    for name, fields in shapes.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind in fields:
            message.field.add(
                name=field_name,
                number=number,
                type=kind,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"pytest_talos.probes.{name}")
        )
        for name in shapes
    }


_WIRE = _wire_messages()
_M = "/machine.MachineService/"
_EMPTY = empty_pb2.Empty  # replies are read (and thrown away) as Empty: unknown fields kept


def _rpc(
    path: str, request_type: type[Message], reply_type: type[Message] = _EMPTY
) -> Rpc[Any, Any]:
    return Rpc(path, request_type, reply_type)


# os:admin only (machined.go rules). Read and Copy of a world-readable kernel file: read and
# thrown away even where a defective node lets them through.
ADMIN_ONLY_READS: tuple[MethodCall, ...] = (
    MethodCall(
        "Read /proc/version",
        _rpc(_M + "Read", machine_pb2.ReadRequest, common_pb2.Data),
        machine_pb2.ReadRequest(path="/proc/version"),
        streaming=True,
    ),
    MethodCall(
        "Copy /proc/version",
        _rpc(_M + "Copy", machine_pb2.CopyRequest, common_pb2.Data),
        machine_pb2.CopyRequest(root_path="/proc/version"),
        streaming=True,
    ),
)
# What os:reader may not read (machined.go rules): the admin-only reads above; EtcdSnapshot
# (os:admin, os:operator, os:etcd:backup; only its first chunk is read, then the stream is
# cancelled: a snapshot only reads etcd); PacketCapture (os:admin, os:operator) on an
# interface that does not exist (the handler answers NotFound before opening any socket:
# v1alpha1_server.go PacketCapture). machined's authorizer refuses before any handler runs,
# so a control-plane-only method is refused on workers too.
PRIVILEGED_READS: tuple[MethodCall, ...] = (
    *ADMIN_ONLY_READS,
    MethodCall(
        "EtcdSnapshot (first chunk read and thrown away)",
        _rpc(_M + "EtcdSnapshot", _EMPTY, common_pb2.Data),
        _EMPTY(),
        streaming=True,
    ),
    MethodCall(
        f"PacketCapture on the absent interface {_ABSENT_ID}",
        _rpc(_M + "PacketCapture", _WIRE["PacketCaptureRequest"], common_pb2.Data),
        _WIRE["PacketCaptureRequest"](interface=_ABSENT_ID),
        streaming=True,
    ),
)
# Changing methods os:reader may not call (machined.go rules), each on something that does
# not exist: a service id no node has (system.Services APIStart/APIStop/APIRestart answer
# "service not found"), an image reference no node has (images.go Remove answers NotFound).
CHANGING_CALLS: tuple[MethodCall, ...] = (
    MethodCall(
        f"ServiceStart {_ABSENT_ID}",
        _rpc(
            _M + "ServiceStart", machine_pb2.ServiceStartRequest, machine_pb2.ServiceStartResponse
        ),
        machine_pb2.ServiceStartRequest(id=_ABSENT_ID),
    ),
    MethodCall(
        f"ServiceStop {_ABSENT_ID}",
        _rpc(_M + "ServiceStop", machine_pb2.ServiceStopRequest, machine_pb2.ServiceStopResponse),
        machine_pb2.ServiceStopRequest(id=_ABSENT_ID),
    ),
    MethodCall(
        f"ServiceRestart {_ABSENT_ID}",
        _rpc(
            _M + "ServiceRestart",
            machine_pb2.ServiceRestartRequest,
            machine_pb2.ServiceRestartResponse,
        ),
        machine_pb2.ServiceRestartRequest(id=_ABSENT_ID),
    ),
    MethodCall(
        f"ImageService/Remove of the absent image {_ABSENT_ID}.invalid/absent:probe",
        _rpc("/machine.ImageService/Remove", _WIRE["ImageServiceRemoveRequest"]),
        _WIRE["ImageServiceRemoveRequest"](image_ref=f"{_ABSENT_ID}.invalid/absent:probe"),
    ),
)
# Disruptive-level methods (pytest_talos.talos_api CHANGING_METHODS), sent so that they change
# nothing: BlockDeviceWipe of no device (storaged/server.go checks the role, then loops over
# the empty list; its rule admits os:reader for maintenance only, the handler refuses it on
# a configured node) and EtcdRemoveMemberByID of member 0, which no etcd member has
# (NotFound).
DISRUPTIVE_CALLS: tuple[MethodCall, ...] = (
    MethodCall(
        "BlockDeviceWipe of no device",
        _rpc("/storage.StorageService/BlockDeviceWipe", _EMPTY),
        _EMPTY(),
    ),
    MethodCall(
        "EtcdRemoveMemberByID of member 0 (no member has it)",
        _rpc(_M + "EtcdRemoveMemberByID", _WIRE["EtcdRemoveMemberByIDRequest"]),
        _WIRE["EtcdRemoveMemberByIDRequest"](member_id=0),
    ),
)


def served_by(
    calls: tuple[MethodCall, ...], release: Release
) -> tuple[tuple[MethodCall, ...], list[str]]:
    """The calls ``release`` serves, and a line for each it does not (not sent: its node
    answers Unimplemented ``unknown service ...`` before any role check, a method it lacks,
    not a refusal: pytest_talos.releases ``Release.unknown_method``)."""
    kept = tuple(call for call in calls if release.has_method(call.rpc.path))
    skipped = [
        f"{call.what}: not supported on Talos {release.line} "
        f"({release.unknown_method(call.rpc.path)})"
        for call in calls
        if not release.has_method(call.rpc.path)
    ]
    return kept, skipped


async def _first_message(transport: Connection, call: MethodCall, target: Target) -> str:
    """Read one message of a stream, throw it away and cancel the rest."""
    stream = transport.stream(call.rpc, call.request, target, total_timeout=transport.timeout)
    async with contextlib.aclosing(stream) as messages:
        async for _message in messages:
            return "answered (the first message was read and thrown away)"
    return "answered with an empty stream"


async def _method_attempt(transport: Connection, target: Target, call: MethodCall) -> Attempt:
    """PermissionDenied is a refusal; any other answer (NotFound, Unimplemented, a reply)
    means the call got past the authorization, as does no answer at all in time."""
    try:
        if call.streaming:
            detail = await _first_message(transport, call, target)
        else:
            await transport.unary(call.rpc, call.request, target)
            detail = "answered"
    except APIError as exc:
        if exc.code is StatusCode.PERMISSION_DENIED:
            return Attempt(call.what, accepted=False, detail=f"refused: {exc.details}")
        return Attempt(
            call.what, accepted=True, detail=f"past the authorization: {exc.code}: {exc.details}"
        )
    except DeadlineExceeded:
        detail = f"not refused within {transport.timeout:g}s"
    return Attempt(call.what, accepted=True, detail=detail)


def _as_role(role: str, attempt: Attempt) -> Attempt:
    return Attempt(f"{attempt.what} as {role}", attempt.accepted, attempt.detail)


# Calls of one probe in flight at once, as HTTP/2 streams of its one connection: round trips
# overlap instead of adding up (apid serves each stream on its own).
PROBE_STREAMS = 16


def method_attempts(
    endpoint: str,
    credentials: models.ClientConfiguration,
    node: str,
    timeout: float,
    calls: tuple[MethodCall, ...],
) -> list[Attempt]:
    """Send each of ``calls`` to ``node`` (through ``endpoint``) with ``credentials``, on a
    connection of their own (the client has no such methods, on purpose); each attempt is
    labelled with the certificate's role."""
    return role_attempts(endpoint, node, timeout, [(credentials, calls)])


RoleCalls = tuple[models.ClientConfiguration, tuple[MethodCall, ...]]


def role_attempts(
    endpoint: str, node: str, timeout: float, per_role: Sequence[RoleCalls]
) -> list[Attempt]:
    """:func:`method_attempts` of every ``(credentials, calls)`` of ``per_role`` at once, a
    connection each; the attempts in order, role after role."""

    async def run() -> list[Attempt]:
        found = await asyncio.gather(
            *(_attempts(endpoint, node, timeout, creds, calls) for creds, calls in per_role)
        )
        return [attempt for attempts in found for attempt in attempts]

    return asyncio.run(run())


async def _attempts(
    endpoint: str,
    node: str,
    timeout: float,
    credentials: models.ClientConfiguration,
    calls: tuple[MethodCall, ...],
) -> list[Attempt]:
    role = ", ".join(certificate_roles(credentials.crt_pem)) or "no role"
    ssl_context = shared_ssl_context(credentials.ca_pem, credentials.crt_pem, credentials.key_pem)
    transport = Connection(GrpcTransport(endpoint, ssl_context), timeout=timeout)
    target = Target(node=node)
    gate = asyncio.Semaphore(PROBE_STREAMS)

    async def attempt(call: MethodCall) -> Attempt:
        async with gate:
            return _as_role(role, await _method_attempt(transport, target, call))

    try:  # each attempt stands alone: sent together, judged one by one, in order
        return list(await asyncio.gather(*(attempt(c) for c in calls)))
    finally:
        await transport.aclose()


_LIST = _rpc(_STATE + "List", state_pb2.ListRequest, state_pb2.ListResponse)
_WATCH = _rpc(_STATE + "Watch", state_pb2.WatchRequest, state_pb2.WatchResponse)


def _cosi_reads(kind: str, namespace: str, ids: list[str]) -> list[MethodCall]:
    """Get of each id, List, Watch of the kind and Watch of the first id (a single-resource
    watch sends the resource's current state at once: cosi's state server)."""
    calls = [
        MethodCall(
            f"Get {kind} {namespace}/{id_}",
            _GET,
            state_pb2.GetRequest(namespace=namespace, type=kind, id=id_),
        )
        for id_ in ids
    ]
    watch_kind = state_pb2.WatchRequest(
        namespace=namespace,
        type=kind,
        options=state_pb2.WatchOptions(bootstrap_contents=True),
        api_version=1,
    )
    watch_one = state_pb2.WatchRequest(namespace=namespace, type=kind, id=ids[0], api_version=1)
    return [
        *calls,
        MethodCall(
            f"List {kind} in {namespace}",
            _LIST,
            state_pb2.ListRequest(namespace=namespace, type=kind),
            streaming=True,
        ),
        MethodCall(f"Watch {kind} in {namespace}", _WATCH, watch_kind, streaming=True),
        MethodCall(f"Watch {kind} {namespace}/{ids[0]}", _WATCH, watch_one, streaming=True),
    ]


def sensitive_targets(
    admin: TalosClient, release: Release = V1_13
) -> tuple[list[MethodCall], list[str]]:
    """The reads of every sensitive type: those the node's definitions mark sensitive, and
    every one ``release`` has (:attr:`Release.sensitive_types`; v1.13's are
    :data:`KNOWN_SENSITIVE`) whether the node serves it or not. Gets ask for
    the ids the admin sees (at most two a type), or an absent id: the access filter refuses
    before any lookup (internal/app/resources/access.go), so NotFound is a finding too.
    Returns the calls and the known-sensitive types the node does not list."""
    served = {d.resource_type: d for d in admin.resource_definitions(refresh=True)}
    known = release.sensitive_types
    targets = dict(known)
    targets.update({kind: d.default_namespace for kind, d in served.items() if d.sensitive})
    listable = [kind for kind in sorted(targets) if kind in served]
    listed = admin.list_each([(kind, targets[kind]) for kind in listable])  # at once
    ids = {
        kind: [r.id for r in found][:2]
        for kind, found in zip(listable, listed, strict=True)
        if not isinstance(found, APIError)
    }
    calls: list[MethodCall] = []
    for kind in sorted(targets):
        calls += _cosi_reads(kind, targets[kind], ids.get(kind) or [_ABSENT_ID])
    return calls, sorted(set(known) - set(served))


def sensitive_read_attempts(
    admin: TalosClient,
    endpoint: str,
    node: str,
    timeout: float,
    per_role: Sequence[RoleCalls],
    release: Release = V1_13,
) -> tuple[list[Attempt], list[str]]:
    """Get, List, Watch (kind and id) of every sensitive type of ``release`` by each role of
    ``per_role`` (roles without os:admin), then that role's own calls, the roles at once.
    The types and their ids are found once, for all roles. Returns the attempts, role
    after role, and the known-sensitive types the node does not list."""
    cosi_reads, not_served = sensitive_targets(admin, release)
    attempts = role_attempts(
        endpoint, node, timeout, [(creds, (*cosi_reads, *own)) for creds, own in per_role]
    )
    return attempts, not_served


def _reader_verdict(what: str, call: Callable[[], str]) -> Attempt:
    try:
        detail = call()
    except APIError as exc:
        if exc.code is StatusCode.PERMISSION_DENIED:
            return Attempt(what, accepted=False, detail=f"refused: {exc.details}")
        return Attempt(
            what, accepted=True, detail=f"past the access policy: {exc.code}: {exc.details}"
        )
    return Attempt(what, accepted=True, detail=detail)


def reader_admin_attempts(
    reader: TalosClient, which: Sequence[str] = ("kubeconfig", "mint")
) -> dict[str, Attempt]:
    """The Kubeconfig RPC (``kubeconfig``), and GenerateClientConfiguration asking for
    os:admin (``mint``), as os:reader: those of ``which``.

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

    calls = {
        "kubeconfig": ("Kubeconfig as os:reader", kubeconfig),
        "mint": ("GenerateClientConfiguration(os:admin) as os:reader", mint),
    }
    return {name: _reader_verdict(*calls[name]) for name in which}


# machined takes its apply lock before it looks at the caller's roles (v1alpha1_server.go
# ApplyConfiguration: TryLock, then the admin check), so a reader's apply while another
# apply runs on the node (another run, another worker's config check) is refused as busy.
APPLY_BUSY = "another apply configuration is already in progress"
BUSY_TRIES = 6


# The try-mode timer of a reader's try apply: should a defective node take it, the node goes
# back to the same bytes this soon.
READER_TRY_SECONDS = 10.0


def reader_apply(
    node: TalosNode,
    reader: TalosClient,
    raw: bytes,
    *,
    dry_run: bool,
    mode: models.ApplyMode = "no-reboot",
) -> models.ApplyResult:
    """The reader's apply in ``mode``, tried again while the node is busy with another
    apply."""
    try_timeout = READER_TRY_SECONDS if mode == "try" else None
    for attempt in range(BUSY_TRIES):
        try:
            return reader.apply_configuration(raw, mode, dry_run=dry_run, try_timeout=try_timeout)
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
