"""An emulated node's place on the networks: its links and addresses (controllers/network),
the pod network its CNI brings up, and what discovery and etcd say of its peers.

:class:`NodeNetworking` owns the node's :class:`~.network.NodeNetwork`
and publishes the Members resources; the node gives it the active config and its peers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.cosi.store import ResourceStore, StoreEvent
from pytest_talos.emulator.faults import DiscoveryQuirk
from pytest_talos.emulator.machineconfig.accessors import (
    cni_name,
    coredns_enabled,
    discovery_enabled,
)
from pytest_talos.emulator.node.identity import NodeIdentity, node_id_for, node_pod_cidr
from pytest_talos.emulator.node.kubelet import nodename_of
from pytest_talos.emulator.node.net.network import COREDNS_REPLICAS, NodeNetwork
from pytest_talos.emulator.node.net.wireguard import wireguard_links

__all__ = ["NodeNetworking", "pod_cidr_of"]


def pod_cidr_of(identity: NodeIdentity, config: bytes) -> str:
    """The Node's podCIDR: a /24 of the first pod subnet, picked by the node address."""
    pods = mc.pod_subnets(config)
    return node_pod_cidr(pods[0] if pods else "10.244.0.0/16", identity.address)


class NodeNetworking:
    """The network state of one node; rebuilt at every boot (:meth:`publish`)."""

    def __init__(
        self,
        identity: NodeIdentity,
        *,
        store: ResourceStore,
        config: Callable[[], bytes],
        peers: Callable[[], Sequence[NodeIdentity]],
        quirk: Callable[[DiscoveryQuirk], bool],
        discovery_reachable: bool,
        talos_version: Callable[[], str],
    ) -> None:
        self._identity = identity
        self._store = store
        self._config = config
        self._peers = peers
        self._quirk = quirk
        self._discovery_reachable = discovery_reachable
        self._talos_version = talos_version
        self.network: NodeNetwork | None = None  # the links and addresses of the booted node
        self._cni_watch: Callable[[], None] | None = None

    @property
    def _hostname(self) -> str:
        return self._identity.hostname

    def k8s_subnets(self) -> list[str]:
        """What address_filter.go filters on: the config's pod and service CIDRs, plus the
        Node's podCIDR once the node is registered (the CNI runs then)."""
        config = self._config()
        subnets = [*mc.pod_subnets(config), *mc.service_subnets(config)]
        if self.network is not None and self.network.cni_up:
            subnets.append(pod_cidr_of(self._identity, config))
        return subnets

    def publish(self) -> None:
        """Links and addresses of a freshly booted node: lo and eth0 (see :mod:`.network`).

        Flannel's links follow once kubelet runs healthy (it runs the flannel DaemonSet pod):
        a watch on the Services resource, like a controller's input, adds them.
        """
        ident = self._identity
        self.network = NodeNetwork(
            self._store,
            address=ident.address,
            prefix_length=ident.prefix_length,
            platform=ident.platform,
            wireguard=wireguard_links(self._config(), node_id=ident.node_id),
        )
        self.network.publish(self.k8s_subnets())
        if self._cni_watch is not None:
            self._cni_watch()
        self._cni_watch = self._store.subscribe(self._watch_for_cni)

    def _watch_for_cni(self, event: StoreEvent) -> None:
        found = event.resource
        if found.type != T.SERVICES or found.id != "kubelet" or event.kind == "destroyed":
            return
        network = self.network
        if network is None or network.cni_up or not found.spec.get("healthy"):
            return
        config = self._config()
        if cni_name(config) != "flannel":  # `none` or `custom`: not ours to model
            return
        pod_cidr = pod_cidr_of(self._identity, config)
        network.start_cni(
            pod_block=pod_cidr,
            pods=self.pod_network_pods(),
            k8s_subnets=[*self.k8s_subnets(), pod_cidr],
        )

    def pod_network_pods(self) -> int:
        """Pods on the pod network this node runs: its share of CoreDNS's replicas, spread
        over the workers (control planes are tainted NoSchedule) or, without workers, over
        the control planes (INFERRED placement: the scheduler's spreading, in node order)."""
        if not coredns_enabled(self._config()):
            return 0
        peers = list(self._peers())
        nodes = [peer for peer in peers if not peer.controlplane] or peers
        return sum(
            1 for i in range(COREDNS_REPLICAS) if nodes[i % len(nodes)].hostname == self._hostname
        )

    def _member_addresses(self, peer: NodeIdentity) -> list[str]:
        """A member's addresses: its ``routed-no-k8s`` IPs (controllers/cluster/local_affiliate.go).
        Another node's are its address unless the cluster's CIDRs cover it."""
        if peer.hostname == self._hostname and self.network is not None:
            return [p.split("/", 1)[0] for p in self.network.addresses("routed-no-k8s")]
        ip = ipaddress.ip_address(peer.address)
        nets = [ipaddress.ip_network(c, strict=False) for c in self.k8s_subnets()]
        return [] if any(ip.version == n.version and ip in n for n in nets) else [peer.address]

    def publish_members(self) -> None:
        """Members.cluster.talos.dev: one per affiliate with a nodename
        (controllers/cluster/member.go), id = the nodename, ``hostname`` = the FQDN
        (local_affiliate.go, HostnameStatusSpec.FQDN). Discovery off in the machine config:
        no affiliates, no Members. Discovery service unreachable: only the local affiliate."""
        store = self._store
        for member in store.list("cluster", T.MEMBERS):
            store.destroy("cluster", T.MEMBERS, member.id)
        config = self._config()
        if not discovery_enabled(config):
            return
        peers = list(self._peers())
        if not self._discovery_reachable:
            peers = [peer for peer in peers if peer.hostname == self._hostname]
        if self._quirk(DiscoveryQuirk.DISCOVERY_MISSES_FIRST_NODE):
            first = self._peers()[0].hostname
            peers = [peer for peer in peers if peer.hostname != first]
        for peer in peers:
            spec: dict[str, object] = {
                "nodeId": peer.node_id or node_id_for(peer.hostname, peer.cluster_name),
                "addresses": self._member_addresses(peer),
                "hostname": peer.fqdn,
                "machineType": peer.role,
                "operatingSystem": f"Talos ({self._talos_version()})",
            }
            if peer.controlplane:
                spec["controlPlane"] = {"apiServerPort": 6443}
            # The affiliate's nodename is the peer's own Nodename (local_affiliate.go);
            # INFERRED: every node shares this node's registerWithFQDN setting.
            member_id = nodename_of(peer.hostname, peer.domain, config)
            store.put("cluster", T.MEMBERS, member_id, spec, owner="cluster.MemberController")

    def etcd_members(self) -> list[NodeIdentity]:
        """The etcd members: the control planes, named by their short hostname
        (controllers/etcd/spec.go names the member after HostnameStatus.hostname)."""
        members = [peer for peer in self._peers() if peer.controlplane]
        if self._quirk(DiscoveryQuirk.ETCD_MEMBERS_LACK_LAST_CONTROLPLANE) and members:
            members = members[:-1]
        return members
