"""Who an emulated node is (:class:`NodeIdentity`), what Kubernetes shows of it
(:class:`KubeNodeInfo`), what it asks of its surroundings (:class:`NodeHooks`), and the ids
derived from its name. Plain data, no behaviour of the node."""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "KubeNodeInfo",
    "NodeHooks",
    "NodeIdentity",
    "Role",
    "etcd_member_id",
    "node_id_for",
    "node_pod_cidr",
    "with_node_id",
]

Role = Literal["controlplane", "worker"]


@dataclass(frozen=True)
class NodeIdentity:
    hostname: str
    role: Role
    address: str
    prefix_length: int = 24
    platform: str = "container"
    cluster_name: str = "talos-default"
    node_id: str = ""
    kubernetes_version: str = "1.36.0"
    extensions: tuple[str, ...] = ()  # system extension names (ExtensionStatuses)
    extension_services: tuple[str, ...] = ()  # ext-<name> services
    domain: str = ""  # DNS domain (DHCP, cloud metadata); "" for none

    @property
    def fqdn(self) -> str:
        """``host.domain`` when the node has a domain, else the short hostname."""
        return f"{self.hostname}.{self.domain}" if self.domain else self.hostname

    @property
    def controlplane(self) -> bool:
        return self.role == "controlplane"


@dataclass(frozen=True)
class KubeNodeInfo:
    """What the emulated Kubernetes API shows for this node.

    ``ready`` is Ready=True. ``status_unknown`` means the node controller gave up on a
    kubelet that stopped posting status: every condition reads Unknown (then ``ready`` is
    false), last heard of at ``last_heartbeat`` and turned Unknown at ``unknown_since``.
    """

    name: str
    address: str
    labels: dict[str, str]
    ready: bool
    controlplane: bool
    kubelet_version: str
    os_image: str
    pod_cidr: str
    created: float
    status_unknown: bool = False
    last_heartbeat: float | None = None  # emulated Unix seconds
    unknown_since: float | None = None
    ready_since: float | None = None  # Ready's lastTransitionTime when it is not ``created``
    pressure: tuple[str, ...] = ()  # the pressure conditions that are True
    unschedulable: bool = False  # cordoned (spec.unschedulable)


class NodeHooks:
    """What the node asks of its surroundings; the cluster overrides these."""

    def api_down(self) -> None:
        """The node stops serving (reboot, shutdown, reset): close its listeners."""

    def api_up(self) -> None:
        """The node serves again after a reboot."""

    def kube_changed(self) -> None:
        """The node's Kubernetes Node object changed (labels, readiness)."""


def node_id_for(hostname: str, cluster: str) -> str:
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    number = int.from_bytes(hashlib.sha256(f"{cluster}/{hostname}".encode()).digest(), "big")
    chars: list[str] = []
    while number and len(chars) < 43:
        number, digit = divmod(number, 62)
        chars.append(alphabet[digit])
    return "".join(chars)


def etcd_member_id(hostname: str) -> int:
    return int.from_bytes(hashlib.sha256(hostname.encode()).digest()[:8], "big") >> 1


def with_node_id(identity: NodeIdentity) -> NodeIdentity:
    return replace(identity, node_id=node_id_for(identity.hostname, identity.cluster_name))


def node_pod_cidr(pod_subnet: str, address: str) -> str:
    """A /24 of the pod subnet per node, picked by the node address (like kube-controller)."""
    try:
        network = ipaddress.ip_network(pod_subnet, strict=False)
        index = int(ipaddress.ip_address(address)) & 0xFF
        subnets = network.subnets(new_prefix=24) if network.prefixlen <= 24 else iter([network])
        for position, subnet in enumerate(subnets):
            if position == index:
                return str(subnet)
        return str(network)
    except ValueError:
        return pod_subnet
