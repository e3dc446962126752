"""Read single values out of a (trusted, already accepted) machine config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_talos.emulator.machineconfig.common import (
    DEFAULT_POD_SUBNETS,
    DEFAULT_SERVICE_SUBNETS,
    scalar_text,
    string_map,
)
from pytest_talos.emulator.machineconfig.loader import lenient_documents, main_document

# Real kubelet command-line flags; anything else in extraArgs makes kubelet exit at start
# (`unknown flag: --x`), so it crash-loops.
KNOWN_KUBELET_FLAGS = frozenset(
    {
        "address",
        "anonymous-auth",
        "authentication-token-webhook",
        "authorization-mode",
        "bootstrap-kubeconfig",
        "cert-dir",
        "cgroup-driver",
        "cgroup-root",
        "client-ca-file",
        "cloud-provider",
        "cluster-dns",
        "cluster-domain",
        "config",
        "container-log-max-files",
        "container-log-max-size",
        "container-runtime-endpoint",
        "cpu-cfs-quota",
        "cpu-manager-policy",
        "cpu-manager-reconcile-period",
        "enforce-node-allocatable",
        "event-burst",
        "event-qps",
        "eviction-hard",
        "eviction-max-pod-grace-period",
        "eviction-minimum-reclaim",
        "eviction-soft",
        "eviction-soft-grace-period",
        "fail-swap-on",
        "feature-gates",
        "hairpin-mode",
        "healthz-bind-address",
        "healthz-port",
        "hostname-override",
        "image-gc-high-threshold",
        "image-gc-low-threshold",
        "image-service-endpoint",
        "kube-api-burst",
        "kube-api-qps",
        "kube-reserved",
        "kube-reserved-cgroup",
        "kubeconfig",
        "kubelet-cgroups",
        "log-flush-frequency",
        "logging-format",
        "make-iptables-util-chains",
        "max-open-files",
        "max-pods",
        "memory-manager-policy",
        "node-ip",
        "node-labels",
        "node-status-update-frequency",
        "pod-infra-container-image",
        "pod-max-pids",
        "pods-per-core",
        "port",
        "protect-kernel-defaults",
        "provider-id",
        "read-only-port",
        "register-node",
        "register-with-taints",
        "registry-burst",
        "registry-qps",
        "reserved-cpus",
        "reserved-memory",
        "root-dir",
        "rotate-certificates",
        "rotate-server-certificates",
        "runtime-request-timeout",
        "seccomp-default",
        "serialize-image-pulls",
        "system-reserved",
        "system-reserved-cgroup",
        "tls-cert-file",
        "tls-cipher-suites",
        "tls-min-version",
        "tls-private-key-file",
        "topology-manager-policy",
        "topology-manager-scope",
        "v",
        "vmodule",
        "volume-plugin-dir",
        "volume-stats-agg-period",
    }
)


def _dig(doc: Mapping[str, Any], *path: str) -> Any:
    value: Any = doc
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _string_list(value: Any) -> list[str]:
    return [scalar_text(item) for item in value] if isinstance(value, list) else []


def node_labels(data: bytes) -> dict[str, str]:
    """``machine.nodeLabels`` as strings."""
    return string_map(_dig(main_document(data), "machine", "nodeLabels"))


def kubelet_extra_args(data: bytes) -> dict[str, str]:
    """``machine.kubelet.extraArgs`` as strings."""
    return string_map(_dig(main_document(data), "machine", "kubelet", "extraArgs"))


def unknown_kubelet_flags(data: bytes) -> list[str]:
    """extraArgs keys kubelet does not know (it then exits with ``unknown flag``), sorted."""
    return sorted(flag for flag in kubelet_extra_args(data) if flag not in KNOWN_KUBELET_FLAGS)


def pod_subnets(data: bytes) -> list[str]:
    """``cluster.network.podSubnets``, or Talos's default when unset."""
    found = _string_list(_dig(main_document(data), "cluster", "network", "podSubnets"))
    return found or list(DEFAULT_POD_SUBNETS)


def service_subnets(data: bytes) -> list[str]:
    """``cluster.network.serviceSubnets``, or Talos's default when unset."""
    found = _string_list(_dig(main_document(data), "cluster", "network", "serviceSubnets"))
    return found or list(DEFAULT_SERVICE_SUBNETS)


def machine_type(data: bytes) -> str:
    """``machine.type`` (``""`` when unset)."""
    return scalar_text(_dig(main_document(data), "machine", "type") or "")


def hostname(data: bytes) -> str:
    """The static hostname: the ``HostnameConfig`` document, else ``machine.network.hostname``."""
    for doc in lenient_documents(data):
        if doc.get("kind") == "HostnameConfig" and doc.get("hostname"):
            return scalar_text(doc["hostname"])
    return scalar_text(_dig(main_document(data), "machine", "network", "hostname") or "")


def cluster_name(data: bytes) -> str:
    """``cluster.clusterName`` (``""`` when unset)."""
    return scalar_text(_dig(main_document(data), "cluster", "clusterName") or "")


def cert_sans(data: bytes) -> list[str]:
    """``machine.certSANs``."""
    return _string_list(_dig(main_document(data), "machine", "certSANs"))


def kubernetes_version(data: bytes) -> str:
    """The Kubernetes version from the kubelet image tag (``1.36.0``), ``""`` if unknown."""
    image = scalar_text(_dig(main_document(data), "machine", "kubelet", "image") or "")
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return tag.removeprefix("v")


def discovery_enabled(data: bytes) -> bool:
    """``cluster.discovery.enabled``; unset means off (v1alpha1_discoveryconfig.go Enabled)."""
    return _dig(main_document(data), "cluster", "discovery", "enabled") is True


def cni_name(data: bytes) -> str:
    """``cluster.network.cni.name``; ``flannel`` without a CNI section (v1alpha1_clusterconfig.go
    CNI)."""
    cni = _dig(main_document(data), "cluster", "network", "cni")
    if not isinstance(cni, Mapping):
        return "flannel"
    return scalar_text(cni.get("name") or "")


def coredns_enabled(data: bytes) -> bool:
    """Not ``cluster.coreDNS.disabled: true`` (v1alpha1_provider.go CoreDNS.Enabled)."""
    return _dig(main_document(data), "cluster", "coreDNS", "disabled") is not True


def proxy_disabled(data: bytes) -> bool:
    """``cluster.proxy.disabled: true`` (v1alpha1_clusterconfig.go Proxy: kube-proxy runs
    unless disabled)."""
    return _dig(main_document(data), "cluster", "proxy", "disabled") is True


def component_extra_args(data: bytes, section: str) -> dict[str, str]:
    """``cluster.<section>.extraArgs`` (``etcd``, ``controllerManager``, ``scheduler``)."""
    return string_map(_dig(main_document(data), "cluster", section, "extraArgs"))


def kubelet_extra_config(data: bytes) -> dict[str, Any]:
    """``machine.kubelet.extraConfig`` (merged into KubeletConfiguration by kubelet_spec.go)."""
    found = _dig(main_document(data), "machine", "kubelet", "extraConfig")
    return dict(found) if isinstance(found, Mapping) else {}


IMAGE_VERIFICATION_KIND = "ImageVerificationConfig"


def image_verification_rules(data: bytes) -> list[dict[str, Any]]:
    """The ImageVerificationRule specs the controller makes of the config's
    ``ImageVerificationConfig`` rules, in order (controllers/security/
    image_verification_config.go; the spec's YAML keys and omitempty as in
    resources/security/image_verification_rule.go; config keys from
    config/types/security/image_verification.go). None without such a document."""
    for doc in lenient_documents(data):
        if doc.get("kind") == IMAGE_VERIFICATION_KIND:
            rules = doc.get("rules")
            return (
                [_rule_spec(rule) for rule in rules if isinstance(rule, Mapping)]
                if isinstance(rules, list)
                else []
            )
    return []


def _rule_spec(rule: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if rule.get("image"):
        spec["imagePattern"] = str(rule["image"])
    spec["skip"] = bool(rule.get("skip"))  # *bool: nil is false
    spec["deny"] = bool(rule.get("deny"))
    keyless = rule.get("keyless")
    if isinstance(keyless, Mapping):
        verifier: dict[str, Any] = {"issuer": str(keyless.get("issuer") or "")}
        if keyless.get("subject"):
            verifier["subject"] = str(keyless["subject"])
        if keyless.get("subjectRegex"):
            verifier["subjectRegex"] = str(keyless["subjectRegex"])
        spec["keylessVerifier"] = verifier
    public_key = rule.get("publicKey")
    if isinstance(public_key, Mapping):
        spec["publicKeyVerifier"] = {"certificate": str(public_key.get("certificate") or "")}
    return spec
