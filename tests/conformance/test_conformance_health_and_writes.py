"""The audited cluster and api checks run as a user runs them against the emulator: the
health check covers the whole cluster when the run targets part of it, and it and the COSI
write check skip, naming the role, with a talosconfig that is not os:admin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.cluster.clusterinfo import OWN_DISCOVERY
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from tests.conformance.suite_runner import SuiteRun, run_suite, target_args

HEALTH, WRITES = "cluster.health-check-passes", "api.resource-writes-refused"
CP, WORKER = "talos-default-controlplane-1", "talos-default-worker-1"
SELECT = ("-k", "health or writes", "--talos-allow", "mutating")


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        yield cluster


def _checks(result: SuiteRun, check: str) -> list[dict[str, Any]]:
    return [c for c in result.checks if c["id"] == check]


def test_a_run_on_part_of_the_cluster_checks_the_whole_cluster(
    emulator: EmulatedCluster, tmp_path: Path
) -> None:
    result = run_suite([*target_args(emulator), *SELECT, "--talos-nodes", CP], tmp_path / "report")
    (health,) = _checks(result, HEALTH)
    assert health["outcome"] == "passed", result.describe()
    evidence = health["evidence"]
    # Discovery sees every node: the node checks the whole cluster itself, as talosctl health.
    assert evidence["cluster info from"] == OWN_DISCOVERY
    assert "control plane IPs" not in evidence


@pytest.mark.parametrize("role", ["os:reader", "os:operator"])
def test_without_admin_the_health_and_write_checks_skip_naming_the_role(
    emulator: EmulatedCluster, tmp_path: Path, role: str
) -> None:
    identity = emulator.issue_client([role], path=tmp_path / "talosconfig")
    assert identity.path is not None
    args = ["--talosconfig", str(identity.path), "--talos-endpoint", emulator.endpoint]
    result = run_suite([*args, *SELECT], tmp_path / "report")
    (health,) = _checks(result, HEALTH)
    assert health["outcome"] == "skipped", result.describe()
    assert health["message"] == (
        "needs os:admin: the health check reads Kubernetes with the caller's roles and only "
        f"os:admin may fetch the kubeconfig; this talosconfig has {role}"
    )
    writes = _checks(result, WRITES)
    assert {c["outcome"] for c in writes} == {"skipped"}, result.describe()
    assert {c["message"] for c in writes} == {
        "needs os:admin: without it the authorizer refuses the writes before the resource "
        f"access filter is reached; this talosconfig has {role}"
    }


def test_with_discovery_unreachable_the_kubernetes_node_list_is_sent(tmp_path: Path) -> None:
    # Each node's Members list only itself: told nothing, the node would check only itself
    # and fail on the other Kubernetes Nodes (NodesMatch), so the kit names them all.
    with EmulatedCluster(1, 1, time_scale=20, variants=["discovery-unreachable"]) as cluster:
        result = run_suite([*target_args(cluster), *SELECT], tmp_path / "report")
    (health,) = _checks(result, HEALTH)
    assert health["outcome"] == "passed", result.describe()
    evidence = health["evidence"]
    assert evidence["cluster info from"] == (
        "the Kubernetes Node list (InternalIPs, control-plane label)"
    )
    assert evidence["control plane IPs"] == [cluster.nodes[0].address]
    assert evidence["worker IPs"] == [cluster.nodes[1].address]
