"""What differs between the Talos releases in the field, where the kit's checks look.

A leaf module (it imports nothing from pytest_talos): the client side judges a node by the
entry of the release its Version reply names (:func:`release_of`), and the emulator plays the
entry it is asked for. Each fact was read in siderolabs/talos at the tag its entry names
(:attr:`Release.tag`); the upstream path is given beside it. Facts every release shares stay
where they always were (``talos_api``, ``node._ports``, the suite's own modules).

The API: the kit's protos (``proto/``, v1.13.9's subset) are wire-identical on the three
tags for every message and method they hold, so one set serves all; what differs is which
services and methods a release serves (:meth:`Release.has_method`, and what its apid
answers for one it lacks, :meth:`Release.unknown_method`), which roles exist
(:attr:`Release.roles`) and machined's authorizer rules (:meth:`Release.allowed_roles`,
v1.13.9's :data:`pytest_talos.talos_api.ROLE_RULES` where the entry lists no difference).

A node on a release the table does not know (v1.11, v1.15) is judged by the nearest known
one, and :attr:`ReleaseMatch.note` says so in one line, never silently.

It imports only :mod:`pytest_talos.talos_api` (the role names and v1.13.9's rule table).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from pytest_talos.talos_api import (
    ADMIN,
    ETCD_BACKUP,
    IMAGE_VERIFIER,
    IMPERSONATOR,
    META_WRITER,
    OPERATOR,
    READER,
    allowed_roles,
)

__all__ = [
    "RELEASES",
    "V1_12",
    "V1_13",
    "V1_14",
    "Release",
    "ReleaseMatch",
    "lacking",
    "minor_of",
    "release_named",
    "release_of",
]


@dataclass(frozen=True)
class Release:
    """One release line (``v1.13``) as read at one tag (``v1.13.9``)."""

    line: str
    tag: str  # the tag the facts below were read at
    commit: str  # ``git rev-parse --short=9 <tag>``: the sha a Version reply carries
    # go.mod's ``go`` directive at the tag: the least toolchain that builds it (the exact
    # toolchain of the release images is INFERRED from it)
    go_version: str
    # pkg/machinery/constants/constants.go DefaultKubernetesVersion
    kubernetes_version: str
    # pkg/machinery/constants/constants.go DefaultEtcdVersion
    etcd_version: str
    # etcd listeners besides 2379/2380 on ListenClientAddresses
    # (internal/app/machined/pkg/system/services/etcd.go argsForInit/argsForControlPlane)
    etcd_extra_ports: frozenset[int]
    # whether machined starts sandboxd outside container mode when a SecurityProfileConfig
    # document enables workloadIsolation (internal/app/machined/pkg/sandboxd/enabled.go,
    # v1alpha1_sequencer_tasks.go StartAllServices)
    has_sandboxd: bool
    # whether the release has image verification: the ImageVerificationConfig document and
    # its ImageVerificationRules.security.talos.dev resources
    # (pkg/machinery/resources/security/image_verification_rule.go,
    # internal/app/machined/pkg/controllers/security/image_verification_config.go; first in
    # v1.13.0-beta.0, absent at v1.12.11)
    has_image_verification: bool
    # every ``Sensitivity: meta.Sensitive`` type (pkg/machinery/resources/**) -> its default
    # namespace
    sensitive_types: Mapping[str, str]
    # the gRPC services machined registers
    # (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Register)
    services: frozenset[str]
    # methods (``/service/Method``) of a registered service this release lacks: its proto
    # (api/machine/machine.proto; cosi runtime's api/v1alpha1/state_grpc.pb.go) has no such rpc
    absent_methods: frozenset[str]
    # the built-in roles (pkg/machinery/role/role.go ``All``)
    roles: frozenset[str]
    # machined's authorizer rules where they differ from v1.13.9's talos_api.ROLE_RULES
    # (internal/app/machined/pkg/system/services/machined.go ``rules``)
    role_rules: Mapping[str, frozenset[str]]
    # methods whose rule admits os:reader for maintenance only: the handler refuses anyone
    # but os:admin on a configured node (the "verified in the handler" comments of the rules)
    reader_in_maintenance_only: frozenset[str]
    # the Versions.runtime.talos.dev ``name`` (pkg/machinery/resources/runtime/version.go;
    # controllers/runtime/version.go sets it from version.Name): none before v1.13
    version_resource_name: str

    def __hash__(self) -> int:
        # Its mappings are unhashable; a line read at a tag is the release (cache keys).
        return hash((self.line, self.tag))

    @property
    def minor(self) -> tuple[int, int]:
        found = minor_of(self.line)
        assert found is not None
        return found

    def unknown_method(self, method: str) -> str | None:
        """What this release's node answers (gRPC Unimplemented) for ``method``
        (``/service/Method``) when it does not serve it; None when it does.

        apid proxies every method to machined (a ``grpc.UnknownServiceHandler``), whose
        grpc-go server has none: an unregistered service or method is answered before any
        interceptor runs, so before the authorizer (grpc-go ``server.go`` handleStream)."""
        service, _, name = method.lstrip("/").rpartition("/")
        if service not in self.services:
            return f"unknown service {service}"
        if method in self.absent_methods:
            return f"unknown method {name} for service {service}"
        return None

    def has_method(self, method: str) -> bool:
        return self.unknown_method(method) is None

    def allowed_roles(self, method: str) -> frozenset[str]:
        """The roles this release's authorizer lets call ``method`` (unlisted: admin only)."""
        found = self.role_rules.get(method)
        return found if found is not None else allowed_roles(method)

    def roles_needed(self, method: str) -> tuple[str, ...]:
        """The roles one of which ``method`` needs on a running (not maintenance) node of
        this release, sorted; what a PermissionDenied hint names."""
        if method in self.reader_in_maintenance_only:
            return (ADMIN,)
        return tuple(sorted(self.allowed_roles(method)))


@dataclass(frozen=True)
class ReleaseMatch:
    """The entry a node's tag is judged by, and a one-line note when it is not its own."""

    release: Release
    tag: str
    exact: bool

    @property
    def note(self) -> str | None:
        if self.exact:
            return None
        return (
            f"Talos {self.tag or '(no tag)'} is not a release this kit knows "
            f"({', '.join(RELEASES)}): judged by {self.release.line} ({self.release.tag})"
        )


# Sensitive types of v1.13.9 (each ``Sensitivity: meta.Sensitive`` in pkg/machinery/resources).
_SENSITIVE_V1_13: Final = {
    "MachineConfigs.config.talos.dev": "config",
    "ApiCertificates.secrets.talos.dev": "secrets",
    "CertSANs.secrets.talos.dev": "secrets",
    "EncryptionSalts.secrets.talos.dev": "secrets",
    "EtcdSecrets.secrets.talos.dev": "secrets",
    "EtcdRootSecrets.secrets.talos.dev": "secrets",
    "KubeletSecrets.secrets.talos.dev": "secrets",
    "KubernetesSecrets.secrets.talos.dev": "secrets",
    "KubernetesDynamicCerts.secrets.talos.dev": "secrets",
    "KubernetesRootSecrets.secrets.talos.dev": "secrets",
    "MaintenanceRootSecrets.secrets.talos.dev": "secrets",
    "OSRootSecrets.secrets.talos.dev": "secrets",
    "TrustdCertificates.secrets.talos.dev": "secrets",
    "VolumeConfigs.block.talos.dev": "runtime",
    "DiscoveryConfigs.cluster.talos.dev": "config",
    "RegistryConfigs.cri.talos.dev": "cri",
    "EtcFileSpecs.files.talos.dev": "files",
    "APIServerConfigs.kubernetes.talos.dev": "controlplane",
    "AuditPolicyConfigs.kubernetes.talos.dev": "controlplane",
    "AuthorizationConfigs.kubernetes.talos.dev": "controlplane",
    "KubeletConfigs.kubernetes.talos.dev": "k8s",
    "KubeletSpecs.kubernetes.talos.dev": "k8s",
    "NodeAnnotationSpecs.k8s.talos.dev": "k8s",
    "NodeCordonedSpecs.k8s.talos.dev": "k8s",
    "NodeLabelSpecs.k8s.talos.dev": "k8s",
    "NodeTaintSpecs.k8s.talos.dev": "k8s",
    "KubeSpanConfigs.kubespan.talos.dev": "config",
    "KubeSpanIdentities.kubespan.talos.dev": "kubespan",
    "DeviceConfigSpecs.net.talos.dev": "network",
    "LinkSpecs.net.talos.dev": "network",
    "OperatorSpecs.net.talos.dev": "network",
    "ExtensionServiceConfigs.runtime.talos.dev": "runtime",
    "OOMActions.talos.dev": "runtime",
    "SiderolinkConfigs.siderolink.talos.dev": "config",
    "SiderolinkTunnels.siderolink.talos.dev": "config",
}
# v1.12.11 has one more: pkg/machinery/resources/secrets/maintenance.go (gone in v1.13).
_SENSITIVE_V1_12: Final = {
    **_SENSITIVE_V1_13,
    "MaintenanceServiceCertificates.secrets.talos.dev": "secrets",
}
# v1.14.0-rc.1 adds three: pkg/machinery/resources/k8s/authentication_config.go
# (ControlPlaneNamespaceName), k8s/etcd_encryption_config.go (NamespaceName "k8s"),
# cri/customization_config.go (NamespaceName "cri").
_SENSITIVE_V1_14: Final = {
    **_SENSITIVE_V1_13,
    "AuthenticationConfigs.kubernetes.talos.dev": "controlplane",
    "EtcdEncryptionConfigs.kubernetes.talos.dev": "k8s",
    "CustomizationConfigs.cri.talos.dev": "cri",
}

_M = "/machine.MachineService/"
_A = frozenset({ADMIN})
_AR = frozenset({ADMIN, READER})

# v1alpha1_server.go Register at v1.12.11; v1.13 adds image.proto, debug.proto and
# lifecycle.proto's services, v1.14 lvm.proto's and md.proto's.
_SERVICES_V1_12: Final = frozenset(
    {
        "machine.MachineService",
        "cluster.ClusterService",
        "cosi.resource.State",
        "inspect.InspectService",
        "storage.StorageService",
        "time.TimeService",
    }
)
_SERVICES_V1_13: Final = _SERVICES_V1_12 | {
    "machine.ImageService",
    "machine.DebugService",
    "machine.LifecycleService",
}
_SERVICES_V1_14: Final = _SERVICES_V1_13 | {"machine.LVMService", "machine.MDService"}

# MachineService.GenerateConfiguration: in v1.12's api/machine/machine.proto (deprecated,
# ``remove_deprecated_method = "v1.13"``), gone in v1.13. State.Teardown and
# TeardownAndDestroy: cosi runtime v1.16.2 (Talos v1.14's go.mod), not in v1.12.0 or v1.14.1
# (v1.12's, v1.13's).
_GENERATE_CONFIGURATION = _M + "GenerateConfiguration"
_TEARDOWNS = frozenset({"/cosi.resource.State/Teardown", "/cosi.resource.State/TeardownAndDestroy"})

# pkg/machinery/role/role.go All: v1.13 adds os:image:verifier and os:meta:writer.
_ROLES_V1_12: Final = frozenset({ADMIN, OPERATOR, READER, ETCD_BACKUP, IMPERSONATOR})
_ROLES_V1_13: Final = _ROLES_V1_12 | {IMAGE_VERIFIER, META_WRITER}

# machined.go rules at v1.12.11 where v1.13.9's differ: ApplyConfiguration and BlockDeviceWipe
# are os:admin only (v1.13 admits os:reader in maintenance, checked in the handler), MetaWrite
# and MetaDelete os:admin only (v1.13 adds os:meta:writer); GenerateConfiguration is listed.
_RULES_V1_12: Final = {
    _M + "ApplyConfiguration": _A,
    "/storage.StorageService/BlockDeviceWipe": _A,
    _M + "MetaWrite": _A,
    _M + "MetaDelete": _A,
    _GENERATE_CONFIGURATION: _A,
}
# machined.go rules at v1.14.0-rc.1 beyond v1.13.9's: the Teardowns (os:admin), the LVM
# removals and MD Destroy (os:admin; os:reader in maintenance, checked in the handler).
_LVM_MD_REMOVALS: Final = frozenset(
    {
        "/machine.LVMService/LogicalVolumeRemove",
        "/machine.LVMService/VolumeGroupRemove",
        "/machine.LVMService/PhysicalVolumeRemove",
        "/machine.MDService/Destroy",
    }
)
_RULES_V1_14: Final = {
    **dict.fromkeys(_TEARDOWNS, _A),
    **dict.fromkeys(_LVM_MD_REMOVALS, _AR),
}
_READER_IN_MAINTENANCE_V1_13: Final = frozenset(
    {_M + "ApplyConfiguration", "/storage.StorageService/BlockDeviceWipe"}
)

# pkg/machinery/constants/constants.go EtcdClientHTTPPort (v1.14): etcd's
# listen-client-http-urls, on the same addresses as its client port.
ETCD_CLIENT_HTTP_PORT: Final = 2383

V1_12: Final = Release(
    line="v1.12",
    tag="v1.12.11",
    commit="2e80771ba",
    go_version="go1.25.12",
    kubernetes_version="1.35.4",
    etcd_version="v3.6.11",
    etcd_extra_ports=frozenset(),
    has_sandboxd=False,
    has_image_verification=False,
    sensitive_types=MappingProxyType(_SENSITIVE_V1_12),
    services=_SERVICES_V1_12,
    absent_methods=_TEARDOWNS,
    roles=_ROLES_V1_12,
    role_rules=MappingProxyType(_RULES_V1_12),
    reader_in_maintenance_only=frozenset(),
    version_resource_name="",
)
V1_13: Final = Release(
    line="v1.13",
    tag="v1.13.9",
    commit="3ebd10a7c",
    go_version="go1.26.6",
    kubernetes_version="1.36.3",
    etcd_version="v3.6.12",
    etcd_extra_ports=frozenset(),
    has_sandboxd=False,
    has_image_verification=True,
    sensitive_types=MappingProxyType(_SENSITIVE_V1_13),
    services=_SERVICES_V1_13,
    absent_methods=_TEARDOWNS | {_GENERATE_CONFIGURATION},
    roles=_ROLES_V1_13,
    role_rules=MappingProxyType({}),
    reader_in_maintenance_only=_READER_IN_MAINTENANCE_V1_13,
    version_resource_name="Talos",
)
V1_14: Final = Release(
    line="v1.14",
    tag="v1.14.0-rc.1",
    commit="7a84d742b",
    go_version="go1.26.5",
    kubernetes_version="1.37.0-rc.0",
    etcd_version="3.7.1",
    etcd_extra_ports=frozenset({ETCD_CLIENT_HTTP_PORT}),
    has_sandboxd=True,
    has_image_verification=True,
    sensitive_types=MappingProxyType(_SENSITIVE_V1_14),
    services=_SERVICES_V1_14,
    absent_methods=frozenset({_GENERATE_CONFIGURATION}),
    roles=_ROLES_V1_13,
    role_rules=MappingProxyType(_RULES_V1_14),
    reader_in_maintenance_only=_READER_IN_MAINTENANCE_V1_13 | _LVM_MD_REMOVALS,
    version_resource_name="Talos",
)

RELEASES: Final[Mapping[str, Release]] = MappingProxyType(
    {release.line: release for release in (V1_12, V1_13, V1_14)}
)

_MINOR = re.compile(r"^v?(\d+)\.(\d+)(?:[.\-+].*)?$")


def minor_of(tag: str) -> tuple[int, int] | None:
    """``v1.14.0-rc.1`` -> (1, 14); None for text that is not a version."""
    found = _MINOR.match(tag.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def release_of(tag: str) -> ReleaseMatch:
    """The entry a node reporting ``tag`` is judged by: its own release line, else the
    nearest known one (a tag that is no version at all: the newest)."""
    minor = minor_of(tag)
    known = sorted(RELEASES.values(), key=lambda r: r.minor)
    if minor is None:
        return ReleaseMatch(known[-1], tag, exact=False)
    for release in known:
        if release.minor == minor:
            return ReleaseMatch(release, tag, exact=True)
    nearest = min(known, key=lambda r: (_distance(r.minor, minor), -r.minor[1]))
    return ReleaseMatch(nearest, tag, exact=False)


def _distance(left: tuple[int, int], right: tuple[int, int]) -> int:
    return 100 * abs(left[0] - right[0]) + abs(left[1] - right[1])


def release_named(text: str) -> tuple[Release, str]:
    """``v1.14``, ``v1.14.x``, ``1.14.*`` or a full tag (``v1.12.3``) -> the entry and the
    tag to report (the entry's own tag unless a full one was given). ValueError, naming the
    known lines, for anything else."""
    cleaned = text.strip()
    minor = minor_of(cleaned.removesuffix(".x").removesuffix(".*"))
    release = next((r for r in RELEASES.values() if r.minor == minor), None)
    if release is None:
        raise ValueError(
            f"unknown Talos release {text!r}: the emulator plays "
            + ", ".join(f"{line}.x" for line in RELEASES)
            + " (or a full tag of one, e.g. v1.13.9)"
        )
    bare = cleaned.removesuffix(".x").removesuffix(".*")
    full = re.fullmatch(r"v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?", bare)
    tag = ("v" + bare.removeprefix("v")) if full else release.tag
    return release, tag


def lacking(method: str) -> tuple[Release, ...]:
    """The known releases that do not serve ``method``, oldest first."""
    known = sorted(RELEASES.values(), key=lambda r: r.minor)
    return tuple(release for release in known if not release.has_method(method))
