"""The rules of the immutability checks that need no node (unit-tested on their own)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pytest_talos import models
from pytest_talos.checks import SHELL_DIRECTORIES, pod_workload_pids

__all__ = [
    "IMAGE_TREES",
    "MACHINED_ARGS",
    "MACHINED_COMMAND",
    "MACHINED_EXECUTABLES",
    "PACKAGE_DIRECTORIES",
    "PACKAGE_MANAGERS",
    "WRITABLE_IN_CONTAINERS",
    "WRITABLE_IN_IMAGE",
    "is_machined",
    "machined_doubts",
    "writable_image_mounts",
]

PACKAGE_MANAGERS = frozenset(
    {
        "apt",
        "apt-get",
        "apt-cache",
        "aptitude",
        "dpkg",
        "dpkg-deb",
        "dpkg-query",
        "yum",
        "dnf",
        "microdnf",
        "tdnf",
        "rpm",
        "rpm-ostree",
        "ostree",
        "zypper",
        "apk",
        "pacman",
        "opkg",
        "ipkg",
        "emerge",
        "snap",
        "flatpak",
        "nix",
        "nix-env",
        "brew",
        "pkg",
        "xbps-install",
        "slackpkg",
        "tce-load",
        "swupd",
        "pip",
        "pip3",
    }
)
# Where shells are looked for (the node's PATH, /usr/libexec and one level below it,
# /opt/*/bin and /opt/*/sbin), and /opt/bin.
PACKAGE_DIRECTORIES = (*SHELL_DIRECTORIES, "/opt/bin")

# The trees the system image provides. / is the read-only SquashFS (or an overlay of
# SquashFS layers; Docker's read-only overlay in containers): internal/app/init/main.go
# mountRootFS, pkg/provision/providers/docker/node.go (ReadonlyRootfs).
IMAGE_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/boot")
# Mounts inside those trees that Talos itself makes writable:
# - pkg/machinery/constants/constants.go Overlays: /etc/cni, /etc/kubernetes,
#   /usr/libexec/kubernetes, /opt (overlays on metal, Docker volumes in containers);
# - /usr/lib/udev, a system overlay for udevd's rules
#   (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go StartUdevd);
# - each extension service's rootfs under /usr/local/lib/containers, re-mounted as an
#   overlay for containerd (internal/app/machined/pkg/system/services/extension.go);
WRITABLE_IN_IMAGE = (
    "/etc/cni",
    "/etc/kubernetes",
    "/usr/libexec/kubernetes",
    "/opt",
    "/usr/lib/udev",
    "/usr/local/lib/containers",
)
# In container mode only: /etc/hosts, /etc/hostname and /etc/resolv.conf, which Docker
# bind-mounts writable into every container. Everywhere else machined binds its /etc files
# read-only (internal/app/machined/pkg/controllers/files/etcfile.go createBindMountFile ->
# internal/pkg/mount/v3/mount.go BindReadonly, MOUNT_ATTR_RDONLY; resolv.conf and hosts from
# controllers/network/etcfile.go), and /etc/hostname is the read-only image's own file.
WRITABLE_IN_CONTAINERS = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")


def _within(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def writable_image_mounts(
    entries: Iterable[Sequence[str]], *, in_container: bool
) -> list[tuple[str, str, str, str]]:
    """The mounts of ``/proc/mounts`` (split lines: device, mount point, type, options, ...)
    that make system image content writable: ``/`` or a mount inside one of
    :data:`IMAGE_TREES`, mounted ``rw``, other than those Talos itself makes writable
    (:data:`WRITABLE_IN_IMAGE`, and in container mode Docker's
    :data:`WRITABLE_IN_CONTAINERS`). Of several mounts on one mount point only the last, the
    visible one, counts. Mount points are as the kernel escapes them (``\\040``)."""
    allowed = WRITABLE_IN_IMAGE + (WRITABLE_IN_CONTAINERS if in_container else ())
    visible = {entry[1]: tuple(entry[:4]) for entry in entries}
    found = []
    for device, mountpoint, fstype, options in visible.values():
        if "ro" in options.split(","):
            continue
        in_image = mountpoint == "/" or any(_within(mountpoint, t) for t in IMAGE_TREES)
        if in_image and not any(_within(mountpoint, w) for w in allowed):
            found.append((device, mountpoint, fstype, options))
    return found


# Talos's PID 1 is machined: the Dockerfile installs it as /usr/bin/init, the kernel (or
# Docker's entrypoint) starts it as /sbin/init, which /sbin -> usr/bin resolves. Processes
# reports readlink(/proc/1/exe) (internal/pkg/miniprocfs/processes.go), so the executable is
# /usr/bin/init; images from before the usr-merge had the binary at /sbin/init itself.
MACHINED_EXECUTABLES = frozenset({"/usr/bin/init", "/sbin/init"})
MACHINED_COMMAND = "init"  # /proc/1/comm; systemd renames itself "systemd"
MACHINED_ARGS = frozenset({"/sbin/init", "/usr/bin/init"})


def is_machined(init: models.ProcessInfo) -> bool:
    """machined by every field Processes gives: systemd installed as /sbin/init shows
    either its own executable or its own command name, and never passes."""
    words = init.args.split()
    fields = (init.command, init.executable, *words[:1])
    if any("systemd" in field for field in fields):
        return False
    return (
        init.command == MACHINED_COMMAND
        and init.executable in MACHINED_EXECUTABLES
        and len(words) == 1
        and words[0] in MACHINED_ARGS
    )


def machined_doubts(init: models.ProcessInfo, processes: Iterable[models.ProcessInfo]) -> list[str]:
    """What gives away a PID 1 that only looks like machined by name, path and args.

    machined is a Go program (``internal/app/machined``): the Go runtime starts its sysmon
    thread before ``main`` runs, so it always has several threads, and ``/proc/<pid>/stat``
    ``num_threads`` is what Processes reports (``internal/pkg/miniprocfs/processes.go``);
    a single thread is some other init (tini, dumb-init, busybox init, a wrapper). 0 means
    not reported and is not judged. And only PID 1 runs the init binary as ``/sbin/init``:
    switchroot execs it once (``internal/pkg/mount/switchroot/switchroot.go``), apid and
    trustd run it bind-mounted as ``/apid``/``/trustd`` and ``dashboard``, ``poweroff``
    reach it through symlinks with their own argv (``Dockerfile``, the rootfs stage); a
    second host process running it as init is machined started under a wrapper. Processes
    of pod workloads (under a ``k8s.io`` containerd shim) are the pods' own business.
    """
    table = list(processes)
    doubts = []
    if init.threads == 1:
        doubts.append("PID 1 runs a single thread (machined, a Go program, always runs several)")
    in_pods = pod_workload_pids(table)
    for process in table:
        if process.pid in (1, init.pid) or process.pid in in_pods:
            continue
        if process.executable in MACHINED_EXECUTABLES and process.args.split() in (
            ["/sbin/init"],
            ["/usr/bin/init"],
        ):
            doubts.append(
                f"pid {process.pid} (parent {process.ppid}) also runs {process.executable} "
                f"as {process.args}: machined started by another init"
            )
    return doubts
