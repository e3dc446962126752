"""Assertion helpers for Talos nodes, usable with or without pytest.

Each ``assert_*`` returns a :class:`CheckResult` (what was checked, with evidence) when the
node conforms, and raises :class:`~pytest_talos.errors.ConformanceFailure` (an
``AssertionError``) with the evidence when it does not. Problems reaching the node are
:class:`~pytest_talos.errors.TalosError` s, not failures.

Helpers that change a node go through a :class:`ConfigGuard` (:mod:`pytest_talos.guard`,
re-exported here): the one passed in, else the node's own guard (under pytest, the
``talos_config_guard`` fixture's), else a private guard that restores the node before the
helper returns::

    with ConfigGuard() as guard:            # restores every touched node on exit
        assert_service_healthy_after_patch(node, patch, guard=guard)

The package is split by what the helpers check: :mod:`pytest_talos.checks.shell` (no way in
besides the API: shells, login daemons, port 22), :mod:`pytest_talos.checks.open_ports`
(open TCP ports and UDP sockets, scan against Netstat; the host's own listeners),
:mod:`pytest_talos.checks.pod_ports` (host-network pods' listeners),
:mod:`pytest_talos.checks.listeners`
(the node's Netstat account and how it meets a scan), :mod:`pytest_talos.checks.config`
(config changes: rejection, service health after a patch, try-mode revert),
:mod:`pytest_talos.checks.kubernetes` (the Kubernetes Node) and
:mod:`pytest_talos.checks.result` (:class:`CheckResult`). Import from ``pytest_talos.checks``.
"""

from __future__ import annotations

from pytest_talos.checks.config import (
    DEFAULT_STABLE_FOR,
    assert_config_unchanged_after_rejection,
    assert_service_healthy_after_patch,
    assert_try_reverts,
)
from pytest_talos.checks.kubernetes import assert_node_ready
from pytest_talos.checks.open_ports import CUSTOM_CNI_UDP_PORTS as CUSTOM_CNI_UDP_PORTS
from pytest_talos.checks.open_ports import DHCP_CLIENT_PORTS as DHCP_CLIENT_PORTS
from pytest_talos.checks.open_ports import FLANNEL_VXLAN_PORT as FLANNEL_VXLAN_PORT
from pytest_talos.checks.open_ports import KUBESPAN_PORT as KUBESPAN_PORT
from pytest_talos.checks.open_ports import PortObservation as PortObservation
from pytest_talos.checks.open_ports import (
    assert_only_api_port,
    assert_only_expected_ports,
    expected_udp_ports_for,
)
from pytest_talos.checks.open_ports import judge_ports as judge_ports
from pytest_talos.checks.open_ports import observe_listeners as observe_listeners
from pytest_talos.checks.open_ports import observe_ports as observe_ports
from pytest_talos.checks.open_ports import wireguard_link_ports as wireguard_link_ports
from pytest_talos.checks.pod_ports import PodListener as PodListener
from pytest_talos.checks.pod_ports import (
    assert_pod_listeners_expected as assert_pod_listeners_expected,
)
from pytest_talos.checks.pod_ports import pod_listeners as pod_listeners
from pytest_talos.checks.result import CheckResult
from pytest_talos.checks.shell import REMOTE_ACCESS_PROCESSES as REMOTE_ACCESS_PROCESSES
from pytest_talos.checks.shell import (
    SHELL_DIRECTORIES,
    SHELL_NAMES,
    SHELL_PROCESSES,
    assert_no_shell,
    pod_sandboxes,
    pod_workload_pids,
)
from pytest_talos.checks.shell import SSH_PORT as SSH_PORT
from pytest_talos.checks.shell import find_programs as find_programs
from pytest_talos.checks.shell import is_program_named as is_program_named
from pytest_talos.errors import ConfigRestoreError
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import default_expected_ports

# Also importable from here, outside __all__ as before (the ``X as X`` imports): the shell
# helpers the conformance suite uses, the SSH port, the UDP port constants and the two halves
# of assert_only_expected_ports (observe_ports, judge_ports).
__all__ = [
    "DEFAULT_STABLE_FOR",
    "SHELL_DIRECTORIES",
    "SHELL_NAMES",
    "SHELL_PROCESSES",
    "CheckResult",
    "ConfigGuard",
    "ConfigRestoreError",
    "PodListener",
    "assert_config_unchanged_after_rejection",
    "assert_no_shell",
    "assert_node_ready",
    "assert_only_api_port",
    "assert_only_expected_ports",
    "assert_pod_listeners_expected",
    "assert_service_healthy_after_patch",
    "assert_try_reverts",
    "default_expected_ports",
    "expected_udp_ports_for",
    "pod_listeners",
    "pod_sandboxes",
    "pod_workload_pids",
    "wireguard_link_ports",
]
