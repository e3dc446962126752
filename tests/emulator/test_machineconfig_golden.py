"""Generated configs have the shape Talos 1.13 pins for its own generator.

Talos keeps the output of ``pkg/machinery/config/generate`` for the v1.13 version contract in
``pkg/machinery/config/types/v1alpha1/testdata/stability/v1.13/base-{controlplane,worker}.yaml``
(inputs: cluster ``base``, endpoint ``https://base:6443``, Kubernetes 1.28.0, comments off).
Below is our own restatement of those files as ordered ``path = value`` lines (``{AC}``
abbreviates the PodSecurity admission configuration), with every secret or certificate
masked as ``*``; the emulator's generator, given the same inputs, must
flatten to exactly the same lines (same keys, same order, same plain values).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.node.identity import Role

MASKED = "*"
# Leaves holding generated secrets or certificates (they differ from run to run in Talos).
SECRET_LEAVES = frozenset(
    {
        "machine.token",
        "machine.ca.crt",
        "machine.ca.key",
        "cluster.id",
        "cluster.secret",
        "cluster.token",
        "cluster.secretboxEncryptionSecret",
        "cluster.ca.crt",
        "cluster.ca.key",
        "cluster.aggregatorCA.crt",
        "cluster.aggregatorCA.key",
        "cluster.serviceAccount.key",
        "cluster.etcd.ca.crt",
        "cluster.etcd.ca.key",
    }
)

_COMMON_MACHINE = """
machine.certSANs = []
machine.kubelet.image = "ghcr.io/siderolabs/kubelet:v1.28.0"
machine.kubelet.defaultRuntimeSeccompProfileEnabled = true
machine.kubelet.disableManifestsDirectory = true
machine.install.wipe = false
machine.install.grubUseUKICmdline = true
machine.features.diskQuotaSupport = true
machine.features.kubePrism.enabled = true
machine.features.kubePrism.port = 7445
machine.features.hostDNS.enabled = true
machine.features.hostDNS.forwardKubeDNSToHost = true
"""
_CLUSTER_HEAD = """
cluster.id = *
cluster.secret = *
cluster.controlPlane.endpoint = "https://base:6443"
cluster.clusterName = "base"
cluster.network.dnsDomain = "cluster.local"
cluster.network.podSubnets = ["10.244.0.0/16"]
cluster.network.serviceSubnets = ["10.96.0.0/12"]
cluster.token = *
"""
_DISCOVERY = """
cluster.discovery.enabled = true
cluster.discovery.registries.kubernetes.disabled = true
cluster.discovery.registries.service = {}
"""
_HOSTNAME_DOCUMENT = """
apiVersion = "v1alpha1"
kind = "HostnameConfig"
auto = "stable"
"""

GOLDEN: dict[str, tuple[str, str]] = {
    "controlplane": (
        """
version = "v1alpha1"
debug = false
persist = true
machine.type = "controlplane"
machine.token = *
machine.ca.crt = *
machine.ca.key = *
"""
        + _COMMON_MACHINE
        + """
machine.nodeLabels.node.kubernetes.io/exclude-from-external-load-balancers = ""
"""
        + _CLUSTER_HEAD
        + """
cluster.secretboxEncryptionSecret = *
cluster.ca.crt = *
cluster.ca.key = *
cluster.aggregatorCA.crt = *
cluster.aggregatorCA.key = *
cluster.serviceAccount.key = *
cluster.apiServer.image = "registry.k8s.io/kube-apiserver:v1.28.0"
cluster.apiServer.admissionControl[0].name = "PodSecurity"
{AC}.apiVersion = "pod-security.admission.config.k8s.io/v1alpha1"
{AC}.defaults.audit = "restricted"
{AC}.defaults.audit-version = "latest"
{AC}.defaults.enforce = "baseline"
{AC}.defaults.enforce-version = "latest"
{AC}.defaults.warn = "restricted"
{AC}.defaults.warn-version = "latest"
{AC}.exemptions.namespaces = ["kube-system"]
{AC}.exemptions.runtimeClasses = []
{AC}.exemptions.usernames = []
{AC}.kind = "PodSecurityConfiguration"
cluster.apiServer.auditPolicy.apiVersion = "audit.k8s.io/v1"
cluster.apiServer.auditPolicy.kind = "Policy"
cluster.apiServer.auditPolicy.rules[0].level = "Metadata"
cluster.controllerManager.image = "registry.k8s.io/kube-controller-manager:v1.28.0"
cluster.proxy.image = "registry.k8s.io/kube-proxy:v1.28.0"
cluster.scheduler.image = "registry.k8s.io/kube-scheduler:v1.28.0"
"""
        + _DISCOVERY
        + """
cluster.etcd.ca.crt = *
cluster.etcd.ca.key = *
""",
        _HOSTNAME_DOCUMENT,
    ),
    "worker": (
        """
version = "v1alpha1"
debug = false
persist = true
machine.type = "worker"
machine.token = *
machine.ca.crt = *
machine.ca.key = ""
"""
        + _COMMON_MACHINE
        + _CLUSTER_HEAD
        + """
cluster.ca.crt = *
cluster.ca.key = ""
"""
        + _DISCOVERY,
        _HOSTNAME_DOCUMENT,
    ),
}


def _flatten(value: Any, path: str = "") -> list[str]:
    """Ordered ``path = value`` lines; maps and lists of maps are walked, other lists kept."""
    if isinstance(value, dict) and value:
        lines: list[str] = []
        for key, item in value.items():
            lines += _flatten(item, f"{path}.{key}" if path else str(key))
        return lines
    if isinstance(value, list) and any(isinstance(item, dict) for item in value):
        return [line for i, item in enumerate(value) for line in _flatten(item, f"{path}[{i}]")]
    if path in SECRET_LEAVES and value != "":
        return [f"{path} = {MASKED}"]
    return [f"{path} = {json.dumps(value)}"]


def _lines(text: str) -> list[str]:
    text = text.replace("{AC}", "cluster.apiServer.admissionControl[0].configuration")
    return [line for line in text.strip().splitlines() if line]


@pytest.mark.parametrize("role", ["controlplane", "worker"])
def test_generated_config_has_the_v1_13_golden_structure(role: Role) -> None:
    generated = mc.generate_config(
        cluster_name="base", role=role, endpoint="https://base:6443", kubernetes_version="1.28.0"
    )
    documents = list(yaml.safe_load_all(generated))
    assert [_flatten(document) for document in documents] == [_lines(text) for text in GOLDEN[role]]


@pytest.mark.parametrize("role", ["controlplane", "worker"])
def test_generated_config_leaves_out_what_v1_13_hides(role: Role) -> None:
    text = mc.generate_config(
        cluster_name="base", role=role, endpoint="https://base:6443", kubernetes_version="1.28.0"
    ).decode()
    for hidden in (
        "rbac:",
        "apidCheckExtKeyUsage:",
        "stableHostname:",
        "network: {}",
        "disablePodSecurityPolicy:",
        "extraManifests:",
        "inlineManifests:",
    ):
        assert hidden not in text
