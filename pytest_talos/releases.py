"""What differs between the Talos releases in the field, where the kit's checks look.

A leaf module (it imports nothing from pytest_talos): the client side judges a node by the
entry of the release its Version reply names (:func:`release_of`), and the emulator plays the
entry it is asked for. Each fact was read in siderolabs/talos at the tag its entry names
(:attr:`Release.tag`); the upstream path is given beside it. Facts every release shares stay
where they always were (``talos_api``, ``node._ports``, the suite's own modules).

A node on a release the table does not know (v1.11, v1.15) is judged by the nearest known
one, and :attr:`ReleaseMatch.note` says so in one line, never silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "RELEASES",
    "V1_12",
    "V1_13",
    "V1_14",
    "Release",
    "ReleaseMatch",
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

    @property
    def minor(self) -> tuple[int, int]:
        found = minor_of(self.line)
        assert found is not None
        return found


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
