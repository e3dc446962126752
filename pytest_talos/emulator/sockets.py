"""The sockets an emulated node listens on, as its Netstat shows them.

Plain data: :mod:`.listeners` opens the reachable ones on the node's loopback address, the
Netstat servicer renders all of them. A socket is *reachable* when it is bound to a wildcard
address (a scan of the node address finds it); sockets bound to 127.0.0.1, 127.0.0.53 or the
host-scope 169.254.116.108, and every UDP socket, are Netstat-only, so a TCP scan of the node
address stays honest. Faults can break the agreement between the two accounts: a
``hidden`` socket is opened but left out of Netstat, a ``rejected`` one is in Netstat but
not opened (as behind a firewall rule that rejects every connection).

Go's ``net.Listen("tcp", "0.0.0.0:N")`` and ``":N"`` open one dual-stack IPv6 socket, which
netstat shows as ``tcp6 :::N``; that is how apid, trustd, etcd, kube-apiserver, kubelet and
kube-proxy's healthz server appear (the address family shown is INFERRED from that rule).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from pytest_talos.emulator.faults.catalogue import EXTRA_PORT, SSH_PORT
from pytest_talos.emulator.kubespan import KUBESPAN_PORT

__all__ = [
    "CRI_STREAM_PORT",
    "EXTRA_PORT",
    "HOST_DNS_ADDRESS",
    "KERNEL",
    "SSH_PORT",
    "Listener",
    "listeners_for",
    "pod_listeners",
]

# internal/app/machined/pkg/controllers/network/hostdns_config.go (constants.HostDNSAddress):
# host DNS also answers here, on lo with scope host, so pods can reach it.
HOST_DNS_ADDRESS = "169.254.116.108"
# containerd's CRI streaming server binds 127.0.0.1 on a random port (INFERRED number).
CRI_STREAM_PORT = 38261
KERNEL = ""  # the process name of a kernel-owned socket (a VXLAN port has no process)
_WILDCARDS = frozenset({"::", "0.0.0.0"})


@dataclass(frozen=True)
class Listener:
    """One listening (or, for UDP, bound) socket of the node."""

    port: int
    process: str  # the owning process's command name ("" for a kernel socket)
    bind: str  # "::", "0.0.0.0", "127.0.0.1", ... or "node" (the node address)
    udp: bool = False
    netns: str = ""  # "" = the host network namespace, else a pod's namespace name
    hidden: bool = False  # (a fault's) open, but left out of the node's Netstat
    rejected: bool = False  # (a fault's) in Netstat, refused to every connection

    @property
    def l4proto(self) -> str:
        family = "6" if ":" in self.bind else ""
        return ("udp" if self.udp else "tcp") + family

    @property
    def reachable(self) -> bool:
        """Whether a TCP scan of the node address finds it (the emulator opens these)."""
        return (
            not self.udp
            and not self.netns
            and not self.rejected
            and (self.bind in _WILDCARDS or self.bind == "node")
        )


def listeners_for(
    *,
    controlplane: bool,
    proxy: bool,
    flannel: bool = True,
    kubespan: bool = False,
    api_server_port: int = 6443,
    etcd_extra_ports: Iterable[int] = (),
    added: Iterable[Listener] = (),
    hidden_ports: Collection[int] = (),
) -> list[Listener]:
    """The host network namespace's sockets of a healthy node, plus what faults add.

    ``added`` are the sockets the node's faults open (``FaultProfile.listeners``);
    ``hidden_ports`` those of the healthy sockets they leave out of Netstat
    (``FaultProfile.hidden_ports``).
    """
    sockets = [
        # internal/app/machined/pkg/controllers/runtime/api_service_config.go: ":50000"
        Listener(50000, "apid", "::"),
        # internal/app/machined/pkg/controllers/k8s/kubelet_spec.go: address 0.0.0.0
        Listener(10250, "kubelet", "::"),
        # internal/app/machined/pkg/system/services/kubelet.go: healthz on 127.0.0.1:10248
        Listener(10248, "kubelet", "127.0.0.1"),
        # internal/app/machined/pkg/controllers/k8s/kubeprism_config.go: 127.0.0.1:7445,
        # served by machined (PID 1, command "init")
        Listener(7445, "init", "127.0.0.1"),
        # internal/app/machined/pkg/controllers/network/hostdns_config.go and
        # dns_resolve_cache.go: host DNS on udp and tcp, 127.0.0.53 and 169.254.116.108
        *_dns("127.0.0.53"),
        *_dns(HOST_DNS_ADDRESS),
        Listener(CRI_STREAM_PORT, "containerd", "127.0.0.1"),
    ]
    if flannel:
        # controllers/k8s/internal/k8stemplates/flannel.go: the VXLAN backend on UDP 4789,
        # a kernel socket (no process; its bind address is INFERRED)
        sockets.append(Listener(4789, KERNEL, "0.0.0.0", udp=True))
    if kubespan:
        # controllers/kubespan/manager.go: the kubespan WireGuard link listens on
        # constants.KubeSpanDefaultPort, a kernel socket (bind address INFERRED)
        sockets.append(Listener(KUBESPAN_PORT, KERNEL, "0.0.0.0", udp=True))
    if proxy:
        # k8stemplates/kube-proxy.go (hostNetwork) and controllers/k8s/control_plane.go (no
        # --healthz-bind-address or --metrics-bind-address): Kubernetes' defaults apply,
        # healthz 0.0.0.0:10256 and metrics 127.0.0.1:10249.
        sockets += [Listener(10256, "kube-proxy", "::"), Listener(10249, "kube-proxy", "127.0.0.1")]
    if controlplane:
        sockets += [
            Listener(50001, "trustd", "::"),  # internal/app/trustd/main.go
            # controllers/etcd/spec.go: listen on 0.0.0.0 (no listenSubnets configured)
            Listener(2379, "etcd", "::"),
            Listener(2380, "etcd", "::"),
            # v1.14 services/etcd.go: listen-client-http-urls on the client addresses, port
            # constants.EtcdClientHTTPPort (2383); none before (pytest_talos.releases)
            *(Listener(port, "etcd", "::") for port in sorted(etcd_extra_ports)),
            # controllers/k8s/control_plane_static_pod.go: bind-address 0.0.0.0 for the API
            # server, 127.0.0.1 for controller-manager (10257) and scheduler (10259)
            Listener(api_server_port, "kube-apiserver", "::"),
            Listener(10257, "kube-controller", "127.0.0.1"),  # comm is cut at 15 chars
            Listener(10259, "kube-scheduler", "127.0.0.1"),
        ]
    sockets = [
        dataclasses.replace(socket, hidden=True) if socket.port in hidden_ports else socket
        for socket in sockets
    ]
    return [*sockets, *added]


def _dns(address: str) -> tuple[Listener, Listener]:
    return Listener(53, "init", address, udp=True), Listener(53, "init", address)


def pod_listeners(*, coredns: bool, node_id: str) -> list[Listener]:
    """Sockets in pod network namespaces; Netstat shows them only when asked for netns.

    CoreDNS (k8stemplates/coredns.go: dns 53 udp/tcp, metrics 9153; health 8080 and ready
    8181 from its Corefile) listens in its pod's namespace. The namespace name is INFERRED
    (containerd's CNI setup names them ``cni-<uuid>``).
    """
    if not coredns:
        return []
    netns = f"cni-{uuid.uuid5(uuid.NAMESPACE_URL, f'coredns/{node_id}')}"
    return [
        Listener(53, "coredns", "::", udp=True, netns=netns),
        *(Listener(port, "coredns", "::", netns=netns) for port in (53, 8080, 8181, 9153)),
    ]
