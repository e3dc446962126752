"""The links of one emulated node and their addresses, as the kernel shows them:
``LinkStatuses.net.talos.dev`` (``pkg/machinery/resources/network/link_status.go``, filled
by ``controllers/network/link_status.go``) and ``AddressStatuses.net.talos.dev``
(``address_status.go``). ``lo`` and ``eth0`` at boot; Flannel's ``flannel.1``, ``cni0`` and
one veth per pod once the CNI runs. NodeAddresses and the resources are :mod:`.network`.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_talos.emulator.node.net.wireguard import WireguardLink

__all__ = [
    "COREDNS_REPLICAS",
    "FLANNEL_MTU",
    "HOST_DNS_ADDRESS",
    "Address",
    "Link",
    "cni_links",
    "host_links",
    "wireguard_link_items",
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
    # kind wireguard: the device as link_status.go decodes it (publicKey, listenPort, ...)
    wireguard: tuple[tuple[str, Any], ...] = ()

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
        if self.wireguard:  # yaml:"wireguard,omitempty"
            spec["wireguard"] = dict(self.wireguard)
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


def wireguard_link_items(links: Iterable[WireguardLink], first_index: int) -> list[Address | Link]:
    """Kernel WireGuard links (kind ``wireguard``, type ``none``: ARPHRD_NONE, no hardware
    address) and their addresses, as LinkStatus and AddressStatus show them; the
    ``wireguard`` spec carries what link_status.go decodes from the device (the bound
    ``listenPort``, the public key; the peers are not modelled)."""
    found: list[Address | Link] = []
    for offset, item in enumerate(links):
        link = Link(
            item.name,
            first_index + offset,
            "none",
            "wireguard",
            item.mtu,
            "UP,POINTOPOINT,NOARP,RUNNING,LOWER_UP",
            "",
            "",
            "unknown",
            False,
            wireguard=(
                ("publicKey", item.public_key),
                ("listenPort", item.listen_port),
                ("firewallMark", 0),
                ("peers", []),
            ),
        )
        found.append(link)
        found += [Address(link, prefix, "global") for prefix in item.addresses]
    return found
