"""The API differences of the release table (pytest_talos.releases): the services and methods
each release serves, its built-in roles and its authorizer rules, and what the client makes of
a node that lacks a method or refuses a role. Each row holds every release's value and is
checked to tell the releases apart, so applying another release's expectation fails."""

from __future__ import annotations

import pytest
from grpclib.const import Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from conformance._support import probes
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.client import _convert as convert
from pytest_talos.errors import NotInRelease, PermissionDenied, Unimplemented
from pytest_talos.releases import RELEASES, V1_12, V1_13, V1_14, Release, lacking
from pytest_talos.talos_api import (
    ADMIN,
    IMAGE_VERIFIER,
    META_WRITER,
    READER,
    ROLE_RULES,
    roles_needed,
)
from pytest_talos.transport import CallInfo, classify_error

_M = "/machine.MachineService/"
_REMOVE = "/machine.ImageService/Remove"
_GENERATE = _M + "GenerateConfiguration"
_TEARDOWN = "/cosi.resource.State/Teardown"
_LVM = "/machine.LVMService/LogicalVolumeRemove"
_A = (ADMIN,)
_AMW = (ADMIN, META_WRITER)

# What each release's node answers for a method (None: it serves it), v1.12 / v1.13 / v1.14:
# v1alpha1_server.go Register; api/machine/machine.proto; cosi runtime state_grpc.pb.go.
UNKNOWN: dict[str, tuple[str | None, str | None, str | None]] = {
    _REMOVE: ("unknown service machine.ImageService", None, None),
    "/machine.LifecycleService/Upgrade": ("unknown service machine.LifecycleService", None, None),
    "/machine.DebugService/ContainerRun": ("unknown service machine.DebugService", None, None),
    _GENERATE: (
        None,
        "unknown method GenerateConfiguration for service machine.MachineService",
        "unknown method GenerateConfiguration for service machine.MachineService",
    ),
    _TEARDOWN: (
        "unknown method Teardown for service cosi.resource.State",
        "unknown method Teardown for service cosi.resource.State",
        None,
    ),
    _LVM: ("unknown service machine.LVMService", "unknown service machine.LVMService", None),
}
# What a call needs on a running node of each release (machined.go rules at each tag).
NEEDED: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    _M + "MetaWrite": (_A, _AMW, _AMW),
    _M + "MetaDelete": (_A, _AMW, _AMW),
}
# The authorizer's own rule (before the handler's maintenance check).
ALLOWED: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {
    _M + "ApplyConfiguration": (
        frozenset(_A),
        frozenset({ADMIN, READER}),
        frozenset({ADMIN, READER}),
    ),
    "/storage.StorageService/BlockDeviceWipe": (
        frozenset(_A),
        frozenset({ADMIN, READER}),
        frozenset({ADMIN, READER}),
    ),
    _LVM: (frozenset(_A), frozenset(_A), frozenset({ADMIN, READER})),
}
ORDER = (V1_12, V1_13, V1_14)


def _per_release(row: tuple[object, object, object]) -> list[tuple[Release, object]]:
    assert len(set(map(repr, row))) > 1, "a row the releases agree on tells them not apart"
    return list(zip(ORDER, row, strict=True))


@pytest.mark.parametrize("method", sorted(UNKNOWN))
def test_each_release_serves_its_own_methods(method: str) -> None:
    for release, expected in _per_release(UNKNOWN[method]):
        assert release.unknown_method(method) == expected, release.line
        assert release.has_method(method) is (expected is None)


@pytest.mark.parametrize("method", sorted(NEEDED))
def test_each_release_needs_its_own_roles(method: str) -> None:
    for release, expected in _per_release(NEEDED[method]):
        assert release.roles_needed(method) == expected, release.line


@pytest.mark.parametrize("method", sorted(ALLOWED))
def test_each_release_has_its_own_rule(method: str) -> None:
    for release, expected in _per_release(ALLOWED[method]):
        assert release.allowed_roles(method) == expected, release.line


def test_roles_v1_12_lacks() -> None:
    """pkg/machinery/role/role.go All: os:image:verifier and os:meta:writer are v1.13's."""
    rows = [
        (role in V1_12.roles, role in V1_13.roles, role in V1_14.roles)
        for role in (IMAGE_VERIFIER, META_WRITER)
    ]
    for row in rows:
        assert [have for _, have in _per_release(row)] == [False, True, True]
    assert ADMIN in V1_12.roles


def test_v1_13_is_the_shared_table_and_every_rule_names_a_role_of_its_release() -> None:
    assert not V1_13.role_rules
    for method in ROLE_RULES:
        assert V1_13.roles_needed(method) == roles_needed(method)
    for release in RELEASES.values():
        for method in (*ROLE_RULES, *release.role_rules):
            if release.has_method(method):
                assert release.allowed_roles(method) <= release.roles, (release.line, method)


def test_lacking_names_the_releases_oldest_first() -> None:
    assert [r.line for r in lacking(_REMOVE)] == ["v1.12"]
    assert [r.line for r in lacking(_TEARDOWN)] == ["v1.12", "v1.13"]
    assert lacking(_M + "Version") == ()


# --------------------------------------------------------------------------- the client side


def _info(method: str, roles: tuple[str, ...] = (ADMIN,)) -> CallInfo:
    return CallInfo(
        method=method,
        endpoint="10.5.0.2:50000",
        node="10.5.0.3",
        required_roles=roles_needed(method),
        client_roles=roles,
    )


def test_a_method_the_release_lacks_is_a_clear_not_in_release_error() -> None:
    status = GRPCError(Status.UNIMPLEMENTED, "unknown service machine.ImageService")

    error = classify_error(status, _info(_REMOVE))

    assert isinstance(error, NotInRelease)
    assert isinstance(error, Unimplemented)  # code-based handling keeps working
    assert error.releases == ("v1.12",)
    assert error.details == "unknown service machine.ImageService"
    assert str(error) == (
        f"[node 10.5.0.3, {_REMOVE}] UNIMPLEMENTED: unknown service machine.ImageService "
        f"(the node's Talos release does not serve {_REMOVE}: not supported on Talos v1.12 "
        "(the kit's release table))"
    )


def test_an_unknown_method_every_known_release_serves_says_so() -> None:
    text = "unknown method Version for service machine.MachineService"

    error = classify_error(GRPCError(Status.UNIMPLEMENTED, text), _info(_M + "Version"))

    assert isinstance(error, NotInRelease)
    assert error.releases == ()
    assert "every Talos release this kit knows (v1.12, v1.13, v1.14) serves it" in str(error)


def test_other_unimplemented_texts_stay_unimplemented() -> None:
    text = "etcd snapshot is only available on control plane nodes"

    error = classify_error(GRPCError(Status.UNIMPLEMENTED, text), _info(_M + "EtcdSnapshot"))

    assert type(error) is Unimplemented


def test_the_meta_write_hint_names_each_releases_roles() -> None:
    """v1.12 has no os:meta:writer: its MetaWrite is os:admin only (machined.go at v1.12.11)."""
    method = _M + "MetaWrite"
    status = GRPCError(Status.PERMISSION_DENIED, "not authorized")

    error = classify_error(status, _info(method, roles=(READER,)))

    assert isinstance(error, PermissionDenied)
    assert str(error).endswith(
        f"({method} needs one of os:admin, os:meta:writer; the client certificate carries "
        "os:reader: use a talosconfig with one of those roles (by release: Talos v1.12: "
        "os:admin; Talos v1.13, v1.14: os:admin, os:meta:writer))"
    )


def test_a_hint_the_releases_agree_on_names_no_release() -> None:
    method = _M + "Read"
    status = GRPCError(Status.PERMISSION_DENIED, "not authorized")

    error = classify_error(status, _info(method, roles=(READER,)))

    assert "by release" not in str(error)


# --------------------------------------------------------------------------- the probes


def test_the_reader_probes_send_no_image_removal_to_v1_12() -> None:
    kept, skipped = probes.served_by(probes.CHANGING_CALLS, V1_12)
    assert [c.rpc.path for c in kept] == [
        c.rpc.path for c in probes.CHANGING_CALLS if c.rpc.path != _REMOVE
    ]
    assert skipped == [
        "ImageService/Remove of the absent image pytest-talos-absent.invalid/absent:probe: "
        "not supported on Talos v1.12 (unknown service machine.ImageService)"
    ]
    for release in (V1_13, V1_14):
        assert probes.served_by(probes.CHANGING_CALLS, release) == (probes.CHANGING_CALLS, [])


# --------------------------------------------------------------------------- newer fields


def test_a_field_a_newer_release_adds_is_ignored_by_the_client() -> None:
    """The kit's protos are v1.13.9's; a v1.14 node may send fields they lack. protobuf keeps
    them as unknown fields, and the client's conversion reads only the fields it knows."""
    reply = m.VersionResponse(
        messages=[m.Version(version=m.VersionInfo(tag="v1.14.0", sha="7a84d742b"))]
    )
    # Field 99 (length-delimited) on the reply and on its Version message: numbers no
    # release's api/machine/machine.proto uses, standing in for a field added later.
    unknown = bytes([0x9A, 0x06, 0x03]) + b"new"
    inner = reply.messages[0].SerializeToString() + unknown
    wire = bytes([0x0A, len(inner)]) + inner + unknown

    decoded = ProtoCodec().decode(wire, m.VersionResponse)
    assert isinstance(decoded, m.VersionResponse)
    version = convert.version(decoded.messages[0], "10.5.0.3")

    assert (version.tag, version.sha, version.node) == ("v1.14.0", "7a84d742b", "10.5.0.3")
    assert decoded.SerializeToString().count(b"new") == 2  # kept, not an error
