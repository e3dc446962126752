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

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_talos.emulator.resources import T
from pytest_talos.emulator.store import ResourceStore

__all__ = [
    "Address",
    "Link",
    "NodeAddressSet",
    "NodeNetwork",
    "cni_links",
    "host_links",
    "node_addresses",
]

_ETHER_FLAGS = "UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP"
_LOOPBACK_FLAGS = "UP,LOOPBACK,RUNNING,LOWER_UP"
FLANNEL_MTU = 1450  # flannel's vxlan backend: the host MTU minus the 50-byte VXLAN header
COREDNS_REPLICAS = 2  # the CoreDNS Deployment Talos installs (k8stemplates/coredns.go)
HOST_DNS_ADDRESS = "169.254.116.108/32"  # constants.HostDNSAddress, on lo (hostdns_config.go)


@dataclass(frozen=True)
class Link:
    """One kernel link as LinkStatus shows it."""

    name: str
    index: int
    type: str  # nethelpers.LinkType text: "ether", "loopback"
    kind: str  # rtnetlink link kind: "" for a physical NIC, "veth", "vxlan", "bridge"
    mtu: int
    flags: str
    hardware_addr: str
    broadcast_addr: str
    operational_state: str  # "up", "unknown", "down"
    link_state: bool  # ethtool carrier
    link_index: int = 0
    master_index: int = 0
    slave_kind: str = ""
    queue_disc: str = "noqueue"
    permanent_addr: str = ""
    driver: str = ""
    bus_path: str = ""
    speed_mbit: int = 0
    port: str = "Other"  # link_status.go: Other when ethtool has no link info
    duplex: str = "Unknown"

    @property
    def physical(self) -> bool:
        """LinkStatusSpec.Physical(): an Ethernet link without a kind (a real NIC)."""
        return self.type == "ether" and self.kind == ""

    @property
    def up(self) -> bool:
        """Up as node_address.go counts it: oper state up/unknown, and carrier if physical."""
        if self.operational_state not in ("up", "unknown"):
            return False
        return not self.physical or self.link_state

    def spec(self) -> dict[str, Any]:
        """The YAML spec, keys in LinkStatusSpec order, ``omitempty`` fields left out."""
        spec: dict[str, Any] = {
            "index": self.index,
            "type": self.type,
            "linkIndex": self.link_index,
            "flags": self.flags,
            "hardwareAddr": self.hardware_addr,
            "permanentAddr": self.permanent_addr,
            "broadcastAddr": self.broadcast_addr,
            "mtu": self.mtu,
            "queueDisc": self.queue_disc,
        }
        if self.master_index:
            spec["masterIndex"] = self.master_index
        spec.update(
            operationalState=self.operational_state, kind=self.kind, slaveKind=self.slave_kind
        )
        if self.bus_path:
            spec["busPath"] = self.bus_path
        if self.driver:
            spec["driver"] = self.driver
        spec["linkState"] = self.link_state
        if self.speed_mbit:
            spec["speedMbit"] = self.speed_mbit
        spec.update(port=self.port, duplex=self.duplex)
        return spec


@dataclass(frozen=True)
class Address:
    """One kernel address as AddressStatus shows it."""

    link: Link
    prefix: str  # "10.5.0.2/24"
    scope: str  # nethelpers.Scope text: "global", "link", "host"
    flags: str = "permanent"

    @property
    def interface(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        return ipaddress.ip_interface(self.prefix)

    @property
    def id(self) -> str:
        return f"{self.link.name}/{self.interface}"

    def spec(self) -> dict[str, Any]:
        iface = self.interface
        spec: dict[str, Any] = {"address": str(iface)}
        if iface.version == 4:
            spec["local"] = str(iface.ip)  # IFA_LOCAL: set for IPv4 only
            if iface.network.prefixlen < 31 and self.link.type != "loopback":
                spec["broadcast"] = str(iface.network.broadcast_address)
        spec.update(
            linkIndex=self.link.index,
            linkName=self.link.name,
            family="inet4" if iface.version == 4 else "inet6",
            scope=self.scope,
            flags=self.flags,
            priority=0,
        )
        return spec


def _mac(seed: str) -> str:
    """A stable locally administered unicast MAC for a virtual link."""
    raw = bytearray(hashlib.sha256(seed.encode()).digest()[:6])
    raw[0] = (raw[0] | 0x02) & 0xFE
    return ":".join(f"{b:02x}" for b in raw)


def _link_local(mac: str) -> str:
    """The EUI-64 fe80::/64 address the kernel gives a link with this MAC."""
    octets = [int(part, 16) for part in mac.split(":")]
    octets[0] ^= 0x02
    eui = [*octets[:3], 255, 254, *octets[3:]]
    value = (0xFE80 << 112) | int.from_bytes(bytes(eui), "big")
    return f"{ipaddress.IPv6Address(value)}/64"


def host_links(*, address: str, prefix_length: int, platform: str) -> list[Address | Link]:
    """``lo`` and ``eth0`` with their addresses, before any CNI runs.

    In a Docker container (platform ``container``) eth0 is the container end of a veth pair
    (kind ``veth``, Docker's ``02:42:<IPv4>`` MAC; no IPv6 link-local: INFERRED, Docker turns
    IPv6 off on IPv4-only networks). On metal it is a NIC: kind ``""``, carrier up.
    """
    lo = Link(
        "lo",
        1,
        "loopback",
        "",
        65536,
        _LOOPBACK_FLAGS,
        "00:00:00:00:00:00",
        "00:00:00:00:00:00",
        "unknown",
        False,
    )
    ip = ipaddress.ip_address(address)
    if platform == "container":
        mac = "02:42:" + ":".join(f"{b:02x}" for b in ip.packed[-4:])
        eth0 = Link(
            "eth0",
            2,
            "ether",
            "veth",
            1500,
            _ETHER_FLAGS,
            mac,
            "ff:ff:ff:ff:ff:ff",
            "up",
            True,
            driver="veth",
            speed_mbit=10000,
            port="TwistedPair",
            duplex="Full",
        )
    else:  # INFERRED: a virtio NIC as on a typical VM
        mac = _mac(f"eth0/{address}")
        eth0 = Link(
            "eth0",
            2,
            "ether",
            "",
            1500,
            _ETHER_FLAGS,
            mac,
            "ff:ff:ff:ff:ff:ff",
            "up",
            True,
            queue_disc="pfifo_fast",
            permanent_addr=mac,
            driver="virtio_net",
            bus_path="0000:00:03.0",
        )
    found: list[Address | Link] = [
        lo,
        Address(lo, "127.0.0.1/8", "host"),
        Address(lo, HOST_DNS_ADDRESS, "host"),
        Address(lo, "::1/128", "host"),
        eth0,
        Address(eth0, f"{address}/{prefix_length}", "global"),
    ]
    if platform != "container":
        found.append(Address(eth0, _link_local(mac), "link"))
    return found


def cni_links(
    *, pod_block: str, pods: int, seed: str, first_index: int = 3
) -> list[Address | Link]:
    """Flannel's links for a node whose pod block is ``pod_block`` (the Node's podCIDR).

    ``flannel.1`` (vxlan) holds ``<block>.0/32``; the bridge CNI plugin creates ``cni0``
    with ``<block>.1/<len>`` when the first pod on the pod network starts, and one veth per
    such pod enslaved to it (k8stemplates/flannel.go: flannel with the bridge plugin).
    """
    block = ipaddress.ip_network(pod_block, strict=False)
    vxlan_mac = _mac(f"flannel.1/{seed}")
    flannel = Link(
        "flannel.1",
        first_index,
        "ether",
        "vxlan",
        FLANNEL_MTU,
        _ETHER_FLAGS,
        vxlan_mac,
        "ff:ff:ff:ff:ff:ff",
        "unknown",
        True,
        driver="vxlan",
    )
    found: list[Address | Link] = [
        flannel,
        Address(flannel, f"{block.network_address}/{block.max_prefixlen}", "global"),
        Address(flannel, _link_local(vxlan_mac), "link"),
    ]
    if pods <= 0:
        return found
    bridge_mac = _mac(f"cni0/{seed}")
    bridge = Link(
        "cni0",
        first_index + 1,
        "ether",
        "bridge",
        FLANNEL_MTU,
        _ETHER_FLAGS,
        bridge_mac,
        "ff:ff:ff:ff:ff:ff",
        "up",
        True,
        driver="bridge",
    )
    found += [
        bridge,
        Address(bridge, f"{block.network_address + 1}/{block.prefixlen}", "global"),
        Address(bridge, _link_local(bridge_mac), "link"),
    ]
    for pod in range(pods):
        # the bridge plugin names the host end "veth" + 8 random hex digits
        name = "veth" + hashlib.sha256(f"{seed}/{pod}".encode()).hexdigest()[:8]
        mac = _mac(name)
        veth = Link(
            name,
            first_index + 2 + pod,
            "ether",
            "veth",
            FLANNEL_MTU,
            _ETHER_FLAGS,
            mac,
            "ff:ff:ff:ff:ff:ff",
            "up",
            True,
            master_index=bridge.index,
            slave_kind="bridge",
            driver="veth",
            speed_mbit=10000,
            port="TwistedPair",
            duplex="Full",
        )
        found += [veth, Address(veth, _link_local(mac), "link")]
    return found


# ---- NodeAddresses (controllers/network/node_address.go) ---------------------------------


def _sort_key(prefix: str) -> tuple[int, int, int]:
    """ComparePrefixesLegacy (sort algorithm v1): by address (IPv4 first), then length."""
    iface = ipaddress.ip_interface(prefix)
    return (iface.version, int(iface.ip), iface.network.prefixlen)


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
    routed = current  # no external (cloud) or SideroLink addresses on an emulated node
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
        self, store: ResourceStore, *, address: str, prefix_length: int, platform: str
    ) -> None:
        self._store = store
        self._seed = address
        self._items = host_links(address=address, prefix_length=prefix_length, platform=platform)
        self._addresses: NodeAddressSet | None = None
        self.cni_up = False

    @property
    def items(self) -> tuple[Address | Link, ...]:
        return tuple(self._items)

    def addresses(self, id_: str) -> tuple[str, ...]:
        """The prefixes of NodeAddresses ``id_`` (e.g. ``routed-no-k8s``)."""
        return self._addresses.get(id_) if self._addresses else ()

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
