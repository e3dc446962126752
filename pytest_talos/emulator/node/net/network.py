"""The network truth of one emulated node: its links, their addresses, and NodeAddresses.

Plain Python, no gRPC. The shapes follow Talos v1.13.9:

* ``LinkStatuses.net.talos.dev`` — one per kernel link, id = the link name; spec fields as
  ``pkg/machinery/resources/network/link_status.go`` (filled by
  ``internal/app/machined/pkg/controllers/network/link_status.go`` from rtnetlink/ethtool).
* ``AddressStatuses.net.talos.dev`` — one per kernel address, id ``<link>/<address>``
  (``pkg/machinery/resources/network/network.go`` AddressID); spec as ``address_status.go``.
* ``NodeAddresses.net.talos.dev`` — ids ``default``, ``current``, ``routed``,
  ``accumulative`` and the filtered ``<id>-no-k8s`` / ``<id>-only-k8s``
  (``controllers/network/node_address.go``, filters from ``controllers/k8s/address_filter.go``).

A node has ``lo`` and ``eth0``; once Flannel runs (the default CNI) it adds ``flannel.1``
(vxlan, ``<pod block>.0/32``) and, on a node that runs a pod on the pod network, the ``cni0``
bridge (``<pod block>.1/24``) with one veth per pod. ``current`` then holds the CNI addresses
too — which is why Talos keeps the ``-no-k8s`` filter.

The emulator's node address is a 127.0.0.0/8 stand-in for a LAN address (Linux routes all of
127/8 to loopback, so nodes need no privileges). It sits on ``eth0`` with scope global and is
treated as the LAN address it stands for; only addresses on the loopback link count as
loopback here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.cosi.store import ResourceStore
from pytest_talos.emulator.node.net.links import (
    COREDNS_REPLICAS,
    Address,
    Link,
    cni_links,
    host_links,
    wireguard_link_items,
)
from pytest_talos.emulator.node.net.wireguard import WireguardLink

__all__ = [
    "COREDNS_REPLICAS",
    "Address",
    "Link",
    "NodeAddressSet",
    "NodeNetwork",
    "cni_links",
    "host_links",
    "node_addresses",
]

# ---- NodeAddresses (controllers/network/node_address.go) ---------------------------------


def _sort_key(prefix: str) -> tuple[int, int, int]:
    """ComparePrefixesLegacy (sort algorithm v1): by address (IPv4 first), then length."""
    iface = ipaddress.ip_interface(prefix)
    return (iface.version, int(iface.ip), iface.network.prefixlen)


def _is_siderolink(prefix: str) -> bool:
    packed = ipaddress.ip_interface(prefix).ip.packed
    return len(packed) == 16 and packed[0] == 0xFD and packed[7] == 0x03


def _usable(address: Address) -> bool:
    """The filter of node_address.go: scope global/site, not loopback/multicast/link-local."""
    if address.scope not in ("global", "site"):
        return False
    ip = address.interface.ip
    on_loopback = address.link.type == "loopback"  # see the module docstring
    return not (on_loopback or ip.is_multicast or ip.is_link_local)


@dataclass(frozen=True)
class NodeAddressSet:
    """The NodeAddresses resources of a node: id -> prefixes in their order."""

    by_id: Mapping[str, tuple[str, ...]]

    @property
    def default(self) -> str | None:
        found = self.by_id.get("default", ())
        return found[0] if found else None

    def get(self, id_: str) -> tuple[str, ...]:
        return self.by_id.get(id_, ())


def _filtered(
    prefixes: Iterable[str], *, include: Sequence[str], exclude: Sequence[str]
) -> tuple[str, ...]:
    """addressutil.FilterIPs: keep IPs inside ``include`` (if any), drop those in ``exclude``."""
    inc = [ipaddress.ip_network(c, strict=False) for c in include]
    exc = [ipaddress.ip_network(c, strict=False) for c in exclude]

    def contains(nets: list[Any], ip: Any) -> bool:
        return any(ip.version == net.version and ip in net for net in nets)

    kept = []
    for prefix in prefixes:
        ip = ipaddress.ip_interface(prefix).ip
        if inc and not contains(inc, ip):
            continue
        if not contains(exc, ip):
            kept.append(prefix)
    return tuple(kept)


def node_addresses(
    items: Iterable[Address | Link],
    *,
    k8s_subnets: Sequence[str],
    previous: NodeAddressSet | None = None,
) -> NodeAddressSet:
    """NodeAddresses from the node's links and addresses.

    ``default`` is the first usable address (links sorted by name) and is kept while it is
    still current; ``accumulative`` never forgets an address; ``k8s_subnets`` (pod and
    service CIDRs from the config plus the Node's podCIDRs) make the ``-no-k8s`` and
    ``-only-k8s`` variants of current, routed and accumulative.
    """
    addresses = sorted(
        (a for a in items if isinstance(a, Address) and _usable(a)),
        key=lambda a: (a.link.name, _sort_key(a.prefix)),
    )
    current = tuple(
        sorted(dict.fromkeys(str(a.interface) for a in addresses if a.link.up), key=_sort_key)
    )
    # routed: current without SideroLink's addresses (network.NotSideroLinkIP, ula.go:
    # fd.. with byte 7 = ULASideroLink); no external (cloud) addresses on an emulated node
    routed = tuple(p for p in current if not _is_siderolink(p))
    old = previous.by_id if previous else {}
    accumulative = tuple(
        sorted(
            {*old.get("accumulative", ()), *(str(a.interface) for a in addresses)}, key=_sort_key
        )
    )
    default = previous.default if previous and previous.default in current else None
    if default is None and addresses:
        default = str(addresses[0].interface)
    by_id: dict[str, tuple[str, ...]] = {}
    if default is not None:
        by_id["default"] = (default,)
    by_id.update(current=current, routed=routed, accumulative=accumulative)
    for base in ("current", "routed", "accumulative"):
        # accumulative-<filter> accumulates too, which here is the filter of accumulative
        by_id[f"{base}-no-k8s"] = _filtered(by_id[base], include=(), exclude=k8s_subnets)
        by_id[f"{base}-only-k8s"] = _filtered(by_id[base], include=k8s_subnets, exclude=())
    return NodeAddressSet(by_id)


# ---- the resources ------------------------------------------------------------------------

OWNER_LINKS = "network.LinkStatusController"
OWNER_ADDRESSES = "network.AddressStatusController"
OWNER_NODE_ADDRESSES = "network.NodeAddressController"


class NodeNetwork:
    """The links and addresses of one booted node, kept in its resource store.

    ``publish`` writes LinkStatuses, AddressStatuses and NodeAddresses from the links the
    node has; ``start_cni`` adds Flannel's links (they stay until the node reboots, as the
    kernel keeps them when a pod or kubelet stops).
    """

    def __init__(
        self,
        store: ResourceStore,
        *,
        address: str,
        prefix_length: int,
        platform: str,
        wireguard: Sequence[WireguardLink] = (),
    ) -> None:
        self._store = store
        self._seed = address
        self._items = host_links(address=address, prefix_length=prefix_length, platform=platform)
        # controllers/network/link_config.go, siderolink/manager.go: the WireGuard links
        self._items += wireguard_link_items(wireguard, 1 + len(self._links()))
        self._addresses: NodeAddressSet | None = None
        self.cni_up = False

    @property
    def items(self) -> tuple[Address | Link, ...]:
        return tuple(self._items)

    def addresses(self, id_: str) -> tuple[str, ...]:
        """The prefixes of NodeAddresses ``id_`` (e.g. ``routed-no-k8s``)."""
        return self._addresses.get(id_) if self._addresses else ()

    def _links(self) -> list[Link]:
        return [item for item in self._items if isinstance(item, Link)]

    def start_cni(self, *, pod_block: str, pods: int, k8s_subnets: Sequence[str]) -> None:
        if self.cni_up:
            return
        self.cni_up = True
        first = 1 + max(item.index for item in self._items if isinstance(item, Link))
        self._items += cni_links(pod_block=pod_block, pods=pods, seed=self._seed, first_index=first)
        self.publish(k8s_subnets)

    def publish(self, k8s_subnets: Sequence[str]) -> None:
        for item in self._items:
            if isinstance(item, Link):
                self._store.put(
                    "network", T.LINK_STATUSES, item.name, item.spec(), owner=OWNER_LINKS
                )
            else:
                self._store.put(
                    "network", T.ADDRESS_STATUSES, item.id, item.spec(), owner=OWNER_ADDRESSES
                )
        self._addresses = node_addresses(
            self._items, k8s_subnets=k8s_subnets, previous=self._addresses
        )
        for id_, prefixes in self._addresses.by_id.items():
            spec = {"addresses": list(prefixes), "sortAlgorithm": "v1"}
            self._store.put("network", T.NODE_ADDRESSES, id_, spec, owner=OWNER_NODE_ADDRESSES)
