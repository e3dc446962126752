"""The pure rules behind the shell, package-manager and mount checks: program names and their
aliases, shell-like and remote-access processes, and which mounts make image content writable."""

from __future__ import annotations

import pytest

from conformance.immutability.rules import PACKAGE_MANAGERS, writable_image_mounts
from pytest_talos import models
from pytest_talos.checks import SHELL_NAMES, is_program_named
from pytest_talos.checks.shell import is_shell_process


@pytest.mark.parametrize(
    "name",
    [
        "sh",
        "/usr/bin/ash",
        "busybox.static",
        "busybox-x86_64",
        "toybox",
        "toybox-aarch64",
        "bash5",
        "bash5.2",
        "ksh93",
        "rbash",
        "yash",
        "hush",
        "/usr/libexec/dash",
    ],
)
def test_shells_and_their_aliases_are_recognised(name: str) -> None:
    assert is_program_named(name, SHELL_NAMES)


@pytest.mark.parametrize(
    "name",
    [
        "sha256sum",
        "shutdown",
        "bashbug.txt",
        "containerd-shim-runc-v2",
        "iscsid",
        "iscsiadm",
        "tgtd",
        "flannel",
        "init",
        "nsenter",
        "mksh-config",
        "ssh-keygen",
    ],
)
def test_other_programs_are_not_shells(name: str) -> None:
    assert not is_program_named(name, SHELL_NAMES)


@pytest.mark.parametrize("name", ["dpkg", "apk.static", "dnf5", "apt-get", "/opt/foo/bin/rpm"])
def test_package_managers_and_aliases(name: str) -> None:
    assert is_program_named(name, PACKAGE_MANAGERS)


def _process(command: str, executable: str, args: str) -> models.ProcessInfo:
    return models.ProcessInfo(1, 0, "S", 1, 0.0, 0, 0, command, executable, args)


@pytest.mark.parametrize(
    ("command", "executable", "args"),
    [
        ("sshd-session", "/usr/libexec/sshd-session", "sshd-session -R"),
        ("sshd", "/usr/sbin/sshd", "sshd: root@pts/0"),
        ("dropbear", "/var/lib/dropbear", "dropbear -F -E"),
        ("ttyd", "/var/lib/ttyd/ttyd", "/var/lib/ttyd/ttyd -i /run/ttyd.sock login"),
        ("gotty", "/tmp/gotty", "gotty -w sh"),
        ("shellinaboxd", "/tmp/shellinaboxd", "shellinaboxd -t"),
        ("socat", "/tmp/socat", "socat TCP-LISTEN:4444,fork EXEC:/tmp/sh"),
        ("nc", "/tmp/nc", "nc -lvp 4444 -e /tmp/sh"),
        ("ncat", "/tmp/ncat", "ncat --listen 4444"),
        ("busybox.static", "/tmp/busybox.static", "busybox.static"),
    ],
)
def test_shell_like_and_remote_access_processes(command: str, executable: str, args: str) -> None:
    assert is_shell_process(_process(command, executable, args))


@pytest.mark.parametrize(
    ("command", "executable", "args"),
    [
        ("init", "/usr/bin/init", "/sbin/init"),
        ("apid", "/usr/bin/init", "/apid"),
        ("containerd", "/usr/bin/containerd", "/bin/containerd --address /system/run/containerd"),
        ("socat", "/tmp/socat", "socat - TCP:10.5.0.2:80"),  # a client, not a listener
        ("flanneld", "/opt/bin/flanneld", "/opt/bin/flanneld --ip-masq --kube-subnet-mgr"),
    ],
)
def test_host_processes_of_a_healthy_node_are_not_shells(
    command: str, executable: str, args: str
) -> None:
    assert not is_shell_process(_process(command, executable, args))


HEALTHY_METAL = [
    ["/dev/loop0", "/", "squashfs", "ro,relatime,errors=continue"],
    ["devtmpfs", "/dev", "devtmpfs", "rw,nosuid"],
    ["proc", "/proc", "proc", "rw"],
    ["tmpfs", "/run", "tmpfs", "rw"],
    ["tmpfs", "/system", "tmpfs", "rw"],
    ["/dev/sda6", "/var", "xfs", "rw"],
    ["/dev/sda5", "/system/state", "xfs", "rw"],
    ["overlay", "/etc/cni", "overlay", "rw,lowerdir=/etc/cni"],
    ["overlay", "/etc/kubernetes", "overlay", "rw"],
    ["overlay", "/usr/libexec/kubernetes", "overlay", "rw"],
    ["overlay", "/opt", "overlay", "rw"],
    ["overlay", "/usr/lib/udev", "overlay", "rw"],
    ["overlay", "/usr/local/lib/containers/iscsid", "overlay", "rw"],
    ["tmpfs", "/etc/hosts", "tmpfs", "ro"],
    ["tmpfs", "/etc/resolv.conf", "tmpfs", "ro"],
    ["shm", "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/x/shm", "tmpfs", "rw"],
]


def test_a_healthy_node_has_no_writable_image_mount() -> None:
    assert writable_image_mounts(HEALTHY_METAL, in_container=False) == []


DOCKER_ETC_BINDS = [
    ["/dev/vda1", path, "ext4", "rw,relatime"]
    for path in ("/etc/resolv.conf", "/etc/hostname", "/etc/hosts")
]


def test_dockers_writable_etc_binds_are_allowed_in_container_mode_only() -> None:
    """machined binds its /etc files read-only (controllers/files/etcfile.go, mount/v3
    BindReadonly); only Docker's binds in a container are writable."""
    assert writable_image_mounts([*HEALTHY_METAL, *DOCKER_ETC_BINDS], in_container=True) == []
    found = writable_image_mounts([*HEALTHY_METAL, *DOCKER_ETC_BINDS], in_container=False)
    assert sorted(m[1] for m in found) == ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"]


@pytest.mark.parametrize(
    "mount",
    [
        ["overlay", "/usr", "overlay", "rw,lowerdir=/usr,upperdir=/var/u"],
        ["/dev/loop0", "/usr/bin", "squashfs", "rw"],
        ["tmpfs", "/etc/ssl", "tmpfs", "rw"],
        ["/dev/sda6", "/lib/modules", "xfs", "rw"],
    ],
)
def test_a_writable_mount_of_image_content_is_found(mount: list[str]) -> None:
    assert writable_image_mounts([*HEALTHY_METAL, mount], in_container=False) == [tuple(mount)]


def test_only_the_visible_mount_on_a_mount_point_counts() -> None:
    entries = [["rootfs", "/", "rootfs", "rw"], ["/dev/loop0", "/", "squashfs", "ro"]]
    assert writable_image_mounts(entries, in_container=False) == []
    assert writable_image_mounts(entries[::-1], in_container=False) == [
        ("rootfs", "/", "rootfs", "rw")
    ]
