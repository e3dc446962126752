"""COSI resources (``talosctl get``), their typed specs, watch events, the machine config."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_talos.models.events import UnmetCondition

ResourceEventType = Literal["created", "updated", "destroyed", "bootstrapped", "errored", "noop"]


@dataclass(frozen=True)
class ServiceSpec:
    running: bool
    healthy: bool
    unknown: bool


@dataclass(frozen=True)
class MemberSpec:
    node_id: str
    addresses: tuple[str, ...]
    hostname: str
    machine_type: str  # "controlplane" | "worker" | "init" | "unknown"
    operating_system: str
    api_server_port: int | None = None  # control-plane members only


@dataclass(frozen=True)
class MachineStatusSpec:
    stage: str  # lower-case, e.g. "running", "booting"
    ready: bool
    unmet_conditions: tuple[UnmetCondition, ...] = ()


@dataclass(frozen=True)
class NodeAddressSpec:
    addresses: tuple[str, ...]  # CIDR notation, e.g. "10.5.0.2/24"
    sort_algorithm: str = "v1"


@dataclass(frozen=True)
class HostnameStatusSpec:
    hostname: str
    domainname: str

    @property
    def fqdn(self) -> str:
        return f"{self.hostname}.{self.domainname}" if self.domainname else self.hostname


@dataclass(frozen=True)
class VersionSpec:
    version: str
    name: str


@dataclass(frozen=True)
class MachineConfigSpec:
    yaml: bytes = field(repr=False)  # the submitted config, byte for byte (may hold secrets)


@dataclass(frozen=True)
class MachineTypeSpec:
    machine_type: str  # "controlplane" | "worker" | "init" | "unknown"


@dataclass(frozen=True)
class PrintColumn:
    name: str
    json_path: str


@dataclass(frozen=True)
class ResourceDefinitionSpec:
    resource_type: str  # e.g. "Services.v1alpha1.talos.dev"
    display_type: str  # e.g. "Service"
    default_namespace: str
    aliases: tuple[str, ...] = ()
    all_aliases: tuple[str, ...] = ()
    print_columns: tuple[PrintColumn, ...] = ()
    sensitive: bool = False


ResourceSpec = (
    ServiceSpec
    | MemberSpec
    | MachineStatusSpec
    | NodeAddressSpec
    | HostnameStatusSpec
    | VersionSpec
    | MachineConfigSpec
    | MachineTypeSpec
    | ResourceDefinitionSpec
)


@dataclass(frozen=True)
class ResourceMetadata:
    namespace: str
    type: str
    id: str
    version: int
    owner: str = ""  # controller name; "" for user-owned
    phase: str = "running"  # "running" | "tearingDown"
    created: dt.datetime | None = None
    updated: dt.datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    annotations: Mapping[str, str] = field(default_factory=dict, hash=False)
    finalizers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resource:
    """A COSI resource as ``talosctl get -o yaml`` shows it.

    ``spec`` is the YAML spec parsed to Python; ``typed_spec`` is the decoded protobuf
    spec for the types pytest-talos knows (see :data:`ResourceSpec`), else ``None``.
    """

    metadata: ResourceMetadata
    spec: Any = field(hash=False)
    spec_yaml: str = field(default="", repr=False)
    spec_bytes: bytes = field(default=b"", repr=False)
    typed_spec: ResourceSpec | None = field(default=None, hash=False)
    node: str | None = None

    @property
    def id(self) -> str:
        return self.metadata.id

    @property
    def type(self) -> str:
        return self.metadata.type

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def version(self) -> int:
        return self.metadata.version


@dataclass(frozen=True)
class ResourceEvent:
    """One change seen by a watch. ``resource`` is a tombstone for ``destroyed``."""

    type: ResourceEventType
    resource: Resource | None
    old: Resource | None = None
    error: str | None = None  # set for "errored"
    node: str | None = None


@dataclass(frozen=True)
class MachineConfig:
    """The active machine config: raw bytes as submitted, parsed documents, version."""

    raw: bytes = field(repr=False)  # holds secrets
    documents: list[dict[str, Any]] = field(hash=False, repr=False)
    version: int
    node: str | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The document kinds, e.g. ``("v1alpha1", "HostnameConfig")`` (v1alpha1 has no kind)."""
        return tuple(str(doc.get("kind") or doc.get("version") or "?") for doc in self.documents)
