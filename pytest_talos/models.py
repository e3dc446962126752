"""Plain, frozen dataclasses the client returns (never protobuf objects).

Everything here is a value: safe to compare, print and keep after the connection is gone.
Conversion from protobuf lives in :mod:`pytest_talos.client`; this module imports nothing
from the package but the standard library, so every layer (and the emulator) may use it.

Conventions:

* ``node`` is the target the reply came from (the address as given to the client), or
  ``None`` when the call went to the endpoint itself without node targeting.
* Times are timezone-aware UTC :class:`datetime.datetime` objects, ``None`` when unset.
* Enum values are the proto enum names (``"RUNNING"``) unless a field says otherwise.
* Mapping/list fields are excluded from ``hash()`` (they are compared, not hashed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "AddressEvent",
    "ApplyMode",
    "ApplyResult",
    "ClientConfiguration",
    "ConfigLoadErrorEvent",
    "ConfigValidationErrorEvent",
    "ConnectRecord",
    "EtcdMember",
    "Event",
    "EventPayload",
    "FileInfo",
    "HealthProgress",
    "HostnameStatusSpec",
    "MachineConfig",
    "MachineConfigSpec",
    "MachineStatusEvent",
    "MachineStatusSpec",
    "MachineTypeSpec",
    "MemInfo",
    "MemberSpec",
    "MountStat",
    "NodeAddressSpec",
    "PhaseEvent",
    "PrintColumn",
    "ProcessInfo",
    "Resource",
    "ResourceDefinitionSpec",
    "ResourceEvent",
    "ResourceEventType",
    "ResourceMetadata",
    "ResourceSpec",
    "RestartEvent",
    "SequenceEvent",
    "ServiceEvent",
    "ServiceInfo",
    "ServiceSpec",
    "ServiceStateEvent",
    "TaskEvent",
    "UnmetCondition",
    "UpgradeResult",
    "Version",
    "VersionSpec",
]

ApplyMode = Literal["reboot", "auto", "no-reboot", "staged", "try"]
ResourceEventType = Literal["created", "updated", "destroyed", "bootstrapped", "errored", "noop"]

# Go os.FileMode type bits, as List reports them.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_DEVICE = 1 << 26
_MODE_NAMED_PIPE = 1 << 25
_MODE_SOCKET = 1 << 24
_MODE_CHAR_DEVICE = 1 << 21
_MODE_IRREGULAR = 1 << 19
_MODE_TYPE = (
    _MODE_DIR
    | _MODE_SYMLINK
    | _MODE_DEVICE
    | _MODE_NAMED_PIPE
    | _MODE_SOCKET
    | _MODE_CHAR_DEVICE
    | _MODE_IRREGULAR
)


# --------------------------------------------------------------------------- machine API


@dataclass(frozen=True)
class Version:
    """``talosctl version`` for one node."""

    tag: str
    sha: str
    go_version: str
    os: str
    arch: str
    platform: str  # e.g. "container", "metal", "aws"
    platform_mode: str  # "cloud" | "container" | "metal" | "metal-agent"
    rbac: bool | None  # None before a machine config is loaded (maintenance mode)
    node: str | None = None

    @property
    def in_container(self) -> bool:
        return self.platform_mode == "container"


@dataclass(frozen=True)
class ServiceEvent:
    """One entry of a service's event history (the last 64 are kept)."""

    msg: str
    state: str  # "Running", "Waiting", "Failed", ...
    ts: dt.datetime | None


@dataclass(frozen=True)
class ServiceInfo:
    """A service as ``talosctl services`` shows it."""

    id: str
    state: str  # "Running", "Finished", "Failed", ... ("Unknown" fallback)
    healthy: bool
    health_unknown: bool  # no health result (yet)
    last_message: str
    last_change: dt.datetime | None = None
    events: tuple[ServiceEvent, ...] = ()
    node: str | None = None

    @property
    def running(self) -> bool:
        return self.state == "Running"

    @property
    def last_event(self) -> ServiceEvent | None:
        return self.events[-1] if self.events else None


@dataclass(frozen=True)
class ApplyResult:
    """What ApplyConfiguration did: the final mode, its details and any warnings."""

    mode: ApplyMode
    mode_details: str
    warnings: tuple[str, ...] = ()
    node: str | None = None


@dataclass(frozen=True)
class FileInfo:
    """One entry of a List call. ``mode`` holds Go ``os.FileMode`` bits."""

    name: str
    size: int
    mode: int
    modified: dt.datetime | None
    is_dir: bool
    error: str = ""  # per-entry error (e.g. permission denied); the listing goes on
    link: str = ""  # symlink target
    relative_name: str = ""
    uid: int = 0
    gid: int = 0
    node: str | None = None

    @property
    def permissions(self) -> int:
        return self.mode & 0o777

    @property
    def is_symlink(self) -> bool:
        return bool(self.mode & _MODE_SYMLINK)

    @property
    def is_regular(self) -> bool:
        return not self.mode & _MODE_TYPE


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    state: str
    threads: int
    cpu_time: float
    virtual_memory: int
    resident_memory: int
    command: str
    executable: str
    args: str
    label: str = ""
    node: str | None = None


@dataclass(frozen=True)
class ConnectRecord:
    """One socket from Netstat. ``state`` is the TCP state name (``"LISTEN"``, ...)."""

    l4proto: str  # "tcp", "tcp6", "udp", "udp6", ...
    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    state: str
    pid: int | None = None  # None when the server did not report a process
    process_name: str = ""
    uid: int = 0
    inode: int = 0
    netns: str = ""
    node: str | None = None

    @property
    def listening(self) -> bool:
        return self.state == "LISTEN" or (self.l4proto.startswith("udp") and self.remote_port == 0)


@dataclass(frozen=True)
class MountStat:
    """A mounted filesystem; sizes in bytes."""

    filesystem: str
    size: int
    available: int
    mounted_on: str
    node: str | None = None


@dataclass(frozen=True)
class MemInfo:
    """The most used /proc/meminfo values, in kB (as the API reports them)."""

    total_kb: int
    free_kb: int
    available_kb: int
    buffers_kb: int
    cached_kb: int
    swap_total_kb: int
    swap_free_kb: int
    node: str | None = None


@dataclass(frozen=True)
class EtcdMember:
    id: int
    hostname: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_learner: bool


@dataclass(frozen=True)
class UpgradeResult:
    ack: str  # "Upgrade request received"
    actor_id: str
    node: str | None = None


@dataclass(frozen=True)
class ClientConfiguration:
    """Credentials returned by GenerateClientConfiguration. ``repr`` hides the key."""

    ca_pem: bytes
    crt_pem: bytes
    key_pem: bytes = field(repr=False)
    talosconfig: bytes = field(repr=False)  # holds the key too
    node: str | None = None


@dataclass(frozen=True)
class HealthProgress:
    """One line of server-side ``talosctl health`` progress."""

    message: str
    node: str | None = None


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class SequenceEvent:
    sequence: str
    action: str  # "NOOP" | "START" | "STOP"
    error: str | None = None
    error_code: str | None = None  # "FATAL" | "LOCKED" | "CANCELED"


@dataclass(frozen=True)
class PhaseEvent:
    phase: str
    action: str  # "START" | "STOP"


@dataclass(frozen=True)
class TaskEvent:
    task: str
    action: str  # "START" | "STOP"


@dataclass(frozen=True)
class ServiceStateEvent:
    service: str
    action: str  # "INITIALIZED" ... "RUNNING" ... "STARTING"
    message: str
    healthy: bool = False
    health_unknown: bool = True
    health_message: str = ""

    @property
    def state(self) -> str:
        """The state as ServiceInfo spells it (``"Running"``)."""
        return self.action.capitalize()


@dataclass(frozen=True)
class RestartEvent:
    cmd: int


@dataclass(frozen=True)
class ConfigLoadErrorEvent:
    error: str


@dataclass(frozen=True)
class ConfigValidationErrorEvent:
    error: str


@dataclass(frozen=True)
class AddressEvent:
    hostname: str
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class UnmetCondition:
    name: str
    reason: str


@dataclass(frozen=True)
class MachineStatusEvent:
    stage: str  # "BOOTING", "RUNNING", ...
    ready: bool
    unmet_conditions: tuple[UnmetCondition, ...] = ()


EventPayload = (
    SequenceEvent
    | PhaseEvent
    | TaskEvent
    | ServiceStateEvent
    | RestartEvent
    | ConfigLoadErrorEvent
    | ConfigValidationErrorEvent
    | AddressEvent
    | MachineStatusEvent
)


@dataclass(frozen=True)
class Event:
    """A runtime event; ``id`` is an rs/xid string (sortable by time)."""

    id: str
    actor_id: str
    payload: EventPayload
    node: str | None = None


# --------------------------------------------------------------------------- resources


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
