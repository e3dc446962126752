"""The Talos API: answers everywhere with one version, enforces mTLS and RBAC, and its
resource API is readable but never writable (as Talos's own integration tests check it:
``internal/integration/api/version.go``, ``apid.go``, ``resources.go``)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance._support import probes
from conformance._support.context import ReaderAccess
from conformance.cluster.discovery import discovery_enabled
from pytest_talos import models
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import (
    APIError,
    ConformanceFailure,
    NodeError,
    PermissionDenied,
)
from pytest_talos.node import TalosNode

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


@pytest.mark.talos_check(
    "api.version-answers", severity="critical",
    claim="The Talos API answers Version on every node, with a configured (RBAC) machine")
def test_version_answers_on_every_node(
    talos_node: TalosNode, talos_evidence: dict[str, Any]
) -> None:
    version = talos_node.version
    talos_evidence.update(tag=version.tag, platform=version.platform, arch=version.arch)
    if not version.tag.startswith("v") or version.rbac is not True:
        raise ConformanceFailure(
            "api.version-answers", "Version did not describe a configured Talos node",
            node=talos_node.name, expected="a v-tag and features.rbac = true",
            observed=f"tag {version.tag!r}, rbac {version.rbac}")


@pytest.mark.talos_check(
    "api.version-consistent", severity="high",
    claim="Every node runs the same Talos version (Version fanned out to all nodes)")
def test_all_nodes_run_one_talos_version(
    talos_cluster: TalosCluster, talos_evidence: dict[str, Any]
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
    talos_evidence["versions"] = tags
    if silent or len(set(tags.values())) > 1:
        raise ConformanceFailure(
            "api.version-consistent",
            "the nodes do not all answer with one Talos version",
            expected="one version on every node",
            observed=", ".join(f"{n}: {t}" for n, t in sorted(tags.items())),
            evidence={"no answer": silent} if silent else None)


@pytest.mark.talos_check(
    "api.version-matches-resource", severity="medium",
    claim="The Version API and the Versions resource name the same Talos version")
def test_version_api_matches_versions_resource(
    talos_node: TalosNode, talos_evidence: dict[str, Any]
) -> None:
    api_tag = talos_node.version.tag
    resource = talos_node.resource("Versions.runtime.talos.dev", "version", "runtime")
    spec = resource.typed_spec
    resource_tag = spec.version if isinstance(spec, models.VersionSpec) else str(
        (resource.spec or {}).get("version"))
    talos_evidence.update(version_api=api_tag, versions_resource=resource_tag)
    if api_tag != resource_tag:
        raise ConformanceFailure(
            "api.version-matches-resource", "the node reports two different versions",
            node=talos_node.name, expected=f"Version API == Versions resource ({resource_tag})",
            observed=f"Version API says {api_tag}")


@pytest.mark.talos_check(
    "api.mtls-required", severity="critical",
    claim="apid refuses a client that presents no certificate")
def test_client_without_certificate_is_refused(
    talos_node: TalosNode, talos_cluster: TalosCluster, talos_evidence: dict[str, Any]
) -> None:
    attempt = probes.connect_without_certificate(
        talos_node.host, _ca_pem(talos_cluster), talos_cluster.client.timeout)
    talos_evidence[attempt.what] = attempt.detail
    if attempt.accepted:
        raise ConformanceFailure(
            "api.mtls-required", "apid accepted a connection without a client certificate",
            node=talos_node.name, expected="the TLS handshake refused (certificate required)",
            observed=attempt.detail)


@pytest.mark.talos_check(
    "api.foreign-ca-refused", severity="critical",
    claim="apid refuses a client certificate issued by a CA other than the cluster's")
def test_certificate_from_foreign_ca_is_refused(
    talos_node: TalosNode, talos_cluster: TalosCluster, talos_evidence: dict[str, Any]
) -> None:
    attempt = probes.foreign_ca_attempt(
        talos_node.host, _ca_pem(talos_cluster), talos_cluster.client.timeout)
    talos_evidence[attempt.what] = attempt.detail
    if attempt.accepted:
        raise ConformanceFailure(
            "api.foreign-ca-refused", "apid accepted a certificate from a foreign CA",
            node=talos_node.name, expected="the TLS handshake refused",
            observed=attempt.detail)


@pytest.mark.talos_check(
    "api.reader-cannot-apply", severity="critical",
    claim="An os:reader client cannot apply a machine configuration (PermissionDenied)")
def test_reader_cannot_apply_configuration(
    talos_node: TalosNode, talos_reader: ReaderAccess, talos_evidence: dict[str, Any]
) -> None:
    reader = talos_reader.for_node(talos_node.address)
    current = talos_node.machine_config.raw
    try:
        # A dry run: authorization comes first (v1alpha1_server.go ApplyConfiguration), and even
        # a node that wrongly lets the reader through changes nothing.
        reply = reader.apply_configuration(current, "no-reboot", dry_run=True)
    except PermissionDenied as exc:
        talos_evidence["reply"] = f"{exc.code}: {exc.details}"
        return
    except APIError as exc:
        raise ConformanceFailure(
            "api.reader-cannot-apply", "the reader was refused, but not for lack of rights",
            node=talos_node.name, expected="PermissionDenied: not authorized",
            observed=f"{exc.code}: {exc.details}") from None
    raise ConformanceFailure(
        "api.reader-cannot-apply", "an os:reader client got through ApplyConfiguration",
        node=talos_node.name, expected="PermissionDenied: not authorized",
        observed=f"accepted (dry run): {reply.mode_details.splitlines()[0]}")


@pytest.mark.talos_check(
    "api.reader-cannot-read-secrets", severity="high",
    claim="An os:reader client cannot read the machine config (a sensitive resource)")
def test_reader_cannot_read_machine_config(
    talos_node: TalosNode, talos_reader: ReaderAccess, talos_evidence: dict[str, Any]
) -> None:
    reader = talos_reader.for_node(talos_node.address)
    try:
        config = reader.machine_config()
    except PermissionDenied as exc:
        talos_evidence["reply"] = f"{exc.code}: {exc.details}"
        return
    raise ConformanceFailure(
        "api.reader-cannot-read-secrets",
        "an os:reader client read the MachineConfig (it holds the cluster's secrets)",
        node=talos_node.name, expected="PermissionDenied: not authorized",
        observed=f"MachineConfig version {config.version}, {len(config.raw)} bytes")


@pytest.mark.talos_check(
    "api.resources-readable", severity="medium",
    claim="The resource API lists its resource definitions and the core resources")
def test_core_resources_are_readable(
    talos_node: TalosNode, talos_evidence: dict[str, Any]
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
    broken = {k: v for k, v in counts.items()
              if (not isinstance(v, int) or v == 0) and k not in empty_is_fine}
    if broken:
        raise ConformanceFailure(
            "api.resources-readable", "core resources cannot be listed", node=talos_node.name,
            expected="every core resource type defined and listed with at least one item",
            observed="; ".join(f"{k}: {v}" for k, v in broken.items()))


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "api.resource-writes-refused", severity="critical",
    claim="The resource API refuses Create, Update and Destroy (write access is not allowed)")
def test_resource_writes_are_refused(
    talos_node: TalosNode, talos_cluster: TalosCluster, talos_evidence: dict[str, Any]
) -> None:
    if talos_cluster.talosconfig is None:
        pytest.skip("the talosconfig of this run is unknown")
    attempts = probes.write_attempts(
        talos_cluster.client, talos_cluster.talosconfig.context, talos_node.address,
        talos_cluster.client.timeout)
    talos_evidence.update({a.what: a.detail for a in attempts})
    accepted = [a for a in attempts if a.accepted]
    if accepted:
        raise ConformanceFailure(
            "api.resource-writes-refused", "the resource API let writes through",
            node=talos_node.name, expected="PermissionDenied: write access is not allowed",
            observed="; ".join(f"{a.what}: {a.detail}" for a in accepted))
