"""The emulated node's system model: usr-merged root, List/Read errors, processes, sockets,
mounts — as a Talos v1.13.9 node reports them through the API."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest
from google.protobuf import empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.node.host.system import MODE_DIR, MODE_STICKY, MODE_SYMLINK

from .conftest import RawClient

EMPTY = empty_pb2.Empty()
M = "/machine.MachineService/"
HOST = m.NetstatRequest.NetNS(hostnetwork=True)
ALL_PROTOCOLS = m.NetstatRequest.L4proto(tcp=True, tcp6=True, udp=True, udp6=True)


@pytest.fixture(scope="module")
def cp(shared_cluster: EmulatedCluster) -> str:
    return shared_cluster.nodes[0].address


@pytest.fixture(scope="module")
def worker(shared_cluster: EmulatedCluster) -> str:
    return shared_cluster.nodes[-1].address


def _list(client: RawClient, node: str, root: str, **options: object) -> list[m.FileInfo]:
    return list(client.call(node, M + "List", m.ListRequest(root=root, **options)))  # type: ignore[arg-type]


def _processes(client: RawClient, node: str) -> list[m.ProcessInfo]:
    return list(client.call(node, M + "Processes", EMPTY).messages[0].processes)


def _netstat(client: RawClient, node: str, **options: object) -> list[m.ConnectRecord]:
    request = m.NetstatRequest(
        filter=m.NetstatRequest.LISTENING,
        feature=m.NetstatRequest.Feature(pid=True),
        l4proto=ALL_PROTOCOLS,
        **options,  # type: ignore[arg-type]
    )
    return list(client.call(node, M + "Netstat", request).messages[0].connectrecord)


def _root_mount(client: RawClient, node: str) -> list[str]:
    data = b"".join(
        f.bytes for f in client.call(node, M + "Read", m.ReadRequest(path="/proc/mounts"))
    )
    return next(line.split() for line in data.decode().splitlines() if line.split()[1] == "/")


# ---- the usr-merged root and List ---------------------------------------------------------


def test_root_is_usr_merged(admin: RawClient, cp: str) -> None:
    top = {info.name: info for info in _list(admin, cp, "/")}
    for path, target in (("/bin", "usr/bin"), ("/sbin", "usr/bin"), ("/lib", "usr/lib")):
        assert (top[path].link, top[path].mode & MODE_SYMLINK) == (target, MODE_SYMLINK)
    assert top["/tmp"].mode & (MODE_DIR | MODE_STICKY | 0o777) == MODE_DIR | MODE_STICKY | 0o777
    usr = {info.name: info for info in _list(admin, cp, "/usr")}
    assert usr["/usr/sbin"].link == "bin"
    assert not usr["/usr/bin"].link


def test_usr_bin_holds_init_and_its_links(admin: RawClient, cp: str) -> None:
    entries = {info.relative_name: info for info in _list(admin, cp, "/usr/bin")}
    assert entries["init"].mode & 0o777 == 0o755
    assert not entries["init"].link
    for name in ("poweroff", "shutdown", "reboot", "dashboard"):
        assert entries[name].link == "init"
    assert {"containerd", "containerd-shim-runc-v2", "runc", "udevadm", "modprobe"} <= set(entries)
    assert not set(entries) & {"sh", "bash", "busybox", "sshd", "apk", "ls", "cat"}


def test_list_follows_a_symlinked_root(admin: RawClient, cp: str) -> None:
    """pkg/archiver/walker.go: /bin and /sbin list /usr/bin, under its real path."""
    usr_bin = _list(admin, cp, "/usr/bin")
    for root in ("/bin", "/sbin", "/usr/sbin", "bin/"):
        listed = _list(admin, cp, root)
        assert [(i.name, i.relative_name) for i in listed] == [
            (i.name, i.relative_name) for i in usr_bin
        ]
    assert (usr_bin[0].name, usr_bin[0].relative_name) == ("/usr/bin", ".")


@pytest.mark.parametrize("root", ["/usr/local/bin", "/usr/local/sbin", "/opt/bin", "/bin/sh"])
def test_list_of_a_missing_path_is_unknown_lstat(admin: RawClient, cp: str, root: str) -> None:
    with pytest.raises(GRPCError) as missing:
        _list(admin, cp, root)
    assert missing.value.status == Status.UNKNOWN
    assert missing.value.message == f"lstat {root}: no such file or directory"


def test_list_depth_follows_the_walker(admin: RawClient, cp: str) -> None:
    """Without recurse: the root and its entries; a directory found is not entered."""
    shallow = _list(admin, cp, "/etc")
    assert {i.name.count("/") for i in shallow} == {1, 2}
    assert "/etc/cri/containerd.toml" not in {i.name for i in shallow}
    deep = {i.name for i in _list(admin, cp, "/etc", recurse=True)}
    assert "/etc/cri/containerd.toml" in deep
    # walker.go atMaxDepth counts separators: a depth of 1 under / reaches two levels
    under_root = {i.name for i in _list(admin, cp, "/", recurse=True, recursion_depth=1)}
    assert "/usr/bin" in under_root
    assert "/usr/bin/init" not in under_root


def test_list_type_filter_still_walks_filtered_directories(admin: RawClient, cp: str) -> None:
    links = _list(admin, cp, "/etc", types=[m.ListRequest.SYMLINK])
    names = {i.name for i in links}
    assert "/etc/localtime" in names
    assert "/etc/ssl/certs/ca-certificates" in names  # inside a directory never sent
    assert all(i.mode & MODE_SYMLINK for i in links)


def test_apid_and_trustd_are_bind_mounts_under_system_libexec(
    admin: RawClient, cp: str, worker: str
) -> None:
    """system/services/utils.go prepareRootfs: /system/libexec/<id>/<id>, not in /usr/bin."""
    cp_paths = {i.name for i in _list(admin, cp, "/system/libexec", recurse=True)}
    assert {"/system/libexec/apid/apid", "/system/libexec/trustd/trustd"} <= cp_paths
    worker_paths = {i.name for i in _list(admin, worker, "/system/libexec", recurse=True)}
    assert "/system/libexec/apid/apid" in worker_paths
    assert not any("trustd" in path for path in worker_paths)


def test_read_follows_symlinks_and_reports_real_errors(admin: RawClient, cp: str) -> None:
    via_link = b"".join(
        f.bytes for f in admin.call(cp, M + "Read", m.ReadRequest(path="/sbin/init"))
    )
    assert via_link.startswith(b"\x7fELF")
    with pytest.raises(GRPCError) as missing:
        admin.call(cp, M + "Read", m.ReadRequest(path="/bin/sh"))
    assert (missing.value.status, missing.value.message) == (
        Status.NOT_FOUND,
        "stat /bin/sh: no such file or directory",
    )
    with pytest.raises(GRPCError) as directory:
        admin.call(cp, M + "Read", m.ReadRequest(path="/etc"))
    assert (directory.value.status, directory.value.message) == (
        Status.UNKNOWN,
        "path must be a regular file",
    )


# ---- processes ----------------------------------------------------------------------------


def test_pid1_is_init_at_usr_bin_init(admin: RawClient, cp: str) -> None:
    first = next(p for p in _processes(admin, cp) if p.pid == 1)
    assert (first.command, first.executable, first.args, first.ppid) == (
        "init",
        "/usr/bin/init",
        "/sbin/init",
        0,
    )


def test_system_services_run_as_talos_starts_them(admin: RawClient, cp: str) -> None:
    processes = _processes(admin, cp)
    by_args = {p.args.split(" ", 1)[0]: p for p in processes}
    assert (by_args["/apid"].command, by_args["/apid"].args) == ("apid", "/apid")
    assert by_args["/trustd"].args == "/trustd"
    containerd = [p for p in processes if p.command == "containerd"]
    assert {p.args.split()[2] for p in containerd} == {
        "/system/run/containerd/containerd.sock",
        "/run/containerd/containerd.sock",
    }
    assert all(p.ppid == 1 and p.executable == "/usr/bin/containerd" for p in containerd)
    shims = {p.pid: p for p in processes if p.executable.endswith("containerd-shim-runc-v2")}
    assert all(p.command == "containerd-shim" for p in shims.values())  # comm: 15 chars
    apid_shim = shims[by_args["/apid"].ppid]
    assert "-namespace system -id apid" in apid_shim.args
    manager = next(p for p in processes if "kube-controller-manager" in p.executable)
    assert manager.command == "kube-controller"
    assert "-namespace k8s.io" in shims[manager.ppid].args


def test_pods_run_under_k8s_shims(admin: RawClient, cp: str, worker: str) -> None:
    for node, components in (
        (cp, {"kube-apiserver", "kube-controller", "kube-scheduler", "kube-proxy", "flanneld"}),
        (worker, {"kube-proxy", "flanneld"}),
    ):
        processes = _processes(admin, node)
        shims = {p.pid for p in processes if "containerd-shim" in p.command and "k8s.io" in p.args}
        in_pods = {p.command for p in processes if p.ppid in shims}
        assert components | {"pause"} <= in_pods
        assert "sh" not in {p.command for p in processes}


def test_container_mode_runs_no_udevd_and_metal_runs_it_as_systemd_udevd(
    admin: RawClient,
    cp: str,
    make_cluster: Callable[..., EmulatedCluster],
    client_for: Callable[..., RawClient],
) -> None:
    assert not any("udev" in p.command for p in _processes(admin, cp))
    metal = make_cluster(variants=["metal"], workers=0)
    processes = _processes(client_for(metal), metal.nodes[0].address)
    udevd = next(p for p in processes if p.command == "systemd-udevd")
    assert (udevd.executable, udevd.args, udevd.ppid) == (
        "/usr/bin/udevadm",
        "/sbin/systemd-udevd --resolve-names=never",
        1,
    )
    dashboard = next(p for p in processes if p.command == "dashboard")
    assert (dashboard.executable, dashboard.args) == ("/usr/bin/init", "/sbin/dashboard")


def test_pod_shell_variant_runs_sh_under_a_k8s_shim(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(variants=["pod-shell"], workers=0)
    processes = {p.pid: p for p in _processes(client_for(cluster), cluster.nodes[0].address)}
    shell = next(p for p in processes.values() if p.command == "sh")
    assert shell.args.startswith("/bin/sh -c ")
    shim = processes[shell.ppid]
    assert shim.command == "containerd-shim"
    assert "-namespace k8s.io" in shim.args
    assert any(p.ppid == shell.pid and p.command == "sleep" for p in processes.values())


def test_kube_proxy_disabled_removes_its_pod_and_ports(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(variants=["kube-proxy-disabled"], workers=0)
    client, node = client_for(cluster), cluster.nodes[0].address
    assert "kube-proxy" not in {p.command for p in _processes(client, node)}
    ports = {r.localport for r in _netstat(client, node, netns=HOST)}
    assert not ports & {10256, 10249}
    assert not _answers(node, 10256)


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("pid1-not-machined", ("systemd", "/usr/lib/systemd/systemd", "/sbin/init")),
        ("pid1-systemd-as-init", ("systemd", "/sbin/init", "/sbin/init")),
    ],
)
def test_pid1_faults(
    make_cluster: Callable[..., EmulatedCluster],
    client_for: Callable[..., RawClient],
    fault: str,
    expected: tuple[str, str, str],
) -> None:
    cluster = make_cluster(faults=[fault], workers=0)
    first = next(p for p in _processes(client_for(cluster), cluster.nodes[0].address) if p.pid == 1)
    assert (first.command, first.executable, first.args) == expected


def test_host_shell_fault_runs_sh_as_a_child_of_pid1(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(faults=["host-shell-process"], workers=0)
    shell = next(
        p for p in _processes(client_for(cluster), cluster.nodes[0].address) if p.command == "sh"
    )
    assert (shell.ppid, shell.executable) == (1, "/tmp/busybox")


# ---- sockets ------------------------------------------------------------------------------


def test_netstat_without_hostnetwork_shows_no_host_socket(admin: RawClient, cp: str) -> None:
    """v1alpha1_server.go Netstat: NoHostNetwork = !netns.hostnetwork."""
    assert _netstat(admin, cp) == []


def test_netstat_host_sockets_of_a_control_plane(admin: RawClient, cp: str) -> None:
    records = _netstat(admin, cp, netns=HOST)
    seen = {(r.l4proto, r.localip, r.localport) for r in records}
    assert {
        ("tcp6", "::", 50000),
        ("tcp6", "::", 50001),
        ("tcp6", "::", 2379),
        ("tcp6", "::", 2380),
        ("tcp6", "::", 6443),
        ("tcp6", "::", 10250),
        ("tcp6", "::", 10256),
        ("tcp", "127.0.0.1", 10248),
        ("tcp", "127.0.0.1", 7445),
        ("tcp", "127.0.0.1", 10249),
        ("tcp", "127.0.0.1", 10257),
        ("tcp", "127.0.0.1", 10259),
        ("tcp", "127.0.0.53", 53),
        ("udp", "127.0.0.53", 53),
        ("tcp", "169.254.116.108", 53),
        ("udp", "169.254.116.108", 53),
        ("udp", "0.0.0.0", 4789),
    } <= seen
    assert not {port for _, _, port in seen} & {22, 8080, 8472}
    apid = next(r for r in records if r.localport == 50000)
    assert (apid.state, apid.process.name, apid.remoteip) == (m.ConnectRecord.LISTEN, "apid", "::")
    dns = next(r for r in records if r.localport == 53 and r.l4proto == "tcp")
    assert (dns.process.pid, dns.process.name) == (1, "init")  # machined serves host DNS
    vxlan = next(r for r in records if r.localport == 4789)
    assert (vxlan.state, vxlan.process.pid, vxlan.process.name) == (m.ConnectRecord.CLOSE, 0, "")


def test_netstat_of_a_worker_and_protocol_flags(admin: RawClient, worker: str) -> None:
    ports = {r.localport for r in _netstat(admin, worker, netns=HOST)}
    assert {50000, 10250, 10256} <= ports
    assert not ports & {50001, 2379, 2380, 6443, 10257, 10259, 22}
    tcp4 = m.NetstatRequest(l4proto=m.NetstatRequest.L4proto(tcp=True), netns=HOST)
    records = admin.call(worker, M + "Netstat", tcp4).messages[0].connectrecord
    assert records
    assert all(r.l4proto == "tcp" for r in records)


def test_netstat_pod_namespaces_on_request(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    everywhere = m.NetstatRequest.NetNS(hostnetwork=False, allnetns=True)
    with_coredns = [
        records
        for node in shared_cluster.nodes
        if (records := _netstat(admin, node.address, netns=everywhere))
    ]
    assert with_coredns  # CoreDNS runs somewhere
    for records in with_coredns:
        assert all(r.netns.startswith("cni-") and r.process.name == "coredns" for r in records)
        assert {(r.l4proto, r.localport) for r in records} >= {("udp6", 53), ("tcp6", 53)}


def _answers(address: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2.0)
        return probe.connect_ex((address, port)) == 0


def test_only_wildcard_tcp_sockets_are_opened(shared_cluster: EmulatedCluster) -> None:
    """A scan of the node address finds what it would on a real node: loopback and host-scope
    sockets, and UDP ones, exist only in Netstat."""
    cp, worker = shared_cluster.nodes[0].address, shared_cluster.nodes[-1].address
    for port in (50000, 50001, 6443, 2379, 2380, 10250, 10256):
        assert _answers(cp, port), port
    for port in (50000, 10250, 10256):
        assert _answers(worker, port), port
    for port in (10248, 7445, 10249, 10257, 10259, 53, 4789):
        assert not _answers(cp, port), port
    assert shared_cluster.node(cp).listeners.ports == [2379, 2380, 10250, 10256, 50001]  # type: ignore[union-attr]


# ---- mounts -------------------------------------------------------------------------------


def test_container_root_is_dockers_read_only_overlay(admin: RawClient, cp: str) -> None:
    """pkg/provision/providers/docker/node.go: ReadonlyRootfs."""
    device, _, fstype, options = _root_mount(admin, cp)[:4]
    assert (device, fstype, options.split(",")[0]) == ("overlay", "overlay", "ro")
    stats = admin.call(cp, M + "Mounts", EMPTY).messages[0].stats
    assert next(s for s in stats if s.mounted_on == "/").filesystem == "overlay"


@pytest.mark.parametrize(
    ("variant", "device", "fstype"),
    [("metal", "/dev/loop0", "squashfs"), ("extensions", "none", "overlay")],
)
def test_metal_roots(
    make_cluster: Callable[..., EmulatedCluster],
    client_for: Callable[..., RawClient],
    variant: str,
    device: str,
    fstype: str,
) -> None:
    """internal/app/init/main.go mountRootFS: squashfs, or an overlay of squashfs layers."""
    cluster = make_cluster(variants=["metal", variant], workers=0)
    client, node = client_for(cluster), cluster.nodes[0].address
    root = _root_mount(client, node)
    assert (root[0], root[2], root[3].split(",")[0]) == (device, fstype, "ro")
    if variant == "extensions":
        assert root[3].endswith("lowerdir=/layers/layer1:/layers/layer0:/layers/root")
    stats = client.call(node, M + "Mounts", EMPTY).messages[0].stats
    assert next(s for s in stats if s.mounted_on == "/").available == 0


def test_extensions_add_files_under_usr_local(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(variants=["extensions"], workers=0)
    names = {
        i.relative_name
        for i in _list(client_for(cluster), cluster.nodes[0].address, "/usr/local/sbin")
    }
    assert {"iscsiadm", "iscsid"} <= names
