"""The checks hardened after audit 2, against emulated nodes over real mTLS: lifecycle taints,
a PID 1 that wraps machined, a login process and a versioned shell one level down in
/usr/libexec, and apid's and kube-apiserver's certificate names and lifetime."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from conformance._support.context import Timing
from conformance._support.fanout import checked_fanout
from pytest_talos import pki
from pytest_talos.certs import ExpiryPolicy, apid_certificate, kubernetes_certificates
from pytest_talos.certs import readers as cert_readers
from pytest_talos.checks import assert_no_shell
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import ConformanceFailure
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.catalogue import marked_check
from tests.integration.checks_support import TIME_SCALE, connected

TIMING = Timing(scale=TIME_SCALE, source="the emulator")
# The checks themselves are imported when called: their modules carry the suite's markers,
# which only the suite's plugin registers (the suite_markers fixture registers them here).
pytestmark = pytest.mark.usefixtures("suite_markers")


def conditions_check(*args: Any) -> None:
    from conformance.kubernetes.test_kubernetes import test_node_is_schedulable_without_pressure

    check = test_node_is_schedulable_without_pressure
    check(*args, marked_check(check))


def pid1_check(node: TalosNode, evidence: dict[str, Any]) -> None:
    """The check's test, its node read through the suite's at-once read of every node."""
    from conformance.immutability import test_immutability as suite

    check = suite.test_pid1_is_machined
    reads = checked_fanout([node], suite._pid1_machined, marked_check(check).id, None)
    check(node, evidence, reads)


@pytest.fixture(scope="module")
def healthy() -> Iterator[tuple[EmulatedCluster, TalosCluster]]:
    with connected() as pair:
        yield pair


# ---- taints ----------------------------------------------------------------------------------


def test_a_healthy_node_carries_only_talos_taints_which_it_owns(
    healthy: tuple[EmulatedCluster, TalosCluster],
) -> None:
    _, cluster = healthy
    node = cluster.kubernetes.node(cluster.controlplane().kubernetes_name)
    assert [(t.key, t.effect) for t in node.spec.taints] == [
        ("node-role.kubernetes.io/control-plane", "NoSchedule")
    ]
    owned = node.metadata.annotations["talos.dev/owned-taints"]
    assert json.loads(owned) == ["node-role.kubernetes.io/control-plane"]
    for target in cluster.nodes:
        evidence: dict[str, Any] = {}
        conditions_check(target, cluster.kubernetes, TIMING, evidence)
        assert evidence["taints"] in ("none", ["node-role.kubernetes.io/control-plane:NoSchedule"])


def test_a_lingering_cloud_taint_fails_after_the_grace() -> None:
    with connected(["node-uninitialized"]) as (_, cluster):
        conditions_check(cluster.controlplane(), cluster.kubernetes, TIMING, {})
        with pytest.raises(ConformanceFailure) as caught:
            conditions_check(cluster.worker(), cluster.kubernetes, TIMING, {})
    failure = caught.value
    assert "tainted to keep pods off" in str(failure)
    assert failure.observed == (
        "tainted node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule (still there "
        "after 20s of node time)"
    )


def test_a_lifecycle_taint_the_config_declares_is_the_operators_choice() -> None:
    patch = {"machine": {"nodeTaints": {"node.kubernetes.io/out-of-service": "NoExecute"}}}
    with connected() as (_, cluster), ConfigGuard() as guard:
        worker = cluster.worker()
        worker.apply_patch(patch, guard=guard)
        node = cluster.kubernetes.node(worker.kubernetes_name)
        assert ("node.kubernetes.io/out-of-service", "NoExecute") in [
            (t.key, t.effect) for t in node.spec.taints
        ]
        assert json.loads(node.metadata.annotations["talos.dev/owned-taints"]) == [
            "node.kubernetes.io/out-of-service"
        ]
        evidence: dict[str, Any] = {}
        conditions_check(worker, cluster.kubernetes, TIMING, evidence)
        assert evidence["taints"] == ["node.kubernetes.io/out-of-service:NoExecute"]


# ---- PID 1, login, shells ----------------------------------------------------------------------


def test_a_one_thread_init_wrapping_machined_is_not_machined(
    healthy: tuple[EmulatedCluster, TalosCluster],
) -> None:
    evidence: dict[str, Any] = {}
    pid1_check(healthy[1].worker(), evidence)
    assert evidence["pid 1 threads"] > 1
    with (
        connected(["pid1-init-wrapper"]) as (_, cluster),
        pytest.raises(ConformanceFailure) as caught,
    ):
        pid1_check(cluster.worker(), {})
    failure = caught.value
    assert failure.check == "immutability.pid1-is-machined"  # from the check's marker
    assert "PID 1 looks like machined but is another init" in str(failure)
    assert failure.observed is not None
    assert "1 thread(s); PID 1 runs a single thread" in failure.observed
    assert "also runs /usr/bin/init as /sbin/init: machined started by another init" in (
        failure.observed
    )


def test_a_login_session_and_a_deep_versioned_shell_are_ways_in() -> None:
    with (
        connected(["login-running", "shell-in-libexec-subdir"]) as (_, cluster),
        pytest.raises(ConformanceFailure) as caught,
    ):
        assert_no_shell(cluster.worker())
    evidence = caught.value.evidence
    assert evidence["shells on disk"] == "/usr/libexec/toolbox/bash-5.2"
    assert evidence["shell or remote-login processes"].endswith(
        ": /usr/bin/login /bin/login -f root"
    )


# ---- certificates ----------------------------------------------------------------------------


def test_healthy_certificates_name_every_node_address_and_the_in_cluster_names(
    healthy: tuple[EmulatedCluster, TalosCluster],
) -> None:
    _, cluster = healthy
    assert cluster.talosconfig is not None
    for node in cluster.nodes:
        report = apid_certificate(node, cluster.talosconfig.context)
        assert report.findings == [], report.to_json()
        assert report.facts is not None
        assert report.facts.covers("127.0.0.1")
    cp = cluster.controlplane()
    reports = kubernetes_certificates(cp, cp.client.kubeconfig(), ExpiryPolicy())
    assert [r.failures for r in reports] == [[], []]


def _der(cert: pki.CertAndKey) -> bytes:
    return cert.cert.public_bytes(serialization.Encoding.DER)


def test_apid_certificates_talos_never_issues_fail(
    healthy: tuple[EmulatedCluster, TalosCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator, cluster = healthy
    assert cluster.talosconfig is not None
    node = cluster.worker()
    forged = pki.issue_apid_cert(
        emulator.ca,
        hostname=node.hostname,
        fqdn=node.hostname,
        ips=[node.address],
        validity=dt.timedelta(days=3650),
        loopback=False,
    )
    monkeypatch.setattr(
        cert_readers, "_apid_der", lambda *_: (_der(forged), "a forged certificate", "")
    )
    report = apid_certificate(node, cluster.talosconfig.context, retry_after=0)
    assert len(report.failures) == 2
    assert "is valid for 3650.0 days" in report.failures[0]
    assert "does not name 127.0.0.1" in report.failures[1]


def test_a_kube_apiserver_certificate_without_in_cluster_names_fails(
    healthy: tuple[EmulatedCluster, TalosCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator, cluster = healthy
    cp = cluster.controlplane()
    bare = pki.issue_kube_apiserver_cert(
        emulator.kube_ca,
        hostname=cp.hostname,
        fqdn=cp.hostname,
        ips=[cp.address],
        endpoint_host=cp.address,
        in_cluster_names=False,
    )
    monkeypatch.setattr(cert_readers, "_served", lambda *_: _der(bare))
    (report, _client) = kubernetes_certificates(cp, cp.client.kubeconfig(), ExpiryPolicy())
    (failure,) = report.failures
    assert failure.startswith(
        f"kube-apiserver's certificate at {cp.address}:6443 does not name kubernetes, "
        "kubernetes.default, kubernetes.default.svc, localhost, 127.0.0.1, "
        "kubernetes.default.svc.cluster.local, 10.96.0.1 (its names: "
    )
