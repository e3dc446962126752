"""The listeners of host-network pods, judged against their own allow-list
(:func:`assert_pod_listeners_expected`, the opt-in ``immutability.pod-listeners-expected``).

``immutability.only-expected-ports`` judges only the host's own listeners: a listener whose
Netstat PID is a pod workload (a descendant of a ``containerd-shim`` of the ``k8s.io``
namespace, :func:`~pytest_talos.checks.pod_sandboxes`) belongs to a pod on the host network
(a CNI agent, kube-proxy, node-exporter, a CSI node plugin) and is listed there as evidence
only. This check judges those: each one bound off loopback and link-local, in both of two
Netstat reads, must be on an allowed port. Kernel sockets (no PID) and host processes are
never a pod's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_talos import models
from pytest_talos.checks.listeners import exposed, stable_listeners
from pytest_talos.checks.open_ports import pod_listener_text
from pytest_talos.checks.result import CheckResult
from pytest_talos.checks.shell import pod_sandboxes
from pytest_talos.errors import ConformanceFailure
from pytest_talos.node import TalosNode

__all__ = [
    "PodListener",
    "assert_pod_listeners_expected",
    "pod_listeners",
]

CHECK = "immutability.pod-listeners-expected"


@dataclass(frozen=True)
class PodListener:
    """A listener of a host-network pod: its Netstat record and the pod's sandbox id."""

    record: models.ConnectRecord
    sandbox: str

    @property
    def text(self) -> str:
        return pod_listener_text(self.record, self.sandbox)


def pod_listeners(
    first: list[models.ConnectRecord],
    second: list[models.ConnectRecord],
    processes: Iterable[models.ProcessInfo],
) -> list[PodListener]:
    """The host-network listeners in both Netstat reads, off loopback and link-local, whose
    process is a pod workload."""
    pods = pod_sandboxes(processes)
    return [
        PodListener(record, pods[record.pid])
        for record in stable_listeners(first, second)
        if record.pid is not None and record.pid in pods and exposed(record.local_ip)
    ]


def assert_pod_listeners_expected(node: TalosNode, allowed: Iterable[int]) -> CheckResult:
    """Every host-network pod listener of ``node`` (Netstat twice, then Processes; each call
    with the client's deadline) is on a port in ``allowed`` (TCP and UDP alike)."""
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    allow = frozenset(allowed)
    first = list(node.listeners)
    second = list(node.listeners)
    found = pod_listeners(first, second, node.processes)
    outside = [item for item in found if item.record.local_port not in allow]
    evidence = {
        "pod listeners": "\n".join(dict.fromkeys(item.text for item in found)) or "none",
        "allowed": ", ".join(map(str, sorted(allow))) or "none",
    }
    if outside:
        ports = sorted({item.record.local_port for item in outside})
        raise ConformanceFailure(
            CHECK,
            "host-network pod listening outside its allowlist: " + ", ".join(map(str, ports)),
            node=node.name,
            expected=f"pod listeners at most on {evidence['allowed']}",
            observed="; ".join(dict.fromkeys(item.text for item in outside)),
            evidence=evidence,
        )
    return CheckResult(CHECK, node.name, evidence)
