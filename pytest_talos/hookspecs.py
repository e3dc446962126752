"""Hooks other plugins and conftest files can implement to tailor pytest-talos.

The plugin adds these through ``pytest_addhooks``; implement them in a ``conftest.py`` or a
plugin like any pytest hook (every argument is optional in an implementation)::

    def pytest_talos_expected_ports(node, role, ports):
        if role == "worker":
            ports.update({4240, 4244})     # Cilium health checks and Hubble

    def pytest_talos_expected_udp_ports(node, role, ports):
        ports.add(51871)                   # Cilium's WireGuard encryption

    def pytest_talos_expected_pod_ports(node, role, ports):
        ports.update({4240, 4244})         # judge host-network pods: Cilium's are allowed

    def pytest_talos_select_nodes(nodes, config):
        return [n for n in nodes if not n.hostname.startswith("spare-")]

    def pytest_talos_node_report(node, report):
        if report.failed:
            states = "\n".join(f"{s.id}: {s.state}" for s in node.services)
            report.sections.append(("talos services", states))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import pytest

    from pytest_talos.node import TalosNode

hookspec = pluggy.HookspecMarker("pytest")


class PytestTalosDeprecationWarning(DeprecationWarning):
    """A pytest-talos feature that still works but will be removed; the message says how."""


@hookspec
def pytest_talos_expected_ports(node: TalosNode, role: str, ports: set[int]) -> None:
    """Edit, in place, the TCP ports ``node`` (of ``role``: ``controlplane`` or ``worker``) may
    have open.

    ``ports`` starts as what Talos opens for the role and the node's machine config
    (:func:`pytest_talos.node.default_expected_ports`: worker 50000, 10250 and kube-proxy's
    10256 unless ``cluster.proxy.disabled``; control plane also 50001, 6443, 2379, 2380). It is
    one set, passed to every implementation in turn: add ports (``ports.update({4240, 4244})``
    for Cilium's health checks and Hubble), remove them (``ports.discard(10250)``) or empty it
    (``ports.clear()``); each implementation sees the edits of those called before it. Return
    nothing. What ``ports`` holds at the end becomes ``talos_node.expected_ports`` and the
    allowlist of :func:`pytest_talos.checks.assert_only_expected_ports`.

    Deprecated: a returned set is still added to ``ports`` after every implementation ran (the
    old way to extend it), with a :class:`PytestTalosDeprecationWarning`; edit ``ports``
    instead.
    """


@hookspec
def pytest_talos_expected_udp_ports(node: TalosNode, role: str, ports: set[int]) -> None:
    """Edit, in place, the UDP ports ``node`` (of ``role``) may have a socket bound to off
    loopback and link-local addresses (the UDP part of ``immutability.only-expected-ports``).

    ``ports`` starts as :func:`pytest_talos.checks.expected_udp_ports_for`: the DHCP client's
    68 and 546, Flannel's VXLAN 4789 (or, with a custom CNI, the common overlay and WireGuard
    ports of Cilium and Calico), KubeSpan's 51820 when the machine config enables it. Like
    :func:`pytest_talos_expected_ports`, it is one set passed to every implementation in
    turn: add (``ports.add(51871)``), remove or clear it, and return nothing. What it holds
    at the end is the UDP allowlist (``allowed_udp``) the conformance suite passes to
    :func:`pytest_talos.checks.assert_only_expected_ports`.
    """


@hookspec
def pytest_talos_expected_pod_ports(node: TalosNode, role: str, ports: set[int]) -> None:
    """Edit, in place, the ports host-network pods on ``node`` may listen on off loopback
    (TCP and UDP alike), and turn on the opt-in check ``immutability.pod-listeners-expected``.

    ``immutability.only-expected-ports`` judges only the host's own listeners; a listener
    whose process descends from a ``containerd-shim`` of the ``k8s.io`` namespace is a pod's
    (Cilium's agent and Hubble, kube-proxy, node-exporter, a CSI node plugin) and is only
    listed there. Implementing this hook runs the pod check: ``ports`` starts as what Talos's
    own pods open for the role and the machine config
    (:func:`pytest_talos.node.expected_ports_for`: the API server, kube-proxy's 10256, the
    metrics ports ``extraArgs`` expose); add your CNI's and agents' ports
    (``ports.update({4240, 4244})``), and return nothing. Without an implementation the
    check is skipped.
    """


@hookspec(firstresult=True)
def pytest_talos_select_nodes(
    nodes: list[TalosNode], config: pytest.Config
) -> list[TalosNode] | None:
    """Narrow (or reorder) the target nodes before tests are parametrized over them.

    ``nodes`` are sorted by hostname. Return the nodes to test, or ``None`` to keep them all.
    The first non-``None`` result wins. Keep the choice deterministic: under pytest-xdist every
    worker calls this hook and must end with the same list.
    """


@hookspec
def pytest_talos_node_report(node: TalosNode, report: pytest.TestReport) -> None:
    """Add evidence to the report of a test that ran against ``node`` (its call phase).

    Called for every outcome; check ``report.failed`` and append to ``report.sections``
    (``(title, text)`` pairs that pytest prints under the failure).
    """
