"""Facts about the Talos API that both the client side and the emulator use.

A leaf module: it imports nothing from pytest_talos, so the client (which refuses changes a
test may not make) and the emulator (whose call log records them) share one table.

:data:`CHANGING_METHODS` lists every RPC of the Talos v1.13 API that changes a node, with the
allow level it needs:

* ``mutating``: a change the kit can undo (machine config applied without a reboot, services
  started, stopped or restarted, META keys, images, COSI resources);
* ``disruptive``: the node reboots, shuts down, resets, upgrades or installs, or the etcd
  cluster's membership, leadership or data changes.

The method lists are those of ``api/machine/machine.proto``, ``api/machine/image.proto``,
``api/machine/lifecycle.proto``, ``api/machine/debug.proto``, ``api/storage/storage.proto``
and ``api/resource/...`` (COSI ``State``). Reading calls (Version, List, Logs, EtcdSnapshot,
EtcdStatus, PacketCapture, ImageList, Verify, ...) are absent: they do not change the node.

The other facts here, each stated once for both sides:

* ports: :data:`APID_PORT` (50000), :data:`TRUSTD_PORT` (50001);
* roles: the built-in role names (``pkg/machinery/role/role.go``), machined's authorizer rule
  table :data:`ROLE_RULES` (``internal/app/machined/pkg/system/services/machined.go``), and
  what a method needs on a running node (:func:`roles_needed`);
* which roles a client certificate carries (:func:`certificate_roles`);
* resource type names (:class:`ResourceType`);
* :func:`split_host_port`, the one way ``host[:port]`` text is taken apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from cryptography import x509
from cryptography.x509.oid import NameOID

__all__ = [
    "ADMIN",
    "ALLOW_LEVELS",
    "APID_PORT",
    "CHANGING_METHODS",
    "EMULATOR_BUILT",
    "ETCD_BACKUP",
    "IMAGE_VERIFIER",
    "IMPERSONATOR",
    "META_WRITER",
    "OPERATOR",
    "READER",
    "ROLE_RULES",
    "TRUSTD_PORT",
    "ChangeLevel",
    "ResourceType",
    "allowed_roles",
    "certificate_roles",
    "change_level",
    "is_emulator_build",
    "join_host_port",
    "kubernetes_node_name",
    "permits",
    "roles_needed",
    "split_host_port",
    "unsupported_mode",
]

# --------------------------------------------------------------------------- ports

APID_PORT: Final = 50000  # internal/app/machined/pkg/controllers/runtime/api_service_config.go
TRUSTD_PORT: Final = 50001  # internal/app/trustd/main.go

# --------------------------------------------------------------------------- the emulator

# What the pytest-talos emulator answers in the Version reply's ``built`` field. A real Talos
# build leaves it empty: pkg/machinery/version/version.go (v1.13.9) declares ``Built string``
# with "set at build time. TODO: its not", and NewVersion copies it as is. So the emulator can
# say what it is there, where no real node puts anything by accident, and the client side
# decides "emulated" from it, never from the clock rate.
EMULATOR_BUILT: Final = "pytest-talos emulator (not a Talos build)"


def is_emulator_build(built: str) -> bool:
    """Whether a Version reply's ``built`` is the emulator's own marker."""
    return built.strip() == EMULATOR_BUILT


# --------------------------------------------------------------------------- node names


def kubernetes_node_name(hostname: str) -> str:
    """A hostname as Talos turns it into a Kubernetes Node name (FromHostname in
    internal/app/machined/pkg/controllers/k8s/internal/nodename/nodename.go): ASCII
    letters lower-cased, digits, ``-`` and ``.`` kept, ``_`` turned into ``-``, anything
    else dropped, then leading and trailing ``-``/``.`` trimmed. ValueError when nothing is
    left (Talos then publishes no Nodename)."""
    kept = []
    for char in hostname:
        if "a" <= char <= "z" or "0" <= char <= "9" or char in "-.":
            kept.append(char)
        elif "A" <= char <= "Z":
            kept.append(char.lower())
        elif char == "_":
            kept.append("-")
    name = "".join(kept).strip("-.")
    if not name:
        raise ValueError(f"could not convert hostname {hostname!r} to a valid Kubernetes Node name")
    return name


# --------------------------------------------------------------------------- runtime modes

# How machined and the lifecycle service refuse what the node's runtime mode cannot do
# (internal/app/machined/pkg/runtime/mode.go capabilities; the texts in
# internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go checkSupported and
# internal/app/lifecycle/lifecycle.go): FAILED_PRECONDITION "method is not supported in
# container mode", "upgrade is not supported in container mode", "installation is ...".
_MODE_REFUSAL = re.compile(r"\bnot supported in (cloud|container|metal|metal-agent) mode\b")


def unsupported_mode(details: str) -> str | None:
    """The runtime mode named by a FAILED_PRECONDITION refusal text, or None for another one."""
    found = _MODE_REFUSAL.search(details)
    return found.group(1) if found else None


# --------------------------------------------------------------------------- resource types


class ResourceType:
    """Resource type names (``pkg/machinery/resources/<group>/*.go``; cosi's own ``meta``)."""

    RESOURCE_DEFINITIONS: Final = "ResourceDefinitions.meta.cosi.dev"
    NAMESPACES: Final = "Namespaces.meta.cosi.dev"
    MACHINE_CONFIGS: Final = "MachineConfigs.config.talos.dev"
    # security/image_verification_rule.go (v1.13 and later; namespace `security`)
    IMAGE_VERIFICATION_RULES: Final = "ImageVerificationRules.security.talos.dev"
    MACHINE_TYPES: Final = "MachineTypes.config.talos.dev"
    SERVICES: Final = "Services.v1alpha1.talos.dev"
    MACHINE_STATUSES: Final = "MachineStatuses.runtime.talos.dev"
    VERSIONS: Final = "Versions.runtime.talos.dev"
    EXTENSION_STATUSES: Final = "ExtensionStatuses.runtime.talos.dev"
    DIAGNOSTICS: Final = "Diagnostics.runtime.talos.dev"
    VOLUME_STATUSES: Final = "VolumeStatuses.block.talos.dev"
    MEMBERS: Final = "Members.cluster.talos.dev"
    IDENTITIES: Final = "Identities.cluster.talos.dev"
    INFOS: Final = "Infos.cluster.talos.dev"
    NODE_ADDRESSES: Final = "NodeAddresses.net.talos.dev"
    HOSTNAME_STATUSES: Final = "HostnameStatuses.net.talos.dev"
    ETCD_MEMBERS: Final = "EtcdMembers.etcd.talos.dev"
    NODENAMES: Final = "Nodenames.kubernetes.talos.dev"
    ADDRESS_STATUSES: Final = "AddressStatuses.net.talos.dev"
    LINK_STATUSES: Final = "LinkStatuses.net.talos.dev"


# --------------------------------------------------------------------------- roles

ADMIN: Final = "os:admin"
OPERATOR: Final = "os:operator"
READER: Final = "os:reader"
ETCD_BACKUP: Final = "os:etcd:backup"
IMAGE_VERIFIER: Final = "os:image:verifier"
META_WRITER: Final = "os:meta:writer"
IMPERSONATOR: Final = "os:impersonator"

_A = frozenset({ADMIN})
_AO = frozenset({ADMIN, OPERATOR})
_AOR = frozenset({ADMIN, OPERATOR, READER})


def _rules(prefix: str, roles: frozenset[str], *names: str) -> dict[str, frozenset[str]]:
    return {prefix + name: roles for name in names}


# machined's authorizer: the roles allowed to call each method; a method not listed is
# admin only (internal/app/machined/pkg/system/services/machined.go, ``rules``).
ROLE_RULES: Final[Mapping[str, frozenset[str]]] = {
    "/cluster.ClusterService/HealthCheck": _AOR,
    "/inspect.InspectService/ControllerRuntimeDependencies": _AOR,
    **_rules("/machine.ImageService/", _A, "Import", "Remove"),
    "/machine.ImageService/List": _AOR,
    "/machine.ImageService/Pull": _AO,
    "/machine.ImageService/Verify": _AOR | {IMAGE_VERIFIER},
    "/machine.DebugService/ContainerRun": _A,
    **_rules("/machine.LifecycleService/", _A, "Install", "Upgrade"),
    # admin, and reader for maintenance only (the handler checks: see roles_needed)
    "/machine.MachineService/ApplyConfiguration": frozenset({ADMIN, READER}),
    **_rules(
        "/machine.MachineService/",
        _A,
        "Bootstrap",
        "Copy",
        "EtcdForfeitLeadership",
        "EtcdLeaveCluster",
        "EtcdRecover",
        "EtcdRemoveMemberByID",
        "EtcdDowngradeCancel",
        "EtcdDowngradeEnable",
        "EtcdDowngradeValidate",
        "GenerateClientConfiguration",
        "Kubeconfig",
        "Read",
        "Reset",
        "Rollback",
        "Upgrade",
    ),
    **_rules(
        "/machine.MachineService/",
        _AO,
        "EtcdAlarmDisarm",
        "EtcdDefragment",
        "ImagePull",
        "PacketCapture",
        "Reboot",
        "Restart",
        "ServiceRestart",
        "ServiceStart",
        "ServiceStop",
        "Shutdown",
    ),
    **_rules(
        "/machine.MachineService/",
        _AOR,
        "CPUInfo",
        "CPUFreqStats",
        "Containers",
        "DiskStats",
        "DiskUsage",
        "Dmesg",
        "Events",
        "Hostname",
        "ImageList",
        "List",
        "LoadAvg",
        "Logs",
        "LogsContainers",
        "Memory",
        "Mounts",
        "NetworkDeviceStats",
        "Netstat",
        "Processes",
        "ServiceList",
        "Stats",
        "SystemStat",
        "Version",
    ),
    **_rules(
        "/machine.MachineService/",
        _AOR | {ETCD_BACKUP},
        "EtcdAlarmList",
        "EtcdMemberList",
        "EtcdStatus",
    ),
    "/machine.MachineService/EtcdSnapshot": _AO | {ETCD_BACKUP},
    **_rules(
        "/machine.MachineService/", frozenset({ADMIN, META_WRITER}), "MetaWrite", "MetaDelete"
    ),
    **_rules("/cosi.resource.State/", _AOR, "Get", "List", "Watch"),
    **_rules("/cosi.resource.State/", _A, "Create", "Update", "Destroy"),
    "/storage.StorageService/Disks": _AOR,
    # admin, and reader for maintenance only (the handler checks: see roles_needed)
    "/storage.StorageService/BlockDeviceWipe": frozenset({ADMIN, READER}),
    **_rules("/time.TimeService/", _AOR, "Time", "TimeCheck"),
}

# Methods whose handler admits a reader only in maintenance mode (machined.go comments;
# v1alpha1_server.go ApplyConfiguration: ``!inMaintenance && !roles.Includes(role.Admin)``).
_ADMIN_OUTSIDE_MAINTENANCE = frozenset(
    {"/machine.MachineService/ApplyConfiguration", "/storage.StorageService/BlockDeviceWipe"}
)


def allowed_roles(method: str) -> frozenset[str]:
    """The roles machined's authorizer lets call ``method`` (unlisted: admin only)."""
    return ROLE_RULES.get(method, _A)


def roles_needed(method: str) -> tuple[str, ...]:
    """The roles one of which a call to ``method`` needs on a running (not maintenance) node,
    sorted; what a PermissionDenied hint names."""
    roles = _A if method in _ADMIN_OUTSIDE_MAINTENANCE else allowed_roles(method)
    return tuple(sorted(roles))


def certificate_roles(cert: x509.Certificate | bytes) -> tuple[str, ...]:
    """The Talos roles a client certificate carries: its Subject Organization values, empty
    ones dropped as Talos drops them (``pkg/grpc/middleware/authz``); a PEM that does not
    parse carries none."""
    if isinstance(cert, bytes):
        try:
            cert = x509.load_pem_x509_certificate(cert)
        except ValueError:
            return ()
    values = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    roles = (v.value.decode() if isinstance(v.value, bytes) else v.value for v in values)
    return tuple(role for role in roles if role)


# --------------------------------------------------------------------------- host and port


def join_host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets (``[fd00::2]:50000``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_host_port(text: str) -> tuple[str, str | None]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address -> the host and
    the port text (None without one), neither judged further.

    Raises ValueError for a ``[`` without ``]`` and for anything after ``]`` but ``:port``.
    """
    if text.startswith("["):
        inner, closed, rest = text[1:].partition("]")
        if not closed:
            raise ValueError("'[' without a closing ']'")
        if rest and not rest.startswith(":"):
            raise ValueError(f"unexpected {rest!r} after ']'")
        return inner, rest[1:] if rest else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, port
    return text, None  # a name, an IPv4 address, or a bare IPv6 address: no port


# --------------------------------------------------------------------------- changing methods

ChangeLevel = Literal["mutating", "disruptive"]
ALLOW_LEVELS: Final = ("none", "mutating", "disruptive")  # each permits those before it

_MACHINE = "/machine.MachineService/"
_IMAGE = "/machine.ImageService/"
_LIFECYCLE = "/machine.LifecycleService/"
_DEBUG = "/machine.DebugService/"
_STORAGE = "/storage.StorageService/"
_STATE = "/cosi.resource.State/"

_MUTATING = (
    _MACHINE + "ApplyConfiguration",  # unless dry_run; a reboot mode is disruptive
    _MACHINE + "ServiceStart",
    _MACHINE + "ServiceStop",
    _MACHINE + "ServiceRestart",
    _MACHINE + "Restart",  # restarts a container
    _MACHINE + "MetaWrite",
    _MACHINE + "MetaDelete",
    _MACHINE + "ImagePull",
    _IMAGE + "Pull",
    _IMAGE + "Import",
    _IMAGE + "Remove",
    _DEBUG + "ContainerRun",  # runs a privileged container on the node
    _STATE + "Create",
    _STATE + "Update",
    _STATE + "Destroy",
)
_DISRUPTIVE = (
    _MACHINE + "Bootstrap",
    _MACHINE + "Reboot",
    _MACHINE + "Shutdown",
    _MACHINE + "Reset",
    _MACHINE + "Upgrade",
    _MACHINE + "Rollback",
    _LIFECYCLE + "Install",
    _LIFECYCLE + "Upgrade",
    _STORAGE + "BlockDeviceWipe",
    _MACHINE + "EtcdRemoveMemberByID",
    _MACHINE + "EtcdLeaveCluster",
    _MACHINE + "EtcdForfeitLeadership",
    _MACHINE + "EtcdRecover",
    _MACHINE + "EtcdAlarmDisarm",
    _MACHINE + "EtcdDefragment",
    _MACHINE + "EtcdDowngradeValidate",
    _MACHINE + "EtcdDowngradeEnable",
    _MACHINE + "EtcdDowngradeCancel",
)

CHANGING_METHODS: Final[Mapping[str, ChangeLevel]] = {
    **dict.fromkeys(_MUTATING, "mutating"),
    **dict.fromkeys(_DISRUPTIVE, "disruptive"),
}

# ApplyConfigurationRequest.Mode (api/machine/machine.proto): REBOOT = 0, AUTO = 1 (reboots
# when the change needs it), NO_REBOOT = 2, STAGED = 3, TRY = 4.
_REBOOTING_APPLY_MODES = frozenset({0, 1})


def change_level(method: str, request: Any = None) -> ChangeLevel | None:
    """The allow level a call to ``method`` with ``request`` needs; None if it only reads.

    An ApplyConfiguration with ``dry_run`` reads; one in a mode that may reboot the node
    (reboot, auto) is disruptive. Without a request, the method's own level.
    """
    level = CHANGING_METHODS.get(method)
    if level is None or request is None or method != _MACHINE + "ApplyConfiguration":
        return level
    if getattr(request, "dry_run", False):
        return None
    if getattr(request, "mode", 2) in _REBOOTING_APPLY_MODES:
        return "disruptive"
    return level


def permits(allowed: str, needed: ChangeLevel | None) -> bool:
    """Whether the allow level ``allowed`` (none, mutating, disruptive) covers ``needed``."""
    if needed is None:
        return True
    return ALLOW_LEVELS.index(allowed) >= ALLOW_LEVELS.index(needed)
