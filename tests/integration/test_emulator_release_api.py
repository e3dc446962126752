"""The API of each release over real gRPC and mTLS: a v1.12 emulator answers a method v1.12
lacks as its machined's grpc-go server does (Unimplemented ``unknown service ...``, for every
role: before the authorizer), applies v1.12's authorizer rules (MetaWrite os:admin only: no
os:meta:writer), and the client reads the answer as :class:`NotInRelease` naming v1.12."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import empty_pb2
from google.protobuf.message import Message

from conformance._support import probes
from pytest_talos import models
from pytest_talos.client import Connection, TalosClient
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import APIError, FailedPrecondition, NotInRelease, PermissionDenied
from pytest_talos.models import VersionSpec
from pytest_talos.pki import issue_client_cert
from pytest_talos.talos_api import ADMIN, META_WRITER, READER
from pytest_talos.transport import GrpcTransport, Rpc, Target, shared_ssl_context

_REMOVE = probes.CHANGING_CALLS[-1]  # ImageService/Remove of an absent image
_META_DELETE = "/machine.MachineService/MetaDelete"


@pytest.fixture(scope="module", params=["v1.12", "v1.13"])
def emulated(request: pytest.FixtureRequest) -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 0, talos_version=f"{request.param}.x", time_scale=20) as cluster:
        yield cluster


def _answer(cluster: EmulatedCluster, role: str, rpc: Rpc[Any, Any], request: Message) -> APIError:
    """The error one call with a ``role`` certificate gets (every call here is refused)."""
    cert = issue_client_cert(cluster.ca, roles=[role])
    context = shared_ssl_context(cluster.ca.cert_pem, cert.cert_pem, cert.key_pem)

    async def run() -> APIError:
        connection = Connection(GrpcTransport(cluster.endpoint, context), roles=[role])
        try:
            await connection.unary(rpc, request, Target(node=cluster.nodes[0].address))
        except APIError as exc:
            return exc
        finally:
            await connection.aclose()
        raise AssertionError("the call was answered")

    return asyncio.run(run())


def _meta_delete() -> tuple[Rpc[Any, Any], Message]:
    rpc: Rpc[Any, Any] = Rpc(_META_DELETE, empty_pb2.Empty, empty_pb2.Empty)
    return rpc, empty_pb2.Empty()  # key 0: a uint8


@pytest.mark.parametrize("role", [ADMIN, READER])
def test_image_removal_is_an_unknown_service_on_v1_12_for_every_role(
    emulated: EmulatedCluster, role: str
) -> None:
    error = _answer(emulated, role, _REMOVE.rpc, _REMOVE.request)
    if emulated.release.line == "v1.12":
        assert isinstance(error, NotInRelease)
        assert error.details == "unknown service machine.ImageService"
        assert error.releases == ("v1.12",)
        assert "not supported on Talos v1.12" in str(error)
    elif role == READER:  # v1.13: the authorizer refuses first
        assert isinstance(error, PermissionDenied)
    else:
        assert error.details == "Remove is not emulated (pytest-talos emulator)"


def test_meta_writer_gets_past_the_rule_only_where_the_role_exists(
    emulated: EmulatedCluster,
) -> None:
    error = _answer(emulated, META_WRITER, *_meta_delete())
    if emulated.release.line == "v1.12":  # machined.go at v1.12.11: MetaDelete os:admin only
        assert isinstance(error, PermissionDenied)
        assert str(error).endswith(
            f"({_META_DELETE} needs one of os:admin, os:meta:writer, but on Talos v1.12 the "
            "client certificate's os:meta:writer is not enough (by release: Talos v1.12: "
            "os:admin; Talos v1.13, v1.14: os:admin, os:meta:writer))"
        )
    else:  # past the authorizer: the container node has no META (checkSupported)
        assert isinstance(error, FailedPrecondition)
        assert error.details == "method is not supported in container mode"


def test_the_version_resource_has_a_name_from_v1_13_on(emulated: EmulatedCluster) -> None:
    with TalosClient.from_talosconfig(emulated.talosconfig_path, env={}) as client:
        (version,) = client.list_resources("Versions.runtime.talos.dev", "runtime")
    assert isinstance(version.typed_spec, VersionSpec)
    expected = {"v1.12": "", "v1.13": "Talos"}[emulated.release.line]
    assert version.typed_spec.name == expected
    assert ("name" in version.spec) is bool(expected)  # v1.12's spec has no such field


def test_the_reader_probe_of_v1_12_skips_what_it_lacks(emulated: EmulatedCluster) -> None:
    calls, skipped = probes.served_by(probes.CHANGING_CALLS, emulated.release)
    cert = issue_client_cert(emulated.ca, roles=[READER])
    credentials = models.ClientConfiguration(
        ca_pem=emulated.ca.cert_pem, crt_pem=cert.cert_pem, key_pem=cert.key_pem, talosconfig=b""
    )
    attempts = probes.method_attempts(
        emulated.endpoint, credentials, emulated.nodes[0].address, 10.0, calls
    )
    assert [a.accepted for a in attempts] == [False] * len(calls)  # every sent call refused
    assert bool(skipped) is (emulated.release.line == "v1.12")
