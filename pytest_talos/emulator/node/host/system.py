"""The static side of an emulated node: root filesystem and memory (and, re-exported from
:mod:`.mounts`, :mod:`.processes` and :mod:`.sockets`, its mounts, processes and sockets).

The root is the Talos image: usr-merged (siderolabs/pkgs ``fhs/pkg.yaml``: ``/bin`` and
``/sbin`` link to ``usr/bin``, ``/usr/sbin`` to ``bin``), machined installed as
``/usr/bin/init`` with ``poweroff``, ``shutdown``, ``reboot`` and ``dashboard`` linked to it
(``Dockerfile``, the rootfs stage), no shell, SSH, GNU utilities, busybox or package manager,
and no ``/usr/local/bin``, ``/usr/local/sbin`` or ``/opt/bin``. Fault profiles bend exactly
these, through the executables they declare (``FaultProfile.rootfs_executables``) and the
mount table.
Plain Python data; the servicers render it.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytest_talos.emulator.node.host.mounts import MountEntry, mounts_for, proc_mounts
from pytest_talos.emulator.node.host.processes import ProcessEntry, processes_for
from pytest_talos.emulator.node.host.sockets import (
    EXTRA_PORT,
    SSH_PORT,
    ComponentBinds,
    Listener,
    cilium_listeners,
    component_binds,
    listeners_for,
    pod_listeners,
)

__all__ = [
    "EXTRA_PORT",
    "IMAGE_BUILT",
    "SSH_PORT",
    "ComponentBinds",
    "FileEntry",
    "Listener",
    "MountEntry",
    "ProcessEntry",
    "build_rootfs",
    "cilium_listeners",
    "component_binds",
    "listeners_for",
    "meminfo",
    "mounts_for",
    "os_release",
    "pod_listeners",
    "proc_mounts",
    "processes_for",
    "resolve",
]

# Go os.FileMode bits (FileInfo.mode is Go's os.FileMode, api/machine/machine.proto).
MODE_DIR = 1 << 31
MODE_SYMLINK = 1 << 27
MODE_STICKY = 1 << 20
# When the image was built (INFERRED: Talos builds are reproducible, so every file of the
# SquashFS root carries the build's timestamp).
IMAGE_BUILT = int(dt.datetime(2026, 8, 20, 9, 30, tzinfo=dt.UTC).timestamp())


@dataclass(frozen=True)
class FileEntry:
    path: str
    kind: str  # "file", "dir" or "symlink"
    perm: int = 0o644
    content: bytes = b""
    link: str = ""
    mtime: int = IMAGE_BUILT  # Unix seconds (FileInfo.modified)

    @property
    def mode(self) -> int:
        if self.kind == "dir":
            return MODE_DIR | (MODE_STICKY if self.perm & 0o1000 else 0) | self.perm & 0o777
        if self.kind == "symlink":
            return MODE_SYMLINK | 0o777
        return self.perm & 0o777

    @property
    def size(self) -> int:
        if self.kind == "dir":
            return 4096
        if self.kind == "symlink":
            return len(self.link)
        return len(self.content)


def os_release(version: str) -> bytes:
    # pkg/machinery/version/os-release says ID=talos. The other keys are INFERRED.
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


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_ELF_STUB = b"\x7fELF\x02\x01\x01" + bytes(57)  # a 64-byte ELF header stand-in

# siderolabs/pkgs fhs/pkg.yaml: the skeleton every Talos image starts from.
_FHS_DIRS = {
    **dict.fromkeys(("/", "/dev", "/proc", "/sys", "/etc", "/opt", "/run", "/run/lock"), 0o755),
    **dict.fromkeys(("/usr", "/usr/bin", "/usr/lib", "/usr/var", "/usr/include"), 0o755),
    **dict.fromkeys(("/usr/src", "/var", "/var/log", "/var/mail", "/var/spool"), 0o755),
    "/root": 0o750,
    "/tmp": 0o1777,
    "/var/tmp": 0o1777,
}
_FHS_LINKS = {
    "/bin": "usr/bin",
    "/sbin": "usr/bin",
    "/lib": "usr/lib",
    "/lib64": "usr/lib",
    "/usr/sbin": "bin",
    "/usr/lib64": "lib",
    "/var/run": "../run",
    "/var/lock": "../run/lock",
}
# Dockerfile, rootfs stage: the directories it creates after the packages.
_IMAGE_DIRS = _words(
    """
    /boot /boot/EFI /mnt /system /.extra /etc/iscsi /etc/nvme /etc/cri /etc/cri/conf.d
    /etc/cri/conf.d/hosts /etc/kubernetes /etc/kubernetes/manifests /etc/cni /etc/cni/net.d
    /etc/ssl /etc/ssl/certs /etc/containerd /etc/lvm /etc/selinux /etc/selinux/targeted
    /etc/selinux/targeted/contexts /etc/selinux/targeted/contexts/files /usr/etc
    /usr/lib/firmware /usr/lib/modules /usr/lib/udev /usr/lib/udev/rules.d /usr/libexec
    /usr/libexec/kubernetes /usr/local /usr/local/share /usr/local/lib /usr/local/lib/kubelet
    /usr/local/lib/kubelet/credentialproviders /usr/share /usr/share/zoneinfo
    /usr/share/zoneinfo/Etc /opt/containerd /opt/containerd/bin /opt/containerd/lib /opt/cni
    /opt/cni/bin
    """
)
_IMAGE_FILES = _words(  # Dockerfile: copied (hack/...) or touched
    """
    /etc/nfsmount.conf /etc/containerd/config.toml /etc/cri/conf.d/00-base.part
    /etc/cri/conf.d/cri.toml /etc/cri/conf.d/01-registries.part
    /etc/cri/conf.d/20-customization.part /etc/cri/conf.d/base-spec.json /etc/lvm/lvm.conf
    /etc/extensions.yaml /etc/iscsi/initiatorname.iscsi /etc/nvme/hostid /etc/nvme/hostnqn
    /etc/selinux/targeted/contexts/files/file_contexts /usr/share/zoneinfo/Etc/UTC
    """
)
_IMAGE_LINKS = {
    "/etc/localtime": "/usr/share/zoneinfo/Etc/UTC",
    "/etc/ssl/certs/ca-certificates": "ca-certificates.crt",
    "/etc/pki": "/etc/ssl",
    "/etc/ca-certificates": "/etc/ssl",
    "/usr/share/ca-certificates": "/etc/ssl",
    "/usr/local/share/ca-certificates": "/etc/ssl",
    # Dockerfile: poweroff, shutdown, reboot and dashboard are links to init (machined)
    **{f"/usr/bin/{name}": "init" for name in ("dashboard", "poweroff", "reboot", "shutdown")},
    # siderolabs/pkgs systemd-udevd: systemd-udevd is udevadm under another name
    "/usr/bin/systemd-udevd": "udevadm",
}
# Binaries of the packages the rootfs stage copies (containerd without ctr, runc, udevd,
# kmod as modprobe, xfsprogs, e2fsprogs, dosfstools, cryptsetup, lvm2, iptables, nftables);
# a representative subset of each package's programs (INFERRED selection).
_USR_BINARIES = _words(
    """
    containerd containerd-shim-runc-v2 cryptsetup dmsetup e2fsck fsck.fat iptables lvm mke2fs
    mkfs.fat mkfs.xfs modprobe nft resize2fs runc udevadm xfs_growfs xfs_repair
    xtables-nft-multi
    """
)
_CNI_PLUGINS = ("bridge", "firewall", "flannel", "host-local", "loopback", "portmap")
# siderolabs/extensions: what the default extensions of the `extensions` variant install
# (storage/iscsi-tools/pkg.yaml, iscsid.yaml; guest-agents/qemu-guest-agent).
_EXTENSION_FILES: Mapping[str, tuple[str, ...]] = {
    "iscsi-tools": _words(
        """
        /usr/local/etc/containers/iscsid.yaml /usr/local/etc/containers/tgtd.yaml
        /usr/local/etc/iscsi/iscsid.conf /usr/local/sbin/iscsiadm /usr/local/sbin/iscsid
        /usr/local/sbin/iscsid-wrapper /usr/local/sbin/tgtd
        """
    ),
    "qemu-guest-agent": (
        "/usr/local/etc/containers/qemu-guest-agent.yaml",
        "/usr/local/lib/containers/qemu-guest-agent/usr/local/bin/qemu-ga",
    ),
}


def build_rootfs(
    *,
    hostname: str,
    version: str,
    controlplane: bool,
    extensions: Iterable[str] = (),
    extra_executables: Iterable[str] = (),
) -> dict[str, FileEntry]:
    """The node's root filesystem as ``{path: entry}``: the image plus what boot creates,
    plus ``extra_executables`` (what its faults drop: ``FaultProfile.rootfs_executables``)."""
    dirs = {**_FHS_DIRS, **dict.fromkeys(_IMAGE_DIRS, 0o755), **_runtime_dirs(controlplane)}
    files: dict[str, bytes] = {
        **dict.fromkeys(_IMAGE_FILES, b""),
        "/etc/os-release": os_release(version),
        "/etc/cri/containerd.toml": b"version = 3\n",
        "/etc/ssl/certs/ca-certificates.crt": b"# system trust bundle\n",
        "/usr/bin/init": _ELF_STUB,
        **{f"/usr/bin/{name}": _ELF_STUB for name in _USR_BINARIES},
        **{f"/opt/cni/bin/{name}": _ELF_STUB for name in _CNI_PLUGINS},
        **_runtime_files(hostname, controlplane),
    }
    links = {**_FHS_LINKS, **_IMAGE_LINKS}
    for name in extensions:
        files.update(_extension_files(name))
    files.update(dict.fromkeys(extra_executables, _ELF_STUB))
    entries = {path: FileEntry(path, "dir", perm) for path, perm in dirs.items()}
    for path, content in files.items():
        _add_parents(entries, path)
        perm = 0o755 if content.startswith(b"\x7fELF") else 0o644
        entries[path] = FileEntry(path, "file", perm, content)
    for path, target in links.items():
        entries[path] = FileEntry(path, "symlink", link=target)
    return entries


def _runtime_dirs(controlplane: bool) -> dict[str, int]:
    """What boot creates on /system (tmpfs) and /var (EPHEMERAL); INFERRED beyond the paths
    Talos's constants name (system/services/utils.go: /system/libexec/<id>, 0o711)."""
    made = """
        /system/state /system/run /system/run/containerd /system/secrets /system/var /var/lib
        /var/lib/containerd /var/lib/kubelet /var/log/pods /var/log/containers /run/containerd
    """
    dirs = dict.fromkeys(_words(made), 0o755)
    dirs["/system/libexec"] = 0o755
    for service in ("apid", "trustd") if controlplane else ("apid",):
        dirs[f"/system/libexec/{service}"] = 0o711
    if controlplane:
        dirs["/var/lib/etcd"] = 0o700
    return dirs


def _runtime_files(hostname: str, controlplane: bool) -> dict[str, bytes]:
    files = {
        "/etc/hostname": f"{hostname}\n".encode(),
        "/etc/hosts": f"127.0.0.1 localhost\n::1 localhost\n127.0.1.1 {hostname}\n".encode(),
        "/etc/resolv.conf": b"nameserver 127.0.0.53\n",
        "/etc/machine-id": b"3c0f0f1a2b3c4d5e6f708192a3b4c5d6\n",
        "/etc/kubernetes/kubelet.yaml": b"apiVersion: kubelet.config.k8s.io/v1beta1\n",
        # utils.go prepareRootfs: /sbin/init bind-mounted over an empty /system/libexec/<id>/<id>
        "/system/libexec/apid/apid": _ELF_STUB,
    }
    if controlplane:
        files["/system/libexec/trustd/trustd"] = _ELF_STUB
    return files


def _extension_files(name: str) -> dict[str, bytes]:
    # Every extension brings a container directory and its service definition (INFERRED for
    # names not in the table).
    paths = _EXTENSION_FILES.get(name) or (f"/usr/local/etc/containers/{name}.yaml",)
    return {path: _ELF_STUB if "/bin/" in path or "/sbin/" in path else b"" for path in paths}


def _add_parents(entries: dict[str, FileEntry], path: str) -> None:
    parent = posixpath.dirname(path)
    while parent not in entries:
        entries[parent] = FileEntry(parent, "dir", 0o755)
        parent = posixpath.dirname(parent)


def resolve(rootfs: Mapping[str, FileEntry], path: str, *, follow_last: bool = True) -> str:
    """``path`` with its symlinks resolved against ``rootfs`` (like Go's filepath.EvalSymlinks).

    ``follow_last=False`` keeps a final symlink itself (as lstat does). A missing component
    ends the walk: the rest is appended as it is, so a lookup of the result finds nothing.
    """
    parts = [part for part in path.split("/") if part and part != "."]
    current, hops = "/", 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = posixpath.dirname(current)
            continue
        candidate = posixpath.join(current, part)
        entry = rootfs.get(candidate)
        if entry is None:
            return posixpath.join(candidate, *parts)
        if entry.kind != "symlink" or (not parts and not follow_last) or hops > 40:
            current = candidate  # more than 40 links: the kernel's ELOOP (INFERRED: stop)
            continue
        hops += 1
        parts = [p for p in entry.link.split("/") if p and p != "."] + parts
        current = "/" if entry.link.startswith("/") else current
    return current


def meminfo() -> dict[str, int]:
    """/proc/meminfo values in kB (MemInfo is in kB), for an 8 GiB machine."""
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


# The kernel of Talos v1.13 (the version string the kernel log's first line carries).
KERNEL_RELEASE = "6.18.24-talos"


def proc_version() -> bytes:
    """/proc/version of a node that boots the image's kernel (metal); INFERRED build host
    and compiler, matching the kernel log's first line."""
    return (
        f"Linux version {KERNEL_RELEASE} (@buildkitsandbox) (gcc (GCC) 15.2.0, GNU ld (GNU "
        "Binutils) 2.45) #1 SMP\n"
    ).encode()


def proc_cmdline(platform: str) -> bytes:
    """/proc/cmdline of a v1.13.9 amd64 image booted on ``platform`` as the imager builds it
    (pkg/imager/imager.go buildCmdline): talos.platform=<name>, the platform's own args
    (metal amd64: console=tty0, platform/metal/metal.go KernelArgs; ttyS0 was dropped in
    1.8, quirks.SupportsMetalPlatformConsoleTTYS0), then kernel.DefaultArgs
    (pkg/machinery/kernel/kernel.go) with the quirks of 1.13: no IMA (up to 1.10 only),
    selinux=1, module.sig_enforce=1, proc_mem.force_override=never."""
    args = [
        f"talos.platform={platform}",
        "console=tty0",
        "init_on_alloc=1",
        "slab_nomerge=",
        "pti=on",
        "consoleblank=0",
        "nvme_core.io_timeout=4294967295",
        "printk.devkmsg=on",
        "selinux=1",
        "module.sig_enforce=1",
        "proc_mem.force_override=never",
    ]
    return (" ".join(args) + "\n").encode()
