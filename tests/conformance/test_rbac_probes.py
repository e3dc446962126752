"""The role probes of the api checks against the emulator over real mTLS: every method a role
may not call is refused as machined's authorizer and handlers refuse it
(internal/app/machined/pkg/system/services/machined.go, internal/app/storaged/server.go,
internal/app/resources/access.go, internal/app/apid/service.go), what an authorized caller
gets from the methods the emulator serves only for their refusals, and the faults that let
each through."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any, cast

import pytest

from conformance._support import probes
from pytest_talos import models
from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import PermissionDenied
from pytest_talos.node import TalosNode
from pytest_talos.pki import issue_client_cert
from pytest_talos.talos_api import ADMIN, OPERATOR, READER
from pytest_talos.talosconfig import Context, load_talosconfig

TIMEOUT = 10.0


def _credentials(cluster: EmulatedCluster, role: str) -> models.ClientConfiguration:
    cert = issue_client_cert(cluster.ca, roles=[role])
    return models.ClientConfiguration(
        ca_pem=cluster.ca.cert_pem, crt_pem=cert.cert_pem, key_pem=cert.key_pem, talosconfig=b""
    )


def _attempts(
    cluster: EmulatedCluster, role: str, node: str, calls: tuple[probes.MethodCall, ...]
) -> dict[str, probes.Attempt]:
    found = probes.method_attempts(
        cluster.endpoint, _credentials(cluster, role), node, TIMEOUT, calls
    )
    return {a.what: a for a in found}


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(controlplanes=1, workers=1, time_scale=20) as emulated:
        yield emulated


def _faulty(*faults: str) -> EmulatedCluster:
    return EmulatedCluster(controlplanes=1, workers=0, time_scale=20, faults=list(faults))


ALL_READER_CALLS = probes.PRIVILEGED_READS + probes.CHANGING_CALLS + probes.DISRUPTIVE_CALLS


@pytest.mark.parametrize("index", [0, 1], ids=["controlplane", "worker"])
def test_every_probe_is_refused_to_a_reader_by_the_authorizer(
    cluster: EmulatedCluster, index: int
) -> None:
    """Control-plane-only methods too: the authorizer runs before the handler's check."""
    node = cluster.nodes[index].address
    found = _attempts(cluster, READER, node, ALL_READER_CALLS)
    assert len(found) == len(ALL_READER_CALLS)
    for call in ALL_READER_CALLS:
        attempt = found[f"{call.what} as {READER}"]
        assert not attempt.accepted, attempt
        assert attempt.detail == "refused: not authorized"


def test_the_operator_is_refused_only_the_admin_reads(cluster: EmulatedCluster) -> None:
    node = cluster.nodes[0].address
    found = _attempts(cluster, OPERATOR, node, probes.PRIVILEGED_READS)
    assert [a.accepted for a in found.values()] == [False, False, True, True]
    assert found[f"Read /proc/version as {OPERATOR}"].detail == "refused: not authorized"
    # os:operator may take a snapshot: machined's rule admits it, the emulator keeps no etcd
    snapshot = found[f"EtcdSnapshot (first chunk read and thrown away) as {OPERATOR}"]
    assert snapshot.detail == (
        "past the authorization: UNIMPLEMENTED: EtcdSnapshot is not emulated (pytest-talos "
        "emulator)"
    )
    capture = found[f"PacketCapture on the absent interface pytest-talos-absent as {OPERATOR}"]
    assert capture.detail == (
        'past the authorization: NOT_FOUND: interface "pytest-talos-absent" not found'
    )


def test_an_admin_wipe_of_no_device_succeeds_and_removes_no_member(
    cluster: EmulatedCluster,
) -> None:
    controlplane = _attempts(cluster, ADMIN, cluster.nodes[0].address, probes.DISRUPTIVE_CALLS)
    assert [a.detail for a in controlplane.values()] == [
        "answered",
        "past the authorization: NOT_FOUND: etcdserver: member not found",
    ]
    worker = _attempts(cluster, ADMIN, cluster.nodes[1].address, probes.DISRUPTIVE_CALLS)
    assert [a.detail for a in worker.values()][1] == (
        "past the authorization: UNIMPLEMENTED: etcd remove member is only available on "
        "control plane nodes"
    )


def test_an_admin_image_removal_is_not_emulated(cluster: EmulatedCluster) -> None:
    remove = probes.CHANGING_CALLS[-1:]
    (attempt,) = _attempts(cluster, ADMIN, cluster.nodes[0].address, remove).values()
    assert attempt.detail == (
        "past the authorization: UNIMPLEMENTED: Remove is not emulated (pytest-talos emulator)"
    )


def _admin(cluster: EmulatedCluster) -> TalosClient:
    return TalosClient.from_talosconfig(cluster.talosconfig_path, env={})


@pytest.mark.parametrize("role", [READER, OPERATOR])
def test_every_sensitive_read_is_refused_whether_the_type_is_listed_or_not(
    cluster: EmulatedCluster, role: str
) -> None:
    with _admin(cluster) as admin:
        found, not_served = probes.sensitive_read_attempts(
            admin.with_node(cluster.nodes[1].address),
            cluster.endpoint,
            cluster.nodes[1].address,
            TIMEOUT,
            [(_credentials(cluster, role), ())],
        )
    assert "OSRootSecrets.secrets.talos.dev" in not_served
    assert "MachineConfigs.config.talos.dev" not in not_served
    assert all(not a.accepted for a in found)
    by_what = {a.what: a.detail for a in found}
    watches = [w for w in by_what if w.startswith("Watch MachineConfigs.config.talos.dev config/")]
    assert [by_what[w] for w in watches] == ["refused: not authorized"]
    assert by_what[f"List OSRootSecrets.secrets.talos.dev in secrets as {role}"] == (
        'refused: resource type "OSRootSecrets.secrets.talos.dev" is not supported'
    )
    assert len(probes.KNOWN_SENSITIVE) == 35


def test_both_roles_probe_at_once_with_the_targets_found_once(cluster: EmulatedCluster) -> None:
    node = cluster.nodes[1].address
    per_role = [(_credentials(cluster, READER), ()), (_credentials(cluster, OPERATOR), ())]
    with _admin(cluster) as admin:
        found, _ = probes.sensitive_read_attempts(
            admin.with_node(node), cluster.endpoint, node, TIMEOUT, per_role
        )
    half = len(found) // 2
    assert len(found) == 2 * half > 0
    assert all(a.what.endswith(f" as {READER}") for a in found[:half])  # role after role
    assert all(a.what.endswith(f" as {OPERATOR}") for a in found[half:])
    assert [a.what.rsplit(" as ", 1)[0] for a in found[:half]] == [
        a.what.rsplit(" as ", 1)[0] for a in found[half:]
    ]  # the same targets for both
    assert not any(a.accepted for a in found)


def test_a_type_served_but_not_listed_is_caught() -> None:
    with _faulty("unlisted-secrets-served") as emulated, _admin(emulated) as admin:
        found, _ = probes.sensitive_read_attempts(
            admin,
            emulated.endpoint,
            emulated.nodes[0].address,
            5,
            [(_credentials(emulated, READER), ())],
        )
    leaked = [a.what for a in found if a.accepted]
    assert leaked == [
        f"Get OSRootSecrets.secrets.talos.dev secrets/pytest-talos-absent as {READER}",
        f"List OSRootSecrets.secrets.talos.dev in secrets as {READER}",
        f"Watch OSRootSecrets.secrets.talos.dev in secrets as {READER}",
        f"Watch OSRootSecrets.secrets.talos.dev secrets/pytest-talos-absent as {READER}",
    ]


@pytest.mark.parametrize(
    ("fault", "leaked"),
    [
        ("reader-reads-files", "Read /proc/version"),
        ("reader-restarts-services", "ServiceRestart pytest-talos-absent"),
        ("reader-wipes-disks", "BlockDeviceWipe of no device"),
    ],
)
def test_each_reader_fault_lets_exactly_its_method_through(fault: str, leaked: str) -> None:
    with _faulty(fault) as emulated:
        found = _attempts(emulated, READER, emulated.nodes[0].address, ALL_READER_CALLS)
    assert [a.what for a in found.values() if a.accepted] == [f"{leaked} as {READER}"]


def _eku(cluster: EmulatedCluster) -> dict[str, bool]:
    node = cluster.nodes[0].address
    control, *found = probes.eku_attempts(node, cluster.ca.cert_pem, cluster.ca, TIMEOUT)
    assert control.control
    assert control.accepted
    assert not any(a.control for a in found)
    return {a.what.rsplit(" with ", 1)[-1]: a.accepted for a in found}


def test_every_eku_shape_is_refused(cluster: EmulatedCluster) -> None:
    assert _eku(cluster) == {
        "an os:reader certificate of the Talos CA without ExtKeyUsage": False,
        "ExtKeyUsage [ClientAuth, ServerAuth]": False,
        "ExtKeyUsage [anyExtendedKeyUsage]": False,
        "ExtKeyUsage [ClientAuth, CodeSigning]": False,
    }


def test_a_rule_that_only_refuses_server_auth_lets_code_signing_through() -> None:
    with _faulty("eku-rule-only-refuses-server-auth") as emulated:
        accepted = [shape for shape, ok in _eku(emulated).items() if ok]
    assert accepted == ["ExtKeyUsage [ClientAuth, CodeSigning]"]


def test_a_certificate_not_valid_yet_is_refused(cluster: EmulatedCluster) -> None:
    control, attempt = probes.not_yet_valid_attempts(
        cluster.nodes[0].address, cluster.ca.cert_pem, cluster.ca, TIMEOUT
    )
    assert control.control
    assert control.accepted
    assert not attempt.accepted
    assert attempt.detail.startswith("refused: ")
    assert attempt.what.startswith(
        "Version with an os:reader certificate of the Talos CA not valid before "
    )


def test_an_apid_checking_only_not_after_takes_it_but_not_an_expired_one() -> None:
    with _faulty("not-yet-valid-certs-accepted") as emulated:
        node, ca = emulated.nodes[0].address, emulated.ca
        _, ahead = probes.not_yet_valid_attempts(node, ca.cert_pem, ca, TIMEOUT)
        past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
        expired = issue_client_cert(
            ca, roles=[READER], not_before=past, validity=dt.timedelta(hours=1)
        )
        behind = probes.certificate_attempt(
            node, ca.cert_pem, expired.cert_pem, expired.key_pem, TIMEOUT, "expired"
        )
    assert ahead.accepted
    assert ahead.detail.startswith("answered: Talos v")
    assert not behind.accepted


def test_writes_in_other_namespaces_are_refused(cluster: EmulatedCluster) -> None:
    with _admin(cluster) as admin:
        found = probes.write_attempts(
            admin, admin_context(cluster), cluster.nodes[0].address, TIMEOUT
        )
    details = {a.what: a.detail for a in found}
    assert details["Destroy of an absent MachineConfigs.config.talos.dev in config"] == (
        "refused: write access is not allowed"
    )
    assert details["Update of an absent AddressSpecs.net.talos.dev in network"] == (
        "refused: write access is not allowed"
    )
    assert not any(a.accepted for a in found)


def test_a_writable_resource_api_lets_the_absent_writes_past_the_policy() -> None:
    with _faulty("cosi-writable") as emulated, _admin(emulated) as admin:
        found = probes.write_attempts(
            admin, admin_context(emulated), emulated.nodes[0].address, TIMEOUT
        )
    details = {a.what: (a.accepted, a.detail) for a in found}
    accepted, detail = details["Destroy of an absent MachineConfigs.config.talos.dev in config"]
    assert accepted
    assert detail.startswith("not refused by policy: NOT_FOUND: ")


def admin_context(cluster: EmulatedCluster) -> Context:
    return load_talosconfig(cluster.talosconfig_path, env={}).context


class RecordingReader:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def apply_configuration(self, *args: Any, **kwargs: Any) -> models.ApplyResult:
        self.calls.append((*args, kwargs))
        raise PermissionDenied("not authorized")


@pytest.mark.parametrize(
    ("mode", "timeout"), [("no-reboot", None), ("staged", None), ("try", 10.0)]
)
def test_the_reader_apply_is_sent_in_the_mode_asked_for(mode: str, timeout: float | None) -> None:
    reader = RecordingReader()
    node = cast(TalosNode, type("Node", (), {"name": "worker-1"})())
    with pytest.raises(PermissionDenied):
        probes.reader_apply(
            node, cast(TalosClient, reader), b"x", dry_run=False, mode=cast(Any, mode)
        )
    assert reader.calls == [(b"x", mode, {"dry_run": False, "try_timeout": timeout})]
