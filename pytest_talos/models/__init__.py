"""Plain, frozen dataclasses the client returns (never protobuf objects).

Everything here is a value: safe to compare, print and keep after the connection is gone.
Conversion from protobuf lives in :mod:`pytest_talos.client`; this package imports nothing
from the rest of pytest_talos, only the standard library, so every layer (and the emulator)
may use it.

Conventions:

* ``node`` is the target the reply came from (the address as given to the client), or
  ``None`` when the call went to the endpoint itself without node targeting.
* Times are timezone-aware UTC :class:`datetime.datetime` objects, ``None`` when unset.
* Enum values are the proto enum names (``"RUNNING"``) unless a field says otherwise.
* Mapping/list fields are excluded from ``hash()`` (they are compared, not hashed).

Layout: ``machine`` (machine API replies), ``events`` (runtime events), ``resources`` (COSI
resources, their typed specs, watch events and the machine config).
"""

from pytest_talos.models.events import (
    AddressEvent,
    ConfigLoadErrorEvent,
    ConfigValidationErrorEvent,
    Event,
    EventPayload,
    MachineStatusEvent,
    PhaseEvent,
    RestartEvent,
    SequenceEvent,
    ServiceStateEvent,
    TaskEvent,
    UnmetCondition,
)
from pytest_talos.models.machine import (
    ApplyMode,
    ApplyResult,
    ClientConfiguration,
    ConnectRecord,
    EtcdMember,
    FileInfo,
    HealthProgress,
    MemInfo,
    MountStat,
    ProcessInfo,
    ServiceEvent,
    ServiceInfo,
    UpgradeResult,
    Version,
)
from pytest_talos.models.resources import (
    HostnameStatusSpec,
    MachineConfig,
    MachineConfigSpec,
    MachineStatusSpec,
    MachineTypeSpec,
    MemberSpec,
    NodeAddressSpec,
    PrintColumn,
    Resource,
    ResourceDefinitionSpec,
    ResourceEvent,
    ResourceEventType,
    ResourceMetadata,
    ResourceSpec,
    ServiceSpec,
    VersionSpec,
)

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
