"""The COSI resource registry of an emulated node: type names, namespaces, definitions.

* :data:`DEFINITIONS` — the resource types the emulator serves, each with the
  ResourceDefinition data talosctl resolves names with (``aliases`` plus the automatic
  aliases cosi adds, cosi-project/runtime ``pkg/resource/meta/spec/resource_definition.go``),
  its default namespace, print columns, sensitivity and a spec encoder
  that fills ``proto_spec`` (wire-compatible with ``api/resource/definitions/**``) while
  ``yaml_spec`` is the YAML of the same spec.
The spec encoders are :mod:`.specs`; the versioned store of resources is
:mod:`.store`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_talos.emulator.cosi.specs import (
    encode_address_status,
    encode_etcd_member,
    encode_hostname_status,
    encode_identity,
    encode_image_verification_rule,
    encode_info,
    encode_link_status,
    encode_machine_config,
    encode_machine_status,
    encode_machine_type,
    encode_member,
    encode_namespace,
    encode_node_address,
    encode_nodename,
    encode_nothing,
    encode_rd,
    encode_service,
    encode_version,
)
from pytest_talos.releases import Release
from pytest_talos.talos_api import ResourceType as T  # the one table of type names

__all__ = [
    "DEFINITIONS",
    "NAMESPACES",
    "ResourceDefinition",
    "T",
    "definition_for",
    "definitions_on",
]


# The namespaces machined registers, with their descriptions
# (internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go; `meta` is cosi's own,
# cosi-project/runtime pkg/state/registry/namespace.go).
NAMESPACES: Mapping[str, str] = {
    "meta": "Metadata namespace which contains resource and namespace definitions.",
    "runtime": "Talos v1alpha1 subsystems glue resources.",
    "cluster": "Cluster configuration and discovery resources.",
    "cluster-raw": "Cluster unmerged raw resources.",
    "config": "Talos node configuration.",
    "etcd": "etcd resources.",
    "files": "Files and file-like resources.",
    "hardware": "Hardware resources.",
    "k8s": "Kubernetes all node types resources.",
    "controlplane": "Kubernetes control plane resources.",
    "kubespan": "KubeSpan resources.",
    "network": "Networking resources.",
    "network-config": "Networking configuration resources.",
    "cri": "CRI Seccomp resources.",
    "secrets": "Resources with secret material.",
    "security": "Security resources.",
    "perf": "Stats resources.",
}

SpecEncoder = Callable[[Any], bytes]


@dataclass(frozen=True)
class ResourceDefinition:
    type: str
    display_type: str
    default_namespace: str
    aliases: tuple[str, ...] = ()
    print_columns: tuple[tuple[str, str], ...] = ()
    sensitive: bool = False
    encode_proto: SpecEncoder = field(default=lambda spec: b"", repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.type.lower()

    @property
    def filled_aliases(self) -> tuple[str, ...]:
        """``aliases`` as cosi's ``Fill`` leaves them: explicit, singular, initials."""
        return (*self.aliases, *_automatic_aliases(self))

    @property
    def all_aliases(self) -> tuple[str, ...]:
        """``allAliases``: the plural and its suffix prefixes, then :attr:`filled_aliases`."""
        return (*_plural_aliases(self), *self.filled_aliases)

    def spec(self) -> dict[str, Any]:
        """The ResourceDefinition resource spec (YAML shape, in the Go struct's field order).

        cosi-project/runtime ``pkg/resource/meta/spec/resource_definition.go``: the
        ``sensitivity`` key is ``omitempty`` and a non-sensitive type's value is ``""``
        (``sensitivity.go``), so only sensitive types carry it.
        """
        spec: dict[str, Any] = {
            "type": self.type,
            "displayType": self.display_type,
            "defaultNamespace": self.default_namespace,
            "aliases": list(self.filled_aliases),
            "allAliases": list(self.all_aliases),
            "printColumns": [{"name": n, "jsonPath": p} for n, p in self.print_columns],
        }
        if self.sensitive:
            spec["sensitivity"] = "sensitive"
        return spec


# cosi-project/runtime pkg/resource/meta/spec/resource_definition.go (Fill): the singular
# name and, for a plural name with at least two capitals, its lower-cased initials plus the
# initials with an "s" (left out when the initials already end in "S") join `aliases`;
# `allAliases` is the plural, the plural with each prefix of the suffix, then `aliases`.
def _automatic_aliases(definition: ResourceDefinition) -> list[str]:
    plural = definition.type.split(".", 1)[0]
    aliases = [definition.display_type.lower()]
    initials = "".join(ch for ch in plural if ch.isupper())
    if len(initials) > 1:
        aliases.append(initials.lower())
        if not initials.endswith("S"):
            aliases.append(initials.lower() + "s")
    return aliases


def _plural_aliases(definition: ResourceDefinition) -> list[str]:
    plural, _, suffix = definition.type.partition(".")
    parts = suffix.split(".")
    return [plural.lower()] + [".".join([plural.lower(), *parts[:n]]) for n in range(1, len(parts))]


def _definition(
    type_: str,
    display: str,
    namespace: str,
    encoder: SpecEncoder,
    *,
    aliases: Sequence[str] = (),
    columns: Sequence[tuple[str, str]] = (),
    sensitive: bool = False,
) -> ResourceDefinition:
    return ResourceDefinition(
        type=type_,
        display_type=display,
        default_namespace=namespace,
        aliases=tuple(aliases),
        print_columns=tuple(columns),
        sensitive=sensitive,
        encode_proto=encoder,
    )


# Each definition restates the type's ResourceDefinition() in siderolabs/talos
# pkg/machinery/resources/<group>/<type>.go (cosi's own two: cosi-project/runtime
# pkg/resource/meta/{resource_definition,namespace}.go): explicit aliases, default namespace,
# print columns, sensitivity. cosi adds the automatic aliases.
_DEFINITION_LIST = (
    _definition(
        T.RESOURCE_DEFINITIONS,
        "ResourceDefinition",
        "meta",
        encode_rd,
        aliases=["api-resources"],
        columns=[("Aliases", "{.aliases[:]}")],
    ),
    _definition(T.NAMESPACES, "Namespace", "meta", encode_namespace, aliases=["ns"]),
    # config/machine_config.go: sensitive (os:admin only).
    _definition(
        T.MACHINE_CONFIGS, "MachineConfig", "config", encode_machine_config, sensitive=True
    ),
    # config/machine_type.go: the spec is a bare scalar, so the column is the whole spec.
    _definition(
        T.MACHINE_TYPES, "MachineType", "config", encode_machine_type, columns=[("Type", "{@}")]
    ),
    # v1alpha1/service.go: namespace runtime (v1alpha1.NamespaceName), alias svc.
    _definition(
        T.SERVICES,
        "Service",
        "runtime",
        encode_service,
        aliases=["svc"],
        columns=[
            ("Running", "{.running}"),
            ("Healthy", "{.healthy}"),
            ("Health Unknown", "{.unknown}"),
        ],
    ),
    _definition(
        T.MACHINE_STATUSES,
        "MachineStatus",
        "runtime",
        encode_machine_status,
        columns=[("Stage", "{.stage}"), ("Ready", "{.status.ready}")],
    ),
    _definition(
        T.VERSIONS,
        "Version",
        "runtime",
        encode_version,
        columns=[("Name", "{.name}"), ("Version", "{.version}")],
    ),
    _definition(
        T.EXTENSION_STATUSES,
        "ExtensionStatus",
        "runtime",
        encode_nothing,
        aliases=["extensions"],
        columns=[("Name", "{.metadata.name}"), ("Version", "{.metadata.version}")],
    ),
    _definition(
        T.DIAGNOSTICS, "Diagnostic", "runtime", encode_nothing, columns=[("Message", "{.message}")]
    ),
    # block/volume_status.go: block.NamespaceName is v1alpha1's, `runtime`.
    _definition(
        T.VOLUME_STATUSES,
        "VolumeStatus",
        "runtime",
        encode_nothing,
        columns=[
            ("Type", "{.type}"),
            ("Phase", "{.phase}"),
            ("Location", "{.location}"),
            ("Size", "{.prettySize}"),
        ],
    ),
    _definition(
        T.MEMBERS,
        "Member",
        "cluster",
        encode_member,
        columns=[
            ("Hostname", "{.hostname}"),
            ("Machine Type", "{.machineType}"),
            ("OS", "{.operatingSystem}"),
            ("Addresses", "{.addresses}"),
        ],
    ),
    _definition(
        T.IDENTITIES, "Identity", "cluster", encode_identity, columns=[("ID", "{.nodeId}")]
    ),
    _definition(
        T.INFOS,
        "Info",
        "cluster",
        encode_info,
        columns=[("Cluster ID", "{.clusterId}"), ("Cluster Name", "{.clusterName}")],
    ),
    _definition(
        T.NODE_ADDRESSES,
        "NodeAddress",
        "network",
        encode_node_address,
        columns=[("Addresses", "{.addresses}"), ("SortAlgorithm", "{.sortAlgorithm}")],
    ),
    # network/hostname_status.go: alias hostname.
    _definition(
        T.HOSTNAME_STATUSES,
        "HostnameStatus",
        "network",
        encode_hostname_status,
        aliases=["hostname"],
        columns=[("Hostname", "{.hostname}"), ("Domainname", "{.domainname}")],
    ),
    _definition(
        T.ETCD_MEMBERS,
        "EtcdMember",
        "etcd",
        encode_etcd_member,
        columns=[("Member ID", "{.memberID}")],
    ),
    _definition(
        T.NODENAMES, "Nodename", "k8s", encode_nodename, columns=[("Nodename", "{.nodename}")]
    ),
    # network/address_status.go
    _definition(
        T.ADDRESS_STATUSES,
        "AddressStatus",
        "network",
        encode_address_status,
        aliases=["address", "addresses"],
        columns=[("Address", "{.address}"), ("Link", "{.linkName}")],
    ),
    # network/link_status.go
    _definition(
        T.LINK_STATUSES,
        "LinkStatus",
        "network",
        encode_link_status,
        aliases=["link", "links"],
        columns=[
            ("Alias", "{.alias}"),
            ("Type", "{.type}"),
            ("Kind", "{.kind}"),
            ("Hw Addr", "{.hardwareAddr}"),
            ("Oper State", "{.operationalState}"),
            ("Link State", "{.linkState}"),
        ],
    ),
    # security/image_verification_rule.go: explicit empty aliases, not sensitive
    _definition(
        T.IMAGE_VERIFICATION_RULES,
        "ImageVerificationRule",
        "security",
        encode_image_verification_rule,
        columns=[("Pattern", "{.imagePattern}"), ("Skip", "{.skip}"), ("Deny", "{.deny}")],
    ),
)

DEFINITIONS: Mapping[str, ResourceDefinition] = {d.type: d for d in _DEFINITION_LIST}

# Types a release line lacks (the release table says which), by the release fact that says so.
_LATER_TYPES: Mapping[str, Callable[[Release], bool]] = {
    T.IMAGE_VERIFICATION_RULES: lambda release: release.has_image_verification,
}


def definition_for(type_: str) -> ResourceDefinition | None:
    return DEFINITIONS.get(type_)


def definitions_on(release: Release) -> Mapping[str, ResourceDefinition]:
    """The definitions a node of ``release`` registers (v1.12 has no image verification)."""
    return {
        type_: definition
        for type_, definition in DEFINITIONS.items()
        if type_ not in _LATER_TYPES or _LATER_TYPES[type_](release)
    }
