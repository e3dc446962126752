"""The WireGuard links of an emulated node, from its active machine config.

Talos creates a kernel WireGuard link (kind ``wireguard``, type ``none``) for:

* SideroLink (a ``SideroLinkConfig`` document, an Omni-managed node):
  ``internal/app/machined/pkg/controllers/siderolink/manager.go`` (v1.13.9) makes the
  LinkSpec ``siderolink`` (``constants.SideroLinkName``) with a private key and one peer but
  **no listen port**, and an AddressSpec with the node address Omni's provision API hands
  out, from ``fdae:41e4:649b:9303::/64`` (a Talos ULA: byte 7 is ``ULASideroLink``,
  ``pkg/machinery/resources/network/ula.go``). The provision exchange is not modelled: the
  address is made from the node's id (INFERRED: Omni allocates it).
* a ``WireguardConfig`` document (``pkg/machinery/config/types/network/wireguard.go``) or
  ``machine.network.interfaces[].wireguard`` (the legacy form):
  ``controllers/network/link_config.go`` wireguardLink / wireguardLinkLegacy copy its
  ``listenPort`` (0 when unset) and the link's addresses.

The kernel binds each link's UDP socket when the device is configured: on the listen port,
or, with none, on a random one (INFERRED: the kernel's ephemeral range, here picked from the
node id and link name so that it is stable). ``controllers/network/link_status.go`` reads the
device back through wgctrl and puts the bound port in ``LinkStatus.wireguard.listenPort``
(``adapters/network/wireguard_spec.go`` Decode). The socket is a kernel one (no process) on
the wildcard address (INFERRED, as for KubeSpan's).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_talos.emulator.machineconfig.loader import lenient_documents, main_document

__all__ = [
    "SIDEROLINK_KIND",
    "SIDEROLINK_NAME",
    "SIDEROLINK_PREFIX",
    "WIREGUARD_KIND",
    "WireguardLink",
    "link_ips",
    "wireguard_links",
]

SIDEROLINK_KIND = "SideroLinkConfig"  # pkg/machinery/config/types/siderolink/siderolink.go
WIREGUARD_KIND = "WireguardConfig"  # pkg/machinery/config/types/network/wireguard.go
SIDEROLINK_NAME = "siderolink"  # pkg/machinery/constants/constants.go SideroLinkName
SIDEROLINK_PREFIX = "fdae:41e4:649b:9303::/64"  # Omni's SideroLink network (INFERRED)
SIDEROLINK_MTU = 1280  # siderolink/pkg/wireguard LinkMTU (INFERRED value)
WIREGUARD_MTU = 1420  # the kernel's default for a WireGuard device
_EPHEMERAL = (32768, 60999)  # net.ipv4.ip_local_port_range's default


@dataclass(frozen=True)
class WireguardLink:
    """One WireGuard link: its name, the UDP port its device is bound to, its addresses,
    and the public key LinkStatus shows (a stand-in derived from the node and the name)."""

    name: str
    listen_port: int
    addresses: tuple[str, ...]
    mtu: int
    public_key: str


def wireguard_links(data: bytes, *, node_id: str) -> list[WireguardLink]:
    """The WireGuard links the machine config ``data`` makes the node create."""
    links: list[WireguardLink] = []
    documents = lenient_documents(data)
    if any(doc.get("kind") == SIDEROLINK_KIND for doc in documents):
        address = f"{_siderolink_address(node_id)}/64"
        links.append(_link(SIDEROLINK_NAME, 0, (address,), SIDEROLINK_MTU, node_id))
    for doc in documents:
        if doc.get("kind") == WIREGUARD_KIND and doc.get("name"):
            addresses = tuple(
                str(entry["address"])
                for entry in _list(doc.get("addresses"))
                if isinstance(entry, Mapping) and entry.get("address")
            )
            links.append(_link(str(doc["name"]), _port(doc), addresses, _mtu(doc), node_id))
    for device in _list(_dig(main_document(data), "machine", "network", "interfaces")):
        wireguard = device.get("wireguard") if isinstance(device, Mapping) else None
        if isinstance(wireguard, Mapping) and device.get("interface"):
            addresses = tuple(str(a) for a in _list(device.get("addresses")))
            name = str(device["interface"])
            links.append(_link(name, _port(wireguard), addresses, _mtu(device), node_id))
    return links


def _link(
    name: str, port: int, addresses: tuple[str, ...], mtu: int, node_id: str
) -> WireguardLink:
    digest = hashlib.sha256(f"{node_id}/{name}".encode()).digest()
    if not port:  # no listen port: the kernel picks one
        low, high = _EPHEMERAL
        port = low + int.from_bytes(digest[:4], "big") % (high - low + 1)
    key = _base64(digest)
    return WireguardLink(name, port, addresses, mtu, key)


def _siderolink_address(node_id: str) -> str:
    network = ipaddress.IPv6Network(SIDEROLINK_PREFIX)
    host = int.from_bytes(hashlib.sha256(f"siderolink/{node_id}".encode()).digest()[:8], "big")
    return str(network.network_address + (host or 2))


def _mtu(section: Mapping[str, Any]) -> int:
    value = section.get("mtu")
    return value if isinstance(value, int) and not isinstance(value, bool) else WIREGUARD_MTU


def _port(section: Mapping[str, Any]) -> int:
    value = section.get("listenPort")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dig(doc: Mapping[str, Any], *path: str) -> Any:
    value: Any = doc
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw[:32]).decode()


def link_ips(data: bytes, *, node_id: str) -> list[str]:
    """The IPs on the node's WireGuard links: they are in NodeAddresses
    ``accumulative-no-k8s``, so apid's and kube-apiserver's certificates name them
    (controllers/secrets/api_cert_sans.go, kubernetes_cert_sans.go)."""
    return [
        str(ipaddress.ip_interface(prefix).ip)
        for link in wireguard_links(data, node_id=node_id)
        for prefix in link.addresses
    ]
