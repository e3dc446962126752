"""KubeSpan on an emulated node: whether the active machine config enables it, and the
WireGuard socket its manager then binds.

``pkg/machinery/config/container/container.go`` NetworkKubeSpanConfig: a ``KubeSpanConfig``
document, when there is one, wins over the v1alpha1 ``machine.network.kubespan``; its
``enabled`` is off when unset (``pkg/machinery/config/types/network/kubespan.go``).
``controllers/kubespan/config.go`` copies it into the KubeSpan Config resource;
``controllers/kubespan/identity.go`` makes the node's WireGuard identity and
``controllers/kubespan/manager.go`` then sets up the ``kubespan`` WireGuard link with
``ListenPort: constants.KubeSpanDefaultPort`` (51820): a kernel UDP socket on the wildcard
address, owned by no process. The link itself, its address, routes and nftables rules are
not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_talos.emulator.machineconfig.loader import lenient_documents, main_document

__all__ = ["KUBESPAN_KIND", "KUBESPAN_PORT", "kubespan_enabled"]

KUBESPAN_KIND = "KubeSpanConfig"
KUBESPAN_PORT = 51820  # pkg/machinery/constants/constants.go KubeSpanDefaultPort


def kubespan_enabled(data: bytes) -> bool:
    """Whether the machine config ``data`` enables KubeSpan (the document wins)."""
    for doc in lenient_documents(data):
        if doc.get("kind") == KUBESPAN_KIND:
            return doc.get("enabled") is True
    network = _dig(main_document(data), "machine", "network", "kubespan")
    return isinstance(network, Mapping) and network.get("enabled") is True


def _dig(doc: Mapping[str, Any], *path: str) -> Any:
    value: Any = doc
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value
