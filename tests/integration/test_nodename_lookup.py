"""TalosNode.kubernetes_registration against the emulator over real mTLS: the name comes
from the Nodenames resource (the FQDN with registerWithFQDN), is kept until a config change
goes through the node, falls back to the Hostname API, and says when there is no Node
(skipNodeRegistration); the emulator names its Node after it and labels it with the
installed extensions."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_talos.checks import assert_node_ready
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.node.published import NodenameController
from pytest_talos.errors import ConformanceFailure
from pytest_talos.guard import ConfigGuard
from pytest_talos.models import Resource
from pytest_talos.node import KubernetesName, TalosNode
from tests.integration.checks_support import connected

NODENAME = ("Nodenames.kubernetes.talos.dev", "nodename", "k8s")
FROM_RESOURCE = "Nodenames.kubernetes.talos.dev nodename"


@pytest.fixture(scope="module")
def fqdn() -> Iterator[tuple[EmulatedCluster, TalosCluster]]:
    with connected(variants=["register-with-fqdn"]) as pair:
        yield pair


@pytest.fixture(scope="module")
def plain() -> Iterator[tuple[EmulatedCluster, TalosCluster]]:
    with connected(variants=["extensions"]) as pair:
        yield pair


def _kube_node_names(cluster: TalosCluster) -> list[str]:
    kube = cluster.kubernetes
    found = kube.core_v1.list_node(_request_timeout=kube.request_timeout).items
    return sorted(str(item.metadata.name) for item in found)


def _counting_reads(node: TalosNode, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    original: Callable[..., Resource] = node.resource

    def resource(kind: str, ident: str, namespace: str | None = None) -> Resource:
        reads.append(kind)
        return original(kind, ident, namespace)

    monkeypatch.setattr(node, "resource", resource)
    return reads


def test_register_with_fqdn_names_the_node_after_the_fqdn(
    fqdn: tuple[EmulatedCluster, TalosCluster],
) -> None:
    _, cluster = fqdn
    worker = cluster.worker()
    assert worker.hostname == "talos-default-worker-1"  # the Hostname API: the short name
    spec = worker.resource(*NODENAME).spec
    assert spec["nodename"] == "talos-default-worker-1.cluster.example"
    assert spec["skipNodeRegistration"] is False
    assert worker.kubernetes_registration == KubernetesName(
        "talos-default-worker-1.cluster.example", FROM_RESOURCE
    )
    assert _kube_node_names(cluster) == [
        "talos-default-controlplane-1.cluster.example",
        "talos-default-worker-1.cluster.example",
    ]
    result = assert_node_ready(cluster, worker, timeout=5)
    assert result.evidence["kubernetes node name"] == "talos-default-worker-1.cluster.example"
    labels = cluster.kubernetes.node(worker.kubernetes_name).metadata.labels
    assert labels["kubernetes.io/hostname"] == "talos-default-worker-1.cluster.example"


def test_members_are_named_after_the_nodename(
    fqdn: tuple[EmulatedCluster, TalosCluster],
) -> None:
    # controllers/cluster/member.go: a Member's id is its affiliate's nodename, which
    # local_affiliate.go takes from the Nodename resource (the FQDN here).
    _, cluster = fqdn
    members = cluster.worker().resources("Members.cluster.talos.dev", "cluster")
    assert sorted(member.id for member in members) == [
        "talos-default-controlplane-1.cluster.example",
        "talos-default-worker-1.cluster.example",
    ]


def test_the_name_is_kept_until_a_config_change_goes_through_the_node(
    fqdn: tuple[EmulatedCluster, TalosCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, cluster = fqdn
    worker = cluster.worker()
    worker.forget_kubernetes_name()
    reads = _counting_reads(worker, monkeypatch)
    assert (
        worker.kubernetes_name == worker.kubernetes_name == "talos-default-worker-1.cluster.example"
    )
    assert reads == [NODENAME[0]]  # read once, then kept
    with ConfigGuard() as guard:
        worker.apply_patch({"machine": {"kubelet": {"registerWithFQDN": False}}}, guard=guard)
        # NodenameController runs again on the new config; the kit reads the name again.
        assert worker.kubernetes_name == "talos-default-worker-1"
        assert len(reads) == 2
        assert "talos-default-worker-1" in _kube_node_names(cluster)
        assert_node_ready(cluster, worker, timeout=5)
    worker.forget_kubernetes_name()  # the guard restored the config behind the node's back
    assert worker.kubernetes_name == "talos-default-worker-1.cluster.example"


def test_skip_node_registration_means_no_node(
    plain: tuple[EmulatedCluster, TalosCluster],
) -> None:
    _, cluster = plain
    worker = cluster.worker()
    with ConfigGuard() as guard:
        worker.apply_patch({"machine": {"kubelet": {"skipNodeRegistration": True}}}, guard=guard)
        registration = worker.kubernetes_registration
        assert registration == KubernetesName(
            "talos-default-worker-1", FROM_RESOURCE, registered=False
        )
        assert "talos-default-worker-1" not in _kube_node_names(cluster)
        result = assert_node_ready(cluster, worker)
        assert result.notes == [registration.skip_reason]
    worker.forget_kubernetes_name()
    assert worker.kubernetes_registration.registered


def test_a_user_hostname_override_wins(plain: tuple[EmulatedCluster, TalosCluster]) -> None:
    _, cluster = plain
    worker = cluster.worker()
    override = {"machine": {"kubelet": {"extraArgs": {"hostname-override": "Custom-Name"}}}}
    with ConfigGuard() as guard:
        worker.apply_patch(override, guard=guard)
        assert worker.kubernetes_registration == KubernetesName(
            "custom-name", "machine.kubelet.extraArgs hostname-override"
        )
        assert "custom-name" in _kube_node_names(cluster)
        assert_node_ready(cluster, worker, timeout=5)
    worker.forget_kubernetes_name()


def _on_store(emulator: EmulatedCluster, hostname: str, action: Callable[[Any], object]) -> None:
    state = emulator.node(hostname).state
    emulator.on_loop(lambda: action(state))


def test_falls_back_to_the_hostname_api_when_nodenames_is_unreadable(
    plain: tuple[EmulatedCluster, TalosCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator, cluster = plain
    worker = cluster.worker()
    reads = _counting_reads(worker, monkeypatch)
    _on_store(emulator, worker.hostname, lambda s: s.store.destroy("k8s", T.NODENAMES, "nodename"))
    try:
        worker.forget_kubernetes_name()
        registration = worker.kubernetes_registration
        assert (registration.name, registration.source) == (
            "talos-default-worker-1",
            "the Hostname API",
        )
        assert registration.fallback.startswith(f"{FROM_RESOURCE} unreadable: ")
        assert worker.kubernetes_name == "talos-default-worker-1"
        assert len(reads) == 2  # a fallback is not kept: the resource is tried again
        assert_node_ready(cluster, worker, timeout=5)
    finally:
        _on_store(
            emulator,
            worker.hostname,
            lambda s: NodenameController.attach(s.store, s.identity).reconcile(),
        )
    assert worker.kubernetes_registration.source == FROM_RESOURCE


def test_a_missing_node_fails_with_its_kubernetes_name(
    plain: tuple[EmulatedCluster, TalosCluster],
) -> None:
    _, cluster = plain
    worker = cluster.worker()
    ghost = TalosNode(
        worker.client,
        worker.address,
        hostname="ghost",
        role="worker",
        kubernetes=KubernetesName("ghost.example", "a test"),
    )
    with pytest.raises(ConformanceFailure) as failure:
        assert_node_ready(cluster, ghost)
    assert str(failure.value).startswith(
        "kubernetes.node-ready on ghost: Kubernetes has no Node named ghost.example\n"
        "  expected: a Node named ghost.example (a test)\n"
        "  observed: 404 Not Found"
    )


def test_extension_labels_on_the_node(plain: tuple[EmulatedCluster, TalosCluster]) -> None:
    _, cluster = plain
    worker = cluster.worker()
    versions = {
        item.spec["metadata"]["name"]: item.spec["metadata"]["version"]
        for item in worker.resources("ExtensionStatuses.runtime.talos.dev", "runtime")
    }
    assert sorted(versions) == ["iscsi-tools", "qemu-guest-agent"]
    labels = cluster.kubernetes.node(worker.kubernetes_name).metadata.labels
    assert {k: v for k, v in labels.items() if k.startswith("extensions.talos.dev/")} == {
        f"extensions.talos.dev/{name}": version for name, version in versions.items()
    }
