"""assert_no_shell and find_programs beyond /usr/bin: /usr/libexec, /opt/*/bin, aliases, and
remote-access processes, against emulated nodes (healthy variants included)."""

from __future__ import annotations

import pytest

from conformance.immutability.rules import (
    PACKAGE_DIRECTORIES,
    PACKAGE_MANAGERS,
    writable_image_mounts,
)
from pytest_talos.checks import SHELL_NAMES, assert_no_shell, find_programs
from pytest_talos.errors import ConformanceFailure
from tests.integration.checks_support import connected


@pytest.mark.parametrize("variants", [(), ("pod-shell",), ("extensions",), ("metal",)])
def test_healthy_nodes_have_no_shell_package_manager_or_writable_image(
    variants: tuple[str, ...],
) -> None:
    with connected(variants=variants) as (_, cluster):
        for node in cluster.nodes:
            assert_no_shell(node)
            found, searched, _ = find_programs(node, PACKAGE_MANAGERS, PACKAGE_DIRECTORIES)
            assert found == []
            assert {"/usr/libexec", "/opt/cni/bin", "/opt/containerd/bin"} <= set(searched)
            mounts = [line.split() for line in node.files.read_text("/proc/mounts").splitlines()]
            assert writable_image_mounts(mounts, in_container=node.version.in_container) == []


def test_shells_in_libexec_and_under_an_alias_are_found() -> None:
    with connected(["shell-in-libexec", "shell-alias"]) as (_, cluster):
        node = cluster.worker()
        found, _, _ = find_programs(node, SHELL_NAMES)
        assert found == ["/usr/bin/busybox.static", "/usr/libexec/dash"]
        with pytest.raises(ConformanceFailure, match=r"shells on disk: /usr/bin/busybox.static"):
            assert_no_shell(node)


def test_a_package_manager_in_an_opt_tree_is_found() -> None:
    with connected(["package-manager-in-opt"]) as (_, cluster):
        found, searched, _ = find_programs(cluster.worker(), PACKAGE_MANAGERS, PACKAGE_DIRECTORIES)
        assert found == ["/opt/foo/bin/dpkg"]
        assert "/opt/foo/bin" in searched


def test_a_web_terminal_on_the_host_is_a_way_in() -> None:
    with connected(["web-terminal-running"]) as (_, cluster):
        node = cluster.controlplane()
        with pytest.raises(ConformanceFailure, match=r"/var/lib/ttyd/ttyd --interface"):
            assert_no_shell(node)


def test_a_writable_usr_overlay_is_found() -> None:
    with connected(["usr-writable"]) as (_, cluster):
        mounts = [
            line.split() for line in cluster.worker().files.read_text("/proc/mounts").splitlines()
        ]
        assert [m[1] for m in writable_image_mounts(mounts, in_container=True)] == ["/usr"]
