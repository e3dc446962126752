"""The name of a node's Kubernetes Node, as Talos has kubelet register it.

Talos does not register the kernel hostname as is. ``k8s.NodenameController``
(``internal/app/machined/pkg/controllers/k8s/nodename.go``) takes the FQDN when
``machine.kubelet.registerWithFQDN`` is true, else the short hostname, and passes it through
``nodename.FromHostname`` (``controllers/k8s/internal/nodename/nodename.go``): lower case,
``_`` becomes ``-``, any character but letters, digits, ``-`` and ``.`` is dropped. The result
is the ``Nodenames.kubernetes.talos.dev`` resource ``nodename`` (namespace ``k8s``, spec fields
``nodename`` and ``skipNodeRegistration``), which ``controllers/k8s/kubelet_spec.go`` hands to
kubelet as ``--hostname-override`` — unless the user's ``machine.kubelet.extraArgs`` sets
that flag itself, which then wins. With ``skipNodeRegistration`` kubelet gets no kubeconfig
and registers no Node at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_talos.errors import TalosError, TransportError
from pytest_talos.talos_api import ResourceType, kubernetes_node_name

if TYPE_CHECKING:
    from pytest_talos.node._node import TalosNode

__all__ = ["NODENAME", "KubernetesName", "read_kubernetes_name"]

NODENAME = (ResourceType.NODENAMES, "nodename", "k8s")
NODENAME_SOURCE = f"{ResourceType.NODENAMES} nodename"
OVERRIDE_SOURCE = "machine.kubelet.extraArgs hostname-override"


@dataclass(frozen=True)
class KubernetesName:
    """The Kubernetes Node a Talos node registers: ``name``, where it came from
    (``source``) and whether kubelet registers a Node at all (``registered``).

    ``fallback`` is why the Nodenames resource could not be used (then ``name`` is the
    Hostname API's name through FromHostname and may miss ``registerWithFQDN``), else ``""``.
    """

    name: str
    source: str
    registered: bool = True
    fallback: str = ""

    @property
    def skip_reason(self) -> str:
        """Why a check that needs the Node has nothing to look at (``""`` when registered)."""
        if self.registered:
            return ""
        return (
            "the node registers no Kubernetes Node (machine.kubelet.skipNodeRegistration is "
            f"true, as {NODENAME_SOURCE} says)"
        )

    def evidence(self) -> dict[str, str]:
        """What a check reports about the name it looked up."""
        found = {"kubernetes node name": self.name, "kubernetes node name from": self.source}
        if self.fallback:
            found["kubernetes node name fallback"] = self.fallback
        return found


def read_kubernetes_name(node: TalosNode) -> KubernetesName:
    """The node's Kubernetes name from its Nodenames resource, with the user's kubelet
    ``hostname-override`` on top; the Hostname API's name (through FromHostname) when the
    resource cannot be read. Transport errors propagate: the node is not answering."""
    try:
        found = node.resource(*NODENAME)
    except TransportError:
        raise
    except TalosError as exc:
        return _fallback(node, f"{NODENAME_SOURCE} unreadable: {exc}")
    spec: Mapping[str, Any] = found.spec if isinstance(found.spec, Mapping) else {}
    name = str(spec.get("nodename") or "")
    if not name:
        return _fallback(node, f"{NODENAME_SOURCE} has no nodename")
    registered = spec.get("skipNodeRegistration") is not True
    override = _hostname_override(node)
    if override:
        return KubernetesName(override, OVERRIDE_SOURCE, registered)
    return KubernetesName(name, NODENAME_SOURCE, registered)


def _fallback(node: TalosNode, why: str) -> KubernetesName:
    return KubernetesName(kubernetes_node_name(node.hostname), "the Hostname API", fallback=why)


def _hostname_override(node: TalosNode) -> str:
    """kubelet's ``--hostname-override`` from ``machine.kubelet.extraArgs`` (trimmed and
    lower-cased, as kubelet does: Kubernetes component-helpers/node/util GetHostname), or
    ``""``: unset, or the config is not readable with this talosconfig (os:admin only)."""
    try:
        documents = node.machine_config.documents
    except TalosError:
        return ""
    main = next((doc for doc in documents if not doc.get("kind")), {})
    kubelet = (main.get("machine") or {}).get("kubelet") or {}
    value = (kubelet.get("extraArgs") or {}).get("hostname-override")
    if isinstance(value, list):  # an ArgValue may be a list: the last flag wins
        value = value[-1] if value else None
    return str(value).strip().lower() if value is not None else ""
