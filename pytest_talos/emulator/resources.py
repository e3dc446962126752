"""The COSI resource registry of an emulated node: definitions, a versioned store, encoders.

* :data:`DEFINITIONS` — the resource types the emulator serves, each with the
  ResourceDefinition data talosctl resolves names with (``aliases`` plus the automatic
  aliases cosi adds, cosi-project/runtime ``pkg/resource/meta/spec/resource_definition.go``),
  its default namespace, print columns, sensitivity and a spec encoder
  that fills ``proto_spec`` (wire-compatible with ``api/resource/definitions/**``) while
  ``yaml_spec`` is the YAML of the same spec.
* :class:`ResourceStore` — resources keyed by (namespace, type, id) with cosi's version rules
  and synchronous change notifications (the COSI Watch servicer turns them into a stream).

Plain Python; the only protobuf here is the spec encoding, which is part of the resource.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import yaml

from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.resource.definitions.cluster import cluster_pb2
from pytest_talos._proto.resource.definitions.enums import enums_pb2
from pytest_talos._proto.resource.definitions.k8s import k8s_pb2
from pytest_talos._proto.resource.definitions.network import network_pb2
from pytest_talos._proto.resource.definitions.runtime import runtime_pb2
from pytest_talos._proto.resource.definitions.v1alpha1 import v1alpha1_pb2
from pytest_talos._proto.v1alpha1 import meta_pb2
from pytest_talos.talos_api import ResourceType as T  # the one table of type names

__all__ = [
    "DEFINITIONS",
    "NAMESPACES",
    "EventKind",
    "RawSpec",
    "Resource",
    "ResourceDefinition",
    "ResourceStore",
    "StoreEvent",
    "T",
    "definition_for",
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


# ---- spec encoders (proto_spec) ------------------------------------------------------------


def _netip(address: str) -> bytes:
    return ipaddress.ip_address(address).packed


def _member_machine_type(name: str) -> enums_pb2.MachineType:
    kinds: dict[str, enums_pb2.MachineType] = {
        "init": enums_pb2.TYPE_INIT,
        "controlplane": enums_pb2.TYPE_CONTROL_PLANE,
        "worker": enums_pb2.TYPE_WORKER,
    }
    return kinds.get(name, enums_pb2.TYPE_UNKNOWN)


def _encode_rd(spec: Mapping[str, Any]) -> bytes:
    message = meta_pb2.ResourceDefinitionSpec(
        resource_type=spec["type"],
        display_type=spec["displayType"],
        default_namespace=spec["defaultNamespace"],
        aliases=spec["aliases"],
        all_aliases=spec["allAliases"],
        sensitivity=(
            meta_pb2.ResourceDefinitionSpec.SENSITIVE
            if spec.get("sensitivity") == "sensitive"
            else meta_pb2.ResourceDefinitionSpec.NON_SENSITIVE
        ),
    )
    for column in spec["printColumns"]:
        message.print_columns.add(name=column["name"], json_path=column["jsonPath"])
    return message.SerializeToString()


def _encode_namespace(spec: Mapping[str, Any]) -> bytes:
    return meta_pb2.NamespaceSpec(description=spec["description"]).SerializeToString()


def _encode_machine_config(spec: bytes) -> bytes:
    # pkg/machinery/resources/config/machine_config.go: yaml_marshalled holds the config
    # bytes as submitted (configloader keeps them), comments included.
    return config_pb2.MachineConfigSpec(yaml_marshalled=spec).SerializeToString()


_CONFIG_MACHINE_TYPES: dict[str, config_pb2.MachineType] = {
    "init": config_pb2.INIT,
    "controlplane": config_pb2.CONTROL_PLANE,
    "worker": config_pb2.WORKER,
}


def _encode_machine_type(spec: str) -> bytes:
    # pkg/machinery/resources/config/machine_type.go: the spec is machine.Type itself (its
    # YAML is the bare name, `controlplane`), in proto the resource.config.MachineType enum.
    kind = _CONFIG_MACHINE_TYPES.get(spec, config_pb2.UNKNOWN)
    return config_pb2.MachineTypeSpec(machine_type=kind).SerializeToString()


def _encode_service(spec: Mapping[str, Any]) -> bytes:
    return v1alpha1_pb2.ServiceSpec(
        running=spec["running"], healthy=spec["healthy"], unknown=spec["unknown"]
    ).SerializeToString()


_STAGES: dict[str, enums_pb2.RuntimeMachineStage] = {
    "unknown": enums_pb2.MACHINE_STAGE_UNKNOWN,
    "booting": enums_pb2.MACHINE_STAGE_BOOTING,
    "installing": enums_pb2.MACHINE_STAGE_INSTALLING,
    "maintenance": enums_pb2.MACHINE_STAGE_MAINTENANCE,
    "running": enums_pb2.MACHINE_STAGE_RUNNING,
    "rebooting": enums_pb2.MACHINE_STAGE_REBOOTING,
    "shutting down": enums_pb2.MACHINE_STAGE_SHUTTING_DOWN,
    "resetting": enums_pb2.MACHINE_STAGE_RESETTING,
    "upgrading": enums_pb2.MACHINE_STAGE_UPGRADING,
}


def _encode_machine_status(spec: Mapping[str, Any]) -> bytes:
    status = spec["status"]
    message = runtime_pb2.MachineStatusSpec(
        stage=_STAGES.get(spec["stage"], enums_pb2.MACHINE_STAGE_UNKNOWN),
        status=runtime_pb2.MachineStatusStatus(ready=status["ready"]),
    )
    for condition in status.get("unmetConditions") or []:
        message.status.unmet_conditions.add(name=condition["name"], reason=condition["reason"])
    return message.SerializeToString()


def _encode_version(spec: Mapping[str, Any]) -> bytes:
    return runtime_pb2.VersionSpec(version=spec["version"], name=spec["name"]).SerializeToString()


def _encode_member(spec: Mapping[str, Any]) -> bytes:
    message = cluster_pb2.MemberSpec(
        node_id=spec["nodeId"],
        hostname=spec["hostname"],
        machine_type=_member_machine_type(spec["machineType"]),
        operating_system=spec["operatingSystem"],
    )
    for address in spec["addresses"]:
        message.addresses.add(ip=_netip(address))
    if spec.get("controlPlane"):
        message.control_plane.api_server_port = spec["controlPlane"]["apiServerPort"]
    return message.SerializeToString()


def _encode_identity(spec: Mapping[str, Any]) -> bytes:
    return cluster_pb2.IdentitySpec(node_id=spec["nodeId"]).SerializeToString()


def _encode_info(spec: Mapping[str, Any]) -> bytes:
    return cluster_pb2.InfoSpec(
        cluster_id=spec["clusterId"], cluster_name=spec["clusterName"]
    ).SerializeToString()


def _encode_node_address(spec: Mapping[str, Any]) -> bytes:
    message = network_pb2.NodeAddressSpec()
    for prefix in spec["addresses"]:
        network = ipaddress.ip_interface(prefix)
        message.addresses.add(ip=network.ip.packed, prefix_length=network.network.prefixlen)
    return message.SerializeToString()


def _encode_hostname_status(spec: Mapping[str, Any]) -> bytes:
    return network_pb2.HostnameStatusSpec(
        hostname=spec["hostname"], domainname=spec["domainname"]
    ).SerializeToString()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string_field(number: int, text: str) -> bytes:
    data = text.encode("utf-8")
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _encode_etcd_member(spec: Mapping[str, Any]) -> bytes:
    # INFERRED: Talos etcd.MemberSpec {memberID string protobuf:"1"}; no generated message here.
    return _string_field(1, spec["memberID"])


def _encode_nodename(spec: Mapping[str, Any]) -> bytes:
    # pkg/machinery/resources/k8s/nodename.go: nodename = 1, hostnameVersion = 2 (the version
    # of the HostnameStatus it was derived from), skipNodeRegistration = 3.
    return k8s_pb2.NodenameSpec(
        nodename=spec["nodename"],
        hostname_version=str(spec.get("hostnameVersion", "")),
        skip_node_registration=bool(spec.get("skipNodeRegistration", False)),
    ).SerializeToString()


# pkg/machinery/nethelpers: the numbers behind the YAML names of the network specs.
E = enums_pb2
_FAMILIES = {"inet4": E.FAMILY_INET4, "inet6": E.FAMILY_INET6}
_SCOPES = {
    "global": E.SCOPE_GLOBAL,
    "site": E.SCOPE_SITE,
    "link": E.SCOPE_LINK,
    "host": E.SCOPE_HOST,
    "nowhere": E.SCOPE_NOWHERE,
}
_LINK_TYPES = {
    "netrom": E.LINK_NETROM,
    "ether": E.LINK_ETHER,
    "loopback": E.LINK_LOOPBCK,
    "none": E.LINK_NONE,
}
_OPER_STATES = {
    "unknown": E.OPER_STATE_UNKNOWN,
    "notPresent": E.OPER_STATE_NOT_PRESENT,
    "down": E.OPER_STATE_DOWN,
    "lowerLayerDown": E.OPER_STATE_LOWER_LAYER_DOWN,
    "testing": E.OPER_STATE_TESTING,
    "dormant": E.OPER_STATE_DORMANT,
    "up": E.OPER_STATE_UP,
}
_PORTS = {
    "TwistedPair": E.TWISTED_PAIR,
    "AUI": E.AUI,
    "MII": E.MII,
    "Fibre": E.FIBRE,
    "BNC": E.BNC,
    "DirectAttach": E.DIRECT_ATTACH,
    "None": E.NONE,
    "Other": E.OTHER,
}
_DUPLEXES = {"Half": E.HALF, "Full": E.FULL, "Unknown": E.UNKNOWN}
_LINK_FLAGS = {
    "UP": 1 << 0,
    "BROADCAST": 1 << 1,
    "LOOPBACK": 1 << 3,
    "RUNNING": 1 << 6,
    "NOARP": 1 << 7,
    "MASTER": 1 << 10,
    "SLAVE": 1 << 11,
    "MULTICAST": 1 << 12,
    "LOWER_UP": 1 << 16,
}
_ADDRESS_FLAGS = {"permanent": 1 << 7}


def _flag_bits(text: str, bits: Mapping[str, int]) -> int:
    return sum(bits.get(name, 0) for name in text.split(",") if name)


def _mac_bytes(text: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(":")) if text else b""


def _encode_address_status(spec: Mapping[str, Any]) -> bytes:
    # network/address_status.go (protobuf tags 1-11)
    iface = ipaddress.ip_interface(spec["address"])
    message = network_pb2.AddressStatusSpec(
        link_index=spec["linkIndex"],
        link_name=spec["linkName"],
        family=_FAMILIES.get(spec["family"], E.NETHELPERS_FAMILY_UNSPECIFIED),
        scope=_SCOPES.get(spec["scope"], E.SCOPE_GLOBAL),
        flags=_flag_bits(spec["flags"], _ADDRESS_FLAGS),
        priority=spec["priority"],
    )
    message.address.ip = iface.ip.packed
    message.address.prefix_length = iface.network.prefixlen
    for key in ("local", "broadcast", "anycast", "multicast"):
        if spec.get(key):
            getattr(message, key).ip = _netip(spec[key])
    return message.SerializeToString()


def _encode_link_status(spec: Mapping[str, Any]) -> bytes:
    # network/link_status.go (protobuf tags; the kind-specific masters are not modelled)
    return network_pb2.LinkStatusSpec(
        index=spec["index"],
        type=_LINK_TYPES.get(spec["type"], E.LINK_NETROM),
        link_index=spec["linkIndex"],
        flags=_flag_bits(spec["flags"], _LINK_FLAGS),
        hardware_addr=_mac_bytes(spec["hardwareAddr"]),
        permanent_addr=_mac_bytes(spec["permanentAddr"]),
        broadcast_addr=_mac_bytes(spec["broadcastAddr"]),
        mtu=spec["mtu"],
        queue_disc=spec["queueDisc"],
        master_index=spec.get("masterIndex", 0),
        operational_state=_OPER_STATES.get(spec["operationalState"], E.OPER_STATE_UNKNOWN),
        kind=spec["kind"],
        slave_kind=spec["slaveKind"],
        bus_path=spec.get("busPath", ""),
        driver=spec.get("driver", ""),
        link_state=spec["linkState"],
        speed_megabits=spec.get("speedMbit", 0),
        port=_PORTS.get(spec["port"], E.OTHER),
        duplex=_DUPLEXES.get(spec["duplex"], E.UNKNOWN),
    ).SerializeToString()


def _empty(spec: Any) -> bytes:
    return b""


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
        _encode_rd,
        aliases=["api-resources"],
        columns=[("Aliases", "{.aliases[:]}")],
    ),
    _definition(T.NAMESPACES, "Namespace", "meta", _encode_namespace, aliases=["ns"]),
    # config/machine_config.go: sensitive (os:admin only).
    _definition(
        T.MACHINE_CONFIGS, "MachineConfig", "config", _encode_machine_config, sensitive=True
    ),
    # config/machine_type.go: the spec is a bare scalar, so the column is the whole spec.
    _definition(
        T.MACHINE_TYPES, "MachineType", "config", _encode_machine_type, columns=[("Type", "{@}")]
    ),
    # v1alpha1/service.go: namespace runtime (v1alpha1.NamespaceName), alias svc.
    _definition(
        T.SERVICES,
        "Service",
        "runtime",
        _encode_service,
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
        _encode_machine_status,
        columns=[("Stage", "{.stage}"), ("Ready", "{.status.ready}")],
    ),
    _definition(
        T.VERSIONS,
        "Version",
        "runtime",
        _encode_version,
        columns=[("Name", "{.name}"), ("Version", "{.version}")],
    ),
    _definition(
        T.EXTENSION_STATUSES,
        "ExtensionStatus",
        "runtime",
        _empty,
        aliases=["extensions"],
        columns=[("Name", "{.metadata.name}"), ("Version", "{.metadata.version}")],
    ),
    _definition(
        T.DIAGNOSTICS, "Diagnostic", "runtime", _empty, columns=[("Message", "{.message}")]
    ),
    # block/volume_status.go: block.NamespaceName is v1alpha1's, `runtime`.
    _definition(
        T.VOLUME_STATUSES,
        "VolumeStatus",
        "runtime",
        _empty,
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
        _encode_member,
        columns=[
            ("Hostname", "{.hostname}"),
            ("Machine Type", "{.machineType}"),
            ("OS", "{.operatingSystem}"),
            ("Addresses", "{.addresses}"),
        ],
    ),
    _definition(
        T.IDENTITIES, "Identity", "cluster", _encode_identity, columns=[("ID", "{.nodeId}")]
    ),
    _definition(
        T.INFOS,
        "Info",
        "cluster",
        _encode_info,
        columns=[("Cluster ID", "{.clusterId}"), ("Cluster Name", "{.clusterName}")],
    ),
    _definition(
        T.NODE_ADDRESSES,
        "NodeAddress",
        "network",
        _encode_node_address,
        columns=[("Addresses", "{.addresses}"), ("SortAlgorithm", "{.sortAlgorithm}")],
    ),
    # network/hostname_status.go: alias hostname.
    _definition(
        T.HOSTNAME_STATUSES,
        "HostnameStatus",
        "network",
        _encode_hostname_status,
        aliases=["hostname"],
        columns=[("Hostname", "{.hostname}"), ("Domainname", "{.domainname}")],
    ),
    _definition(
        T.ETCD_MEMBERS,
        "EtcdMember",
        "etcd",
        _encode_etcd_member,
        columns=[("Member ID", "{.memberID}")],
    ),
    _definition(
        T.NODENAMES, "Nodename", "k8s", _encode_nodename, columns=[("Nodename", "{.nodename}")]
    ),
    # network/address_status.go
    _definition(
        T.ADDRESS_STATUSES,
        "AddressStatus",
        "network",
        _encode_address_status,
        aliases=["address", "addresses"],
        columns=[("Address", "{.address}"), ("Link", "{.linkName}")],
    ),
    # network/link_status.go
    _definition(
        T.LINK_STATUSES,
        "LinkStatus",
        "network",
        _encode_link_status,
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
)

DEFINITIONS: Mapping[str, ResourceDefinition] = {d.type: d for d in _DEFINITION_LIST}


def definition_for(type_: str) -> ResourceDefinition | None:
    return DEFINITIONS.get(type_)


# ---- YAML of a spec -----------------------------------------------------------------------


class _SpecDumper(yaml.SafeDumper):
    pass


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    # Go's YAML writes multi-line strings as literal blocks; the MachineConfig spec is one.
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_SpecDumper.add_representer(str, _represent_str)


def yaml_of(spec: Any) -> str:
    """The ``yaml_spec`` text: cosi marshals the spec with Go's YAML (cosi-project/runtime
    pkg/resource/protobuf/resource.go)."""
    if isinstance(spec, bytes):
        # config/machine_config.go: the MachineConfig spec marshals as one string scalar
        # holding the whole config.
        spec = spec.decode("utf-8", errors="replace")
    if isinstance(spec, str):
        # A bare scalar (a MachineType, a MachineConfig): Go's YAML writes no `...` end
        # marker and indents a literal block by its default 4 spaces.
        text = yaml.dump(spec, Dumper=_SpecDumper, default_flow_style=False, indent=4)
        return text.removesuffix("...\n")
    return yaml.dump(spec, Dumper=_SpecDumper, sort_keys=False, default_flow_style=False)


@dataclass(frozen=True)
class RawSpec:
    """A spec written by a client (fault cosi-writable): kept exactly as sent."""

    yaml: str
    proto: bytes


# ---- the store ----------------------------------------------------------------------------

EventKind = Literal["created", "updated", "destroyed"]


_EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)


@dataclass(frozen=True)
class Resource:
    namespace: str
    type: str
    id: str
    version: int
    spec: Any
    owner: str = ""
    phase: str = "running"
    created: dt.datetime = _EPOCH
    updated: dt.datetime = _EPOCH
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def definition(self) -> ResourceDefinition:
        return DEFINITIONS[self.type]

    # Resources never change (an update makes a new one), so their encodings are computed
    # once: PyYAML is slow and COSI Get/List/Watch are hot paths.
    @functools.cached_property
    def yaml_spec(self) -> str:
        if isinstance(self.spec, RawSpec):
            return self.spec.yaml
        return yaml_of(self.spec)

    @functools.cached_property
    def proto_spec(self) -> bytes:
        if isinstance(self.spec, RawSpec):
            return self.spec.proto
        definition = DEFINITIONS.get(self.type)
        return definition.encode_proto(self.spec) if definition else b""


@dataclass(frozen=True)
class StoreEvent:
    kind: EventKind
    resource: Resource
    old: Resource | None = None


Listener = Callable[[StoreEvent], None]
Key = tuple[str, str, str]


class ResourceStore:
    """Resources keyed by (namespace, type, id), with cosi's version rules.

    ``put`` creates (version 1) or updates (version + 1). Controllers in Talos skip writes
    whose spec did not change, but machined's direct ``Update`` of the MachineConfig always
    bumps (``internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go`` SetConfig; cosi's
    in-memory Update has no equality short-cut): callers say which with ``always_bump``.
    """

    def __init__(self, now: Callable[[], dt.datetime]) -> None:
        self._now = now
        self._items: dict[Key, Resource] = {}
        self._listeners: list[Listener] = []

    def get(self, namespace: str, type_: str, id_: str) -> Resource | None:
        return self._items.get((namespace, type_, id_))

    def list(self, namespace: str, type_: str) -> list[Resource]:
        found = [r for (ns, t, _), r in self._items.items() if ns == namespace and t == type_]
        return sorted(found, key=lambda r: r.id)

    def __iter__(self) -> Iterator[Resource]:
        return iter(list(self._items.values()))

    def put(
        self,
        namespace: str,
        type_: str,
        id_: str,
        spec: Any,
        *,
        owner: str = "",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        always_bump: bool = False,
    ) -> Resource:
        key = (namespace, type_, id_)
        old = self._items.get(key)
        now = self._now()
        if old is None:
            new = Resource(
                namespace,
                type_,
                id_,
                1,
                spec,
                owner=owner,
                created=now,
                updated=now,
                labels=dict(labels or {}),
                annotations=dict(annotations or {}),
            )
            self._items[key] = new
            self._emit(StoreEvent("created", new))
            return new
        unchanged = old.spec == spec and (labels is None or dict(labels) == dict(old.labels))
        if unchanged and not always_bump:
            return old
        new = replace(
            old,
            version=old.version + 1,
            spec=spec,
            updated=now,
            labels=dict(labels) if labels is not None else old.labels,
        )
        self._items[key] = new
        self._emit(StoreEvent("updated", new, old))
        return new

    def bump(self, namespace: str, type_: str, id_: str) -> Resource | None:
        """An Update with the same spec: version + 1 (fault version-bump-on-reject)."""
        old = self.get(namespace, type_, id_)
        if old is None:
            return None
        return self.put(namespace, type_, id_, old.spec, owner=old.owner, always_bump=True)

    def destroy(self, namespace: str, type_: str, id_: str) -> Resource | None:
        old = self._items.pop((namespace, type_, id_), None)
        if old is not None:
            self._emit(StoreEvent("destroyed", replace(old, phase="tearingDown"), old))
        return old

    def clear(self) -> None:
        """Forget everything without notifications (a node reboot starts from scratch)."""
        self._items.clear()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _emit(self, event: StoreEvent) -> None:
        for listener in list(self._listeners):
            listener(event)
