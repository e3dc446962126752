"""COSI resources -> models, and resource-type resolution the way talosctl does it.

talosctl resolves ``talosctl get <x>`` by listing ``ResourceDefinitions.meta.cosi.dev``
(namespace ``meta``) and matching ``x`` case-insensitively against each definition's id
(the lower-cased type) and all its aliases; the definition's default namespace is used
when none is given (``pkg/machinery/client/resources.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import yaml
from google.protobuf.message import DecodeError, Message

from pytest_talos import models
from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.resource.definitions.cluster import cluster_pb2
from pytest_talos._proto.resource.definitions.enums import enums_pb2
from pytest_talos._proto.resource.definitions.network import network_pb2
from pytest_talos._proto.resource.definitions.runtime import runtime_pb2
from pytest_talos._proto.resource.definitions.v1alpha1 import v1alpha1_pb2
from pytest_talos._proto.v1alpha1 import meta_pb2, resource_pb2, state_pb2
from pytest_talos.client._convert import enum_name, net_ip, timestamp
from pytest_talos.errors import InvalidArgument, NotFound
from pytest_talos.talos_api import ResourceType as T

RD_TYPE = T.RESOURCE_DEFINITIONS
META_NAMESPACE = "meta"
MACHINE_CONFIG_TYPE = T.MACHINE_CONFIGS
MACHINE_CONFIG_NAMESPACE = "config"
ACTIVE_MACHINE_CONFIG = "v1alpha1"

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# machine.Type names (pkg/machinery/config/machine) by enum number: Members use
# talos.resource.definitions.enums.MachineType, MachineTypes resource.config.MachineType
# (api/resource/config/config.proto); both number the types alike.
_MACHINE_TYPES: dict[int, str] = {
    enums_pb2.TYPE_UNKNOWN: "unknown",
    enums_pb2.TYPE_INIT: "init",
    enums_pb2.TYPE_CONTROL_PLANE: "controlplane",
    enums_pb2.TYPE_WORKER: "worker",
}
_CONFIG_MACHINE_TYPES: dict[int, str] = {
    config_pb2.UNKNOWN: "unknown",
    config_pb2.INIT: "init",
    config_pb2.CONTROL_PLANE: "controlplane",
    config_pb2.WORKER: "worker",
}
_EVENT_TYPES: dict[int, models.ResourceEventType] = {
    state_pb2.CREATED: "created",
    state_pb2.UPDATED: "updated",
    state_pb2.DESTROYED: "destroyed",
    state_pb2.BOOTSTRAPPED: "bootstrapped",
    state_pb2.ERRORED: "errored",
    state_pb2.NOOP: "noop",
}


# --------------------------------------------------------------------------- typed specs


def _machine_type(value: int) -> str:
    return _MACHINE_TYPES.get(value, str(value))


def _service_spec(spec: v1alpha1_pb2.ServiceSpec) -> models.ServiceSpec:
    return models.ServiceSpec(running=spec.running, healthy=spec.healthy, unknown=spec.unknown)


def _member_spec(spec: cluster_pb2.MemberSpec) -> models.MemberSpec:
    port = spec.control_plane.api_server_port if spec.HasField("control_plane") else None
    return models.MemberSpec(
        node_id=spec.node_id,
        addresses=tuple(net_ip(address.ip) for address in spec.addresses),
        hostname=spec.hostname,
        machine_type=_machine_type(spec.machine_type),
        operating_system=spec.operating_system,
        api_server_port=port,
    )


def _machine_status_spec(spec: runtime_pb2.MachineStatusSpec) -> models.MachineStatusSpec:
    stage = enum_name(enums_pb2.RuntimeMachineStage, spec.stage)
    return models.MachineStatusSpec(
        stage=stage.removeprefix("MACHINE_STAGE_").lower(),
        ready=spec.status.ready,
        unmet_conditions=tuple(
            models.UnmetCondition(name=c.name, reason=c.reason)
            for c in spec.status.unmet_conditions
        ),
    )


def _node_address_spec(spec: network_pb2.NodeAddressSpec) -> models.NodeAddressSpec:
    algorithm = enum_name(enums_pb2.NethelpersAddressSortAlgorithm, spec.sort_algorithm)
    return models.NodeAddressSpec(
        addresses=tuple(f"{net_ip(p.ip)}/{p.prefix_length}" for p in spec.addresses),
        sort_algorithm=algorithm.removeprefix("ADDRESS_SORT_ALGORITHM_").lower(),
    )


def _hostname_status_spec(spec: network_pb2.HostnameStatusSpec) -> models.HostnameStatusSpec:
    return models.HostnameStatusSpec(hostname=spec.hostname, domainname=spec.domainname)


def _version_spec(spec: runtime_pb2.VersionSpec) -> models.VersionSpec:
    return models.VersionSpec(version=spec.version, name=spec.name)


def _machine_config_spec(spec: config_pb2.MachineConfigSpec) -> models.MachineConfigSpec:
    return models.MachineConfigSpec(yaml=spec.yaml_marshalled)


def _machine_type_spec(spec: config_pb2.MachineTypeSpec) -> models.MachineTypeSpec:
    kind = _CONFIG_MACHINE_TYPES.get(spec.machine_type, str(spec.machine_type))
    return models.MachineTypeSpec(machine_type=kind)


def _rd_spec(spec: meta_pb2.ResourceDefinitionSpec) -> models.ResourceDefinitionSpec:
    return models.ResourceDefinitionSpec(
        resource_type=spec.resource_type,
        display_type=spec.display_type,
        default_namespace=spec.default_namespace,
        aliases=tuple(spec.aliases),
        all_aliases=tuple(spec.all_aliases),
        print_columns=tuple(
            models.PrintColumn(name=c.name, json_path=c.json_path) for c in spec.print_columns
        ),
        sensitive=spec.sensitivity == meta_pb2.ResourceDefinitionSpec.SENSITIVE,
    )


_SpecDecoder = tuple[type[Message], Callable[[Any], models.ResourceSpec]]

SPEC_DECODERS: dict[str, _SpecDecoder] = {
    T.SERVICES: (v1alpha1_pb2.ServiceSpec, _service_spec),
    T.MEMBERS: (cluster_pb2.MemberSpec, _member_spec),
    T.MACHINE_STATUSES: (runtime_pb2.MachineStatusSpec, _machine_status_spec),
    T.NODE_ADDRESSES: (network_pb2.NodeAddressSpec, _node_address_spec),
    T.HOSTNAME_STATUSES: (network_pb2.HostnameStatusSpec, _hostname_status_spec),
    T.VERSIONS: (runtime_pb2.VersionSpec, _version_spec),
    MACHINE_CONFIG_TYPE: (config_pb2.MachineConfigSpec, _machine_config_spec),
    T.MACHINE_TYPES: (config_pb2.MachineTypeSpec, _machine_type_spec),
    RD_TYPE: (meta_pb2.ResourceDefinitionSpec, _rd_spec),
}


def typed_spec(resource_type: str, proto_spec: bytes) -> models.ResourceSpec | None:
    """Decode ``proto_spec`` for the types with a known spec message; None otherwise."""
    decoder = SPEC_DECODERS.get(resource_type)
    if decoder is None or not proto_spec:
        return None
    cls, convert = decoder
    try:
        message = cls.FromString(proto_spec)
    except DecodeError:
        return None
    return convert(message)


# --------------------------------------------------------------------------- resources


def parse_yaml(text: str) -> Any:
    if not text:
        return None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        return text  # keep what the server sent rather than failing the whole call


def _version(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def metadata(message: resource_pb2.Metadata) -> models.ResourceMetadata:
    return models.ResourceMetadata(
        namespace=message.namespace,
        type=message.type,
        id=message.id,
        version=_version(message.version),
        owner=message.owner,
        phase=message.phase,
        created=timestamp(message, "created"),
        updated=timestamp(message, "updated"),
        labels=dict(message.labels),
        annotations=dict(message.annotations),
        finalizers=tuple(message.finalizers),
    )


def resource(message: resource_pb2.Resource, node: str | None) -> models.Resource:
    meta = metadata(message.metadata)
    spec = message.spec
    return models.Resource(
        metadata=meta,
        spec=parse_yaml(spec.yaml_spec),
        spec_yaml=spec.yaml_spec,
        spec_bytes=spec.proto_spec,
        typed_spec=typed_spec(meta.type, spec.proto_spec),
        node=node,
    )


def resource_event(message: state_pb2.Event, node: str | None) -> models.ResourceEvent:
    return models.ResourceEvent(
        type=_EVENT_TYPES.get(message.event_type, "noop"),
        resource=resource(message.resource, node) if message.HasField("resource") else None,
        old=resource(message.old, node) if message.HasField("old") else None,
        error=message.error if message.HasField("error") else None,
        node=node,
    )


def machine_config(found: models.Resource) -> models.MachineConfig:
    """The MachineConfig resource as raw bytes, parsed documents and version."""
    spec = found.typed_spec
    if isinstance(spec, models.MachineConfigSpec) and spec.yaml:
        raw = spec.yaml
    elif isinstance(found.spec, str):  # yaml_spec is a string scalar holding the config
        raw = found.spec.encode()
    else:
        raw = found.spec_yaml.encode()
    try:
        documents = [doc for doc in yaml.load_all(raw, Loader=_Loader) if doc is not None]
    except yaml.YAMLError:
        documents = []
    return models.MachineConfig(
        raw=raw,
        documents=[doc for doc in documents if isinstance(doc, dict)],
        version=found.version,
        node=found.node,
    )


# --------------------------------------------------------------------------- type resolution


def _list_of_str(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


def _rd_from_yaml(spec: Any) -> models.ResourceDefinitionSpec | None:
    if not isinstance(spec, dict) or ("type" not in spec and "resourceType" not in spec):
        return None
    return models.ResourceDefinitionSpec(
        resource_type=str(spec.get("type") or spec.get("resourceType")),
        display_type=str(spec.get("displayType", "")),
        default_namespace=str(spec.get("defaultNamespace", "")),
        aliases=_list_of_str(spec.get("aliases")),
        all_aliases=_list_of_str(spec.get("allAliases")),
        sensitive=spec.get("sensitivity") in (1, "sensitive", "SENSITIVE"),
    )


def definition_of(found: models.Resource) -> models.ResourceDefinitionSpec | None:
    """A ResourceDefinition resource's spec, from the protobuf or else from the YAML."""
    if isinstance(found.typed_spec, models.ResourceDefinitionSpec):
        return found.typed_spec
    return _rd_from_yaml(found.spec)


def _matches(name: str, definition: models.ResourceDefinitionSpec) -> bool:
    wanted = name.casefold()
    names = (definition.resource_type, *definition.aliases, *definition.all_aliases)
    return any(candidate.casefold() == wanted for candidate in names)


def resolve(
    name: str,
    definitions: Sequence[models.ResourceDefinitionSpec],
    *,
    node: str | None = None,
    method: str | None = None,
) -> models.ResourceDefinitionSpec:
    """The one definition ``name`` refers to; NotFound / InvalidArgument like talosctl."""
    found = {d.resource_type: d for d in definitions if _matches(name, d)}
    if not found:
        raise NotFound(f'resource "{name}" is not registered', node=node, method=method)
    if len(found) > 1:
        choices = ", ".join(sorted(found))
        raise InvalidArgument(
            f'resource type "{name}" is ambiguous: it matches {choices}; use the full type name',
            node=node,
            method=method,
        )
    return next(iter(found.values()))
