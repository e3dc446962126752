"""Which nodes this machine reaches directly, learnt once per node per run.

Checks that need their own connection to a node (the port scan, the TLS refusal probes,
apid's served certificate) ask :meth:`DirectReach.require` first. A node whose apid port
refuses, has no route or does not answer a TCP connect within
:data:`~pytest_talos.ports.reach.REACH_TIMEOUT`, **and** that answers Version through the
endpoint (apid's ``node`` metadata forwarding), is not reached directly: the check skips
with one line (:func:`~pytest_talos.reporting.reach.no_reach_reason`) and the verdict names
it. A node that does not answer through the endpoint either is down, not unreached: nothing
is cached and the check runs (and fails) as it would anyway. A node that takes the TCP
connection is reached, so whatever its TLS or authorization then does stays the check's
finding.
"""

from __future__ import annotations

import threading

import pytest

from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode
from pytest_talos.ports.reach import REACH_TIMEOUT, Reach, probe_reach
from pytest_talos.reporting.reach import no_reach_reason
from pytest_talos.talos_api import APID_PORT

__all__ = [
    "DIRECT_REACH_CHECKS",
    "KUBE_API_AT_NODE_NEEDS",
    "PORT_22_NEEDS",
    "PORT_SCAN_NEEDS",
    "VENDOR_SCAN_NEEDS",
    "DirectReach",
]

_OWN_TLS = (
    "this probe needs its own TLS connection to the node's apid (through the endpoint it "
    "meets the endpoint's TLS, not the node's)"
)
# The checks that judge nothing without their own connection to the node, and why; each
# skips on a node this machine does not reach (the autouse fixture _direct_reach).
# immutability.only-expected-ports and immutability.no-shell-or-ssh are not here: they judge
# what the endpoint gives (Netstat, files, processes) and leave out only their scans.
DIRECT_REACH_CHECKS: dict[str, str] = {
    "api.mtls-required": _OWN_TLS,
    "api.foreign-ca-refused": _OWN_TLS,
    "api.expired-cert-refused": _OWN_TLS,
    "api.client-auth-eku-required": _OWN_TLS,
    "api.kube-ca-refused": _OWN_TLS,
    "certs.api-certificate": (
        "this check reads the certificate apid serves on the node's own address (through "
        "the endpoint a handshake shows the endpoint's certificate)"
    ),
}
# vendor.expected-ports and vendor.forbidden-ports are TCP scans and nothing else; they ask
# after their profile is known (no profile: that skip comes first).
VENDOR_SCAN_NEEDS = "this check is a TCP scan of the node's address from here"
KUBE_API_AT_NODE_NEEDS = (
    "kube-apiserver's certificate on the node's own address cannot be read from here (the "
    "kubeconfig's server, when it is elsewhere, was judged)"
)
PORT_22_NEEDS = (
    "its port 22 cannot be scanned from here (no shell, busybox or sshd on disk, among its "
    "processes or in its Netstat, read through the endpoint)"
)
PORT_SCAN_NEEDS = (
    "its addresses cannot be scanned from here (its Netstat, read through the endpoint, "
    "shows nothing outside the allow-list)"
)


class DirectReach:
    """The run's answers, by node address (thread-safe: the port fan-out asks from threads)."""

    def __init__(self, timeout: float = REACH_TIMEOUT) -> None:
        self.timeout = timeout
        self._known: dict[str, Reach] = {}
        self._lock = threading.Lock()

    def unreached(self, node: TalosNode) -> Reach | None:
        """The failed connect if ``node`` is not reached directly but answers through the
        endpoint; None if it is reached (or down: then nothing is known yet)."""
        with self._lock:
            known = self._known.get(node.host)
        if known is None:
            known = self._learn(node)
            if known is None:
                return None
            with self._lock:
                known = self._known.setdefault(node.host, known)
        return None if known.reached else known

    def _learn(self, node: TalosNode) -> Reach | None:
        reach = probe_reach(node.host, APID_PORT, timeout=self.timeout)
        if reach.reached:
            return reach
        try:
            node.client.version()  # through the endpoint, with the client's deadline
        except TalosError:
            return None  # down, not unreached: let the check speak
        return reach

    def reason(self, node: TalosNode, needs: str) -> str | None:
        """The one-line skip reason for ``node``, or None when it is reached."""
        reach = self.unreached(node)
        if reach is None:
            return None
        return no_reach_reason(node.name, reach.tried, reach.why, needs)

    def require(self, node: TalosNode, needs: str) -> None:
        """Skip the calling check (one line) when ``node`` is not reached directly."""
        reason = self.reason(node, needs)
        if reason is not None:
            pytest.skip(reason)
