"""TalosNode: one Talos node seen through its API, in the style of testinfra's ``host``.

Every property is a fresh API call (nothing is cached except the hostname and the role,
which do not change while a node runs, and the Kubernetes node name, which changes only with
the config), so a test always sees the node as it is now::

    node.version.tag                      # "v1.13.9"
    node.service("kubelet").healthy       # True
    node.files.exists("/bin/sh")          # False on Talos
    node.machine_config.version           # MachineConfigs v1alpha1 resource version
    node.ports                            # open TCP ports, scanned from outside
    node.kubernetes_name                  # "worker-1" (the Node's name, as Talos registers it)
    node.apply_patch({"machine": {"nodeLabels": {"a": "b"}}})   # through a guard

Changes go through a *guard* (:class:`ConfigProtector`): before the first change to a node
the guard snapshots its machine config so that it can restore it afterwards
(:class:`pytest_talos.checks.ConfigGuard`), or refuses the change (:class:`ReadOnlyGuard`).

Layout: ``_node`` (:class:`TalosNode`), ``_files`` (:class:`NodeFiles`), ``_guards`` (the
guard protocol), ``_kubename`` (:class:`KubernetesName`, the name of the node's Kubernetes
Node), ``_ports`` (the ports a healthy node opens).
"""

from pytest_talos.node._files import NodeFiles, is_missing_path
from pytest_talos.node._guards import ConfigProtector, ReadOnlyGuard
from pytest_talos.node._kubename import KubernetesName
from pytest_talos.node._node import MACHINE_TYPE, TalosNode, host_of
from pytest_talos.node._ports import (
    default_expected_ports,
    dig,
    expected_ports_for,
    node_release,
    v1alpha1_document,
)

__all__ = [
    "MACHINE_TYPE",
    "ConfigProtector",
    "KubernetesName",
    "NodeFiles",
    "ReadOnlyGuard",
    "TalosNode",
    "default_expected_ports",
    "dig",
    "expected_ports_for",
    "host_of",
    "is_missing_path",
    "node_release",
    "v1alpha1_document",
]
