"""assert_node_ready through the Kubernetes API fetched over Talos, and the waits' timeouts."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator

import pytest

from pytest_talos.checks import assert_node_ready
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import ConformanceFailure, TalosError, WaitTimeout
from pytest_talos.node import KubernetesName, TalosNode
from pytest_talos.wait import wait_for_config, wait_for_service, wait_service_stable
from tests.integration.checks_support import connected


@pytest.fixture(scope="module")
def not_ready() -> Iterator[TalosCluster]:
    # node-not-ready hits the last node (the worker); the control plane stays Ready.
    with connected(["node-not-ready"]) as (_, cluster):
        yield cluster


def test_node_ready_passes_on_a_ready_node(not_ready: TalosCluster) -> None:
    result = assert_node_ready(not_ready, not_ready.controlplane())
    assert result.evidence["conditions"]["Ready"][0] == "True"


def test_node_ready_fails_on_the_not_ready_fault(not_ready: TalosCluster) -> None:
    with pytest.raises(ConformanceFailure) as failure:
        assert_node_ready(not_ready, not_ready.worker(), timeout=0.5)
    text = str(failure.value)
    assert text.startswith(
        "kubernetes.node-ready on talos-default-worker-1: the Kubernetes Node is not Ready\n"
        "  expected: Ready=True\n"
        "  observed: Ready=False"
    )
    assert re.search(r"\n    Ready=False \S", text)


def test_node_ready_fails_for_a_node_kubernetes_does_not_know(not_ready: TalosCluster) -> None:
    worker = not_ready.worker()
    ghost = TalosNode(
        worker.client,
        worker.address,
        hostname="ghost",
        role="worker",
        kubernetes=KubernetesName("ghost", "a test"),
    )
    with pytest.raises(
        ConformanceFailure,
        match=r"kubernetes\.node-ready on ghost: "
        "Kubernetes has no Node named ghost",
    ):
        assert_node_ready(not_ready, ghost)


def test_kubernetes_credentials_stay_in_memory(not_ready: TalosCluster) -> None:
    """No path to a key or CA reaches the Kubernetes client: its pool uses the SSL context
    the kubeconfig's credentials were loaded into, and that context is what it connects with."""
    access = not_ready.kubernetes
    configuration = access.api_client.configuration
    assert (configuration.cert_file, configuration.key_file, configuration.ssl_ca_cert) == (
        None,
        None,
        None,
    )
    pool = access.api_client.rest_client.pool_manager
    context = pool.connection_pool_kw["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.get_ca_certs(), "the kubeconfig's CA is not in the context"
    assert access.core_v1.list_node(_request_timeout=10).items  # it connects with it


# --------------------------------------------------------------------------- waits


def test_wait_for_service_returns_the_healthy_state(not_ready: TalosCluster) -> None:
    state = wait_for_service(not_ready.worker(), "kubelet", timeout=5)
    assert (state.running, state.healthy) == (True, True)


def test_wait_for_service_times_out_with_the_last_observation(not_ready: TalosCluster) -> None:
    with pytest.raises(WaitTimeout) as timeout:
        wait_for_service(not_ready.worker(), "no-such-service", timeout=0.6)
    message = str(timeout.value)
    assert message.startswith(
        "[node talos-default-worker-1] service no-such-service did not become running and "
        "healthy (waited "
    )
    assert message.endswith("s; last observed: 'no-such-service: not running')")
    assert timeout.value.elapsed >= 0.6


def test_wait_service_stable_reports_the_timeline(not_ready: TalosCluster) -> None:
    report = wait_service_stable(not_ready.worker(), "kubelet", stable_for=0.5, timeout=5)
    assert report.restarts == 0
    assert report.timeline().endswith("kubelet: running, healthy")


def test_wait_for_config_never_shows_config_bytes(not_ready: TalosCluster) -> None:
    with pytest.raises(WaitTimeout) as timeout:
        wait_for_config(
            not_ready.worker(),
            lambda raw: False,
            timeout=0.6,
            description="a config that never comes",
        )
    message = str(timeout.value)
    assert re.search(
        r"gave up waiting for a config that never comes \(waited \d+\.\ds; last "
        r"observed: 'version \d+, \d+ bytes, sha256 [0-9a-f]{12}'\)$",
        message,
    )
    assert "machine" not in message


def test_errors_reaching_the_node_are_talos_errors_not_failures(not_ready: TalosCluster) -> None:
    worker = not_ready.worker()
    stranger = TalosNode(worker.client, "127.0.0.254")
    with pytest.raises(TalosError) as error:
        assert_node_ready(not_ready, stranger)
    assert not isinstance(error.value, ConformanceFailure)


def test_a_node_without_a_kubeconfig_is_a_talos_error_not_a_failure() -> None:
    with (
        connected(["no-kubeconfig"], workers=0) as (_, cluster),
        pytest.raises(TalosError, match="kubeconfig") as error,
    ):
        assert_node_ready(cluster, cluster.controlplane())
    assert not isinstance(error.value, ConformanceFailure)
