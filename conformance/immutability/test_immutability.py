"""Immutability: the node is an appliance — no way in but the API, nothing to change on disk.

The Talos root filesystem is a read-only SquashFS image (``internal/app/init/main.go``), in
containers Docker's read-only overlay; PID 1 is machined, installed as ``/usr/bin/init`` in
the usr-merged root (``Dockerfile``, the rootfs stage); there is no shell, SSH, GNU utilities
or busybox, and no package manager. ``docker exec <node> sh`` has been seen to exit 127
(``executable file not found``), and port 22 to refuse connections.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from conformance._support.fanout import CheckedRead, FanOut
from conformance._support.fixtures import (
    checked_at_once,
    nodes_at_once,
    read_at_once,
)
from conformance._support.reach import PORT_22_NEEDS, DirectReach
from conformance.immutability.port_reads import (
    PortRead,
    expected_pod_ports,
    expected_udp_ports,
    pod_ports_opted_in,
    port_fanout,
    read_ports,
)
from conformance.immutability.rules import (
    PACKAGE_DIRECTORIES,
    PACKAGE_MANAGERS,
    is_machined,
    machined_doubts,
    writable_image_mounts,
)
from pytest_talos.checks import (
    assert_no_shell,
    assert_only_expected_ports,
    assert_pod_listeners_expected,
    find_programs,
)
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import ConformanceFailure, TalosError
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.settings import SuiteSettings


@pytest.mark.talos_check(
    "immutability.no-shell-or-ssh",
    severity="critical",
    claim="The node has no shell, busybox or SSH: the Talos API is the only way in",
)
def test_node_has_no_shell_and_no_ssh(
    talos_node: TalosNode, talos_evidence: dict[str, Any], shell_reads: FanOut[CheckedRead]
) -> None:
    shell_reads.get(talos_node).deliver(talos_evidence)


@pytest.fixture(scope="module")
def shell_reads(
    request: pytest.FixtureRequest, talos_suite: SuiteSettings, talos_direct_reach: DirectReach
) -> FanOut[CheckedRead]:
    """Every checked node searched for shells and SSH at once (a listing a directory)."""
    check = partial(_no_shell_or_ssh, talos_suite.docker, talos_direct_reach)
    return checked_at_once(request, test_node_has_no_shell_and_no_ssh, check)


def _no_shell_or_ssh(
    docker: bool,
    reach: DirectReach,
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    _check_id: str,
) -> None:
    container = talos_node.hostname if docker else None
    unreached = reach.reason(talos_node, PORT_22_NEEDS)
    result = assert_no_shell(talos_node, docker_container=container, scan_port_22=unreached is None)
    talos_evidence.update(result.evidence)
    if result.notes:
        talos_evidence["notes"] = result.notes
    if unreached is not None:  # nothing found through the endpoint; port 22 not scanned
        pytest.skip(unreached)


@pytest.mark.talos_check(
    "immutability.rootfs-read-only",
    severity="critical",
    claim="The root filesystem, and every mount of system image content under it, is read-only",
)
def test_root_filesystem_is_read_only(
    talos_node: TalosNode, talos_evidence: dict[str, Any], root_mount_reads: FanOut[CheckedRead]
) -> None:
    root_mount_reads.get(talos_node).deliver(talos_evidence)


def _root_read_only(talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str) -> None:
    mounts = talos_node.files.read_text("/proc/mounts")
    entries = [line.split() for line in mounts.splitlines() if len(line.split()) >= 4]
    roots = [entry for entry in entries if entry[1] == "/"]
    if not roots:
        raise ConformanceFailure(
            check_id,
            "/proc/mounts has no / entry",
            node=talos_node.name,
            evidence={"/proc/mounts": mounts},
        )
    device, _, fstype, options = roots[-1][:4]  # the last mount on / is the visible one
    talos_evidence["root mount"] = f"{device} {fstype} {options}"
    in_container = talos_node.version.in_container
    talos_evidence["platform mode"] = talos_node.version.platform_mode
    writable = writable_image_mounts(entries, in_container=in_container)
    if writable:
        talos_evidence["/proc/mounts"] = mounts
        raise ConformanceFailure(
            check_id,
            "system image content is mounted writable",
            node=talos_node.name,
            expected="/ and every mount of image content ro (a read-only SquashFS image; only "
            "Talos's own overlays such as /etc/cni, /etc/kubernetes, /opt, /usr/libexec/"
            "kubernetes, /usr/lib/udev are writable)",
            observed="; ".join(f"{d} on {m} type {f} ({o})" for d, m, f, o in writable),
        )


root_mount_reads = read_at_once(
    "test_root_filesystem_is_read_only",
    _root_read_only,
    "Every checked node's /proc/mounts read and judged at once.",
)


@pytest.mark.talos_check(
    "immutability.no-package-manager",
    severity="high",
    claim="No package manager is installed: software arrives only as system extensions",
)
def test_node_has_no_package_manager(
    talos_node: TalosNode, talos_evidence: dict[str, Any], package_reads: FanOut[CheckedRead]
) -> None:
    package_reads.get(talos_node).deliver(talos_evidence)


def _no_package_manager(
    talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str
) -> None:
    found, searched, absent = find_programs(talos_node, PACKAGE_MANAGERS, PACKAGE_DIRECTORIES)
    talos_evidence["directories searched"] = ", ".join(searched)
    if absent:
        talos_evidence["directories absent"] = ", ".join(absent)
    if found:
        raise ConformanceFailure(
            check_id,
            "package manager binaries are installed",
            node=talos_node.name,
            expected="none of "
            + ", ".join(sorted(PACKAGE_MANAGERS))
            + " (nor an alias such as apk.static or dnf5)",
            observed=", ".join(found),
        )


package_reads = read_at_once(
    "test_node_has_no_package_manager",
    _no_package_manager,
    "Every checked node searched for package managers at once.",
)


@pytest.mark.talos_check(
    "immutability.pid1-is-machined",
    severity="critical",
    claim="PID 1 is machined, Talos's own init (not systemd, a shell, or another init "
    "wrapping machined)",
)
def test_pid1_is_machined(
    talos_node: TalosNode, talos_evidence: dict[str, Any], pid1_reads: FanOut[CheckedRead]
) -> None:
    pid1_reads.get(talos_node).deliver(talos_evidence)


def _pid1_machined(talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str) -> None:
    processes = talos_node.processes
    first = [p for p in processes if p.pid == 1]
    if not first:
        raise ConformanceFailure(check_id, "the process list has no PID 1", node=talos_node.name)
    init = first[0]
    talos_evidence["pid 1"] = f"{init.command} ({init.executable}) {init.args}".strip()
    talos_evidence["pid 1 threads"] = init.threads
    observed = (
        f"command {init.command or '?'}, executable {init.executable or 'unknown'}, "
        f"args {init.args or 'none'}"
    )
    if not is_machined(init):
        raise ConformanceFailure(
            check_id,
            "PID 1 is not machined",
            node=talos_node.name,
            expected="command init, executable /usr/bin/init (machined), args /sbin/init",
            observed=observed,
        )
    doubts = machined_doubts(init, processes)
    if doubts:
        raise ConformanceFailure(
            check_id,
            "PID 1 looks like machined but is another init",
            node=talos_node.name,
            expected="machined itself as PID 1: several threads (a Go program), and no other "
            "host process running /usr/bin/init as /sbin/init",
            observed=f"{observed}, {init.threads} thread(s); " + "; ".join(doubts),
        )


pid1_reads = read_at_once(
    "test_pid1_is_machined",
    _pid1_machined,
    "Every checked node's process list read and its PID 1 judged at once.",
)


@pytest.mark.talos_check(
    "immutability.only-expected-ports",
    severity="high",
    claim="Full TCP scans of every node address (IPv4 and IPv6) find only the ports Talos "
    "opens for the node's role and config, the node's Netstat agrees with them, and it shows "
    "no UDP socket off loopback but the CNI's and KubeSpan's",
)
def test_only_expected_ports_are_open(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    port_reads: FanOut[PortRead],
    talos_direct_reach: DirectReach,
    request: pytest.FixtureRequest,
) -> None:
    try:
        read = port_reads.get(talos_node)  # observed with the others, or now if not fresh
    except TalosError:  # the earlier read failed: read now, and let that one speak
        read = read_ports(talos_node, None, talos_direct_reach)
    if read.addresses_note is not None:
        talos_evidence["addresses"] = read.addresses_note
    result = assert_only_expected_ports(
        talos_node,
        addresses=read.addresses,
        observation=read.observation,
        allowed_udp=expected_udp_ports(request.config, talos_node),
    )
    talos_evidence.update(result.evidence)
    if result.notes:
        talos_evidence["port notes"] = result.notes
    if read.unreached is not None:  # Netstat alone found nothing: the scan is not judged
        pytest.skip(read.unreached)


@pytest.mark.talos_check(
    "immutability.pod-listeners-expected",
    severity="medium",
    claim="Opt-in (implement pytest_talos_expected_pod_ports): every listener a host-network "
    "pod opens off loopback, by the node's Netstat and process table, is on an allowed port",
)
def test_host_network_pod_listeners_are_expected(
    talos_node: TalosNode, talos_evidence: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    if not pod_ports_opted_in(request.config):
        pytest.skip(
            "opt-in: implement the pytest_talos_expected_pod_ports hook to judge the "
            "listeners of host-network pods (see docs/plugin.md)"
        )
    result = assert_pod_listeners_expected(
        talos_node, expected_pod_ports(request.config, talos_node)
    )
    talos_evidence.update(result.evidence)


@pytest.fixture(scope="module")
def port_reads(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster, talos_direct_reach: DirectReach
) -> FanOut[PortRead]:
    """Every node this run's port check runs on, observed at once by its first test. Not
    under pytest-xdist: its workers already check nodes side by side, and which nodes a
    worker gets is not known beforehand (each would scan them all)."""
    nodes = nodes_at_once(request, test_only_expected_ports_are_open)
    return port_fanout(nodes, talos_cluster.client.change_gate, reach=talos_direct_reach)
