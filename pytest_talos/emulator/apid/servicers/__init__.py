"""Servicers: protobuf requests in, node-state calls, protobuf replies out.

Every servicer method has the name of its RPC and receives the decoded request plus a
:class:`Call`; unary methods return the reply, server-streaming ones are async generators.
:mod:`pytest_talos.emulator.apid.server` routes a call (authentication, ``node``/``nodes``
proxying, the role rules of :data:`ROLE_RULES`) before a servicer method runs.
Domain errors leave as :class:`RPCFailure` (a gRPC status name and message).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pytest_talos.emulator.errors import RPCFailure
from pytest_talos.errors import StatusCode
from pytest_talos.talos_api import ADMIN, CHANGING_METHODS, ROLE_RULES, allowed_roles

if TYPE_CHECKING:
    from pytest_talos.emulator.clock import Clock
    from pytest_talos.emulator.node.state import NodeState

__all__ = [
    "CONTROL_PLANE_ONLY",
    "MUTATING_METHODS",
    "ROLE_RULES",
    "Call",
    "ClientConfiguration",
    "NodeContext",
    "RPCFailure",
    "allowed_roles",
    "require_control_plane",
]

_M = "/machine.MachineService/"
# machined's authorizer rule table (allowed roles per method; unlisted = admin only) is one
# fact shared with the client: pytest_talos.talos_api.ROLE_RULES (machined.go).

# Methods that change a node (the call log marks them; the plugin flags tests that sent them
# without a marker): the one table in pytest_talos.talos_api.
MUTATING_METHODS = frozenset(CHANGING_METHODS)


# internal/app/internal/machinehelper: handlers only control planes serve, and the API name in
# their Unimplemented text
# (`<api> is only available on control plane nodes`). INFERRED: the names for
# GenerateClientConfiguration and HealthCheck.
CONTROL_PLANE_ONLY: Mapping[str, str] = {
    _M + "Bootstrap": "bootstrap",
    _M + "EtcdMemberList": "member list",
    _M + "Kubeconfig": "kubeconfig",
    _M + "GenerateClientConfiguration": "client configuration",
    "/cluster.ClusterService/HealthCheck": "health check",
}


def require_control_plane(call: Call) -> None:
    """Unimplemented on workers for the methods of :data:`CONTROL_PLANE_ONLY`."""
    api = CONTROL_PLANE_ONLY.get(call.method)
    if api is not None and not call.state.identity.controlplane:
        raise RPCFailure(
            StatusCode.UNIMPLEMENTED, f"{api} is only available on control plane nodes"
        )


@dataclass(frozen=True)
class ClientConfiguration:
    ca: bytes
    crt: bytes
    key: bytes
    talosconfig: bytes


class NodeContext(Protocol):
    """What servicers may use besides the node's own state (implemented by the cluster)."""

    @property
    def state(self) -> NodeState: ...

    @property
    def clock(self) -> Clock: ...

    def cluster_states(self) -> Sequence[NodeState]:
        """Every node of the cluster (health checks look at all of them)."""
        ...

    def kubeconfig(self) -> bytes:
        """The admin kubeconfig YAML pointing at this control plane's Kubernetes API."""
        ...

    def client_configuration(self, roles: Sequence[str], ttl: float) -> ClientConfiguration:
        """A fresh client certificate with ``roles`` and a talosconfig around it."""
        ...


@dataclass(frozen=True)
class Call:
    """One RPC as the local node serves it."""

    method: str
    roles: frozenset[str]
    node: NodeContext
    metadata: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @property
    def state(self) -> NodeState:
        return self.node.state

    @property
    def admin(self) -> bool:
        return ADMIN in self.roles
