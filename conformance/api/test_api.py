"""The Talos API: answers everywhere with one version, enforces mTLS and RBAC, and its
resource API is readable but never writable (as Talos's own integration tests check it:
``internal/integration/api/version.go``, ``apid.go``, ``resources.go``).

The access probes cannot change a node, healthy or not: refused certificates are refused at
TLS; an os:reader's (or os:operator's) calls are refused before any handler runs, and each is
sent with arguments that change nothing even where a defective node lets it through (a
world-readable file read and thrown away, a service, image, interface, device list or etcd
member that does not exist; see ``conformance/_support/probes.py``); the real applies send
the node's current config bytes unchanged under the config guard."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from typing import Any

import pytest

from conformance._support import probes
from conformance._support.context import ReaderAccess
from conformance._support.early import Expired
from conformance._support.fanout import CheckedRead, FanOut
from conformance._support.fixtures import nodes_at_once, read_at_once
from conformance.cluster.discovery import discovery_enabled
from pytest_talos import models
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import (
    APIError,
    ConformanceFailure,
    NodeError,
    PermissionDenied,
    TalosError,
)
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode, node_release
from pytest_talos.pki import CertificateAuthority
from pytest_talos.plugin.conformance import ADMIN
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.reporting import natural_key
from pytest_talos.talos_api import OPERATOR, READER

# Resources every configured node has (registered in
# internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go); each must list without error.
CORE_RESOURCES = (
    ("Versions.runtime.talos.dev", "runtime"),
    ("MachineStatuses.runtime.talos.dev", "runtime"),
    ("MachineTypes.config.talos.dev", "config"),
    ("Services.v1alpha1.talos.dev", "runtime"),
    ("Members.cluster.talos.dev", "cluster"),
    ("NodeAddresses.net.talos.dev", "network"),
    ("HostnameStatuses.net.talos.dev", "network"),
)


MEMBERS_TYPE = "Members.cluster.talos.dev"


def _discovery_off(node: TalosNode) -> bool:
    """With cluster.discovery.enabled not true a healthy node has no Members
    (controllers/cluster/member.go lists affiliates; none without discovery). Off too when
    the config is unreadable here: then the empty list is all there is to go by."""
    return discovery_enabled(node) is not True


def _ca_pem(cluster: TalosCluster) -> bytes:
    if cluster.talosconfig is None:
        pytest.skip("the talosconfig (and its CA) of this run is unknown")
    return cluster.talosconfig.context.ca_pem


def _refused_or_fail(
    check: str,
    node: TalosNode,
    attempts: list[probes.Attempt],
    evidence: dict[str, Any],
    message: str,
    expected: str,
) -> None:
    evidence.update({a.what: a.detail for a in attempts})
    accepted = [a for a in attempts if a.accepted and not a.control]
    if accepted:
        raise ConformanceFailure(
            check,
            message,
            node=node.name,
            expected=expected,
            observed="; ".join(f"{a.what}: {a.detail}" for a in accepted),
        )


@pytest.fixture(scope="module")
def talos_ca_signer(
    talos_cluster: TalosCluster, talos_emulator: Any
) -> Iterator[CertificateAuthority | str]:
    """The Talos OS CA with its key (to mint certificates apid must refuse), or why none.

    The emulator hands it out; on a real cluster it is ``machine.ca`` of a control plane's
    config (read as os:admin)."""
    if talos_emulator is not None:
        yield talos_emulator.ca
        return
    try:
        raw = talos_cluster.controlplane().machine_config.raw
    except TalosError as exc:
        yield f"the Talos CA key is unknown: the control plane's config is unreadable ({exc})"
        return
    signer = probes.signer_from_config(raw, "machine")
    yield (
        signer
        if signer is not None
        else ("the Talos CA key is unknown: the control plane's machine.ca has no usable key")
    )


@pytest.fixture(scope="module")
def expired_credentials(talos_expired_credentials: Future[Expired]) -> Expired:
    """Minted and waited out in the background since the run's first check (early.py)."""
    return talos_expired_credentials.result()


@pytest.fixture(scope="module")
def role_credentials(talos_cluster: TalosCluster) -> dict[str, models.ClientConfiguration | str]:
    """Client credentials with os:reader and with os:operator from GenerateClientConfiguration
    (os:admin, a control plane), or why there are none; minting changes nothing on a node."""
    found: dict[str, models.ClientConfiguration | str] = {}
    for role in (READER, OPERATOR):
        try:
            client = talos_cluster.controlplane_client()
            found[role] = client.generate_client_configuration([role], 3600)
        except TalosError as exc:
            found[role] = (
                f"no {role} certificate: GenerateClientConfiguration on a control plane "
                f"failed ({exc}); needs an os:admin talosconfig"
            )
    return found


def _credentials(
    role_credentials: dict[str, models.ClientConfiguration | str], role: str
) -> models.ClientConfiguration:
    found = role_credentials[role]
    if isinstance(found, str):
        pytest.skip(found)
    return found


def _role_attempts(
    cluster: TalosCluster,
    node: TalosNode,
    credentials: models.ClientConfiguration,
    calls: tuple[probes.MethodCall, ...],
) -> list[probes.Attempt]:
    return probes.method_attempts(
        cluster.client.endpoint, credentials, node.address, cluster.client.timeout, calls
    )


def _reader_refused(
    check: str,
    kind: str,
    calls: tuple[probes.MethodCall, ...],
    node: TalosNode,
    cluster: TalosCluster,
    role_credentials: dict[str, models.ClientConfiguration | str],
    evidence: dict[str, Any],
) -> None:
    """``calls`` sent with an os:reader certificate: every one must be PermissionDenied.
    A method the node's release lacks is not sent (a v1.12 node has no ImageService)."""
    reader = _credentials(role_credentials, READER)
    release = node_release(node)
    calls, not_sent = probes.served_by(calls, release)
    if not_sent:
        evidence["not sent"] = not_sent
    if not calls:
        pytest.skip("; ".join(not_sent))
    _refused_or_fail(
        check,
        node,
        _role_attempts(cluster, node, reader, calls),
        evidence,
        f"an os:reader client got past the authorization of {kind}",
        "PermissionDenied: not authorized for every call",
    )


@pytest.fixture(scope="module")
def admin_kubeconfig(talos_cluster: TalosCluster) -> bytes | str:
    try:
        return talos_cluster.controlplane_client().kubeconfig()
    except TalosError as exc:
        return f"no admin kubeconfig to take a Kubernetes-CA certificate from ({exc})"


@pytest.mark.talos_check(
    "api.version-answers",
    severity="critical",
    claim="The Talos API answers Version on every node, with a configured (RBAC) machine",
)
def test_version_answers_on_every_node(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    version_answers: FanOut[CheckedRead],
) -> None:
    version_answers.get(talos_node).deliver(talos_evidence)


def _version_answers(talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str) -> None:
    version = talos_node.version
    talos_evidence.update(tag=version.tag, platform=version.platform, arch=version.arch)
    if not version.tag.startswith("v") or version.rbac is not True:
        raise ConformanceFailure(
            check_id,
            "Version did not describe a configured Talos node",
            node=talos_node.name,
            expected="a v-tag and features.rbac = true",
            observed=f"tag {version.tag!r}, rbac {version.rbac}",
        )


version_answers = read_at_once(
    "test_version_answers_on_every_node",
    _version_answers,
    "Version asked of every checked node at once (one call a node).",
)


@pytest.mark.talos_check(
    "api.version-consistent",
    severity="high",
    claim="Every node runs the same Talos version (Version fanned out to all nodes)",
)
def test_all_nodes_run_one_talos_version(
    talos_cluster: TalosCluster, talos_evidence: dict[str, Any], talos_check_spec: CheckSpec
) -> None:
    nodes = talos_cluster.reachable
    names = {node.address: node.name for node in nodes}
    replies = talos_cluster.client.fanout_version([node.address for node in nodes])
    tags: dict[str, str] = {}
    silent: dict[str, str] = {}
    for address, reply in replies.items():
        name = names.get(address, address)
        if isinstance(reply, NodeError):
            silent[name] = str(reply)
        else:
            tags[name] = reply.tag
    by_tag: dict[str, list[str]] = {}
    for name in sorted(tags, key=natural_key):
        by_tag.setdefault(tags[name], []).append(name)
    talos_evidence["versions"] = {tag: ", ".join(names) for tag, names in by_tag.items()}
    if silent or len(by_tag) > 1:
        raise ConformanceFailure(
            talos_check_spec.id,
            "the nodes do not all answer with one Talos version",
            expected="one version on every node",
            observed=_odd_nodes(by_tag, silent),
            evidence={"no answer": silent} if silent else None,
        )


def _odd_nodes(by_tag: dict[str, list[str]], silent: dict[str, str]) -> str:
    """The version most nodes run, then the nodes that differ (by name), not every node."""
    if not by_tag:
        return f"no answer from {', '.join(sorted(silent, key=natural_key))}"
    common = max(by_tag, key=lambda tag: len(by_tag[tag]))
    parts = [f"{len(by_tag[common])} node(s) run {common}"]
    parts += [f"{', '.join(names)} run(s) {tag}" for tag, names in by_tag.items() if tag != common]
    if silent:
        parts.append(f"no answer from {', '.join(sorted(silent, key=natural_key))}")
    return "; ".join(parts)


@pytest.mark.talos_check(
    "api.version-matches-resource",
    severity="medium",
    claim="The Version API and the Versions resource name the same Talos version",
)
def test_version_api_matches_versions_resource(
    talos_node: TalosNode, talos_evidence: dict[str, Any], version_reads: FanOut[CheckedRead]
) -> None:
    version_reads.get(talos_node).deliver(talos_evidence)


def _versions_agree(talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str) -> None:
    api_tag = talos_node.version.tag
    resource = talos_node.resource("Versions.runtime.talos.dev", "version", "runtime")
    spec = resource.typed_spec
    resource_tag = (
        spec.version
        if isinstance(spec, models.VersionSpec)
        else str((resource.spec or {}).get("version"))
    )
    talos_evidence.update(version_api=api_tag, versions_resource=resource_tag)
    if api_tag != resource_tag:
        raise ConformanceFailure(
            check_id,
            "the node reports two different versions",
            node=talos_node.name,
            expected=f"Version API == Versions resource ({resource_tag})",
            observed=f"Version API says {api_tag}",
        )


version_reads = read_at_once(
    "test_version_api_matches_versions_resource",
    _versions_agree,
    "Every checked node's Version API and Versions resource read at once.",
)


@pytest.mark.talos_check(
    "api.mtls-required",
    severity="critical",
    claim="apid refuses a client that presents no certificate",
)
def test_client_without_certificate_is_refused(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    attempt = probes.connect_without_certificate(
        talos_node.host, _ca_pem(talos_cluster), talos_cluster.client.timeout
    )
    talos_evidence[attempt.what] = attempt.detail
    if attempt.accepted:
        raise ConformanceFailure(
            talos_check_spec.id,
            "apid accepted a connection without a client certificate",
            node=talos_node.name,
            expected="the TLS handshake refused (certificate required)",
            observed=attempt.detail,
        )


@pytest.mark.talos_check(
    "api.foreign-ca-refused",
    severity="critical",
    claim="apid refuses a client certificate issued by a CA other than the cluster's",
)
def test_certificate_from_foreign_ca_is_refused(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    attempt = probes.foreign_ca_attempt(
        talos_node.host, _ca_pem(talos_cluster), talos_cluster.client.timeout
    )
    talos_evidence[attempt.what] = attempt.detail
    if attempt.accepted:
        raise ConformanceFailure(
            talos_check_spec.id,
            "apid accepted a certificate from a foreign CA",
            node=talos_node.name,
            expected="the TLS handshake refused",
            observed=attempt.detail,
        )


@pytest.mark.talos_check(
    "api.client-auth-eku-required",
    severity="high",
    claim="apid refuses a Talos-CA certificate whose ExtKeyUsage is not exactly ClientAuth",
)
def test_certificate_without_client_auth_usage_is_refused(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    talos_ca_signer: CertificateAuthority | str,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    if isinstance(talos_ca_signer, str):
        pytest.skip(talos_ca_signer)
    attempts = probes.eku_attempts(
        talos_node.host, _ca_pem(talos_cluster), talos_ca_signer, talos_cluster.client.timeout
    )
    _refused_or_fail(
        talos_check_spec.id,
        talos_node,
        attempts,
        talos_evidence,
        "apid accepted a certificate without exactly the client-auth usage",
        "the connection refused (verifyExtKeyUsage)",
    )


@pytest.mark.talos_check(
    "api.kube-ca-refused",
    severity="critical",
    claim="apid refuses a client certificate signed by the cluster's Kubernetes CA",
)
def test_kubernetes_ca_certificate_is_refused(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    admin_kubeconfig: bytes | str,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    if isinstance(admin_kubeconfig, str):
        pytest.skip(admin_kubeconfig)
    attempt = probes.kubernetes_ca_attempt(
        talos_node.host, _ca_pem(talos_cluster), admin_kubeconfig, talos_cluster.client.timeout
    )
    if attempt is None:
        pytest.skip("the admin kubeconfig holds no client certificate")
    _refused_or_fail(
        talos_check_spec.id,
        talos_node,
        [attempt],
        talos_evidence,
        "apid accepted a certificate of the Kubernetes CA",
        "the TLS handshake refused (unknown CA)",
    )


@pytest.mark.talos_check(
    "api.reader-cannot-apply",
    severity="critical",
    claim="An os:reader client cannot apply a machine configuration (PermissionDenied)",
)
def test_reader_cannot_apply_configuration(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    reader_apply_reads: FanOut[CheckedRead],
) -> None:
    reader_apply_reads.get(talos_node).deliver(talos_evidence)


def _reader_cannot_apply(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    check_id: str,
    *,
    talos_reader: ReaderAccess,
) -> None:
    reader = talos_reader.for_node(talos_node.address)
    current = talos_node.machine_config.raw
    try:
        # A dry run: authorization comes first (v1alpha1_server.go ApplyConfiguration), and even
        # a node that wrongly lets the reader through changes nothing.
        reply = probes.reader_apply(talos_node, reader, current, dry_run=True)
    except PermissionDenied as exc:
        talos_evidence["reply"] = f"{exc.code}: {exc.details}"
        return
    except APIError as exc:
        raise ConformanceFailure(
            check_id,
            "the reader was refused, but not for lack of rights",
            node=talos_node.name,
            expected="PermissionDenied: not authorized",
            observed=f"{exc.code}: {exc.details}",
        ) from None
    raise ConformanceFailure(
        check_id,
        "an os:reader client got through ApplyConfiguration",
        node=talos_node.name,
        expected="PermissionDenied: not authorized",
        observed=f"accepted (dry run): {reply.mode_details.splitlines()[0]}",
    )


reader_apply_reads = read_at_once(
    "test_reader_cannot_apply_configuration",
    _reader_cannot_apply,
    "The reader's dry-run apply tried on every checked node at once (two calls a node).",
    uses=("talos_reader",),
)


# The modes a reader's real apply is tried in: machined's handler refuses a non-admin outside
# maintenance before it looks at the mode (v1alpha1_server.go ApplyConfiguration), so each must
# be refused alike. Each sends the node's current bytes: a defective node that takes the
# no-reboot or try apply keeps the same config (a try goes back to the same bytes after
# probes.READER_TRY_SECONDS), and a staged one is undone by the config guard.
READER_APPLY_MODES: tuple[models.ApplyMode, ...] = ("no-reboot", "staged", "try")


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "api.reader-cannot-apply-for-real",
    severity="critical",
    claim="An os:reader client's real ApplyConfiguration is refused in no-reboot, staged and "
    "try mode (sent with the node's current config bytes, under the config guard)",
)
def test_reader_cannot_really_apply_configuration(
    talos_node: TalosNode,
    talos_reader: ReaderAccess,
    talos_config_guard: ConfigGuard,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    reader = talos_reader.for_node(talos_node.address)
    # The guard snapshots the config (active and persistent) first: whatever a defective
    # node takes is undone.
    talos_config_guard.protect(talos_node)
    before = talos_node.machine_config
    accepted: list[str] = []
    for mode in READER_APPLY_MODES:
        try:
            reply = probes.reader_apply(talos_node, reader, before.raw, dry_run=False, mode=mode)
        except PermissionDenied as exc:
            talos_evidence[f"{mode} reply"] = f"{exc.code}: {exc.details}"
            continue
        except APIError as exc:
            raise ConformanceFailure(
                talos_check_spec.id,
                "the reader was refused, but not for lack of rights",
                node=talos_node.name,
                expected="PermissionDenied: not authorized",
                observed=f"{mode}: {exc.code}: {exc.details}",
            ) from None
        details = reply.mode_details.splitlines()[0] if reply.mode_details else ""
        accepted.append(f"{mode} accepted: {details}")
    if not accepted:
        return
    after = talos_node.machine_config
    talos_evidence.update(version_before=before.version, version_after=after.version)
    talos_config_guard.restore_node(talos_node)  # a staged or tried config is taken back
    raise ConformanceFailure(
        talos_check_spec.id,
        "an os:reader client's real apply was carried out",
        node=talos_node.name,
        expected="PermissionDenied: not authorized in every mode",
        observed=f"{'; '.join(accepted)} (MachineConfig version {before.version} -> "
        f"{after.version}; the config guard restored the node)",
    )


SensitiveRead = tuple[list[probes.Attempt], list[str]]  # attempts, known types not listed
# A node's sensitive reads are used by its test within this many real seconds of the read.
SENSITIVE_MAX_AGE = 60.0
SENSITIVE_NODES = 8  # nodes probed at once (each probe keeps PROBE_STREAMS calls in flight)


def _sensitive_roles(
    role_credentials: dict[str, models.ClientConfiguration | str],
) -> list[tuple[models.ClientConfiguration, tuple[probes.MethodCall, ...]]]:
    """What each role may not read (machined.go rules): os:operator may take an etcd snapshot
    and capture packets, so it is asked only for the admin-only reads. Empty without an
    os:reader certificate (the check is then skipped)."""
    reader, operator = role_credentials[READER], role_credentials[OPERATOR]
    if isinstance(reader, str):
        return []
    per_role = [(reader, probes.PRIVILEGED_READS)]
    if not isinstance(operator, str):
        per_role.append((operator, probes.ADMIN_ONLY_READS))
    return per_role


def _sensitive_read(
    node: TalosNode,
    cluster: TalosCluster,
    per_role: list[tuple[models.ClientConfiguration, tuple[probes.MethodCall, ...]]],
) -> SensitiveRead:
    client = cluster.client
    return probes.sensitive_read_attempts(
        node.client,
        client.endpoint,
        node.address,
        client.timeout,
        per_role,
        node_release(node),  # the sensitive types differ by release
    )


@pytest.fixture(scope="module")
def sensitive_reads(
    request: pytest.FixtureRequest,
    talos_cluster: TalosCluster,
    role_credentials: dict[str, models.ClientConfiguration | str],
) -> FanOut[SensitiveRead]:
    """Every checked node's sensitive reads probed at once by the first node's test (the
    same calls, one node's result per test); not under pytest-xdist, whose workers already
    check nodes side by side."""
    per_role = _sensitive_roles(role_credentials)
    nodes = nodes_at_once(request, test_reader_cannot_read_sensitive_resources) if per_role else []
    return FanOut(
        nodes,
        lambda node: _sensitive_read(node, talos_cluster, per_role),
        max_age=SENSITIVE_MAX_AGE,
        readers=SENSITIVE_NODES,
    )


@pytest.mark.talos_check(
    "api.reader-cannot-read-secrets",
    severity="high",
    claim="Neither an os:reader nor an os:operator client can Get, List or Watch (a type or "
    "one id) any sensitive resource (MachineConfig, the secrets types, every type Talos marks "
    "sensitive), nor Read or Copy a file; os:reader cannot take an EtcdSnapshot or a "
    "PacketCapture either",
)
def test_reader_cannot_read_sensitive_resources(
    talos_node: TalosNode,
    role_credentials: dict[str, models.ClientConfiguration | str],
    sensitive_reads: FanOut[SensitiveRead],
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    _credentials(role_credentials, READER)  # skipped without an os:reader certificate
    operator = role_credentials[OPERATOR]
    if isinstance(operator, str):
        talos_evidence[OPERATOR] = f"not tried: {operator}"
    release = node_release(talos_node)  # the sensitive types differ by release
    talos_evidence["sensitive types of"] = f"{release.line} ({len(release.sensitive_types)})"
    attempts, not_served = sensitive_reads.get(talos_node)
    talos_evidence["probed"] = len(attempts)
    if not_served:
        talos_evidence["known sensitive types the node does not list (probed all the same)"] = (
            not_served
        )
    accepted = [a for a in attempts if a.accepted]
    talos_evidence["refused"] = len(attempts) - len(accepted)
    if accepted:
        raise ConformanceFailure(
            talos_check_spec.id,
            "a client without os:admin read what only os:admin may read",
            node=talos_node.name,
            expected="PermissionDenied for every Get, List, Watch, Read, Copy, EtcdSnapshot "
            "and PacketCapture",
            observed="; ".join(f"{a.what}: {a.detail}" for a in accepted),
        )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "api.reader-cannot-change-node",
    severity="critical",
    claim="An os:reader client is refused the changing calls of os:operator and os:admin "
    "(ServiceStart, ServiceStop, ServiceRestart, image removal), sent so that they would "
    "change nothing",
)
def test_reader_cannot_change_the_node(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    role_credentials: dict[str, models.ClientConfiguration | str],
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    # Each names a service or image no node has: even a node that lets the reader through
    # answers "not found" and changes nothing (probes.CHANGING_CALLS).
    _reader_refused(
        talos_check_spec.id,
        "a changing call",
        probes.CHANGING_CALLS,
        talos_node,
        talos_cluster,
        role_credentials,
        talos_evidence,
    )


@pytest.mark.talos_disruptive
@pytest.mark.talos_check(
    "api.reader-cannot-run-disruptive-calls",
    severity="critical",
    claim="An os:reader client is refused BlockDeviceWipe (its handler's os:admin check) and "
    "EtcdRemoveMemberByID, sent so that they would change nothing",
)
def test_reader_cannot_run_disruptive_calls(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    role_credentials: dict[str, models.ClientConfiguration | str],
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    # A wipe of no device and the removal of member 0 (no member has it) change nothing even
    # where the reader gets through (probes.DISRUPTIVE_CALLS); the methods are marked
    # disruptive because they are (pytest_talos.talos_api CHANGING_METHODS).
    _reader_refused(
        talos_check_spec.id,
        "a disruptive call",
        probes.DISRUPTIVE_CALLS,
        talos_node,
        talos_cluster,
        role_credentials,
        talos_evidence,
    )


@pytest.mark.talos_check(
    "api.reader-cannot-get-kubeconfig",
    severity="critical",
    claim="An os:reader client is refused the Kubeconfig RPC (PermissionDenied)",
)
def test_reader_cannot_get_kubeconfig(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    reader_kubeconfig_reads: FanOut[CheckedRead],
) -> None:
    reader_kubeconfig_reads.get(talos_node).deliver(talos_evidence)


def _reader_refused_admin_call(
    which: str,
    message: str,
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    check_id: str,
    *,
    talos_reader: ReaderAccess,
) -> None:
    """One of :func:`probes.reader_admin_attempts` (``which``) must be PermissionDenied."""
    reader = talos_reader.for_node(talos_node.address)
    _refused_or_fail(
        check_id,
        talos_node,
        [probes.reader_admin_attempts(reader, (which,))[which]],
        talos_evidence,
        message,
        "PermissionDenied: not authorized",
    )


reader_kubeconfig_reads = read_at_once(
    "test_reader_cannot_get_kubeconfig",
    partial(
        _reader_refused_admin_call,
        "kubeconfig",
        "an os:reader client got past Kubeconfig's os:admin rule",
    ),
    "The reader's Kubeconfig call tried on every checked node at once.",
    uses=("talos_reader",),
)


@pytest.mark.talos_check(
    "api.reader-cannot-mint-roles",
    severity="critical",
    claim="An os:reader client cannot mint a client configuration with os:admin "
    "(GenerateClientConfiguration is refused)",
)
def test_reader_cannot_mint_admin_configuration(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    reader_mint_reads: FanOut[CheckedRead],
) -> None:
    reader_mint_reads.get(talos_node).deliver(talos_evidence)


reader_mint_reads = read_at_once(
    "test_reader_cannot_mint_admin_configuration",
    partial(
        _reader_refused_admin_call,
        "mint",
        "an os:reader client got past GenerateClientConfiguration's os:admin rule",
    ),
    "The reader's GenerateClientConfiguration(os:admin) tried on every checked node at once.",
    uses=("talos_reader",),
)


@pytest.mark.talos_check(
    "api.resources-readable",
    severity="medium",
    claim="The resource API lists its resource definitions and the core resources",
)
def test_core_resources_are_readable(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    core_resource_reads: FanOut[CheckedRead],
) -> None:
    core_resource_reads.get(talos_node).deliver(talos_evidence)


def _core_resources_readable(
    talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str
) -> None:
    definitions = talos_node.client.resource_definitions(refresh=True)
    known = {d.resource_type for d in definitions}
    counts: dict[str, int | str] = {}
    for kind, namespace in CORE_RESOURCES:
        if kind not in known:
            counts[kind] = "not defined"
            continue
        try:
            counts[kind] = len(talos_node.resources(kind, namespace))
        except APIError as exc:
            counts[kind] = f"{exc.code}: {exc.details}"
    empty_is_fine: set[str] = set()
    if counts.get(MEMBERS_TYPE) == 0 and _discovery_off(talos_node):
        empty_is_fine.add(MEMBERS_TYPE)
        talos_evidence["discovery"] = "disabled: a healthy node has no Members"
    talos_evidence.update(definitions=len(definitions), resources=counts)
    broken = {
        k: v
        for k, v in counts.items()
        if (not isinstance(v, int) or v == 0) and k not in empty_is_fine
    }
    if broken:
        raise ConformanceFailure(
            check_id,
            "core resources cannot be listed",
            node=talos_node.name,
            expected="every core resource type defined and listed with at least one item",
            observed="; ".join(f"{k}: {v}" for k, v in broken.items()),
        )


core_resource_reads = read_at_once(
    "test_core_resources_are_readable",
    _core_resources_readable,
    "The core resources listed on every checked node at once (some 20 calls a node).",
)


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "api.resource-writes-refused",
    severity="critical",
    claim="The resource API refuses Create, Update and Destroy (write access is not allowed), "
    "in the runtime, config and network namespaces",
)
def test_resource_writes_are_refused(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    if talos_cluster.talosconfig is None:
        pytest.skip("the talosconfig of this run is unknown")
    roles = talos_cluster.client.roles
    if ADMIN not in roles:
        # machined's authorizer refuses COSI writes to anyone but os:admin (machined.go)
        # before the resource access filter (internal/app/resources/access.go) runs: only
        # an os:admin write reaches the filter this check is about.
        pytest.skip(
            f"needs {ADMIN}: without it the authorizer refuses the writes before the "
            f"resource access filter is reached; this talosconfig has "
            f"{', '.join(roles) or 'no role'}"
        )
    attempts = probes.write_attempts(
        talos_cluster.client,
        talos_cluster.talosconfig.context,
        talos_node.address,
        talos_cluster.client.timeout,
    )
    talos_evidence.update({a.what: a.detail for a in attempts})
    accepted = [a for a in attempts if a.accepted]
    if accepted:
        raise ConformanceFailure(
            talos_check_spec.id,
            "the resource API let writes through",
            node=talos_node.name,
            expected="PermissionDenied: write access is not allowed",
            observed="; ".join(f"{a.what}: {a.detail}" for a in accepted),
        )


# Last in the module: its certificate is minted with the run and must first expire (2.5 s
# of real time, early.py); the checks above run meanwhile instead of after the wait.
@pytest.mark.talos_check(
    "api.expired-cert-refused",
    severity="critical",
    claim="apid refuses a client certificate of the cluster's own CA outside its validity "
    "period: expired, or (when the CA key is known) not valid yet",
)
def test_expired_certificate_is_refused(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    expired_credentials: tuple[bytes, bytes, str] | str,
    talos_ca_signer: CertificateAuthority | str,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    if isinstance(expired_credentials, str) and isinstance(talos_ca_signer, str):
        pytest.skip(f"{expired_credentials}; {talos_ca_signer}")
    ca_pem, timeout = _ca_pem(talos_cluster), talos_cluster.client.timeout
    attempts = []
    if isinstance(expired_credentials, str):
        talos_evidence["expired certificate"] = f"not tried: {expired_credentials}"
    else:
        crt, key, what = expired_credentials
        attempts.append(
            probes.certificate_attempt(talos_node.host, ca_pem, crt, key, timeout, what)
        )
    if isinstance(talos_ca_signer, str):
        talos_evidence["not-yet-valid certificate"] = f"not tried: {talos_ca_signer}"
    else:
        attempts += probes.not_yet_valid_attempts(talos_node.host, ca_pem, talos_ca_signer, timeout)
    _refused_or_fail(
        talos_check_spec.id,
        talos_node,
        attempts,
        talos_evidence,
        "apid accepted a client certificate outside its validity period",
        "the TLS handshake refused (certificate expired or not yet valid)",
    )
