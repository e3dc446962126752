"""What a node's discovery says about the cluster, and whether discovery is on at all.

Names differ by source on a healthy node (Talos v1.13.9): the Hostname API and etcd's member
names are the short hostname (``controllers/network/hostname_spec.go``,
``controllers/etcd/spec.go``); a ``Members`` resource's id is the nodename and its
``hostname`` the FQDN whenever the node has a domain (``controllers/cluster/member.go``,
``local_affiliate.go``). So names are compared on their short, lower-cased form.

With ``cluster.discovery.enabled: false`` (or no discovery section: off is the default,
``v1alpha1_discoveryconfig.go``) there are no Members at all; with the discovery service out
of reach each node's Members list only itself (its local affiliate). Talos's own health
check (``pkg/cluster/check/default.go``) does not use discovery: neither is a fault of the
node, so the checks skip with the reason instead of failing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_talos import models
from pytest_talos.errors import PermissionDenied
from pytest_talos.node import TalosNode

__all__ = [
    "DISABLED_REASON",
    "MEMBERS",
    "UNREACHABLE_REASON",
    "Member",
    "discovery_enabled",
    "members",
    "short_name",
]

MEMBERS = ("Members.cluster.talos.dev", "cluster")
DISABLED_REASON = (
    "discovery is disabled (cluster.discovery.enabled is not true in the machine config): "
    "there are no Members"
)
UNREACHABLE_REASON = (
    "discovery unreachable: every node's Members list only itself (the discovery service "
    "cannot be reached; Kubernetes and etcd do not need it)"
)


def short_name(name: str) -> str:
    """``host`` of ``host.domain``, lower-cased (nodenames are lower case)."""
    return name.split(".", 1)[0].lower()


@dataclass(frozen=True)
class Member:
    id: str
    hostname: str  # the FQDN when the node has a domain
    machine_type: str
    addresses: tuple[str, ...]

    @property
    def name(self) -> str:
        return short_name(self.hostname or self.id)


def _member(resource: models.Resource) -> Member:
    spec = resource.typed_spec
    if isinstance(spec, models.MemberSpec):
        return Member(resource.id, spec.hostname, spec.machine_type, spec.addresses)
    data: Mapping[str, Any] = resource.spec if isinstance(resource.spec, Mapping) else {}
    addresses = tuple(str(a) for a in data.get("addresses") or ())
    return Member(
        resource.id,
        str(data.get("hostname") or resource.id),
        str(data.get("machineType", "?")),
        addresses,
    )


def members(node: TalosNode) -> dict[str, Member]:
    """``{short name: member}`` as this node's discovery sees the cluster."""
    found = (_member(resource) for resource in node.resources(*MEMBERS))
    return {member.name: member for member in found}


def discovery_enabled(node: TalosNode) -> bool | None:
    """``cluster.discovery.enabled`` in the node's active machine config; None when the
    config cannot be read with this talosconfig (it is a sensitive resource)."""
    try:
        config = node.machine_config
    except PermissionDenied:
        return None
    main = next((d for d in config.documents if not d.get("kind")), {})
    discovery = (main.get("cluster") or {}).get("discovery") or {}
    return discovery.get("enabled") is True
