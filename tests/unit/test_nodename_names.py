"""The Kubernetes node name as Talos computes it: FromHostname (one copy, in the leaf
module both sides use: ``pytest_talos.talos_api.kubernetes_node_name``), the kit's
:class:`KubernetesName` and the emulator's (``emulator.kubenode``: nodename.go,
kubelet_spec.go, node_label_spec.go). No sockets."""

from __future__ import annotations

import pytest

from pytest_talos.emulator.node.identity import NodeIdentity
from pytest_talos.emulator.node.kubelet import (
    extension_node_labels,
    kubelet_node_name,
    node_registered,
    nodename_of,
)
from pytest_talos.node import KubernetesName
from pytest_talos.talos_api import kubernetes_node_name

# controllers/k8s/internal/nodename/nodename.go FromHostname
NAMES = [
    ("worker-1", "worker-1"),
    ("Worker-1", "worker-1"),
    ("node_a", "node-a"),
    ("host.Example.COM", "host.example.com"),
    ("-x-.", "x"),
    ("_a_", "a"),
    ("héllo!", "hllo"),
    ("ÄB", "b"),
    ("a b\tc", "abc"),
]


@pytest.mark.parametrize(("hostname", "expected"), NAMES)
def test_from_hostname_keeps_what_kubernetes_accepts(hostname: str, expected: str) -> None:
    assert kubernetes_node_name(hostname) == expected


@pytest.mark.parametrize("hostname", ["-_!", ".."])
def test_a_hostname_with_nothing_to_keep_is_refused(hostname: str) -> None:
    with pytest.raises(ValueError, match=r"^could not convert hostname '.*' to a valid Kub"):
        kubernetes_node_name(hostname)


def _config(kubelet: str = "") -> bytes:
    section = kubelet or "    {}"
    return f"version: v1alpha1\nmachine:\n  type: worker\n  kubelet:\n{section}\n".encode()


FQDN = _config("    registerWithFQDN: true")


def test_emulator_nodename_is_the_fqdn_only_with_register_with_fqdn() -> None:
    assert nodename_of("Node_1", "Cluster.Example", FQDN) == "node-1.cluster.example"
    assert nodename_of("Node_1", "Cluster.Example", _config()) == "node-1"
    assert nodename_of("node-1", "", FQDN) == "node-1"  # no domain: the FQDN is the hostname
    off = _config("    registerWithFQDN: false")
    assert nodename_of("node-1", "cluster.example", off) == "node-1"


def test_emulator_skip_node_registration() -> None:
    assert node_registered(_config())
    assert not node_registered(_config("    skipNodeRegistration: true"))


def test_emulator_kubelet_name_honours_a_user_hostname_override() -> None:
    ident = NodeIdentity("Node_1", "worker", "10.5.0.3", domain="cluster.example")
    assert kubelet_node_name(ident, FQDN) == "node-1.cluster.example"
    override = _config("    extraArgs:\n      hostname-override: ' Custom-Name '")
    assert kubelet_node_name(ident, override) == "custom-name"


def test_extension_labels_only_for_valid_label_values() -> None:
    labels = extension_node_labels(
        {
            "iscsi-tools": "v0.1.6",
            "gvisor": "20240115.0",
            "built": "1.2.3+build",  # '+' is not allowed in a label value
            "long": "v" * 64,  # over 63 characters
            "unversioned": "",  # an empty value is a valid label value
            "": "v1",  # no name: skipped
            "bad name": "v1",  # not a qualified name
        }
    )
    assert labels == {
        "extensions.talos.dev/iscsi-tools": "v0.1.6",
        "extensions.talos.dev/gvisor": "20240115.0",
        "extensions.talos.dev/unversioned": "",
    }


def test_kubernetes_name_messages() -> None:
    registered = KubernetesName("node-1.example", "Nodenames.kubernetes.talos.dev nodename")
    assert registered.skip_reason == ""
    assert registered.evidence() == {
        "kubernetes node name": "node-1.example",
        "kubernetes node name from": "Nodenames.kubernetes.talos.dev nodename",
    }
    unregistered = KubernetesName("node-1", "x", registered=False)
    assert unregistered.skip_reason == (
        "the node registers no Kubernetes Node (machine.kubelet.skipNodeRegistration is "
        "true, as Nodenames.kubernetes.talos.dev nodename says)"
    )
    fallback = KubernetesName("node-1", "the Hostname API", fallback="gone")
    assert fallback.evidence()["kubernetes node name fallback"] == "gone"
