"""The Go types of the strictly decoded documents, as far as yaml.v3's errors need them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class SchemaType:
    """A Go field type: ``kind`` is scalar/seq/map/struct/any; ``go`` its Go spelling."""

    kind: Literal["scalar", "seq", "map", "struct", "any"]
    go: str
    item: SchemaType | None = None
    fields: Mapping[str, SchemaType] = field(default_factory=dict)


ANY = SchemaType("any", "interface {}")
_STR = SchemaType("scalar", "string")
_BOOL = SchemaType("scalar", "bool")
_INT = SchemaType("scalar", "int")
_STR_LIST = SchemaType("seq", "[]string", _STR)
_STR_MAP = SchemaType("map", "map[string]string", _STR)


def _struct(go: str, **fields: SchemaType) -> SchemaType:
    return SchemaType("struct", go, fields=fields)


def _anys(*names: str) -> dict[str, SchemaType]:
    return dict.fromkeys(names, ANY)


_PEM = _struct("x509.PEMEncodedCertificateAndKey", crt=_STR, key=_STR)
_MACHINE = _struct(
    "v1alpha1.MachineConfig",
    type=_STR,
    token=_STR,
    ca=_PEM,
    certSANs=_STR_LIST,
    env=_STR_MAP,
    sysctls=_STR_MAP,
    sysfs=_STR_MAP,
    nodeLabels=_STR_MAP,
    nodeAnnotations=_STR_MAP,
    nodeTaints=_STR_MAP,
    kubelet=_struct(
        "v1alpha1.KubeletConfig",
        image=_STR,
        clusterDNS=_STR_LIST,
        extraArgs=_STR_MAP,
        defaultRuntimeSeccompProfileEnabled=_BOOL,
        registerWithFQDN=_BOOL,
        skipNodeRegistration=_BOOL,
        disableManifestsDirectory=_BOOL,
        **_anys("extraMounts", "extraConfig", "credentialProviderConfig", "nodeIP"),
    ),
    network=_struct(
        "v1alpha1.NetworkConfig",
        hostname=_STR,
        nameservers=_STR_LIST,
        searchDomains=_STR_LIST,
        disableSearchDomain=_BOOL,
        **_anys("interfaces", "extraHostEntries", "kubespan"),
    ),
    install=_struct(
        "v1alpha1.InstallConfig",
        disk=_STR,
        image=_STR,
        extraKernelArgs=_STR_LIST,
        wipe=_BOOL,
        legacyBIOSSupport=_BOOL,
        grubUseUKICmdline=_BOOL,
        **_anys("diskSelector", "extensions"),
    ),
    features=_struct(
        "v1alpha1.FeaturesConfig",
        rbac=_BOOL,
        stableHostname=_BOOL,
        apidCheckExtKeyUsage=_BOOL,
        diskQuotaSupport=_BOOL,
        nodeAddressSortAlgorithm=_STR,
        kubePrism=_struct("v1alpha1.KubePrism", enabled=_BOOL, port=_INT),
        hostDNS=_struct(
            "v1alpha1.HostDNSConfig",
            enabled=_BOOL,
            forwardKubeDNSToHost=_BOOL,
            resolveMemberNames=_BOOL,
        ),
        **_anys("kubernetesTalosAPIAccess", "imageCache"),
    ),
    **_anys(
        "acceptedCAs",
        "controlPlane",
        "pods",
        "disks",
        "files",
        "time",
        "registries",
        "systemDiskEncryption",
        "udev",
        "logging",
        "kernel",
        "seccompProfiles",
        "baseRuntimeSpecOverrides",
    ),
)
_CLUSTER = _struct(
    "v1alpha1.ClusterConfig",
    id=_STR,
    secret=_STR,
    clusterName=_STR,
    token=_STR,
    aescbcEncryptionSecret=_STR,
    secretboxEncryptionSecret=_STR,
    ca=_PEM,
    aggregatorCA=_PEM,
    extraManifests=_STR_LIST,
    extraManifestHeaders=_STR_MAP,
    allowSchedulingOnControlPlanes=_BOOL,
    allowSchedulingOnMasters=_BOOL,
    controlPlane=_struct("v1alpha1.ControlPlaneConfig", endpoint=_STR, localAPIServerPort=_INT),
    network=_struct(
        "v1alpha1.ClusterNetworkConfig",
        dnsDomain=_STR,
        podSubnets=_STR_LIST,
        serviceSubnets=_STR_LIST,
        cni=ANY,
    ),
    **_anys(
        "serviceAccount",
        "apiServer",
        "controllerManager",
        "proxy",
        "scheduler",
        "discovery",
        "etcd",
        "coreDNS",
        "externalCloudProvider",
        "inlineManifests",
        "adminKubeconfig",
    ),
)
_V1ALPHA1 = _struct(
    "v1alpha1.Config",
    version=_STR,
    debug=_BOOL,
    persist=_BOOL,
    machine=_MACHINE,
    cluster=_CLUSTER,
)
STRICT_DOCUMENTS: dict[str, SchemaType] = {
    "v1alpha1": _V1ALPHA1,
    "HostnameConfig": _struct(
        "network.HostnameConfigV1Alpha1", apiVersion=_STR, kind=_STR, hostname=_STR, auto=_STR
    ),
    # Talos v1.14 only (v1.14.0-rc.1 pkg/machinery/config/types/runtime/
    # security_profile_config.go); accepted on every emulated release: a real v1.12 or v1.13
    # node answers "not registered" (a simplification, see docs/fidelity.md)
    "SecurityProfileConfig": _struct(
        "runtime.SecurityProfileConfigV1Alpha1",
        apiVersion=_STR,
        kind=_STR,
        workloadIsolation=_BOOL,
    ),
}
# Other document kinds Talos 1.13 registers (apiVersion v1alpha1); decoded leniently here.
OTHER_KINDS = frozenset(
    {
        "BondConfig",
        "BridgeConfig",
        "DHCPv4Config",
        "DHCPv6Config",
        "DummyLinkConfig",
        "EthernetConfig",
        "EventSinkConfig",
        "ExistingVolumeConfig",
        "ExtensionServiceConfig",
        "ImageVerificationConfig",
        "KmsgLogConfig",
        "KubeSpanConfig",
        "KubeSpanEndpointsConfig",
        "Layer2VIPConfig",
        "LinkAliasConfig",
        "LinkConfig",
        "NetworkDefaultActionConfig",
        "NetworkRuleConfig",
        "PCIDriverRebindConfig",
        "RawVolumeConfig",
        "ResolverConfig",
        "RouteConfig",
        "SideroLinkConfig",
        "StaticHostConfig",
        "SwapVolumeConfig",
        "TimeSyncConfig",
        "TrustedRootsConfig",
        "UserVolumeConfig",
        "VLANConfig",
        "VolumeConfig",
        "WatchdogTimerConfig",
        "WireguardConfig",
        "ZswapConfig",
    }
)
V1ALPHA1_MARKERS = frozenset({"machine", "cluster", "debug", "persist"})
