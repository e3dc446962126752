"""The api and immutability probes after issue 21 (items 4-6): COSI writes that the node can
decode (cosi decodes before Talos's access policy runs), certificate probes with a positive
control and backdated like Talos's own, a clock skew between this machine and the node that
no longer turns a broken EKU rule into a pass, /etc binds exempt in container mode only, and
the three-control-planes shape."""

from __future__ import annotations

import asyncio
import datetime as dt
import types
from collections.abc import Iterator

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from conformance._support import probes
from conformance.immutability.rules import writable_image_mounts
from pytest_talos._proto.v1alpha1 import resource_pb2, state_pb2
from pytest_talos.client import Connection, TalosClient
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import APIError, TalosError
from pytest_talos.pki import CertificateAuthority, issue_client_cert
from pytest_talos.talosconfig import Context, load_talosconfig
from pytest_talos.transport import GrpcTransport, Target, build_ssl_context
from tests.integration.checks_support import connected

TIMEOUT = 10.0
MACHINE_CONFIGS = "MachineConfigs.config.talos.dev"


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(controlplanes=1, workers=0, time_scale=20) as emulated:
        yield emulated


def _context(cluster: EmulatedCluster) -> Context:
    return load_talosconfig(cluster.talosconfig_path, env={}).context


def _writes(cluster: EmulatedCluster) -> list[probes.Attempt]:
    with TalosClient.from_talosconfig(cluster.talosconfig_path, env={}) as admin:
        return probes.write_attempts(admin, _context(cluster), cluster.nodes[0].address, TIMEOUT)


def _admin_update(cluster: EmulatedCluster, resource: resource_pb2.Resource) -> APIError:
    """An os:admin Update of ``resource``, sent as it is; the error it gets."""
    context = _context(cluster)
    ssl_context = build_ssl_context(context.ca_pem, context.crt_pem, context.key_pem)
    request = state_pb2.UpdateRequest(new_resource=resource)

    async def run() -> APIError:
        transport = Connection(GrpcTransport(cluster.endpoint, ssl_context), timeout=TIMEOUT)
        try:
            await transport.unary(probes._UPDATE, request, Target(node=cluster.nodes[0].address))
        except APIError as exc:
            return exc
        finally:
            transport.close()
        raise AssertionError("the Update was carried out")

    return asyncio.run(run())


# --------------------------------------------------------------------------- item 4


def _empty_machine_config() -> resource_pb2.Resource:
    """What the write probe sent before: a MachineConfigs resource with no proto_spec."""
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(
            namespace="config", type=MACHINE_CONFIGS, id="probe", version="1", phase="running"
        ),
        spec=resource_pb2.Spec(yaml_spec="version: pytest-talos-probe\n"),
    )


def test_the_node_decodes_a_write_before_its_access_policy(cluster: EmulatedCluster) -> None:
    """cosi server.go Update: protobuf.UnmarshalResource first; MachineConfig.UnmarshalProto
    of no config bytes is configloader's ErrNoConfig, a plain error (code Unknown)."""
    error = _admin_update(cluster, _empty_machine_config())
    assert (error.code, error.details) == ("UNKNOWN", "config not found")
    bad_phase = _empty_machine_config()
    bad_phase.metadata.phase = "gone"
    error = _admin_update(cluster, bad_phase)
    assert (error.code, error.details) == ("UNKNOWN", "unknown phase: gone")


def test_every_write_probe_sends_a_resource_the_node_decodes(cluster: EmulatedCluster) -> None:
    """So every one reaches the access policy, which refuses it."""
    found = _writes(cluster)
    assert {a.detail for a in found} == {"refused: write access is not allowed"}
    assert [a.what for a in found] == [
        "Destroy of a resource that does not exist",
        "Update of a resource that does not exist",
        "Create of a probe resource",
        f"Destroy of an absent {MACHINE_CONFIGS} in config",
        f"Update of an absent {MACHINE_CONFIGS} in config",
        "Destroy of an absent AddressSpecs.net.talos.dev in network",
        "Update of an absent AddressSpecs.net.talos.dev in network",
    ]


def test_a_write_accepted_after_decoding_is_caught() -> None:
    """The fault refuses an empty spec (and every Destroy): each Create and Update probe gets
    through, so each carries a real spec. The emulator defines no AddressSpecs: those stay
    refused as an unsupported type."""
    with EmulatedCluster(1, 0, faults=["cosi-write-accepted-after-decoding"]) as emulated:
        found = _writes(emulated)
    accepted = {a.what: a.detail for a in found if a.accepted}
    assert sorted(accepted) == [
        "Create of a probe resource",
        "Update of a resource that does not exist",
        f"Update of an absent {MACHINE_CONFIGS} in config",
        "clean-up of the probe resource",  # the Destroy is refused: the resource stays
    ]
    assert accepted["Create of a probe resource"].startswith("the node carried it out")
    assert accepted[f"Update of an absent {MACHINE_CONFIGS} in config"].startswith(
        "not refused by policy: NOT_FOUND: "
    )


def test_a_probe_the_node_cannot_decode_is_not_judged(
    cluster: EmulatedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Unknown reply to a Create or Update is the decoder's: the policy was never asked,
    so it is neither a refusal nor a finding."""
    monkeypatch.setattr(probes, "_probe_spec", lambda kind: resource_pb2.Spec(yaml_spec="x: 1\n"))
    with pytest.raises(TalosError, match=r"^not measured: the node could not decode the probe"):
        _writes(cluster)


# --------------------------------------------------------------------------- item 5


def _runner_ahead(monkeypatch: pytest.MonkeyPatch, seconds: float) -> dt.datetime:
    """This machine's clock ``seconds`` ahead of the node's (the emulator keeps real time)."""
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    monkeypatch.setattr(
        probes, "_runner_now", lambda: dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    )
    return ahead


def test_a_runner_ahead_of_the_node_no_longer_hides_a_broken_eku_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with EmulatedCluster(1, 0, faults=["any-eku-accepted"]) as emulated:
        node, ca = emulated.nodes[0].address, emulated.ca
        in_step = [a.accepted for a in probes.eku_attempts(node, ca.cert_pem, ca, TIMEOUT)]
        minted_at = _runner_ahead(monkeypatch, 5)
        # the old probe: minted at this machine's clock, 5 s ahead of the node's
        old = issue_client_cert(ca, roles=["os:reader"], ext_key_usage=(), not_before=minted_at)
        old_attempt = probes.certificate_attempt(
            node, ca.cert_pem, old.cert_pem, old.key_pem, TIMEOUT, "old"
        )
        control, *found = probes.eku_attempts(node, ca.cert_pem, ca, TIMEOUT)
    # the node refused it as not valid yet, which the old check counted as the EKU rule
    assert not old_attempt.accepted
    assert old_attempt.detail.startswith("refused: ")
    assert control.accepted
    # the fault is caught as well as with clocks in step (OpenSSL's own purpose check still
    # refuses some shapes before apid's rule runs)
    assert [control.accepted] + [a.accepted for a in found] == in_step
    assert any(a.accepted for a in found)


@pytest.mark.parametrize("ahead", [30.0, 3600.0])
def test_a_runner_too_far_ahead_gets_an_error_not_a_pass(
    cluster: EmulatedCluster, monkeypatch: pytest.MonkeyPatch, ahead: float
) -> None:
    _runner_ahead(monkeypatch, ahead)
    node, ca = cluster.nodes[0].address, cluster.ca
    for probe in (probes.eku_attempts, probes.not_yet_valid_attempts):
        with pytest.raises(TalosError) as caught:
            probe(node, ca.cert_pem, ca, TIMEOUT)
        message = caught.value.message
        assert message.startswith("not measured: apid refused the control certificate (refused:")
        assert "check that the node's clock is within 10s of this machine's" in message


def test_probe_certificates_are_backdated_and_the_future_one_by_far_more() -> None:
    """Talos backdates the kubeconfig certificate by allowedTimeSkew, 10 s
    (pkg/kubeconfig/generate.go); the not-yet-valid probe starts two days ahead."""
    assert dt.timedelta(seconds=10) == probes.PROBE_BACKDATE
    assert probes.NOT_YET_VALID_BY > 1000 * probes.PROBE_BACKDATE
    signer = CertificateAuthority.generate(organization="talos")
    cert = probes._reader_cert(signer, (ExtendedKeyUsageOID.CLIENT_AUTH,)).cert
    lead = dt.datetime.now(dt.UTC) - cert.not_valid_before_utc
    assert dt.timedelta(seconds=9) < lead < dt.timedelta(seconds=12)


def test_a_runner_behind_the_node_still_gets_an_expired_certificate(
    cluster: EmulatedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait is the certificate's own lifetime from the reply, not this machine's clock:
    a clock a minute behind the node's used to end in an error."""

    class Behind(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> Behind:
            real = dt.datetime.now(tz) - dt.timedelta(minutes=1)
            return cls.fromtimestamp(real.timestamp(), tz)

    monkeypatch.setattr(probes, "dt", types.SimpleNamespace(**{**vars(dt), "datetime": Behind}))
    with TalosClient.from_talosconfig(cluster.talosconfig_path, env={}) as admin:
        crt, key, what = probes.expired_credentials(admin.with_node(cluster.nodes[0].address))
    attempt = probes.certificate_attempt(
        cluster.nodes[0].address, cluster.ca.cert_pem, crt, key, TIMEOUT, what
    )
    assert not attempt.accepted
    assert attempt.detail.startswith("refused: ")


# --------------------------------------------------------------------------- item 6


def _proc_mounts(faults: list[str], variants: list[str]) -> tuple[list[list[str]], bool]:
    with connected(faults, variants=variants, workers=0) as (_, talos):
        node = talos.nodes[0]
        mounts = node.files.read_text("/proc/mounts")
        return [line.split() for line in mounts.splitlines()], node.version.in_container


def test_a_writable_resolv_conf_on_metal_is_found() -> None:
    entries, in_container = _proc_mounts(["resolv-conf-writable-on-metal"], ["metal"])
    assert not in_container
    found = writable_image_mounts(entries, in_container=in_container)
    assert [(m[1], m[3].split(",")[0]) for m in found] == [("/etc/resolv.conf", "rw")]


def test_dockers_writable_resolv_conf_passes_in_a_container() -> None:
    entries, in_container = _proc_mounts(["resolv-conf-writable-on-metal"], [])
    assert in_container
    by_point = {e[1]: e for e in entries}
    assert by_point["/etc/resolv.conf"][3].startswith("rw,")  # Docker's bind, healthy
    assert writable_image_mounts(entries, in_container=in_container) == []


# --------------------------------------------------------------------------- the variant


def test_three_control_planes_run_three_etcd_members_and_a_worker() -> None:
    with connected(variants=["three-control-planes"]) as (emulated, talos):
        assert (emulated.controlplanes, emulated.workers) == (3, 1)
        assert len(talos.controlplanes) == 3
        assert len(talos.workers) == 1
        members = talos.controlplanes[0].client.etcd_members()
    assert len(members) == 3
