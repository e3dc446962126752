"""The static side of an emulated node: root filesystem, processes, mounts, memory, sockets.

Facts §13: the root filesystem is a read-only SquashFS image; PID 1 is machined; there is no
shell, SSH, GNU utilities or busybox, and no package manager. Fault profiles bend exactly
these (``shell-present``, ``ssh-open``, ``rw-rootfs``, ``pid1-not-machined``, ``extra-port``).
Plain Python data; the servicers render it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "IMAGE_BUILT",
    "FileEntry",
    "Listener",
    "MountEntry",
    "ProcessEntry",
    "build_rootfs",
    "listeners_for",
    "meminfo",
    "mounts_for",
    "os_release",
    "processes_for",
]

# Go os.FileMode bits (facts §3: FileInfo.mode is Go's os.FileMode).
MODE_DIR = 1 << 31
MODE_SYMLINK = 1 << 27
# When the image was built (INFERRED: Talos builds are reproducible, so every file of the
# SquashFS root carries the build's timestamp; v1.13.6 was released 2026-07-09, facts §13).
IMAGE_BUILT = int(dt.datetime(2026, 8, 20, 9, 30, tzinfo=dt.UTC).timestamp())


@dataclass(frozen=True)
class FileEntry:
    path: str
    kind: str  # "file", "dir" or "symlink"
    perm: int = 0o644
    content: bytes = b""
    link: str = ""
    mtime: int = IMAGE_BUILT  # Unix seconds (facts §3: FileInfo.modified)

    @property
    def mode(self) -> int:
        if self.kind == "dir":
            return MODE_DIR | self.perm
        if self.kind == "symlink":
            return MODE_SYMLINK | 0o777
        return self.perm

    @property
    def size(self) -> int:
        if self.kind == "dir":
            return 4096
        if self.kind == "symlink":
            return len(self.link)
        return len(self.content)


def os_release(version: str) -> bytes:
    # facts §11: /etc/os-release says ID=talos. The other keys are INFERRED from a Talos image.
    return (
        'NAME="Talos"\n'
        "ID=talos\n"
        f"VERSION_ID={version}\n"
        f'PRETTY_NAME="Talos ({version})"\n'
        'HOME_URL="https://www.talos.dev/"\n'
        'BUG_REPORT_URL="https://github.com/siderolabs/talos/issues"\n'
        'VENDOR_NAME="Sidero Labs"\n'
        'VENDOR_URL="https://www.siderolabs.com/"\n'
    ).encode()


_ELF_STUB = b"\x7fELF\x02\x01\x01" + bytes(57)  # a 64-byte ELF header stand-in

_DIRS = (
    "/",
    "/dev",
    "/etc",
    "/etc/cri",
    "/etc/kubernetes",
    "/etc/ssl",
    "/etc/ssl/certs",
    "/opt",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/system",
    "/system/state",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/local",
    "/usr/share",
    "/var",
    "/var/lib",
    "/var/lib/kubelet",
    "/var/log",
    "/var/run",
)

# Talos ships one machined binary; the other daemons are symlinks to it (INFERRED layout).
_SBIN_LINKS = ("apid", "dashboard", "poweroff", "shutdown", "trustd", "wrapperd")
_USR_BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "udevadm", "xfs_repair")


def build_rootfs(
    *,
    hostname: str,
    version: str,
    controlplane: bool,
    shell: bool,
    sshd: bool,
    package_manager: bool = False,
    extra_files: Mapping[str, bytes] | None = None,
) -> dict[str, FileEntry]:
    """The node's read-only root filesystem as ``{path: entry}``."""
    entries: dict[str, FileEntry] = {d: FileEntry(d, "dir", 0o755) for d in _DIRS}
    files: dict[str, bytes] = {
        "/etc/os-release": os_release(version),
        "/etc/hostname": f"{hostname}\n".encode(),
        "/etc/hosts": f"127.0.0.1 localhost\n::1 localhost\n127.0.1.1 {hostname}\n".encode(),
        "/etc/resolv.conf": b"nameserver 127.0.0.53\n",
        "/etc/machine-id": b"3c0f0f1a2b3c4d5e6f708192a3b4c5d6\n",
        "/etc/ssl/certs/ca-certificates.crt": b"# system trust bundle\n",
        "/etc/cri/containerd.toml": b"version = 3\n",
        "/etc/kubernetes/kubelet.yaml": b"apiVersion: kubelet.config.k8s.io/v1beta1\n",
        "/sbin/init": _ELF_STUB,
        **{f"/usr/bin/{name}": _ELF_STUB for name in _USR_BINARIES},
    }
    if controlplane:
        entries["/etc/kubernetes/manifests"] = FileEntry("/etc/kubernetes/manifests", "dir", 0o755)
        entries["/var/lib/etcd"] = FileEntry("/var/lib/etcd", "dir", 0o700)
    if shell:  # fault shell-present
        entries["/bin"] = FileEntry("/bin", "dir", 0o755)
        files["/bin/sh"] = files["/bin/bash"] = files["/bin/busybox"] = _ELF_STUB
    if sshd:  # fault ssh-open
        files["/usr/sbin/sshd"] = _ELF_STUB
        entries["/usr/sbin"] = FileEntry("/usr/sbin", "dir", 0o755)
    if package_manager:  # fault package-manager-present
        files["/usr/bin/apk"] = files["/sbin/apk"] = _ELF_STUB
    files.update(extra_files or {})
    for path, content in files.items():
        perm = 0o755 if content.startswith(b"\x7fELF") else 0o644
        entries[path] = FileEntry(path, "file", perm, content)
    for name in _SBIN_LINKS:
        entries[f"/sbin/{name}"] = FileEntry(f"/sbin/{name}", "symlink", link="/sbin/init")
    entries["/lib"] = FileEntry("/lib", "symlink", link="/usr/lib")
    return entries


@dataclass(frozen=True)
class MountEntry:
    device: str
    mountpoint: str
    fstype: str
    options: str
    size: int
    available: int


_GIB = 1 << 30


def mounts_for(*, platform: str, rw_root: bool) -> list[MountEntry]:
    # facts §13: the root filesystem is a read-only SquashFS image (fault rw-rootfs flips it).
    root_options = "rw,relatime" if rw_root else "ro,relatime"
    var_device = "/dev/sda6" if platform == "metal" else "/dev/vda1"  # INFERRED devices
    return [
        MountEntry("/dev/loop0", "/", "squashfs", root_options, 86 << 20, 0),
        MountEntry("devtmpfs", "/dev", "devtmpfs", "rw,nosuid,size=4096k", 4 << 20, 4 << 20),
        MountEntry("proc", "/proc", "proc", "rw,nosuid,nodev,noexec,relatime", 0, 0),
        MountEntry("sysfs", "/sys", "sysfs", "rw,nosuid,nodev,noexec,relatime", 0, 0),
        MountEntry("tmpfs", "/run", "tmpfs", "rw,nosuid,nodev,relatime", 4 * _GIB, 4 * _GIB),
        MountEntry("tmpfs", "/system", "tmpfs", "rw,relatime", 4 * _GIB, 4 * _GIB),
        MountEntry("tmpfs", "/tmp", "tmpfs", "rw,nosuid,nodev,relatime", 64 << 20, 64 << 20),
        MountEntry(var_device, "/var", "xfs", "rw,relatime", 20 * _GIB, 17 * _GIB),
    ]


def proc_mounts(mounts: Iterable[MountEntry]) -> bytes:
    return "".join(
        f"{m.device} {m.mountpoint} {m.fstype} {m.options} 0 0\n" for m in mounts
    ).encode()


def meminfo() -> dict[str, int]:
    """/proc/meminfo values in kB (facts §3: MemInfo is in kB), for an 8 GiB machine."""
    return {
        "memtotal": 8_148_128,
        "memfree": 5_032_448,
        "memavailable": 6_921_336,
        "buffers": 4_312,
        "cached": 1_861_204,
        "swapcached": 0,
        "active": 1_102_364,
        "inactive": 1_533_660,
        "activeanon": 812_004,
        "inactiveanon": 0,
        "activefile": 290_360,
        "inactivefile": 1_533_660,
        "unevictable": 86_016,
        "mlocked": 0,
        "swaptotal": 0,
        "swapfree": 0,
        "dirty": 212,
        "writeback": 0,
        "anonpages": 852_132,
        "mapped": 493_104,
        "shmem": 46_220,
        "slab": 186_144,
        "sreclaimable": 96_616,
        "sunreclaim": 89_528,
        "kernelstack": 9_664,
        "pagetables": 12_836,
        "commitlimit": 4_074_064,
        "committedas": 3_209_732,
        "vmalloctotal": 34_359_738_367,
        "vmallocused": 28_472,
        "hugepagesize": 2_048,
        "directmap4k": 212_800,
        "directmap2m": 8_175_616,
        "directmap1g": 2_097_152,
    }


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


# The processes each running service contributes (command, executable, args).
_SERVICE_PROCESSES: Mapping[str, tuple[str, str, str]] = {
    "apid": ("apid", "/sbin/apid", "/apid"),
    "trustd": ("trustd", "/sbin/trustd", "/trustd"),
    "containerd": (
        "containerd",
        "/usr/bin/containerd",
        "/bin/containerd --address /system/run/containerd/containerd.sock",
    ),
    "cri": (
        "containerd",
        "/usr/bin/containerd",
        "/bin/containerd --config /etc/cri/containerd.toml",
    ),
    "udevd": ("udevd", "/sbin/udevd", "/sbin/udevd --resolve-names=never"),
    "etcd": ("etcd", "/usr/local/bin/etcd", "/usr/local/bin/etcd --name=node"),
    "kubelet": (
        "kubelet",
        "/usr/local/bin/kubelet",
        "/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.yaml",
    ),
    "dashboard": ("dashboard", "/sbin/dashboard", "/sbin/dashboard"),
}
_CONTROL_PLANE_PODS = (
    ("kube-apiserver", "/usr/local/bin/kube-apiserver", "/usr/local/bin/kube-apiserver"),
    (
        "kube-controller-manager",
        "/usr/local/bin/kube-controller-manager",
        "/usr/local/bin/kube-controller-manager",
    ),
    ("kube-scheduler", "/usr/local/bin/kube-scheduler", "/usr/local/bin/kube-scheduler"),
)


def processes_for(
    *, running_services: Iterable[str], controlplane: bool, pid1_machined: bool, sshd: bool
) -> list[ProcessEntry]:
    """The process table: PID 1 machined (facts §13), then one process per running service."""
    if pid1_machined:
        first = ProcessEntry(1, 0, "init", "/sbin/init", "/sbin/init", threads=20)
    else:  # fault pid1-not-machined
        first = ProcessEntry(1, 0, "systemd", "/usr/lib/systemd/systemd", "/sbin/init")
    processes = [first]
    pid = 100
    for service in running_services:
        if service in _SERVICE_PROCESSES:
            command, executable, args = _SERVICE_PROCESSES[service]
            processes.append(ProcessEntry(pid, 1, command, executable, args))
            pid += 37
    if controlplane and "kubelet" in running_services:
        for command, executable, args in _CONTROL_PLANE_PODS:
            processes.append(ProcessEntry(pid, 1, command, executable, args))
            pid += 37
    if sshd:  # fault ssh-open
        processes.append(ProcessEntry(pid, 1, "sshd", "/usr/sbin/sshd", "/usr/sbin/sshd -D"))
    return processes


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket as the node's netstat shows it."""

    port: int
    process: str
    bind: str  # "::" (tcp6 wildcard), "0.0.0.0", "127.0.0.1" or "node" (the node address)
    reachable: bool = True  # whether the emulator opens it on the node address

    @property
    def l4proto(self) -> str:
        return "tcp6" if ":" in self.bind else "tcp"


SSH_PORT = 22
EXTRA_PORT = 8080


def listeners_for(*, controlplane: bool, sshd: bool, extra_port: bool) -> list[Listener]:
    """Listening sockets (issue #3: CPs 50000/50001/6443/2379/2380/10250, workers 50000/10250)."""
    sockets = [Listener(50000, "apid", "::")]
    if controlplane:
        sockets += [
            Listener(50001, "trustd", "::"),
            Listener(6443, "kube-apiserver", "::"),
            Listener(2379, "etcd", "node"),
            Listener(2380, "etcd", "node"),
        ]
    sockets.append(Listener(10250, "kubelet", "::"))
    # Loopback-only sockets a real node has; a scan of the node address never sees them.
    sockets += [
        Listener(10248, "kubelet", "127.0.0.1", reachable=False),
        Listener(7445, "machined", "127.0.0.1", reachable=False),
    ]
    if sshd:  # fault ssh-open
        sockets.append(Listener(SSH_PORT, "sshd", "0.0.0.0"))
    if extra_port:  # fault extra-port
        sockets.append(Listener(EXTRA_PORT, "python3", "0.0.0.0"))
    return sockets
