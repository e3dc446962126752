"""The emulated node's WireGuard links from its machine config (emulator/wireguard.py) and
how LinkStatus encodes them (proto field 29)."""

from __future__ import annotations

from pytest_talos._proto.resource.definitions.network import network_pb2
from pytest_talos.emulator.cosi.specs import encode_link_status
from pytest_talos.emulator.node.net.links import wireguard_link_items
from pytest_talos.emulator.node.net.wireguard import wireguard_links

DOCS = b"""version: v1alpha1
machine:
  type: worker
  network:
    interfaces:
      - interface: wg9
        addresses: [10.9.0.2/24]
        wireguard:
          listenPort: 51999
---
apiVersion: v1alpha1
kind: WireguardConfig
name: wg0
listenPort: 51111
addresses:
  - address: 192.168.250.2/24
---
apiVersion: v1alpha1
kind: WireguardConfig
name: wg1
---
apiVersion: v1alpha1
kind: SideroLinkConfig
apiUrl: https://omni.example:8090/?jointoken=x
"""


def test_every_source_of_a_wireguard_link_is_read() -> None:
    links = {link.name: link for link in wireguard_links(DOCS, node_id="n1")}
    assert set(links) == {"siderolink", "wg0", "wg1", "wg9"}
    assert links["wg0"].listen_port == 51111
    assert links["wg0"].addresses == ("192.168.250.2/24",)
    assert links["wg9"].listen_port == 51999  # machine.network.interfaces[].wireguard
    assert links["wg9"].addresses == ("10.9.0.2/24",)
    for name in ("siderolink", "wg1"):  # no listen port: the kernel picked one
        assert 32768 <= links[name].listen_port <= 60999
    assert links["siderolink"].addresses[0].startswith("fdae:41e4:649b:9303:")
    other = {link.name: link for link in wireguard_links(DOCS, node_id="n2")}
    assert other["siderolink"].listen_port != links["siderolink"].listen_port


def test_no_wireguard_config_no_links() -> None:
    assert wireguard_links(b"version: v1alpha1\nmachine:\n  type: worker\n", node_id="n") == []


def test_link_status_carries_the_bound_port_in_field_29() -> None:
    link = wireguard_links(DOCS, node_id="n1")[0]
    spec = wireguard_link_items([link], 3)[0].spec()
    assert spec["kind"] == "wireguard"
    assert spec["wireguard"]["listenPort"] == link.listen_port
    decoded = network_pb2.LinkStatusSpec.FromString(encode_link_status(spec))
    assert decoded.wireguard.listen_port == link.listen_port
    assert decoded.kind == "wireguard"
    assert network_pb2.LinkStatusSpec.DESCRIPTOR.fields_by_name["wireguard"].number == 29
