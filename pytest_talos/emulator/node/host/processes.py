"""The process table of an emulated node, as the Processes API reports it.

``internal/pkg/miniprocfs/processes.go`` walks every PID of the host PID namespace: pod
containers are in it too. For each it reports ``command`` = ``/proc/<pid>/comm`` (the kernel
cuts it at 15 characters), ``executable`` = ``readlink /proc/<pid>/exe`` (symlinks already
resolved, so ``/sbin/init`` reads ``/usr/bin/init`` in the usr-merged root) and ``args`` =
the command line with spaces for NULs.

The tree: PID 1 is machined; it runs containerd, cri (and udevd, dashboard on metal) as
child processes (``system/runner/process``). apid, trustd, etcd, kubelet and extension
services run in containers of the ``system`` containerd namespace, pods in the ``k8s.io``
namespace of the CRI containerd: each under a ``containerd-shim-runc-v2`` that names its
namespace on its command line. Shims detach from containerd, so their parent is PID 1
(INFERRED from how shims daemonize). PIDs, thread counts and memory sizes are INFERRED.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_talos.emulator.faults import HostProcess

__all__ = ["CILIUM_POD", "ProcessEntry", "processes_for"]

_SYSTEM_CONTAINERD = "/system/run/containerd/containerd.sock"  # constants.SystemContainerdAddress
_CRI_CONTAINERD = "/run/containerd/containerd.sock"  # constants.CRIContainerdAddress
_SHIM = "/usr/bin/containerd-shim-runc-v2"
_COMM_LEN = 15  # TASK_COMM_LEN - 1


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    ppid: int
    command: str
    executable: str
    args: str
    threads: int = 8
    state: str = "S"
    rss: int = 50 << 20
    vms: int = 1 << 30
    pod: str = ""  # (emulator-only, not on the wire) the pod whose container it runs in


@dataclass(frozen=True)
class _Spec:
    """One process to start: its exec path (argv[0]), resolved executable and arguments."""

    argv0: str
    executable: str
    args: tuple[str, ...] = ()
    threads: int = 8
    comm: str = ""  # set when the program renames itself (else the exec'd file's name)
    child: _Spec | None = None  # a process it keeps running (a shell's sleep)

    @property
    def command(self) -> str:
        return (self.comm or self.argv0.rsplit("/", 1)[-1])[:_COMM_LEN]

    @property
    def cmdline(self) -> str:
        return " ".join((self.argv0, *self.args))


def _flags(**values: str) -> tuple[str, ...]:
    """``--key=value`` sorted by key, as Talos's argsbuilder renders arguments."""
    return tuple(f"--{key.replace('_', '-')}={values[key]}" for key in sorted(values))


def _pid1(replacement: HostProcess | None) -> ProcessEntry:
    if replacement is not None:  # a fault's PID 1 in machined's place
        spec = _host_spec(replacement)
        return ProcessEntry(1, 0, spec.command, spec.executable, spec.cmdline, spec.threads)
    # Dockerfile (rootfs stage): machined is /usr/bin/init; the kernel (or Docker's
    # entrypoint) runs it as /sbin/init, which resolves through /sbin -> usr/bin.
    return ProcessEntry(1, 0, "init", "/usr/bin/init", "/sbin/init", threads=24, rss=180 << 20)


# Services machined runs as its own child processes (system/runner/process).
_CHILD_SERVICES = {
    # system/services/containerd.go
    "containerd": _Spec(
        "/bin/containerd",
        "/usr/bin/containerd",
        (
            "--address",
            _SYSTEM_CONTAINERD,
            "--state",
            "/system/run/containerd",
            "--root",
            "/system/var/lib/containerd",
        ),
        threads=12,
    ),
    # system/services/cri.go
    "cri": _Spec(
        "/bin/containerd",
        "/usr/bin/containerd",
        ("--address", _CRI_CONTAINERD, "--config", "/etc/cri/containerd.toml"),
        threads=16,
    ),
    # system/services/udevd.go; siderolabs/pkgs systemd-udevd links systemd-udevd to udevadm
    "udevd": _Spec("/sbin/systemd-udevd", "/usr/bin/udevadm", ("--resolve-names=never",), 1),
    # system/services/dashboard.go: /sbin/dashboard -> init (the Dockerfile's symlink)
    "dashboard": _Spec("/sbin/dashboard", "/usr/bin/init", threads=10),
    # v1.14 sandboxd/runner.go: machined re-exec'd as /sbin/sandboxd (the Dockerfile's
    # ``ln -s init /rootfs/usr/bin/sandboxd``); its thread count is INFERRED
    "sandboxd": _Spec("/sbin/sandboxd", "/usr/bin/init", threads=8),
}


def _system_containers(hostname: str, address: str) -> dict[str, _Spec]:
    """Services in containers of the ``system`` namespace, by service id."""
    etcd = _flags(
        advertise_client_urls=f"https://{address}:2379",
        auto_tls="false",
        cert_file="/system/secrets/etcd/server.crt",
        client_cert_auth="true",
        data_dir="/var/lib/etcd",
        initial_advertise_peer_urls=f"https://{address}:2380",
        initial_cluster=f"{hostname}=https://{address}:2380",
        initial_cluster_state="new",
        key_file="/system/secrets/etcd/server.key",
        listen_client_urls="https://0.0.0.0:2379",
        listen_peer_urls="https://0.0.0.0:2380",
        name=hostname,
        peer_auto_tls="false",
        trusted_ca_file="/system/secrets/etcd/ca.crt",
    )  # system/services/etcd.go argsForControlPlane (a subset of its flags)
    kubelet = _flags(
        bootstrap_kubeconfig="/etc/kubernetes/bootstrap-kubeconfig",
        cert_dir="/var/lib/kubelet/pki",
        config="/etc/kubernetes/kubelet.yaml",
        hostname_override=hostname,
        kubeconfig="/etc/kubernetes/kubeconfig-kubelet",
    )  # controllers/k8s/kubelet_spec.go
    return {
        # system/services/apid.go, trustd.go: the init binary bind-mounted at /<id> in the
        # container's root /system/libexec/<id> (utils.go prepareRootfs); exe is the path
        # inside the container (INFERRED: readlink shows the container's view)
        "apid": _Spec("/apid", "/apid", threads=14),
        "trustd": _Spec("/trustd", "/trustd", threads=10),
        "etcd": _Spec("/usr/local/bin/etcd", "/usr/local/bin/etcd", etcd, threads=16),
        "kubelet": _Spec("/usr/local/bin/kubelet", "/usr/local/bin/kubelet", kubelet, 18),
    }


@dataclass(frozen=True)
class _Pod:
    name: str
    containers: tuple[_Spec, ...]


def _control_plane_pods(address: str, api_server_port: int) -> list[_Pod]:
    """controllers/k8s/control_plane_static_pod.go (a subset of each component's flags)."""
    apiserver = _flags(
        advertise_address=address,
        allow_privileged="true",
        anonymous_auth="false",
        bind_address="0.0.0.0",
        client_ca_file="/system/secrets/kubernetes/kube-apiserver/ca.crt",
        etcd_servers="https://localhost:2379",
        profiling="false",
        secure_port=str(api_server_port),
        service_cluster_ip_range="10.96.0.0/12",
        tls_cert_file="/system/secrets/kubernetes/kube-apiserver/apiserver.crt",
        tls_private_key_file="/system/secrets/kubernetes/kube-apiserver/apiserver.key",
    )
    manager = (
        "--use-service-account-credentials",
        *_flags(
            allocate_node_cidrs="true",
            bind_address="127.0.0.1",
            cluster_cidr="10.244.0.0/16",
            kubeconfig="/system/secrets/kubernetes/kube-controller-manager/kubeconfig",
            leader_elect="true",
            profiling="false",
        ),
    )
    scheduler = _flags(
        bind_address="127.0.0.1",
        config="/system/config/kubernetes/kube-scheduler/scheduler-config.yaml",
        leader_elect="true",
        profiling="false",
    )
    return [
        _Pod("kube-apiserver", (_k8s("kube-apiserver", apiserver, 24),)),
        _Pod("kube-controller-manager", (_k8s("kube-controller-manager", manager, 12),)),
        _Pod("kube-scheduler", (_k8s("kube-scheduler", scheduler, 10),)),
    ]


def _k8s(component: str, args: Sequence[str], threads: int) -> _Spec:
    path = f"/usr/local/bin/{component}"
    return _Spec(path, path, tuple(args), threads)


# Cilium's agent DaemonSet pod (hostNetwork), as its Helm chart runs it: cilium-agent, which
# starts cilium-health-responder (INFERRED from cilium/cilium's chart and docs; variant cilium).
CILIUM_POD = "cilium"


def _cilium_pod() -> _Pod:
    responder = _Spec(
        "cilium-health-responder",
        "/usr/bin/cilium-health-responder",
        ("--listen", "4240", "--pidfile", "/var/run/cilium/state/health-endpoint.pid"),
        4,
    )
    agent = _Spec(
        "cilium-agent",
        "/usr/bin/cilium-agent",
        ("--config-dir=/tmp/cilium/config-map",),
        30,
        child=responder,
    )
    return _Pod(CILIUM_POD, (agent,))


def _node_pods(
    *,
    hostname: str,
    proxy: bool,
    flannel: bool,
    coredns: bool,
    pod_shell: bool,
    cilium: bool = False,
) -> list[_Pod]:
    pods: list[_Pod] = [_cilium_pod()] if cilium else []
    if proxy:  # k8stemplates/kube-proxy.go; controllers/k8s/control_plane.go getProxyArgs
        args = _flags(
            cluster_cidr="10.244.0.0/16",
            conntrack_max_per_core="0",
            hostname_override=hostname,
            kubeconfig="/etc/kubernetes/kubeconfig",
            proxy_mode="nftables",
        )
        pods.append(_Pod("kube-proxy", (_k8s("kube-proxy", args, 9),)))
    if flannel:  # k8stemplates/flannel.go: /opt/bin/flanneld --ip-masq --kube-subnet-mgr
        args = ("--ip-masq", "--kube-subnet-mgr")
        pods.append(_Pod("kube-flannel", (_Spec("/opt/bin/flanneld", "/opt/bin/flanneld", args),)))
    if coredns:  # k8stemplates/coredns.go: args -conf /etc/coredns/Corefile
        coredns_args = ("-conf", "/etc/coredns/Corefile")
        pods.append(_Pod("coredns", (_Spec("/coredns", "/coredns", coredns_args, 11),)))
    if pod_shell:  # variant pod-shell: a busybox pod whose entrypoint is /bin/sh
        sleep = _Spec("sleep", "/bin/busybox", ("3600",), 1)
        loop = ("-c", "while true; do sleep 3600; done")
        shell = _Spec("/bin/sh", "/bin/busybox", loop, 1, child=sleep)
        pods.append(_Pod("shell-demo", (shell,)))
    return pods


class _Table:
    """Hands out PIDs in start order and collects the entries."""

    def __init__(self, first: ProcessEntry) -> None:
        self.entries = [first]
        self._next = 100

    def add(self, spec: _Spec, ppid: int, *, rss: int = 50 << 20, pod: str = "") -> int:
        pid = self._next
        self._next += 1 + len(self.entries) % 7
        entry = ProcessEntry(
            pid, ppid, spec.command, spec.executable, spec.cmdline, spec.threads, rss=rss, pod=pod
        )
        self.entries.append(entry)
        return pid

    def shim(self, namespace: str, ident: str, address: str) -> int:
        args = ("-namespace", namespace, "-id", ident, "-address", address)
        return self.add(_Spec(_SHIM, _SHIM, args, threads=11), 1, rss=12 << 20)


def _sandbox_id(hostname: str, pod: str) -> str:
    return hashlib.sha256(f"{hostname}/{pod}".encode()).hexdigest()


def processes_for(
    *,
    hostname: str,
    address: str,
    running_services: Iterable[str],
    controlplane: bool,
    proxy: bool = True,
    flannel: bool = True,
    coredns: bool = False,
    pod_shell: bool = False,
    cilium: bool = False,
    api_server_port: int = 6443,
    pid1: HostProcess | None = None,
    host_processes: Iterable[HostProcess] = (),
) -> list[ProcessEntry]:
    """The node's processes: PID 1 (machined unless ``pid1`` replaces it), machined's
    children, system containers, pods, then ``host_processes`` (the children of PID 1 the
    node's faults run: ``FaultProfile.host_processes``)."""
    table = _Table(_pid1(pid1))
    running = set(running_services)
    sandbox = table.add(_CHILD_SERVICES["sandboxd"], 1) if "sandboxd" in running else 1
    for service in ("containerd", "cri", "udevd", "dashboard"):
        if service in running:
            # v1.14 services/cri.go: with workload isolation CRI runs inside sandboxd's
            # namespace (its child there; the host's view of the parent is INFERRED)
            table.add(_CHILD_SERVICES[service], sandbox if service == "cri" else 1)
    system = _system_containers(hostname, address)
    for service in sorted(running):
        spec = system.get(service) or _extension_spec(service)
        if spec is not None:
            shim = table.shim("system", service, _SYSTEM_CONTAINERD)
            table.add(spec, shim)
    if "kubelet" in running and "cri" in running:
        pods = _control_plane_pods(address, api_server_port) if controlplane else []
        pods += _node_pods(
            hostname=hostname,
            proxy=proxy,
            flannel=flannel,
            coredns=coredns,
            pod_shell=pod_shell,
            cilium=cilium,
        )
        for pod in pods:
            shim = table.shim("k8s.io", _sandbox_id(hostname, pod.name), _CRI_CONTAINERD)
            table.add(_Spec("/pause", "/pause", threads=1), shim, rss=1 << 20)
            for container in pod.containers:
                pid = table.add(container, shim, pod=pod.name)
                if container.child is not None:
                    table.add(container.child, pid, pod=pod.name)
    for process in host_processes:
        table.add(_host_spec(process), 1)
    return table.entries


def _host_spec(process: HostProcess) -> _Spec:
    return _Spec(process.argv0, process.executable, process.args, process.threads, process.comm)


def _extension_spec(service: str) -> _Spec | None:
    """An extension service (``ext-<name>``): its entrypoint in its container (INFERRED path)."""
    if not service.startswith("ext-"):
        return None
    name = service.removeprefix("ext-")
    return _Spec(f"/usr/local/bin/{name}", f"/usr/local/bin/{name}", threads=4)
