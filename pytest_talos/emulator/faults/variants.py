"""Healthy variants: shapes a real, healthy Talos v1.13.9 cluster can have.

A variant is not a fault. Every conformance check must pass on every variant, because each one
is something a correct node does on some real cluster: a node with a DNS domain (cloud, DHCP),
discovery switched off or unreachable, a pod whose entrypoint is a shell, kube-proxy disabled
(a CNI that replaces it), bare metal instead of a container, system extensions installed.
The fault matrix runs the suite against each variant and requires zero failures, which is how a
check that would fail a healthy real node is caught before a user sees it.

A variant changes the emulated node the way the real cluster differs, at one of five seams:
the generated machine config (``kube-proxy-disabled``, ``discovery-disabled``,
``register-with-fqdn``, ``kubespan``, ``metrics-exposed``, ``siderolink``,
``wireguard``, ``cilium``), the node's identity (``domain``, ``metal``, ``extensions``), its
runtime state (``discovery-unreachable``, ``pod-shell``, ``clock-stepped``), the cluster's
shape (``three-control-planes``) or the network between this machine and the nodes
(``endpoint-only``).
Behaviour that follows from a variant is modelled where the healthy behaviour is, guarded
by ``variants.on(Variant.X)``; where it follows from the machine config (proxy, discovery,
the Kubernetes node name, KubeSpan), the node reads its config, so a user's own config gets
the same behaviour.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytest_talos.errors import ConfigError

__all__ = [
    "CLOCK_STEPPED_AHEAD",
    "DEFAULT_DOMAIN",
    "DEFAULT_EXTENSIONS",
    "HA_CONTROLPLANES",
    "VARIANTS",
    "Variant",
    "VariantSet",
    "describe_variants",
    "resolve_variants",
    "variant_names",
]


class Variant(enum.StrEnum):
    DOMAIN = "domain"
    DISCOVERY_DISABLED = "discovery-disabled"
    DISCOVERY_UNREACHABLE = "discovery-unreachable"
    POD_SHELL = "pod-shell"
    KUBE_PROXY_DISABLED = "kube-proxy-disabled"
    METAL = "metal"
    EXTENSIONS = "extensions"
    REGISTER_WITH_FQDN = "register-with-fqdn"
    KUBESPAN = "kubespan"
    CLOCK_STEPPED = "clock-stepped"
    THREE_CONTROL_PLANES = "three-control-planes"
    ENDPOINT_ONLY = "endpoint-only"
    METRICS_EXPOSED = "metrics-exposed"
    SIDEROLINK = "siderolink"
    WIREGUARD = "wireguard"
    CILIUM = "cilium"


# The domain a node gets from DHCP or a cloud's metadata when the variant asks for one.
DEFAULT_DOMAIN = "cluster.example"
# System extensions the `extensions` variant installs (names of real official extensions).
DEFAULT_EXTENSIONS = ("iscsi-tools", "qemu-guest-agent")
# Seconds the `clock-stepped` nodes' clocks run ahead until their first time sync: a
# real-time clock kept in local time two hours east of UTC (hypervisors, dual boot).
CLOCK_STEPPED_AHEAD = 2 * 3600.0
# The control planes of the `three-control-planes` variant: the smallest etcd cluster that
# survives the loss of a member (each control plane runs an etcd member:
# internal/app/machined/pkg/system/services/etcd.go).
HA_CONTROLPLANES = 3

VARIANTS: Mapping[Variant, str] = {
    Variant.DOMAIN: (
        f"every node has the DNS domain {DEFAULT_DOMAIN!r} (as from DHCP or a cloud): "
        "Members carry the FQDN, the Hostname API and etcd the short name"
    ),
    Variant.DISCOVERY_DISABLED: (
        "cluster.discovery.enabled is false in the machine config: there are no Members"
    ),
    Variant.DISCOVERY_UNREACHABLE: (
        "the discovery service cannot be reached: each node's Members list only itself"
    ),
    Variant.POD_SHELL: (
        "a pod whose entrypoint is /bin/sh runs on every node (under a containerd shim)"
    ),
    Variant.KUBE_PROXY_DISABLED: (
        "cluster.proxy.disabled is true in the machine config: no kube-proxy, no port 10256"
    ),
    Variant.METAL: (
        "the nodes run on bare metal (platform metal): SquashFS root, udevd, auditd, syslogd"
    ),
    Variant.EXTENSIONS: (
        "system extensions are installed (" + ", ".join(DEFAULT_EXTENSIONS) + "): the root "
        "is an overlay of SquashFS layers"
    ),
    Variant.REGISTER_WITH_FQDN: (
        f"every node has the DNS domain {DEFAULT_DOMAIN!r} and machine.kubelet.registerWithFQDN "
        "is true: the Kubernetes Node and the Nodename resource carry the FQDN, the Hostname "
        "API the short name"
    ),
    Variant.KUBESPAN: (
        "KubeSpan is enabled by a KubeSpanConfig document (the v1.13 way): every node has "
        "KubeSpan's WireGuard UDP listener on 51820 (the kubespan link itself is not modelled)"
    ),
    Variant.CLOCK_STEPPED: (
        "every node's clock is 2 h ahead at boot and steps back at its first time sync: "
        "the boot's first events and service histories carry later times than what follows "
        "(on metal: a container node keeps the host's clock)"
    ),
    Variant.THREE_CONTROL_PLANES: (
        f"the cluster has {HA_CONTROLPLANES} control planes (etcd with {HA_CONTROLPLANES} "
        "members) and the workers asked for (one by default): the highly available shape"
    ),
    Variant.ENDPOINT_ONLY: (
        "the workers are on a private network: this machine reaches only the control "
        "plane's apid (the endpoint), which forwards to them; their own addresses refuse "
        "every direct connection (apid 50000, kubelet, any port)"
    ),
    Variant.METRICS_EXPOSED: (
        "etcd's metrics (listen-metrics-urls http://0.0.0.0:2381) and kube-controller-manager's "
        "and kube-scheduler's secure ports (bind-address 0.0.0.0: 10257, 10259) on the node's "
        "addresses, through extraArgs in the generated config"
    ),
    Variant.SIDEROLINK: (
        "a SideroLinkConfig document (an Omni-managed node): every node has the siderolink "
        "WireGuard link, created without a listen port (the kernel binds a random UDP port), "
        "with its fdae:41e4:649b:9303::/64 address"
    ),
    Variant.CILIUM: (
        "Cilium as the CNI (cluster.network.cni.name none, cluster.proxy.disabled true): its "
        "agent pod runs on the host network of every node, under a k8s.io containerd shim, "
        "with TCP 4240 (health) and 4244 (Hubble) on every address and VXLAN on UDP 8472"
    ),
    Variant.WIREGUARD: (
        "a WireguardConfig document: every node has the wg0 WireGuard link, its device bound "
        "to the configured listenPort, UDP 51111"
    ),
}


def variant_names() -> list[str]:
    return sorted(str(variant) for variant in VARIANTS)


def describe_variants() -> str:
    """One line per variant: ``name  description`` (what ``--list-variants`` prints)."""
    width = max(len(name) for name in variant_names())
    return "\n".join(f"{name:<{width}}  {VARIANTS[Variant(name)]}" for name in variant_names())


def resolve_variants(names: Iterable[str | Variant]) -> frozenset[Variant]:
    """Validate variant names; an unknown one raises one clear :class:`ConfigError`."""
    resolved: set[Variant] = set()
    for item in names:
        try:
            resolved.add(Variant(str(item)))
        except ValueError:
            raise ConfigError(
                f"unknown emulator variant {str(item)!r}; choose from: "
                f"{', '.join(variant_names())} (python -m pytest_talos.emulator "
                "--list-variants describes them)"
            ) from None
    return frozenset(resolved)


@dataclass(frozen=True)
class VariantSet:
    """The healthy variants a cluster runs as, and the domain its nodes have ('' for none)."""

    variants: frozenset[Variant] = frozenset()
    domain: str = ""

    @classmethod
    def of(cls, names: Iterable[str | Variant], domain: str = "") -> VariantSet:
        variants = resolve_variants(names)
        if Variant.REGISTER_WITH_FQDN in variants:  # an FQDN needs a domain
            variants |= {Variant.DOMAIN}
        if Variant.CLOCK_STEPPED in variants:  # a container node keeps the host's clock:
            variants |= {Variant.METAL}  # controllers/time/sync.go never syncs there
        if Variant.DOMAIN in variants and not domain:
            domain = DEFAULT_DOMAIN
        if domain:
            variants |= {Variant.DOMAIN}
        return cls(variants, domain)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(str(variant) for variant in self.variants))

    def on(self, variant: Variant) -> bool:
        return variant in self.variants
