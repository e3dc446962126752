"""A node's own addresses, without the ones its CNI put on it.

``NodeAddresses/current`` cannot be used for this: Talos puts every scope-global address of
every link that is up there (``controllers/network/node_address.go``), the CNI's too — with
Flannel ``flannel.1`` holds ``<pod block>.0/32`` and ``cni0`` ``<pod block>.1/24``, addresses
from the pod CIDR on every healthy node. Its ``-no-k8s`` filter
(``controllers/k8s/address_filter.go``) drops every address inside the pod and service CIDRs,
which is exactly the overlap a CIDR check looks for. So the addresses are read from
``AddressStatuses`` and joined with ``LinkStatuses``, and the links a CNI (or kube-proxy)
creates are left out:

* by name: Flannel ``flannel.*`` and ``cni0``, Cilium ``cilium_*`` and ``lxc*``, Calico
  ``cali*``, ``vxlan.calico``, ``vxlan-v6.calico`` and ``tunl0``, kube-router
  ``kube-bridge``, kubenet ``cbr0``, kube-proxy's IPVS ``kube-ipvs0``, NodeLocal DNSCache
  ``nodelocaldns``;
* by kind: ``vxlan`` and ``dummy`` (overlay and service-address devices);
* a ``veth`` enslaved to a bridge (a pod's end) — but not a free ``veth``: in a Docker
  container (Talos's container mode) ``eth0`` itself is a veth and carries the node address;
* a ``bridge`` none of whose ports is a NIC, bond or VLAN — a bridge over a NIC carries the
  host network (bridged metal nodes have their address there).

The address rules are node_address.go's: scope global or site, not multicast, not link-local,
and nothing on the loopback link; only links that are up (operational state up or unknown,
and carrier on a physical NIC).
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_talos.cluster import read_each
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode

__all__ = ["CNI_LINK_NAMES", "AddressBook", "NodeAddressReport", "host_addresses"]

ADDRESSES = ("AddressStatuses.net.talos.dev", "network")
LINKS = ("LinkStatuses.net.talos.dev", "network")
CNI_LINK_NAMES = (
    "flannel.*",
    "cni0",
    "cilium_*",
    "lxc*",
    "cali*",
    "vxlan.calico",
    "vxlan-v6.calico",
    "tunl0",
    "kube-bridge",
    "cbr0",
    "kube-ipvs0",
    "nodelocaldns",
)
_CNI_KINDS = frozenset({"vxlan", "dummy"})
_UPLINK_KINDS = frozenset({"", "bond", "vlan"})  # what a bridge over the host network has


@dataclass(frozen=True)
class NodeAddressReport:
    """The addresses kept, and those left out with the reason (evidence)."""

    kept: tuple[str, ...]
    skipped: Mapping[str, str] = field(default_factory=dict)


def _spec(resource: Any) -> Mapping[str, Any]:
    spec = resource.spec
    return spec if isinstance(spec, Mapping) else {}


def _cni_link(
    name: str, link: Mapping[str, Any] | None, links: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """Why the link is a CNI's, or None for a link of the host network."""
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in CNI_LINK_NAMES):
        return "CNI link"
    if link is None:
        return None
    kind = str(link.get("kind") or "")
    if kind in _CNI_KINDS:
        return f"{kind} link"
    if kind == "veth" and link.get("masterIndex"):
        return "pod veth"
    if kind == "bridge":
        index = link.get("index")
        ports = [p for p in links.values() if p.get("masterIndex") == index]
        if not any(str(p.get("kind") or "") in _UPLINK_KINDS for p in ports):
            return "bridge without an uplink"
    return None


def _link_up(link: Mapping[str, Any] | None) -> bool:
    if link is None:
        return True  # not listed (yet): judge the address alone
    if str(link.get("operationalState") or "") not in ("up", "unknown"):
        return False
    physical = link.get("type") == "ether" and not link.get("kind")
    return not physical or bool(link.get("linkState"))


def _address_reason(spec: Mapping[str, Any], link: Mapping[str, Any] | None) -> str | None:
    """Why the address is not a node address, or None when it is one."""
    if str(spec.get("scope") or "global") not in ("global", "site"):
        return f"scope {spec.get('scope')}"
    if (link is not None and link.get("type") == "loopback") or spec.get("linkName") == "lo":
        return "loopback link"
    ip = ipaddress.ip_interface(str(spec.get("address"))).ip
    if ip.is_multicast or ip.is_link_local:
        return "link-local or multicast"
    if not _link_up(link):
        return "link down"
    return None


def host_addresses(addresses: Iterable[Any], links: Iterable[Any]) -> NodeAddressReport:
    """The node's addresses (``10.5.0.2/24``) from its AddressStatuses and LinkStatuses."""
    by_name = {str(link.id): _spec(link) for link in links}
    kept: list[str] = []
    skipped: dict[str, str] = {}
    for resource in addresses:
        spec = _spec(resource)
        name = str(spec.get("linkName") or str(resource.id).split("/", 1)[0])
        link = by_name.get(name)
        reason = _cni_link(name, link, by_name) or _address_reason(spec, link)
        if reason is None:
            kept.append(str(spec.get("address")))
        else:
            skipped[str(resource.id)] = reason
    return NodeAddressReport(tuple(kept), skipped)


class AddressBook:
    """Each node's addresses, read once per run however many checks ask."""

    def __init__(self) -> None:
        self._found: dict[str, NodeAddressReport] = {}
        self._errors: dict[str, TalosError] = {}  # the last read's, handed out once

    def of(self, node: TalosNode) -> NodeAddressReport:
        report = self._found.get(node.address)
        if report is None:
            report = host_addresses(node.resources(*ADDRESSES), node.resources(*LINKS))
            self._found[node.address] = report
        return report

    def of_all(self, nodes: Sequence[TalosNode]) -> dict[str, NodeAddressReport | TalosError]:
        """Every node's addresses, or the error its read met (by address): the nodes not
        read yet are read at once (a node after another costs a fleet's round trips)."""
        read_each([node for node in nodes if node.address not in self._found], self._try)
        found: dict[str, NodeAddressReport | TalosError] = {}
        for node in nodes:
            error = self._errors.pop(node.address, None)
            found[node.address] = error if error is not None else self._found[node.address]
        return found

    def _try(self, node: TalosNode) -> None:
        try:
            self.of(node)
        except TalosError as exc:  # not kept: the next ask reads the node again
            self._errors[node.address] = exc
