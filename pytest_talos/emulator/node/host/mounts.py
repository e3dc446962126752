"""The mount table of an emulated node (``/proc/mounts`` and the Mounts RPC): the read-only
root (Docker's overlay in container mode, the squashfs image or an overlay of extension
layers on metal), pseudo filesystems and tmpfs, the EPHEMERAL and STATE partitions, the
writable ``constants.Overlays``, and the mounts inside the image's trees: udevd's overlay on
metal, each extension service's overlay, the read-only binds of machined's /etc files and
of /etc/extensions.yaml, and Docker's writable binds of /etc/hosts, /etc/hostname and
/etc/resolv.conf in container mode. Faults bend exactly these
(``FaultProfile.writable_mounts``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["MountEntry", "mounts_for", "proc_mounts"]


@dataclass(frozen=True)
class MountEntry:
    device: str
    mountpoint: str
    fstype: str
    options: str
    size: int
    available: int


_GIB = 1 << 30


def mounts_for(
    *,
    platform: str,
    extensions: int,
    rw_root: bool,
    rw_usr: bool = False,
    extension_services: Sequence[str] = (),
    rw_binds: Iterable[str] = (),
) -> list[MountEntry]:
    """/proc/mounts of the node, with the sizes statfs reports (Mounts API). ``rw_binds``:
    read-only binds a fault makes writable (fault resolv-conf-writable-on-metal)."""
    mounts = [_root_mount(platform, extensions, rw_root), *_other_mounts(platform)]
    writable = frozenset(rw_binds)
    mounts += [
        _writable(m) if m.mountpoint in writable else m
        for m in _image_mounts(platform, extensions, extension_services)
    ]
    if rw_usr:  # a writable overlay over the image's /usr, upper on /var
        options = "rw,relatime,lowerdir=/usr,upperdir=/var/lib/usr-upper,workdir=/var/lib/usr-work"
        mounts.append(MountEntry("overlay", "/usr", "overlay", options, 20 * _GIB, 17 * _GIB))
    return mounts


def _root_mount(platform: str, extensions: int, rw_root: bool) -> MountEntry:
    ro = "rw" if rw_root else "ro"  # a fault can flip it
    if platform == "container":
        # pkg/provision/providers/docker/node.go: ReadonlyRootfs, so Docker mounts its overlay
        # read-only; statfs reports the host disk under it (sizes INFERRED)
        docker = "/var/lib/docker/overlay2"
        options = (
            f"{ro},relatime,lowerdir={docker}/l/TALOS:{docker}/l/BASE,"
            f"upperdir={docker}/talos/diff,workdir={docker}/talos/work"
        )
        return MountEntry("overlay", "/", "overlay", options, 100 * _GIB, 61 * _GIB)
    if extensions:
        # internal/app/init/main.go mountRootFS: a read-only overlay of the squashfs layers
        # (one per extension, then the root image); fsopen without a source shows "none"
        lowers = ":".join(f"/layers/layer{i}" for i in reversed(range(extensions)))
        options = f"{ro},relatime,lowerdir={lowers}:/layers/root"
        return MountEntry("none", "/", "overlay", options, 96 << 20, 0)
    # internal/app/init/main.go mountRootFS: the squashfs image on a loop device
    return MountEntry("/dev/loop0", "/", "squashfs", f"{ro},relatime,errors=continue", 86 << 20, 0)


def _other_mounts(platform: str) -> list[MountEntry]:
    # Pseudo filesystems, tmpfs and the EPHEMERAL/STATE partitions; devices and sizes INFERRED
    # (docker/node.go: tmpfs /run, /system, /tmp and volumes for /var, /system/state).
    var_device, state_device = (
        ("/dev/sda6", "/dev/sda5") if platform != "container" else ("/dev/vda1", "/dev/vda1")
    )
    var_fs = "xfs" if platform != "container" else "ext4"
    return [
        MountEntry("devtmpfs", "/dev", "devtmpfs", "rw,nosuid,size=4096k", 4 << 20, 4 << 20),
        MountEntry("proc", "/proc", "proc", "rw,nosuid,nodev,noexec,relatime", 0, 0),
        MountEntry("sysfs", "/sys", "sysfs", "rw,nosuid,nodev,noexec,relatime", 0, 0),
        MountEntry("tmpfs", "/run", "tmpfs", "rw,nosuid,nodev,relatime", 4 * _GIB, 4 * _GIB),
        MountEntry("tmpfs", "/system", "tmpfs", "rw,relatime", 4 * _GIB, 4 * _GIB),
        MountEntry("tmpfs", "/tmp", "tmpfs", "rw,nosuid,nodev,relatime", 64 << 20, 64 << 20),
        MountEntry(var_device, "/var", var_fs, "rw,relatime", 20 * _GIB, 17 * _GIB),
        MountEntry(state_device, "/system/state", var_fs, "rw,relatime", 100 << 20, 90 << 20),
        *(_overlay(path, platform) for path in _OVERLAYS),
    ]


# constants.Overlays: writable overlays (metal) or Docker volumes (docker/node.go).
_OVERLAYS = ("/etc/cni", "/etc/kubernetes", "/usr/libexec/kubernetes", "/opt")


def _overlay(path: str, platform: str) -> MountEntry:
    if platform == "container":
        return MountEntry("/dev/vda1", path, "ext4", "rw,relatime", 100 * _GIB, 61 * _GIB)
    name = path.strip("/").replace("/", "-")  # mount/v3 NewOverlayWithBasePath
    options = (
        f"rw,relatime,lowerdir={path},upperdir=/var/system/overlays/{name}-diff,"
        f"workdir=/var/system/overlays/{name}-workdir"
    )
    return MountEntry("overlay", path, "overlay", options, 20 * _GIB, 17 * _GIB)


def _image_mounts(
    platform: str, extensions: int, extension_services: Sequence[str]
) -> list[MountEntry]:
    """The mounts inside the image's trees that Talos (or Docker) makes after the root."""
    found: list[MountEntry] = []
    if platform == "container":
        # Docker bind-mounts these three into every container, writable (Docker's own
        # behaviour, not Talos source; the source is the host disk, INFERRED device)
        found += [
            MountEntry("/dev/vda1", path, "ext4", "rw,relatime", 100 * _GIB, 61 * _GIB)
            for path in ("/etc/resolv.conf", "/etc/hostname", "/etc/hosts")
        ]
        etc_files: tuple[str, ...] = ("machine-id",)
    else:
        # v1alpha1_sequencer_tasks.go StartUdevd: a system overlay on /usr/lib/udev
        found.append(_system_overlay("/usr/lib/udev"))
        etc_files = ("machine-id", "resolv.conf", "hosts")
        if extensions:
            # internal/app/init/main.go: /etc/extensions.yaml bound read-only (BindReadonly)
            found.append(_ro_bind("/etc/extensions.yaml"))
    # controllers/files/etcfile.go createBindMountFile -> internal/pkg/mount/v3/mount.go
    # BindReadonly: /etc files machined writes (controllers/cluster/node_identity.go
    # machine-id, controllers/network/etcfile.go resolv.conf (not in containers) and
    # hosts) are read-only binds of their /system/etc copies (in containers, over Docker's
    # hosts: not modelled, INFERRED)
    found += [_ro_bind(f"/etc/{name}") for name in etc_files]
    # system/services/extension.go PreFunc: each extension service's rootfs is re-mounted
    # as a writable system overlay while it runs
    found += [
        _system_overlay(f"/usr/local/lib/containers/{name.removeprefix('ext-')}")
        for name in extension_services
    ]
    return found


def _writable(mount: MountEntry) -> MountEntry:
    options = ",".join("rw" if o == "ro" else o for o in mount.options.split(","))
    return MountEntry(
        mount.device, mount.mountpoint, mount.fstype, options, mount.size, mount.available
    )


def _ro_bind(path: str) -> MountEntry:
    # the source is a file on the /system tmpfs (constants.SystemEtcPath); options INFERRED
    return MountEntry("tmpfs", path, "tmpfs", "ro,relatime", 4 * _GIB, 4 * _GIB)


def _system_overlay(path: str) -> MountEntry:
    # internal/pkg/mount/v3/helpers.go NewSystemOverlay: upper and work dirs under
    # constants.SystemOverlaysPath (/system/overlays), named after the target
    name = path.strip("/").replace("/", "-")
    options = (
        f"rw,relatime,lowerdir={path},upperdir=/system/overlays/{name}-diff,"
        f"workdir=/system/overlays/{name}-workdir"
    )
    return MountEntry("overlay", path, "overlay", options, 4 * _GIB, 4 * _GIB)


def proc_mounts(mounts: Iterable[MountEntry]) -> bytes:
    return "".join(
        f"{m.device} {m.mountpoint} {m.fstype} {m.options} 0 0\n" for m in mounts
    ).encode()
