"""The sockets an emulated node listens on, as its Netstat shows them.

Plain data: :mod:`...apid.listeners` opens the reachable ones on the node's loopback address, the
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
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_talos.emulator.faults.catalogue import EXTRA_PORT, SSH_PORT
from pytest_talos.emulator.node.net.kubespan import KUBESPAN_PORT

__all__ = [
    "CRI_STREAM_PORT",
    "EXTRA_PORT",
    "HOST_DNS_ADDRESS",
    "KERNEL",
    "SSH_PORT",
    "ComponentBinds",
    "Listener",
    "cilium_listeners",
    "component_binds",
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
    pod: str = ""  # the host-network pod whose process owns it ("" = a host process)

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
    binds: ComponentBinds | None = None,
    wireguard_ports: Iterable[int] = (),
    added: Iterable[Listener] = (),
    hidden_ports: Collection[int] = (),
) -> list[Listener]:
    """The host network namespace's sockets of a healthy node, plus what faults add.

    ``added`` are the sockets the node's faults open (``FaultProfile.listeners``);
    ``hidden_ports`` those of the healthy sockets they leave out of Netstat
    (``FaultProfile.hidden_ports``).
    """
    binds = binds or ComponentBinds()
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
    if binds.kubelet_read_only:  # kubelet_spec.go: address 0.0.0.0, readOnlyPort from config
        sockets.append(Listener(binds.kubelet_read_only, "kubelet", "::"))
    if flannel:
        # controllers/k8s/internal/k8stemplates/flannel.go: the VXLAN backend on UDP 4789,
        # a kernel socket (no process; its bind address is INFERRED)
        sockets.append(Listener(4789, KERNEL, "0.0.0.0", udp=True))
    if kubespan:
        # controllers/kubespan/manager.go: the kubespan WireGuard link listens on
        # constants.KubeSpanDefaultPort, a kernel socket (bind address INFERRED)
        sockets.append(Listener(KUBESPAN_PORT, KERNEL, "0.0.0.0", udp=True))
    for port in wireguard_ports:
        # wireguard.py: each WireGuard link's device is bound to its listen port, or to a
        # random one the kernel picks (SideroLink): a kernel socket (bind address INFERRED)
        sockets.append(Listener(port, KERNEL, "0.0.0.0", udp=True))
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
            # extraArgs bind-address / secure-port override them (not MergeDenied there)
            Listener(binds.controller_manager[1], "kube-controller", binds.controller_manager[0]),
            Listener(binds.scheduler[1], "kube-scheduler", binds.scheduler[0]),
            # system/services/etcd.go: listen-metrics-urls from extraArgs reaches etcd
            *(Listener(port, "etcd", bind) for bind, port in binds.etcd_metrics),
        ]
    sockets = [
        dataclasses.replace(socket, hidden=True) if socket.port in hidden_ports else socket
        for socket in sockets
    ]
    return [*sockets, *added]


@dataclass(frozen=True)
class ComponentBinds:
    """Where the components whose address the machine config can move listen (bind, port):
    Talos's defaults unless ``extraArgs`` / ``extraConfig`` say otherwise
    (:func:`component_binds`). ``kube-controller`` is kube-controller-manager's comm (the
    kernel cuts it at 15 characters)."""

    controller_manager: tuple[str, int] = ("127.0.0.1", 10257)
    scheduler: tuple[str, int] = ("127.0.0.1", 10259)
    etcd_metrics: tuple[tuple[str, int], ...] = ()
    kubelet_read_only: int = 0


def component_binds(
    *,
    etcd_args: Mapping[str, str],
    manager_args: Mapping[str, str],
    scheduler_args: Mapping[str, str],
    kubelet_args: Mapping[str, str],
    kubelet_extra_config: Mapping[str, Any],
) -> ComponentBinds:
    """The binds of :class:`ComponentBinds` from the config's ``extraArgs`` and
    ``machine.kubelet.extraConfig`` (a kubelet flag wins over its config file)."""
    metrics = tuple(
        bound
        for url in etcd_args.get("listen-metrics-urls", "").split(",")
        if (bound := _url_bind(url.strip())) is not None
    )
    read_only = kubelet_extra_config.get("readOnlyPort", 0)
    if "read-only-port" in kubelet_args:
        flag = kubelet_args["read-only-port"]
        read_only = int(flag) if flag.isdigit() else 0
    return ComponentBinds(
        controller_manager=_component_bind(manager_args, 10257),
        scheduler=_component_bind(scheduler_args, 10259),
        etcd_metrics=metrics,
        kubelet_read_only=read_only if isinstance(read_only, int) else 0,
    )


def _component_bind(args: Mapping[str, str], port: int) -> tuple[str, int]:
    bind = args.get("bind-address", "127.0.0.1")
    secure = args.get("secure-port", "")
    return (_go_bind(bind), int(secure) if secure.isdigit() else port)


def _url_bind(url: str) -> tuple[str, int] | None:
    hostport = (url.partition("://")[2] or url).split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    return (_go_bind(host.strip("[]")), int(port)) if port.isdigit() and host else None


def _go_bind(host: str) -> str:
    """Go's listener on a wildcard host is one dual-stack socket (``::``, see above)."""
    return "::" if host in ("", "0.0.0.0", "::") else "127.0.0.1" if host == "localhost" else host


def cilium_listeners() -> list[Listener]:
    """The host-network sockets of Cilium's agent pod (variant ``cilium``; INFERRED from
    cilium/cilium ``Documentation/operations/system_requirements.rst``): the health
    responder's TCP 4240 and Hubble's 4244 on every address, the agent's health 9879 and gops
    9890 on loopback, and the VXLAN tunnel's kernel UDP socket on 8472."""
    return [
        Listener(4240, "cilium-health-r", "::", pod="cilium"),  # comm cut at 15 characters
        Listener(4244, "cilium-agent", "::", pod="cilium"),
        Listener(9879, "cilium-agent", "127.0.0.1", pod="cilium"),
        Listener(9890, "cilium-agent", "127.0.0.1", pod="cilium"),
        Listener(8472, KERNEL, "0.0.0.0", udp=True),
    ]


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
