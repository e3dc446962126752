"""The machine configs of an emulated cluster's nodes, as ``talosctl gen config`` and an
operator's patches make them, and the node identities they are made for.

Configs differ per node only by hostname (and the cidr-overlap fault): one template is
generated per kind and the hostname filled in, which keeps 50-node starts fast.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Literal

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.cluster import desired
from pytest_talos.emulator.faults.variants import Variant, VariantSet
from pytest_talos.emulator.node.identity import NodeIdentity
from pytest_talos.errors import ConfigError
from pytest_talos.patches import apply_patches
from pytest_talos.releases import release_of

__all__ = [
    "HOSTNAME_PLACEHOLDER",
    "VARIANT_PATCH_ROLES",
    "NodeConfigs",
    "check_arguments",
    "node_identities",
    "variant_patches",
]

HOSTNAME_PLACEHOLDER = "emulated-node-hostname-placeholder"
Role = Literal["controlplane", "worker"]


def variant_patches(variants: VariantSet) -> list[tuple[str, str]]:
    """``(variant, patch)`` for the variants that live in the machine config."""
    patches: list[tuple[str, str]] = []
    if variants.on(Variant.KUBE_PROXY_DISABLED):
        patches.append((Variant.KUBE_PROXY_DISABLED, "cluster:\n  proxy:\n    disabled: true\n"))
    if variants.on(Variant.DISCOVERY_DISABLED):
        patches.append((Variant.DISCOVERY_DISABLED, "cluster:\n  discovery:\n    enabled: false\n"))
    if variants.on(Variant.REGISTER_WITH_FQDN):
        fqdn = "machine:\n  kubelet:\n    registerWithFQDN: true\n"
        patches.append((Variant.REGISTER_WITH_FQDN, fqdn))
    if variants.on(Variant.KUBESPAN):  # a document of its own (pkg/.../network/kubespan.go)
        kubespan = "apiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: true\n"
        patches.append((Variant.KUBESPAN, kubespan))
    if variants.on(Variant.METRICS_EXPOSED):  # the usual kube-prometheus-stack recipe
        patches.append((Variant.METRICS_EXPOSED, METRICS_EXPOSED_PATCH))
    if variants.on(Variant.SIDEROLINK):  # pkg/machinery/config/types/siderolink/siderolink.go
        patches.append((Variant.SIDEROLINK, SIDEROLINK_PATCH))
    if variants.on(Variant.CILIUM):  # Talos's Cilium guide: no built-in CNI, no kube-proxy
        patches.append((Variant.CILIUM, CILIUM_PATCH))
    if variants.on(Variant.WIREGUARD):  # pkg/machinery/config/types/network/wireguard.go
        patches.append((Variant.WIREGUARD, WIREGUARD_PATCH))
    return patches


METRICS_EXPOSED_PATCH = """cluster:
  etcd:
    extraArgs:
      listen-metrics-urls: http://0.0.0.0:2381
  controllerManager:
    extraArgs:
      bind-address: 0.0.0.0
  scheduler:
    extraArgs:
      bind-address: 0.0.0.0
"""
CILIUM_PATCH = """cluster:
  network:
    cni:
      name: none
  proxy:
    disabled: true
"""
SIDEROLINK_PATCH = """apiVersion: v1alpha1
kind: SideroLinkConfig
apiUrl: https://omni.cluster.example:8090/?jointoken=emulated-join-token
"""
# A peer's public key and the node's private key are stand-ins (32 bytes, base64), not keys
# anyone uses; the link has no addresses of its own (the config does not need any).
WIREGUARD_PATCH = """apiVersion: v1alpha1
kind: WireguardConfig
name: wg0
privateKey: ZW11bGF0ZWQtd2lyZWd1YXJkLXByaXZhdGUta2V5ISE=
listenPort: 51111
peers:
  - publicKey: ZW11bGF0ZWQtd2lyZWd1YXJkLXBlZXItcHVibGljISE=
    endpoint: 192.0.2.10:51111
    allowedIPs:
      - 192.168.250.0/24
"""


# Variants whose patch only control planes get (the rest patch every node): Talos refuses
# cluster.etcd on a worker ("etcd config is only allowed on control plane machines").
VARIANT_PATCH_ROLES: dict[str, tuple[str, ...]] = {Variant.METRICS_EXPOSED: ("controlplane",)}


def _with_variant_patches(config: bytes, variants: VariantSet, role: str) -> bytes:
    """The config as an operator patches it for the variants that live in the machine config."""
    patches = [
        patch
        for name, patch in variant_patches(variants)
        if role in VARIANT_PATCH_ROLES.get(name, (role,))
    ]
    return apply_patches(config, patches) if patches else config


class NodeConfigs:
    """Generates each node's machine config; keeps the base config of each role."""

    def __init__(
        self,
        *,
        cluster_name: str,
        kubernetes_version: str,
        talos_version: str,
        platform: str,
        variants: VariantSet,
    ) -> None:
        self._cluster_name = cluster_name
        self._kubernetes_version = kubernetes_version
        self._talos_version = talos_version
        self._platform = platform
        self._variants = variants
        self._templates: dict[tuple[str, bool], bytes] = {}
        self.bases: dict[str, bytes] = {}  # role -> generated base (write_desired)

    def config_for(
        self,
        ident: NodeIdentity,
        *,
        endpoint: str,
        ca_pem: bytes,
        kube_ca_pem: bytes,
        cidr_overlap: bool,
        drift: bool,
    ) -> bytes:
        key = (ident.role, cidr_overlap)
        template = self._templates.get(key)
        if template is None:
            pods: Sequence[str] = mc.DEFAULT_POD_SUBNETS
            if cidr_overlap:
                pods = ("127.0.0.0/8",)  # fault cidr-overlap: the pod CIDR covers node addresses
            template = mc.generate_config(
                cluster_name=self._cluster_name,
                hostname=HOSTNAME_PLACEHOLDER,
                role=ident.role,
                address=ident.address,
                endpoint=endpoint,
                pod_subnets=pods,
                kubernetes_version=self._kubernetes_version,
                # talosctl cluster create: docker sets no install image, qemu (metal) does
                # (clusterops/configmaker/internal/makers/{docker,qemu}.go).
                install_image=(
                    f"ghcr.io/siderolabs/installer:{self._talos_version}"
                    if self._platform == "metal"
                    else None
                ),
                ca_crt_pem=ca_pem,
                kubernetes_ca_crt_pem=kube_ca_pem,
                security_profile=release_of(self._talos_version).release.has_sandboxd,
            )
            self.bases.setdefault(ident.role, template)
            template = _with_variant_patches(template, self._variants, ident.role)
            self._templates[key] = template
        config = template.replace(HOSTNAME_PLACEHOLDER.encode(), ident.hostname.encode())
        if drift:  # fault config-drift
            config = apply_patches(config, [desired.CONFIG_DRIFT_PATCH])
        return config


def node_identities(
    subnet: ipaddress.IPv4Network,
    *,
    controlplanes: int,
    workers: int,
    name: str,
    platform: str,
    kubernetes_version: str,
    extensions: tuple[str, ...],
    extension_services: tuple[str, ...],
    domain: str,
) -> list[NodeIdentity]:
    """The nodes, control planes first, on ``.2`` onwards of the subnet (like talosctl's
    ``10.5.0.2``), named ``<cluster>-<role>-<n>``."""
    controlplane: Role = "controlplane"
    worker: Role = "worker"
    roles = [controlplane] * controlplanes + [worker] * workers
    counters: dict[str, int] = {"controlplane": 0, "worker": 0}
    identities = []
    for index, role in enumerate(roles):
        counters[role] += 1
        identities.append(
            NodeIdentity(
                hostname=f"{name}-{role}-{counters[role]}",
                role=role,
                address=str(subnet[2 + index]),
                prefix_length=subnet.prefixlen,
                platform=platform,
                cluster_name=name,
                kubernetes_version=kubernetes_version,
                extensions=extensions,
                extension_services=extension_services,
                domain=domain,
            )
        )
    return identities


def check_arguments(controlplanes: int, workers: int, time_scale: float, platform: str) -> None:
    if controlplanes < 1:
        raise ConfigError(
            f"an emulated cluster needs at least one control plane, not "
            f"{controlplanes}; pass controlplanes=1 or more"
        )
    if workers < 0 or controlplanes + workers > 250:
        raise ConfigError(
            f"cannot emulate {controlplanes} control planes and {workers} workers; "
            "use 0 or more workers and at most 250 nodes in total"
        )
    if not time_scale > 0:
        raise ConfigError(f"time_scale must be a positive number, not {time_scale!r}")
    if platform not in ("container", "metal"):
        raise ConfigError(f"platform must be 'container' or 'metal', not {platform!r}")
