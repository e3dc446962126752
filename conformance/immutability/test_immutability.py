"""Immutability: the node is an appliance — no way in but the API, nothing to change on disk.

Talos facts §13: the root filesystem is a read-only SquashFS image; PID 1 is machined; there
is no shell, SSH, GNU utilities or busybox, and no package manager (B1, B2).
"""

from __future__ import annotations

import posixpath
from typing import Any

import pytest

from conformance._support.settings import SuiteSettings
from pytest_talos.checks import SHELL_DIRECTORIES, assert_no_shell, assert_only_expected_ports
from pytest_talos.errors import ConformanceFailure, NotFound
from pytest_talos.node import TalosNode

PACKAGE_MANAGERS = frozenset({
    "apt", "apt-get", "aptitude", "dpkg", "yum", "dnf", "microdnf", "rpm", "zypper", "apk",
    "pacman", "opkg", "ipkg", "emerge", "snap", "flatpak", "nix-env", "brew", "pkg", "xbps-install",
})
PACKAGE_DIRECTORIES = (*SHELL_DIRECTORIES, "/opt/bin")
# Talos's PID 1 is machined, installed as /sbin/init (apid, trustd... are links to it).
MACHINED_EXECUTABLES = frozenset({"/sbin/init", "/sbin/machined"})
MACHINED_COMMANDS = frozenset({"init", "machined"})


@pytest.mark.talos_check(
    "immutability.no-shell-or-ssh", severity="critical",
    claim="The node has no shell, busybox or SSH: the Talos API is the only way in")
def test_node_has_no_shell_and_no_ssh(
    talos_node: TalosNode, talos_suite: SuiteSettings, talos_evidence: dict[str, Any]
) -> None:
    container = talos_node.hostname if talos_suite.docker else None
    result = assert_no_shell(talos_node, docker_container=container)
    talos_evidence.update(result.evidence)
    if result.notes:
        talos_evidence["notes"] = result.notes


@pytest.mark.talos_check(
    "immutability.rootfs-read-only", severity="critical",
    claim="The root filesystem is mounted read-only")
def test_root_filesystem_is_read_only(
    talos_node: TalosNode, talos_evidence: dict[str, Any]
) -> None:
    mounts = talos_node.files.read_text("/proc/mounts")
    roots = [line.split() for line in mounts.splitlines() if line.split()[1:2] == ["/"]]
    if not roots:
        raise ConformanceFailure("immutability.rootfs-read-only", "/proc/mounts has no / entry",
                                 node=talos_node.name, evidence={"/proc/mounts": mounts})
    device, _, fstype, options = roots[-1][:4]  # the last mount on / is the visible one
    talos_evidence["root mount"] = f"{device} {fstype} {options}"
    if "ro" not in options.split(","):
        raise ConformanceFailure(
            "immutability.rootfs-read-only", "the root filesystem is writable",
            node=talos_node.name, expected="/ mounted ro (a read-only SquashFS image)",
            observed=f"{device} on / type {fstype} ({options})")


def _package_managers(node: TalosNode) -> list[str]:
    found = []
    for directory in PACKAGE_DIRECTORIES:
        try:
            names = node.files.names(directory)
        except NotFound:
            continue
        found += [posixpath.join(directory, n) for n in names if n in PACKAGE_MANAGERS]
    return found


@pytest.mark.talos_check(
    "immutability.no-package-manager", severity="high",
    claim="No package manager is installed: software arrives only as system extensions")
def test_node_has_no_package_manager(
    talos_node: TalosNode, talos_evidence: dict[str, Any]
) -> None:
    talos_evidence["directories searched"] = ", ".join(PACKAGE_DIRECTORIES)
    found = _package_managers(talos_node)
    if found:
        raise ConformanceFailure(
            "immutability.no-package-manager", "package manager binaries are installed",
            node=talos_node.name, expected="none of " + ", ".join(sorted(PACKAGE_MANAGERS)),
            observed=", ".join(found))


@pytest.mark.talos_check(
    "immutability.pid1-is-machined", severity="critical",
    claim="PID 1 is machined, Talos's own init (not systemd or a shell)")
def test_pid1_is_machined(talos_node: TalosNode, talos_evidence: dict[str, Any]) -> None:
    first = [p for p in talos_node.processes if p.pid == 1]
    if not first:
        raise ConformanceFailure("immutability.pid1-is-machined",
                                 "the process list has no PID 1", node=talos_node.name)
    init = first[0]
    talos_evidence["pid 1"] = f"{init.command} ({init.executable}) {init.args}".strip()
    if init.executable not in MACHINED_EXECUTABLES or init.command not in MACHINED_COMMANDS:
        raise ConformanceFailure(
            "immutability.pid1-is-machined", "PID 1 is not machined", node=talos_node.name,
            expected="init (/sbin/init, which is machined)",
            observed=f"{init.command} ({init.executable or 'no executable'})")


@pytest.mark.talos_check(
    "immutability.only-expected-ports", severity="high",
    claim="A full TCP scan finds only the ports Talos opens for the node's role")
def test_only_expected_ports_are_open(
    talos_node: TalosNode, talos_evidence: dict[str, Any]
) -> None:
    result = assert_only_expected_ports(talos_node)
    talos_evidence.update(result.evidence)
