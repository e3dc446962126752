"""The machine-config truth an emulated Talos v1.13 node applies.

Pure functions over config bytes — no I/O, no gRPC: generate a config as ``talosctl gen
config`` would, validate one the way ``ApplyConfiguration`` does (talos-facts §9 steps 5-7),
decide whether a change can apply without a reboot (step 9) and word the dry-run summary
(step 10). The servicers turn :class:`ConfigRejected` into a gRPC status.

Where the facts are silent the behaviour below is a guess; every guess is listed in
:data:`INFERRED` (the emulator docs page prints that list).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from pytest_talos.errors import TalosError
from pytest_talos.patches import config_diff, dump_documents

__all__ = [
    "DEFAULT_POD_SUBNETS",
    "DEFAULT_SERVICE_SUBNETS",
    "IMMEDIATE_FEATURES",
    "IMMEDIATE_MACHINE_FIELDS",
    "INFERRED",
    "KNOWN_KUBELET_FLAGS",
    "NO_V1ALPHA1_MESSAGE",
    "ConfigRejected",
    "ValidationOutcome",
    "apply_mode_details",
    "cert_sans",
    "cluster_name",
    "dry_run_details",
    "generate_config",
    "hostname",
    "immediate_apply_blockers",
    "immediate_apply_error",
    "kubelet_extra_args",
    "kubernetes_version",
    "machine_type",
    "node_labels",
    "pod_subnets",
    "service_subnets",
    "unknown_kubelet_flags",
    "validate",
]

INFERRED: tuple[str, ...] = (
    "Generated configs follow Talos 1.13 `talosctl gen config` plus a per-node hostname patch: "
    "with extra documents the hostname lives in a `HostnameConfig` document (`auto: \"off\"`) "
    "and `machine.network` is empty, because 1.13 emits `HostnameConfig` and rejects a second "
    "static hostname in `machine.network.hostname`; without extra documents the hostname is in "
    "`machine.network.hostname` and `machine.features.stableHostname: true` is set.",
    "Generated configs carry no private keys: every `key` of `machine.ca`, `cluster.ca`, "
    "`cluster.aggregatorCA`, `cluster.etcd.ca`, plus `cluster.serviceAccount` and "
    "`cluster.secretboxEncryptionSecret`, are left out; CA `crt` fields hold the PEM passed in "
    "or a recognisable placeholder; tokens, `cluster.id` and `cluster.secret` are derived from a "
    "hash of the cluster name (deterministic, protecting nothing). Control-plane configs are "
    "therefore not checked for `.machine.ca.key`.",
    "Only the documentation comments of the main fields are written (talosctl writes one for "
    "every field, plus commented examples).",
    "Documents other than v1alpha1: `HostnameConfig` is decoded strictly (keys `hostname`, "
    "`auto`); other Talos 1.13 kinds are accepted without looking inside; an unknown kind fails "
    "with `\"<kind>\" \"<apiVersion>\": not registered`.",
    "Strict decoding reports unknown keys as `error decoding document <apiVersion>/<kind>/"
    "<name> (line N): unknown keys found during decoding:` followed by the unknown keys as YAML "
    "(4-space indent, keys sorted, source comments dropped). Type errors read `error decoding "
    "<kind> to *v1alpha1.Config: yaml: unmarshal errors:` then `line N: cannot unmarshal !!seq "
    "into string` lines, as Go's yaml.v3 words them; YAML syntax errors read `decode error: "
    "yaml: line N: <problem>` with libyaml's problem text (yaml.v3 is a port of libyaml, so "
    "most texts match; PyYAML's own wording where libyaml is missing).",
    "Node labels, annotations and taints are checked like Kubernetes label keys and values, and "
    "worded as `invalid machine node labels: <multierror>` (`name \"my label\" is invalid`, "
    "`prefix cannot be empty: …`, `label value \"…\" is invalid`, `label value length exceeds "
    "limit of 63: …`, `invalid format: too many slashes: …`, `invalid taint effect: …`, "
    "`annotation \"talos.dev/owned-labels\" is reserved`).",
    "`machine.kubelet.extraArgs` values must be scalars (a list or map is a type error); "
    "`podSubnets`/`serviceSubnets` entries must be CIDRs: `invalid pod subnet \"x\": invalid "
    "CIDR address: x` (and `invalid service subnet …`); a hostname must be a DNS name of "
    "labels of at most 63 characters: `invalid hostname \"x\"`; the control-plane endpoint "
    "must be an http(s) URL with a host: `invalid controlplane endpoint: \"x\" is not a valid "
    "endpoint URL`.",
    "`HostnameConfig` validation: `'auto' and 'hostname' cannot be set at the same time` "
    "(unless auto is `off`), `either 'auto' or 'hostname' must be set`, `invalid auto hostname "
    "kind \"x\"`; a static hostname in both documents gives `static hostname is already set in "
    "v1alpha1 config`. Document errors are prefixed with the document kind.",
    "Immediate-apply comparison treats an absent field, null, `{}` and `[]` as equal; the "
    "`diff:` in the immediate-mode error is the unified diff of the two v1alpha1 documents "
    "after the fields allowed to change have been copied from the old one.",
    "Reply details: NO_REBOOT/TRY `Applied configuration without a reboot`, STAGED `Staged "
    "configuration to be applied after the next reboot`, REBOOT `Applied configuration with a "
    "reboot`; AUTO resolved to REBOOT appends `: <reason>`; the TRY suffix (`The config is "
    "applied in 'try' mode …`) is left out of the dry-run summary.",
)

NO_V1ALPHA1_MESSAGE = (
    "the applied machine configuration doesn't contain v1alpha1 config, "
    "did you mean to patch the machine config instead?"
)
DEFAULT_POD_SUBNETS: tuple[str, ...] = ("10.244.0.0/16",)
DEFAULT_SERVICE_SUBNETS: tuple[str, ...] = ("10.96.0.0/12",)

# Fields CanApplyImmediate lets differ (talos-facts §9); `debug` and `cluster` are whole.
IMMEDIATE_TOP_LEVEL = frozenset({"debug", "cluster"})
IMMEDIATE_MACHINE_FIELDS = frozenset({
    "ca", "acceptedCAs", "time", "certSANs", "install", "network", "sysfs", "sysctls",
    "logging", "controlPlane", "kubelet", "kernel", "registries", "pods", "seccompProfiles",
    "nodeAnnotations", "nodeLabels", "nodeTaints",
})
IMMEDIATE_FEATURES = frozenset({
    "kubernetesTalosAPIAccess", "kubePrism", "hostDNS", "imageCache", "nodeAddressSortAlgorithm",
})

# Real kubelet command-line flags; anything else in extraArgs makes kubelet exit (B4).
KNOWN_KUBELET_FLAGS = frozenset({
    "address", "anonymous-auth", "authentication-token-webhook", "authorization-mode",
    "bootstrap-kubeconfig", "cert-dir", "cgroup-driver", "cgroup-root", "client-ca-file",
    "cloud-provider", "cluster-dns", "cluster-domain", "config", "container-log-max-files",
    "container-log-max-size", "container-runtime-endpoint", "cpu-cfs-quota",
    "cpu-manager-policy", "cpu-manager-reconcile-period", "enforce-node-allocatable",
    "event-burst", "event-qps", "eviction-hard", "eviction-max-pod-grace-period",
    "eviction-minimum-reclaim", "eviction-soft", "eviction-soft-grace-period",
    "fail-swap-on", "feature-gates", "hairpin-mode", "healthz-bind-address", "healthz-port",
    "hostname-override", "image-gc-high-threshold", "image-gc-low-threshold",
    "image-service-endpoint", "kube-api-burst", "kube-api-qps", "kube-reserved",
    "kube-reserved-cgroup", "kubeconfig", "kubelet-cgroups", "log-flush-frequency",
    "logging-format", "make-iptables-util-chains", "max-open-files", "max-pods",
    "memory-manager-policy", "node-ip", "node-labels", "node-status-update-frequency",
    "pod-infra-container-image", "pod-max-pids", "pods-per-core", "port",
    "protect-kernel-defaults", "provider-id", "read-only-port", "register-node",
    "register-with-taints", "registry-burst", "registry-qps", "reserved-cpus",
    "reserved-memory", "root-dir", "rotate-certificates", "rotate-server-certificates",
    "runtime-request-timeout", "seccomp-default", "serialize-image-pulls", "system-reserved",
    "system-reserved-cgroup", "tls-cert-file", "tls-cipher-suites", "tls-min-version",
    "tls-private-key-file", "topology-manager-policy", "topology-manager-scope", "v",
    "vmodule", "volume-plugin-dir", "volume-stats-agg-period",
})


class ConfigRejected(TalosError):
    """The node refuses a machine config; ``code`` is the gRPC status code name."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ValidationOutcome:
    """An accepted config; ``warnings`` go into the ApplyConfiguration reply."""

    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- YAML reading

_YAML11_ONLY = frozenset({
    "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value",
})
_TAG_STR, _TAG_NULL = "tag:yaml.org,2002:str", "tag:yaml.org,2002:null"
_TAG_BOOL, _TAG_INT = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int"
# yaml.v3 still decodes the YAML 1.1 words into a typed bool field.
_YAML11_BOOL_WORDS = frozenset({"y", "yes", "on", "n", "no", "off"})


# libyaml's parser when PyYAML has it (about 10x faster); the resolvers below still apply.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """YAML 1.2 core scalars, as Go's yaml.v3 reads them (`off` stays a string)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _TAG_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    _TAG_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)
_Loader.add_constructor(_TAG_BOOL, lambda _loader, node: str(node.value).lower() == "true")
_Loader.add_constructor(_TAG_INT, lambda _loader, node: _yaml12_int(str(node.value)))


def _yaml12_int(text: str) -> int:
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct(node: yaml.Node) -> Any:
    loader = _Loader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as exc:  # e.g. a list used as a mapping key
        problem = getattr(exc, "problem", None) or str(exc)
        raise _rejected(f"decode error: yaml: {problem}") from None
    finally:
        loader.dispose()


@dataclass(frozen=True)
class _Document:
    api_version: str
    kind: str  # "v1alpha1" for the legacy main document
    name: str
    line: int
    node: yaml.MappingNode

    @property
    def ident(self) -> str:
        return f"{self.api_version}/{self.kind}/{self.name}"


def _rejected(message: str) -> ConfigRejected:
    return ConfigRejected("INVALID_ARGUMENT", message)


def _compose(data: bytes) -> list[yaml.Node]:
    try:
        return [node for node in yaml.compose_all(data, Loader=_Loader) if node is not None]
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise _rejected(f"decode error: yaml: line {line}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise _rejected(f"decode error: yaml: {exc}") from None


def _top_value(node: yaml.MappingNode, key: str) -> str:
    for key_node, value_node in node.value:
        if key_node.value == key and isinstance(value_node, yaml.ScalarNode):
            return str(value_node.value)
    return ""


def _parse(data: bytes) -> list[_Document]:
    """Talos's configloader: documents in order, or the loader error (§9 step 5)."""
    documents: list[_Document] = []
    seen: set[str] = set()
    for node in _compose(data):
        if isinstance(node, yaml.ScalarNode) and node.tag == _TAG_NULL:
            continue
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.MappingNode):
            raise _rejected(f"expected a YAML document at line {line}")
        doc = _Document(
            _top_value(node, "apiVersion"), _top_value(node, "kind") or "v1alpha1",
            _top_value(node, "name"), line, node,
        )
        if doc.ident in seen:
            raise _rejected(f"duplicate document {doc.ident} is not allowed (line {line})")
        seen.add(doc.ident)
        _decode(doc)
        documents.append(doc)
    if not documents:
        raise _rejected("config not found")
    return documents


# --------------------------------------------------------------------------- strict decoding


@dataclass(frozen=True)
class _Type:
    """A Go field type: ``kind`` is scalar/seq/map/struct/any; ``go`` its Go spelling."""

    kind: Literal["scalar", "seq", "map", "struct", "any"]
    go: str
    item: _Type | None = None
    fields: Mapping[str, _Type] = field(default_factory=dict)


_ANY = _Type("any", "interface {}")
_STR, _BOOL, _INT = _Type("scalar", "string"), _Type("scalar", "bool"), _Type("scalar", "int")
_STR_LIST = _Type("seq", "[]string", _STR)
_STR_MAP = _Type("map", "map[string]string", _STR)


def _struct(go: str, **fields: _Type) -> _Type:
    return _Type("struct", go, fields=fields)


def _anys(*names: str) -> dict[str, _Type]:
    return dict.fromkeys(names, _ANY)


_PEM = _struct("x509.PEMEncodedCertificateAndKey", crt=_STR, key=_STR)
_MACHINE = _struct(
    "v1alpha1.MachineConfig",
    type=_STR, token=_STR, ca=_PEM, certSANs=_STR_LIST, env=_STR_MAP, sysctls=_STR_MAP,
    sysfs=_STR_MAP, nodeLabels=_STR_MAP, nodeAnnotations=_STR_MAP, nodeTaints=_STR_MAP,
    kubelet=_struct(
        "v1alpha1.KubeletConfig",
        image=_STR, clusterDNS=_STR_LIST, extraArgs=_STR_MAP,
        defaultRuntimeSeccompProfileEnabled=_BOOL, registerWithFQDN=_BOOL,
        skipNodeRegistration=_BOOL, disableManifestsDirectory=_BOOL,
        **_anys("extraMounts", "extraConfig", "credentialProviderConfig", "nodeIP"),
    ),
    network=_struct(
        "v1alpha1.NetworkConfig",
        hostname=_STR, nameservers=_STR_LIST, searchDomains=_STR_LIST, disableSearchDomain=_BOOL,
        **_anys("interfaces", "extraHostEntries", "kubespan"),
    ),
    install=_struct(
        "v1alpha1.InstallConfig",
        disk=_STR, image=_STR, extraKernelArgs=_STR_LIST, wipe=_BOOL, legacyBIOSSupport=_BOOL,
        grubUseUKICmdline=_BOOL, **_anys("diskSelector", "extensions"),
    ),
    features=_struct(
        "v1alpha1.FeaturesConfig",
        rbac=_BOOL, stableHostname=_BOOL, apidCheckExtKeyUsage=_BOOL, diskQuotaSupport=_BOOL,
        nodeAddressSortAlgorithm=_STR,
        kubePrism=_struct("v1alpha1.KubePrism", enabled=_BOOL, port=_INT),
        hostDNS=_struct(
            "v1alpha1.HostDNSConfig",
            enabled=_BOOL, forwardKubeDNSToHost=_BOOL, resolveMemberNames=_BOOL,
        ),
        **_anys("kubernetesTalosAPIAccess", "imageCache"),
    ),
    **_anys(
        "acceptedCAs", "controlPlane", "pods", "disks", "files", "time", "registries",
        "systemDiskEncryption", "udev", "logging", "kernel", "seccompProfiles",
        "baseRuntimeSpecOverrides",
    ),
)
_CLUSTER = _struct(
    "v1alpha1.ClusterConfig",
    id=_STR, secret=_STR, clusterName=_STR, token=_STR, aescbcEncryptionSecret=_STR,
    secretboxEncryptionSecret=_STR, ca=_PEM, aggregatorCA=_PEM, extraManifests=_STR_LIST,
    extraManifestHeaders=_STR_MAP, allowSchedulingOnControlPlanes=_BOOL,
    allowSchedulingOnMasters=_BOOL,
    controlPlane=_struct("v1alpha1.ControlPlaneConfig", endpoint=_STR, localAPIServerPort=_INT),
    network=_struct(
        "v1alpha1.ClusterNetworkConfig",
        dnsDomain=_STR, podSubnets=_STR_LIST, serviceSubnets=_STR_LIST, cni=_ANY,
    ),
    **_anys(
        "serviceAccount", "apiServer", "controllerManager", "proxy", "scheduler", "discovery",
        "etcd", "coreDNS", "externalCloudProvider", "inlineManifests", "adminKubeconfig",
    ),
)
_V1ALPHA1 = _struct(
    "v1alpha1.Config", version=_STR, debug=_BOOL, persist=_BOOL, machine=_MACHINE,
    cluster=_CLUSTER,
)
_STRICT_DOCUMENTS: dict[str, _Type] = {
    "v1alpha1": _V1ALPHA1,
    "HostnameConfig": _struct(
        "network.HostnameConfigV1Alpha1", apiVersion=_STR, kind=_STR, hostname=_STR, auto=_STR
    ),
}
# Other document kinds Talos 1.13 registers (apiVersion v1alpha1); decoded leniently here.
_OTHER_KINDS = frozenset({
    "BondConfig", "BridgeConfig", "DHCPv4Config", "DHCPv6Config", "DummyLinkConfig",
    "EthernetConfig", "EventSinkConfig", "ExistingVolumeConfig", "ExtensionServiceConfig",
    "ImageVerificationConfig", "KmsgLogConfig", "KubeSpanEndpointsConfig", "Layer2VIPConfig",
    "LinkAliasConfig", "LinkConfig", "NetworkDefaultActionConfig", "NetworkRuleConfig",
    "PCIDriverRebindConfig", "RawVolumeConfig", "ResolverConfig", "RouteConfig",
    "SideroLinkConfig", "StaticHostConfig", "SwapVolumeConfig", "TimeSyncConfig",
    "TrustedRootsConfig", "UserVolumeConfig", "VLANConfig", "VolumeConfig",
    "WatchdogTimerConfig", "WireguardConfig", "ZswapConfig",
})
_V1ALPHA1_MARKERS = frozenset({"machine", "cluster", "debug", "persist"})


def _decode(doc: _Document) -> None:
    """Resolve the document kind, then decode it strictly (Talos decoder.decode)."""
    keys = {key.value for key, _ in doc.node.value if isinstance(key, yaml.ScalarNode)}
    version = doc.api_version or ("v1alpha1" if keys & _V1ALPHA1_MARKERS else "")
    kind = _top_value(doc.node, "kind")
    problem = ""
    if kind == "" and version != "v1alpha1":
        problem = "missing kind"
    elif kind and version == "":
        problem = "missing apiVersion"
    elif kind and (version != "v1alpha1" or kind not in _STRICT_DOCUMENTS.keys() | _OTHER_KINDS):
        problem = f"{_goq(kind)} {_goq(version)}: not registered"
    else:
        problem = _strict_decode(kind, _STRICT_DOCUMENTS.get(kind or "v1alpha1", _ANY), doc.node)
    if problem:
        raise _rejected(f"error decoding document {doc.ident} (line {doc.line}): {problem}")


def _strict_decode(kind: str, schema: _Type, node: yaml.Node) -> str:
    type_errors = list(_type_errors(schema, node))
    if type_errors:
        joined = "\n  ".join(type_errors)
        return f"error decoding {kind} to *{schema.go}: yaml: unmarshal errors:\n  {joined}"
    unknown = _unknown_keys(schema, node)
    if unknown:
        return f"unknown keys found during decoding:\n{_render_yaml(unknown)}"
    return ""


def _short_tag(tag: str) -> str:
    return "!!" + tag.rsplit(":", 1)[-1] if tag.startswith("tag:yaml.org,2002:") else tag


def _type_error(node: yaml.Node, go: str) -> str:
    value = ""
    if isinstance(node, yaml.ScalarNode):
        text = str(node.value)
        value = f" `{text[:7]}...`" if len(text) > 10 else f" `{text}`"
    line = node.start_mark.line + 1
    return f"line {line}: cannot unmarshal {_short_tag(node.tag)}{value} into {go}"


def _scalar_fits(schema: _Type, node: yaml.ScalarNode) -> bool:
    if schema.go == "bool":
        return node.tag == _TAG_BOOL or str(node.value).lower() in _YAML11_BOOL_WORDS
    if schema.go == "int":
        return node.tag == _TAG_INT
    return True  # yaml.v3 decodes any scalar into a string


def _type_errors(schema: _Type, node: yaml.Node) -> Iterator[str]:
    """yaml.v3's unmarshal errors for ``node`` decoded into ``schema``."""
    if schema.kind == "any" or (isinstance(node, yaml.ScalarNode) and node.tag == _TAG_NULL):
        return
    wanted = {"scalar": yaml.ScalarNode, "seq": yaml.SequenceNode}.get(
        schema.kind, yaml.MappingNode
    )
    if not isinstance(node, wanted) or (
        isinstance(node, yaml.ScalarNode) and not _scalar_fits(schema, node)
    ):
        yield _type_error(node, schema.go)
        return
    if isinstance(node, yaml.SequenceNode) and schema.item is not None:
        for item in node.value:
            yield from _type_errors(schema.item, item)
    elif isinstance(node, yaml.MappingNode):
        yield from _mapping_type_errors(schema, node)


def _mapping_type_errors(schema: _Type, node: yaml.MappingNode) -> Iterator[str]:
    first_seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            yield _type_error(key_node, "string")
            continue
        key, line = str(key_node.value), key_node.start_mark.line + 1
        if key in first_seen:
            yield f"line {line}: mapping key {_goq(key)} already defined at line {first_seen[key]}"
            continue
        first_seen[key] = line
        child = schema.item if schema.kind == "map" else schema.fields.get(key)
        if child is not None:
            yield from _type_errors(child, value_node)


def _unknown_keys(schema: _Type, node: yaml.Node) -> dict[str, Any] | None:
    """The keys a Go struct has no field for, nested as in the document."""
    if schema.kind != "struct" or not isinstance(node, yaml.MappingNode):
        return None
    unknown: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        child = schema.fields.get(key)
        if child is None:
            unknown[key] = _construct(value_node)
            continue
        inner = _unknown_keys(child, value_node)
        if inner:
            unknown[key] = inner
    # Go marshals the map[string]interface{} of unknown keys in key order.
    return dict(sorted(unknown.items())) or None


# --------------------------------------------------------------------------- validation


def _multierror(errors: Sequence[str]) -> str:
    """hashicorp/go-multierror's text."""
    if len(errors) == 1:
        return f"1 error occurred:\n\t* {errors[0]}\n\n"
    points = "\n\t".join(f"* {error}" for error in errors)
    return f"{len(errors)} errors occurred:\n\t{points}\n\n"


def validate(
    data: bytes, *, maintenance: bool = False, container_mode: bool = False
) -> ValidationOutcome:
    """Accept ``data`` (with its warnings) or raise :class:`ConfigRejected` (§9 steps 5-7).

    ``container_mode`` adds the checks a container-platform node makes (host DNS on).
    """
    documents = _parse(data)
    main = next((doc for doc in documents if doc.kind == "v1alpha1"), None)
    if main is None and not maintenance:
        raise _rejected(NO_V1ALPHA1_MESSAGE)
    errors: list[str] = []
    warnings: list[str] = []
    main_data: dict[str, Any] = _construct(main.node) if main is not None else {}
    if main is not None:
        main_errors = _validate_v1alpha1(main_data, warnings, container_mode)
        if main_errors:
            errors.append(f"v1alpha1.Config: {_multierror(main_errors)}")
    for doc in documents:
        if doc.kind == "HostnameConfig":
            errors.extend(_validate_hostname_config(_construct(doc.node), main_data))
    if errors:
        raise _rejected(_multierror(errors))
    return ValidationOutcome(warnings)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _validate_v1alpha1(config: dict[str, Any], warnings: list[str], container: bool) -> list[str]:
    machine = config.get("machine")
    if not isinstance(machine, dict):
        return ["machine instructions are required"]
    mtype = str(machine.get("type") or "")
    errors = _validate_cluster(config.get("cluster"), mtype in ("controlplane", "init"))
    if container:
        errors += _container_mode_errors(machine)
    errors += _machine_ca_errors(machine, _mapping(config.get("cluster")), mtype)
    errors += _cni_errors(config, mtype, warnings)
    host = _mapping(machine.get("network")).get("hostname")
    if host and not _valid_hostname(str(host)):
        errors.append(f"invalid hostname {_goq(str(host))}")
    if _mapping(machine.get("install")).get("extensions"):
        warnings.append(
            ".machine.install.extensions is deprecated, please see "
            "https://www.talos.dev/latest/talos-guides/install/boot-assets/"
        )
    errors += _label_errors(machine)
    if config.get("persist") is False:
        errors.append(".persist should be enabled")
    return errors


def _validate_cluster(cluster: Any, control_plane: bool) -> list[str]:
    if not isinstance(cluster, dict):
        return ["cluster instructions are required"]
    endpoint = _mapping(cluster.get("controlPlane")).get("endpoint")
    if not endpoint:
        return ["cluster controlplane endpoint is required"]
    errors: list[str] = []
    if not _valid_endpoint(str(endpoint)):
        errors.append(f"invalid controlplane endpoint: {_goq(str(endpoint))} is not a valid "
                      "endpoint URL")
    network = _mapping(cluster.get("network"))
    domain = network.get("dnsDomain")
    if domain and not _valid_dns_name(str(domain)):
        errors.append(f"{_goq(str(domain))} is not a valid DNS name")
    for what, key in (("pod", "podSubnets"), ("service", "serviceSubnets")):
        for cidr in network.get(key) or ():
            if not _valid_cidr(str(cidr)):
                errors.append(f"invalid {what} subnet {_goq(str(cidr))}: invalid CIDR address: "
                              f"{cidr}")
    if not control_plane and cluster.get("etcd"):
        errors.append("etcd config is only allowed on control plane machines")
    if not control_plane and _mapping(cluster.get("ca")).get("key"):
        errors.append("cluster CA key is not allowed on non-controlplane nodes (.cluster.ca)")
    return errors


def _container_mode_errors(machine: dict[str, Any]) -> list[str]:
    host_dns = _mapping(_mapping(machine.get("features")).get("hostDNS"))
    errors = []
    if host_dns.get("enabled") is not True:
        errors.append("feature HostDNS should be enabled in container mode "
                      "(.machine.features.hostDNS.enabled)")
    if host_dns.get("forwardKubeDNSToHost") is not True:
        errors.append("feature HostDNS should forward kube-dns to host in container mode "
                      "(.machine.features.hostDNS.forwardKubeDNSToHost)")
    return errors


def _machine_ca_errors(machine: dict[str, Any], cluster: dict[str, Any], mtype: str) -> list[str]:
    ca = _mapping(machine.get("ca"))
    errors = []
    if not ca and not machine.get("acceptedCAs"):
        errors.append(
            "issuing CA or some accepted CAs are required (.machine.ca, machine.acceptedCAs)"
        )
    if mtype == "worker":
        if ca.get("key"):
            errors.append("issuing Talos API CA key is not allowed on non-controlplane nodes "
                          "(.machine.ca)")
        if _mapping(cluster.get("ca")).get("key"):
            errors.append("issuing Kubernetes API CA key is not allowed on non-controlplane "
                          "nodes (.cluster.ca)")
    elif mtype not in ("controlplane", "init"):
        errors.append(f"unknown machine type {_goq(mtype)}")
    return errors


def _cni_errors(config: dict[str, Any], mtype: str, warnings: list[str]) -> list[str]:
    if mtype not in ("controlplane", "init"):
        return []
    cni = _mapping(_mapping(_mapping(config.get("cluster")).get("network")).get("cni"))
    name, urls = str(cni.get("name") or "flannel"), cni.get("urls") or []
    if name not in ("flannel", "custom", "none"):
        return ['cni name should be one of ["flannel", "custom", "none"]']
    if name != "custom" and urls:
        return [f'"urls" field should be empty for {_goq(name)} CNI']
    if name == "custom" and not urls:
        warnings.append('"urls" field should not be empty for "custom" CNI')
    return []


# Kubernetes label syntax (as Talos's pkg/machinery/labels checks it).
_DNS1123_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Talos records what it owns on the Node in these annotations.
_RESERVED_ANNOTATIONS = frozenset({
    "talos.dev/owned-labels", "talos.dev/owned-annotations", "talos.dev/owned-taints",
})


def _qualified_name_error(value: str) -> str | None:
    parts = value.split("/")
    if len(parts) > 2:
        return f"invalid format: too many slashes: {_goq(value)}"
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return f"prefix cannot be empty: {_goq(value)}"
        if len(prefix) > 253:
            return (f"prefix {_goq(prefix)} is invalid: domain name length exceeds limit of "
                    f"253: {_goq(prefix)}")
        if not _DNS1123_SUBDOMAIN.match(prefix):
            return (f"prefix {_goq(prefix)} is invalid: domain doesn't match required format: "
                    f"{_goq(prefix)}")
    if not name:
        return f"name cannot be empty: {_goq(value)}"
    if len(name) > 63:
        return f"name is too long: {_goq(value)} (limit is 63)"
    if not _QUALIFIED_NAME.match(name):
        return f"name {_goq(name)} is invalid"
    return None


def _label_value_error(value: str) -> str | None:
    if len(value) > 63:
        return f"label value length exceeds limit of 63: {_goq(value)}"
    if value and not _QUALIFIED_NAME.match(value):
        return f"label value {_goq(value)} is invalid"
    return None


def _taint_errors(value: str) -> list[str]:
    text, colon, effect = value.partition(":")
    if not colon:
        effect = text
    if effect not in _TAINT_EFFECTS:
        return [f"invalid taint effect: {_goq(effect)}"]
    value_error = _label_value_error(text) if colon else None
    return [value_error] if value_error else []


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): "" if v is None else _scalar_text(v) for k, v in _mapping(value).items()}


def _label_errors(machine: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    for field_name, what in (("nodeLabels", "labels"), ("nodeAnnotations", "annotations"),
                             ("nodeTaints", "taints")):
        problems: list[str] = []
        for key, value in sorted(_string_map(machine.get(field_name)).items()):
            key_error = _qualified_name_error(key)
            if key_error:
                problems.append(key_error)
                if what == "taints":
                    continue
            if what == "labels":
                problems += filter(None, [_label_value_error(value)])
            elif what == "taints":
                problems += _taint_errors(value)
            elif key in _RESERVED_ANNOTATIONS:
                problems.append(f"annotation {_goq(key)} is reserved")
        if problems:
            errors.append(f"invalid machine node {what}: {_multierror(problems)}")
    return errors


_AUTO_HOSTNAME_KINDS = ("off", "default", "stable")


def _validate_hostname_config(doc: dict[str, Any], main: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    host, auto = str(doc.get("hostname") or ""), str(doc.get("auto") or "")
    if auto and auto not in _AUTO_HOSTNAME_KINDS:
        problems.append(f"invalid auto hostname kind {_goq(auto)}")
    if host and auto and auto != "off":
        problems.append("'auto' and 'hostname' cannot be set at the same time")
    if not host and not auto:
        problems.append("either 'auto' or 'hostname' must be set")
    if host and not _valid_hostname(host):
        problems.append(f"invalid hostname {_goq(host)}")
    errors = []
    if problems:
        text = problems[0] if len(problems) == 1 else _multierror(problems)
        errors.append(f"HostnameConfig: {text}")
    legacy = _mapping(_mapping(main.get("machine")).get("network")).get("hostname")
    if legacy and host:
        errors.append("static hostname is already set in v1alpha1 config")
    return errors


_HOST_LABEL = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?$")
_DNS_NAME = re.compile(
    r"^(?:[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})(?:\.[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})*[._]?$"
)


def _valid_hostname(name: str) -> bool:
    labels = name.rstrip(".").split(".")
    return len(name) <= 253 and all(_HOST_LABEL.match(label) for label in labels)


def _valid_dns_name(name: str) -> bool:
    return bool(name) and len(name) - name.count(".") <= 255 and bool(_DNS_NAME.match(name))


def _valid_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _valid_endpoint(text: str) -> bool:
    try:
        parts = urlsplit(text)
        _ = parts.port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _goq(text: str) -> str:
    """Go's %q for ordinary text."""
    return json.dumps(text, ensure_ascii=False)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- immediate apply


@functools.lru_cache(maxsize=256)
def _lenient_documents(data: bytes) -> tuple[dict[str, Any], ...]:
    """The mapping documents of ``data`` (none if it does not parse).

    Cached because the emulator reads the same active config on every Kubernetes request;
    callers must treat the result as read-only.
    """
    try:
        loaded = list(yaml.load_all(data, Loader=_Loader))
    except yaml.YAMLError:
        return ()
    return tuple(doc for doc in loaded if isinstance(doc, dict))


def _main_document(data: bytes) -> dict[str, Any]:
    for doc in _lenient_documents(data):
        if not doc.get("kind") and (doc.get("apiVersion") == "v1alpha1" or
                                    _V1ALPHA1_MARKERS & doc.keys()):
            return doc
    return {}


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def _differs(old: Any, new: Any) -> bool:
    return not (_empty(old) and _empty(new)) and old != new


def _blocked_paths(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    paths: list[str] = []
    for key in dict.fromkeys([*old, *new]):
        if key in IMMEDIATE_TOP_LEVEL or not _differs(old.get(key), new.get(key)):
            continue
        if key != "machine":
            paths.append(str(key))
            continue
        old_m, new_m = _mapping(old.get(key)), _mapping(new.get(key))
        for mkey in dict.fromkeys([*old_m, *new_m]):
            if mkey in IMMEDIATE_MACHINE_FIELDS or not _differs(old_m.get(mkey), new_m.get(mkey)):
                continue
            if mkey == "features":
                paths += _blocked_features(_mapping(old_m.get(mkey)), _mapping(new_m.get(mkey)))
            else:
                paths.append(f"machine.{mkey}")
    return paths


def _blocked_features(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [
        f"machine.features.{key}" for key in dict.fromkeys([*old, *new])
        if key not in IMMEDIATE_FEATURES and _differs(old.get(key), new.get(key))
    ]


def immediate_apply_blockers(old: bytes, new: bytes) -> list[str]:
    """Dotted paths of v1alpha1 fields that differ and need a reboot (§9 CanApplyImmediate)."""
    return _blocked_paths(_main_document(old), _main_document(new))


def _merge_allowed(
    old: dict[str, Any], new: dict[str, Any], allowed: frozenset[str]
) -> dict[str, Any]:
    """``new`` with the ``allowed`` keys taken from ``old``; keys keep ``old``'s order."""
    merged: dict[str, Any] = {}
    for key in dict.fromkeys([*old, *new]):
        source = old if key in allowed else new
        if key in source:
            merged[key] = source[key]
    return merged


def _with_allowed_from(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with every immediately-applicable field taken from ``old``."""
    masked = _merge_allowed(old, new, IMMEDIATE_TOP_LEVEL)
    old_m, new_m = _mapping(old.get("machine")), _mapping(new.get("machine"))
    if isinstance(masked.get("machine"), dict):
        machine = _merge_allowed(old_m, new_m, IMMEDIATE_MACHINE_FIELDS)
        if isinstance(machine.get("features"), dict):
            machine["features"] = _merge_allowed(
                _mapping(old_m.get("features")), machine["features"], IMMEDIATE_FEATURES
            )
        masked["machine"] = machine
    return masked


def immediate_apply_error(old: bytes, new: bytes) -> str:
    """The InvalidArgument text for a NO_REBOOT/TRY apply that needs a reboot."""
    old_doc, new_doc = _main_document(old), _main_document(new)
    diff = config_diff(
        dump_documents([old_doc]), dump_documents([_with_allowed_from(old_doc, new_doc)])
    )
    return f"this config change can't be applied in immediate mode\ndiff:\n{diff}"


# --------------------------------------------------------------------------- reply texts

_MODE_DETAILS = {
    "NO_REBOOT": "Applied configuration without a reboot",
    "TRY": "Applied configuration without a reboot",
    "STAGED": "Staged configuration to be applied after the next reboot",
    "REBOOT": "Applied configuration with a reboot",
}


def apply_mode_details(mode_name: str, *, reason: str = "", try_timeout: str = "") -> str:
    """``mode_details`` of an ApplyConfiguration reply for the *resolved* mode (§9 step 12).

    ``reason`` (why AUTO became REBOOT) is appended as ``: <reason>``; ``try_timeout`` is a
    Go duration text such as ``1m0s`` and adds the try-mode sentence.
    """
    details = _MODE_DETAILS.get(mode_name.upper(), _MODE_DETAILS["REBOOT"])
    if reason:
        details += f": {reason}"
    if mode_name.upper() == "TRY" and try_timeout:
        details += (
            "\nThe config is applied in 'try' mode and will be automatically reverted back in "
            f"{try_timeout}"
        )
    return details


def dry_run_details(mode_name: str, old: bytes, new: bytes, reason: str = "") -> str:
    """``mode_details`` of a dry-run reply (§9 step 10); ``mode_name`` is the resolved mode."""
    diff = config_diff(old, new) or "No changes."
    details = apply_mode_details(mode_name, reason=reason)
    return f"Dry run summary:\n{details} (skipped in dry-run).\nConfig diff:\n\n{diff}"


# --------------------------------------------------------------------------- accessors


def _dig(doc: Mapping[str, Any], *path: str) -> Any:
    value: Any = doc
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _string_list(value: Any) -> list[str]:
    return [_scalar_text(item) for item in value] if isinstance(value, list) else []


def node_labels(data: bytes) -> dict[str, str]:
    """``machine.nodeLabels`` as strings."""
    return _string_map(_dig(_main_document(data), "machine", "nodeLabels"))


def kubelet_extra_args(data: bytes) -> dict[str, str]:
    """``machine.kubelet.extraArgs`` as strings."""
    return _string_map(_dig(_main_document(data), "machine", "kubelet", "extraArgs"))


def unknown_kubelet_flags(data: bytes) -> list[str]:
    """extraArgs keys kubelet does not know (it then exits with ``unknown flag``), sorted."""
    return sorted(flag for flag in kubelet_extra_args(data) if flag not in KNOWN_KUBELET_FLAGS)


def pod_subnets(data: bytes) -> list[str]:
    """``cluster.network.podSubnets``, or Talos's default when unset."""
    found = _string_list(_dig(_main_document(data), "cluster", "network", "podSubnets"))
    return found or list(DEFAULT_POD_SUBNETS)


def service_subnets(data: bytes) -> list[str]:
    """``cluster.network.serviceSubnets``, or Talos's default when unset."""
    found = _string_list(_dig(_main_document(data), "cluster", "network", "serviceSubnets"))
    return found or list(DEFAULT_SERVICE_SUBNETS)


def machine_type(data: bytes) -> str:
    """``machine.type`` (``""`` when unset)."""
    return _scalar_text(_dig(_main_document(data), "machine", "type") or "")


def hostname(data: bytes) -> str:
    """The static hostname: the ``HostnameConfig`` document, else ``machine.network.hostname``."""
    for doc in _lenient_documents(data):
        if doc.get("kind") == "HostnameConfig" and doc.get("hostname"):
            return _scalar_text(doc["hostname"])
    return _scalar_text(_dig(_main_document(data), "machine", "network", "hostname") or "")


def cluster_name(data: bytes) -> str:
    """``cluster.clusterName`` (``""`` when unset)."""
    return _scalar_text(_dig(_main_document(data), "cluster", "clusterName") or "")


def cert_sans(data: bytes) -> list[str]:
    """``machine.certSANs``."""
    return _string_list(_dig(_main_document(data), "machine", "certSANs"))


def kubernetes_version(data: bytes) -> str:
    """The Kubernetes version from the kubelet image tag (``1.36.0``), ``""`` if unknown."""
    image = _scalar_text(_dig(_main_document(data), "machine", "kubelet", "image") or "")
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return tag.removeprefix("v")


# --------------------------------------------------------------------------- generation

# Documentation comments talosctl writes next to (scalars) or above (sections) a field.
_DOCS = {
    "version": "Indicates the schema used to decode the contents.",
    "debug": "Enable verbose logging to the console.",
    "persist": "Indicates whether to pull the machine config upon every boot.",
    "machine": "Provides machine specific configuration options.",
    "machine.type": "Defines the role of the machine within the cluster.",
    "machine.token": "The `token` is used by a machine to join the PKI of the cluster.",
    "machine.ca": "The root certificate authority of the PKI.",
    "machine.certSANs": "Extra certificate subject alternative names for the machine's "
                        "certificate.",
    "machine.kubelet": "Used to provide additional options to the kubelet.",
    "machine.kubelet.image": "The `image` field is an optional reference to an alternative "
                             "kubelet image.",
    "machine.kubelet.defaultRuntimeSeccompProfileEnabled": "Enable container runtime default "
                                                           "Seccomp profile.",
    "machine.kubelet.disableManifestsDirectory": "The `disableManifestsDirectory` field "
                                                 "configures the kubelet to get static pod "
                                                 "manifests from the /etc/kubernetes/manifests "
                                                 "directory.",
    "machine.network": "Provides machine specific network configuration options.",
    "machine.install": "Used to provide instructions for installations.",
    "machine.install.disk": "The disk used for installations.",
    "machine.install.image": "Allows for supplying the image used to perform the installation.",
    "machine.install.wipe": "Indicates if the installation disk should be wiped at installation "
                            "time.",
    "machine.features": "Features describe individual Talos features that can be switched on "
                        "or off.",
    "machine.features.rbac": "Enable role-based access control (RBAC).",
    "machine.features.stableHostname": "Enable stable default hostname.",
    "machine.features.apidCheckExtKeyUsage": "Enable checks for extended key usage of client "
                                             "certificates in apid.",
    "machine.features.diskQuotaSupport": "Enable XFS project quota support for EPHEMERAL "
                                         "partition and user disks.",
    "machine.features.kubePrism": "KubePrism - local proxy/load balancer on defined port that "
                                  "will distribute",
    "machine.features.hostDNS": "Configures host DNS caching resolver.",
    "machine.nodeLabels": "Configures the node labels for the machine.",
    "cluster": "Provides cluster specific configuration options.",
    "cluster.id": "Globally unique identifier for this cluster (base64 encoded random 32 "
                  "bytes).",
    "cluster.secret": "Shared secret of cluster (base64 encoded random 32 bytes).",
    "cluster.controlPlane": "Provides control plane specific configuration options.",
    "cluster.controlPlane.endpoint": "Endpoint is the canonical controlplane endpoint, which "
                                     "can be an IP address or a DNS hostname.",
    "cluster.clusterName": "Configures the cluster's name.",
    "cluster.network": "Provides cluster specific network configuration options.",
    "cluster.network.dnsDomain": "The domain used by Kubernetes DNS.",
    "cluster.network.podSubnets": "The pod subnet CIDR.",
    "cluster.network.serviceSubnets": "The service subnet CIDR.",
    "cluster.token": "The [bootstrap token](https://kubernetes.io/docs/reference/access-authn-"
                     "authz/bootstrap-tokens/) used to join the cluster.",
    "cluster.ca": "The base64 encoded root certificate authority used by Kubernetes.",
    "cluster.aggregatorCA": "The base64 encoded aggregator certificate authority used by "
                            "Kubernetes for front-proxy certificate generation.",
    "cluster.apiServer": "API server specific configuration options.",
    "cluster.controllerManager": "Controller manager server specific configuration options.",
    "cluster.proxy": "Kube-proxy server-specific configuration options",
    "cluster.scheduler": "Scheduler server specific configuration options.",
    "cluster.discovery": "Configures cluster member discovery.",
    "cluster.etcd": "Etcd specific configuration options.",
    "cluster.extraManifests": "A list of urls that point to additional manifests.",
    "cluster.inlineManifests": "A list of inline Kubernetes manifests.",
}
_TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join(("pytest-talos-emulator", *parts)).encode()).digest()


def _token(*parts: str) -> str:
    """A kubeadm-style token ``[a-z0-9]{6}.[a-z0-9]{16}``, derived from ``parts``."""
    chars = "".join(_TOKEN_ALPHABET[b % len(_TOKEN_ALPHABET)] for b in _digest(*parts)[:22])
    return f"{chars[:6]}.{chars[6:]}"


def _b64_32(*parts: str) -> str:
    return base64.b64encode(_digest(*parts)).decode("ascii")


def _crt(pem: bytes | None, what: str, cluster: str) -> str:
    if pem is None:
        body = base64.b64encode(f"emulated {what} for cluster {cluster}".encode()).decode()
        pem = f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n".encode()
    return base64.b64encode(pem).decode("ascii")


def _machine_section(
    *, role: str, cluster: str, host: str, kubelet_version: str, install_image: str,
    cert_sans_list: Sequence[str], ca_crt: str, multidoc: bool,
) -> dict[str, Any]:
    features: dict[str, Any] = {"rbac": True}
    if not multidoc:
        features["stableHostname"] = True
    features.update({
        "apidCheckExtKeyUsage": True, "diskQuotaSupport": True,
        "kubePrism": {"enabled": True, "port": 7445},
        "hostDNS": {"enabled": True, "forwardKubeDNSToHost": True},
    })
    labels = {"node.kubernetes.io/exclude-from-external-load-balancers": ""}
    return {
        "type": role,
        "token": _token("machine-token", cluster),
        "ca": {"crt": ca_crt},
        "certSANs": list(cert_sans_list),
        "kubelet": {
            "image": f"ghcr.io/siderolabs/kubelet:v{kubelet_version}",
            "defaultRuntimeSeccompProfileEnabled": True,
            "disableManifestsDirectory": True,
        },
        "network": {} if multidoc else {"hostname": host},
        "install": {"disk": "/dev/sda", "image": install_image, "wipe": False},
        "features": features,
        "nodeLabels": labels if role == "controlplane" else {},
    }


def _control_plane_cluster_extras(
    version: str, endpoint_host: str, cluster: str
) -> dict[str, Any]:
    return {
        "aggregatorCA": {"crt": _crt(None, "aggregator CA certificate", cluster)},
        "apiServer": {
            "image": f"registry.k8s.io/kube-apiserver:v{version}",
            "certSANs": [endpoint_host],
            "disablePodSecurityPolicy": True,
            "admissionControl": [{
                "name": "PodSecurity",
                "configuration": {
                    "apiVersion": "pod-security.admission.config.k8s.io/v1alpha1",
                    "defaults": {
                        "audit": "restricted", "audit-version": "latest",
                        "enforce": "baseline", "enforce-version": "latest",
                        "warn": "restricted", "warn-version": "latest",
                    },
                    "exemptions": {"namespaces": ["kube-system"], "runtimeClasses": [],
                                   "usernames": []},
                    "kind": "PodSecurityConfiguration",
                },
            }],
            "auditPolicy": {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                            "rules": [{"level": "Metadata"}]},
        },
        "controllerManager": {"image": f"registry.k8s.io/kube-controller-manager:v{version}"},
        "proxy": {"image": f"registry.k8s.io/kube-proxy:v{version}"},
        "scheduler": {"image": f"registry.k8s.io/kube-scheduler:v{version}"},
    }


def _cluster_section(
    *, role: str, cluster: str, endpoint: str, version: str, pods: Sequence[str],
    services: Sequence[str], k8s_ca_crt: str,
) -> dict[str, Any]:
    section: dict[str, Any] = {
        "id": _b64_32("cluster-id", cluster),
        "secret": _b64_32("cluster-secret", cluster),
        "controlPlane": {"endpoint": endpoint},
        "clusterName": cluster,
        "network": {
            "dnsDomain": "cluster.local",
            "podSubnets": list(pods),
            "serviceSubnets": list(services),
        },
        "token": _token("bootstrap-token", cluster),
        "ca": {"crt": k8s_ca_crt},
    }
    if role == "controlplane":
        host = urlsplit(endpoint).hostname or endpoint
        section.update(_control_plane_cluster_extras(version, host, cluster))
    section["discovery"] = {
        "enabled": True,
        "registries": {"kubernetes": {"disabled": True}, "service": {}},
    }
    if role == "controlplane":
        section["etcd"] = {"ca": {"crt": _crt(None, "etcd CA certificate", cluster)}}
        section["extraManifests"] = []
        section["inlineManifests"] = []
    return section


def generate_config(
    *,
    cluster_name: str,
    hostname: str,
    role: Literal["controlplane", "worker"],
    address: str,
    endpoint: str,
    pod_subnets: Sequence[str] = DEFAULT_POD_SUBNETS,
    service_subnets: Sequence[str] = DEFAULT_SERVICE_SUBNETS,
    kubernetes_version: str = "1.36.0",
    install_image: str = "ghcr.io/siderolabs/installer:v1.13.9",
    extra_documents: bool = True,
    cert_sans: Sequence[str] = (),
    ca_crt_pem: bytes | None = None,
    kubernetes_ca_crt_pem: bytes | None = None,
) -> bytes:
    """A machine config as ``talosctl gen config`` (Talos 1.13) plus a hostname patch writes it.

    ``endpoint`` is the Kubernetes control-plane URL (``https://10.5.0.2:6443``). ``address``
    (the node's own address) is accepted for the callers' convenience but, as in gen config,
    written nowhere: Talos discovers node addresses at runtime. The result is the same for
    the same inputs and holds no private keys (see :data:`INFERRED`).
    """
    if role not in ("controlplane", "worker"):
        raise ValueError(f"role must be 'controlplane' or 'worker', not {role!r}")
    version = kubernetes_version.removeprefix("v")
    config = {
        "version": "v1alpha1",
        "debug": False,
        "persist": True,
        "machine": _machine_section(
            role=role, cluster=cluster_name, host=hostname, kubelet_version=version,
            install_image=install_image, cert_sans_list=cert_sans,
            ca_crt=_crt(ca_crt_pem, "Talos OS CA certificate", cluster_name),
            multidoc=extra_documents,
        ),
        "cluster": _cluster_section(
            role=role, cluster=cluster_name, endpoint=endpoint, version=version,
            pods=pod_subnets, services=service_subnets,
            k8s_ca_crt=_crt(kubernetes_ca_crt_pem, "Kubernetes CA certificate", cluster_name),
        ),
    }
    text = _render_yaml(config, _DOCS)
    if extra_documents:
        hostname_doc = {"apiVersion": "v1alpha1", "kind": "HostnameConfig",
                        "hostname": hostname, "auto": "off"}
        text += "---\n" + _render_yaml(hostname_doc, {
            "hostname": "A static hostname to set for the machine.",
            "auto": "A method to automatically generate a hostname for the machine.",
        })
    return text.encode("utf-8")


# --------------------------------------------------------------------------- YAML writing


def _scalar(value: Any) -> str:
    if isinstance(value, str) and "\n" in value:
        return json.dumps(value)
    text = yaml.safe_dump(value, width=1 << 16).removesuffix("\n...\n").rstrip("\n")
    # yaml.v3 quotes with double quotes ("", "off"); PyYAML would pick single ones.
    return json.dumps(value) if text.startswith("'") else text


def _render_yaml(value: Mapping[str, Any], docs: Mapping[str, str] | None = None) -> str:
    """Block YAML the way Go's yaml.v3 writes it (4-space indent), with talosctl-style docs."""
    return "".join(f"{line}\n" for line in _mapping_lines(value, "", 0, docs or {}))


def _mapping_lines(
    value: Mapping[str, Any], path: str, indent: int, docs: Mapping[str, str]
) -> Iterator[str]:
    pad = " " * indent
    for key, item in value.items():
        key_text = _scalar(str(key))
        item_path = f"{path}.{key}" if path else str(key)
        doc = docs.get(item_path)
        if isinstance(item, dict | list) and item:
            if doc:
                yield f"{pad}# {doc}"
            yield f"{pad}{key_text}:"
            yield from _block_lines(item, item_path, indent + 4, docs)
        else:
            inline = "{}" if isinstance(item, dict) else "[]" if isinstance(item, list) else (
                _scalar(item)
            )
            yield f"{pad}{key_text}: {inline}" + (f" # {doc}" if doc else "")


def _block_lines(value: Any, path: str, indent: int, docs: Mapping[str, str]) -> Iterator[str]:
    if isinstance(value, dict):
        yield from _mapping_lines(value, path, indent, docs)
        return
    pad = " " * indent
    for item in value:
        if isinstance(item, dict) and item:
            lines = list(_mapping_lines(item, f"{path}[]", indent + 2, docs))
            yield f"{pad}- {lines[0].lstrip()}"
            yield from lines[1:]
        elif isinstance(item, list) and item:
            yield f"{pad}-"
            yield from _block_lines(item, f"{path}[]", indent + 4, docs)
        else:
            inline = "{}" if isinstance(item, dict) else "[]" if isinstance(item, list) else (
                _scalar(item)
            )
            yield f"{pad}- {inline}"
