"""Which Kubernetes Node a check looks at: the one Talos registers for the node, by the name
in its Nodenames resource (:attr:`TalosNode.kubernetes_registration`), and none with
``machine.kubelet.skipNodeRegistration`` (then a check that needs the Node skips)."""

from __future__ import annotations

import pytest

from pytest_talos.node import KubernetesName, TalosNode

__all__ = ["registered_node"]


def registered_node(node: TalosNode) -> KubernetesName:
    """``node``'s Kubernetes registration; skips the test when the node registers no Node."""
    registration = node.kubernetes_registration
    if not registration.registered:
        pytest.skip(registration.skip_reason)
    return registration
