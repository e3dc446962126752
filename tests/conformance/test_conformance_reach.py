"""Endpoint-only reach: a runner that reaches only the control plane endpoint (the workers on
a private network, answering through the endpoint's apid) gets one-line "not judged" skips
for the checks that need their own connection to a worker, and a verdict that names them;
never an error, never a pass. A node that takes the TCP connection is reached, so a TLS
fault there still fails; a node that is down is not taken for unreached."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance._support.reach import DIRECT_REACH_CHECKS, DirectReach
from pytest_talos.certs import ExpiryPolicy, kubernetes_certificates
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode
from pytest_talos.ports.reach import probe_reach
from pytest_talos.reporting import CheckRecord, apply_gate, decide_verdict
from pytest_talos.reporting.reach import NO_DIRECT_REACH, no_reach_reason, unjudged_reason
from tests.conformance.suite_runner import SuiteRun, run_suite

CP, WORKER = "talos-default-controlplane-1", "talos-default-worker-1"
PORTS, SSH = "immutability.only-expected-ports", "immutability.no-shell-or-ssh"
NOT_JUDGED = {*DIRECT_REACH_CHECKS, PORTS, SSH}
AREAS = ("api", "certs", "immutability")
VARIANT = ("--talos-emulator-variant", "endpoint-only")


# --------------------------------------------------------------------------- the TCP probe


def test_a_refused_connect_is_no_reach_and_says_so() -> None:
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    reach = probe_reach("127.0.0.1", port, timeout=2.0)
    assert (reach.reached, reach.why, reach.tried) == (
        False,
        "connection refused",
        f"127.0.0.1:{port}",
    )


def test_a_node_that_takes_the_connection_and_hangs_up_is_reached() -> None:
    """Only the TCP connect counts: a TLS refusal after it is the check's finding."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        reach = probe_reach("127.0.0.1", server.getsockname()[1], timeout=2.0)
    assert reach.reached
    assert reach.why == ""


# --------------------------------------------------------------------------- the run's book


@pytest.fixture(scope="module")
def endpoint_only() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 1, time_scale=20, variants=["endpoint-only"]) as cluster:
        yield cluster


def _connect(emulator: EmulatedCluster) -> TalosCluster:
    """The cluster as the kit sees it, once each node answers Version through the endpoint
    (keep it: its nodes' clients close with it)."""
    cluster = TalosCluster.connect(emulator.talosconfig_path, endpoints=[emulator.endpoint], env={})
    for node in cluster.nodes:
        for _ in range(100):
            try:
                node.client.version()
                break
            except TalosError:
                time.sleep(0.1)
    return cluster


def _by_name(cluster: TalosCluster) -> dict[str, TalosNode]:
    return {node.name: node for node in cluster.nodes}


def test_only_the_worker_behind_the_endpoint_is_unreached(
    endpoint_only: EmulatedCluster,
) -> None:
    cluster = _connect(endpoint_only)
    nodes = _by_name(cluster)
    book = DirectReach(timeout=2.0)
    worker_address = endpoint_only.node(WORKER).address
    assert book.unreached(nodes[CP]) is None
    reason = book.reason(nodes[WORKER], "this check needs X")
    assert reason == (
        f"{NO_DIRECT_REACH}{WORKER} ({worker_address}:50000 tried: connection refused); "
        "it answers through the endpoint, but this check needs X"
    )


def test_a_node_that_is_down_is_not_taken_for_unreached() -> None:
    """Refused directly and silent through the endpoint: down, not unreached; nothing is
    kept, so once it is back (and only then reachable through the endpoint) it is learnt."""
    with EmulatedCluster(1, 1, time_scale=20, variants=["endpoint-only"]) as emulator:
        cluster = _connect(emulator)
        nodes = _by_name(cluster)
        worker = emulator.node(WORKER)
        loop = emulator._loop
        assert loop is not None
        asyncio.run_coroutine_threadsafe(worker.stop_serving(), loop).result(10)
        book = DirectReach(timeout=2.0)
        assert book.unreached(nodes[WORKER]) is None
        asyncio.run_coroutine_threadsafe(worker.start_serving(), loop).result(10)
        found = book.unreached(nodes[WORKER])
        assert found is not None
        assert found.why == "connection refused"


def test_kube_apiserver_at_an_unreached_node_is_not_read(endpoint_only: EmulatedCluster) -> None:
    """certs.kubernetes-api without direct reach reads nothing on the node's address (here
    the kubeconfig's server is the node itself: only the minted client certificate, shown
    and not judged, is left)."""
    cluster = _connect(endpoint_only)
    cp = _by_name(cluster)[CP]
    kubeconfig = cp.client.kubeconfig()
    near = kubernetes_certificates(cp, kubeconfig, ExpiryPolicy(), timeout=5.0)
    far = kubernetes_certificates(cp, kubeconfig, ExpiryPolicy(), timeout=5.0, at_node=False)
    assert any("kube-apiserver" in report.what for report in near), [r.what for r in near]
    assert [report.what for report in far] == [
        "the kubeconfig client certificate (minted by this Kubeconfig call; shown, not judged)"
    ]


# --------------------------------------------------------------------------- the verdict


def _record(
    check: str, node: str, outcome: str, message: str = "", severity: str = "critical"
) -> CheckRecord:
    return CheckRecord(check, severity, "claim", outcome, node=node, message=message)  # type: ignore[arg-type]


def test_the_verdict_names_what_was_not_judged_and_where() -> None:
    skip = no_reach_reason(WORKER, "10.0.0.3:50000", "no answer within 3s", "it needs Y")
    records = [
        _record("api.mtls-required", CP, "passed"),
        _record("api.mtls-required", WORKER, "skipped", skip),
        _record("certs.api-certificate", CP, "passed"),
        _record("certs.api-certificate", WORKER, "skipped", skip),
        _record("upgrade.version", CP, "skipped", "no expected version: pass", "low"),
    ]
    verdict = decide_verdict(records, apply_gate(records, "low"))
    assert verdict.summary() == (
        "verdict PASSED (exit 0): not judged (no direct reach to "
        f"{WORKER} (10.0.0.3:50000 tried)): 2 check(s): api.mtls-required, "
        "certs.api-certificate"
    )
    assert unjudged_reason([r for r in records if r.node == CP]) is None


def test_a_critical_check_judged_on_no_node_is_incomplete() -> None:
    """Behind a load balancer even the control plane's own address may be out of reach:
    a critical check then judged nothing anywhere, and the run cannot claim PASSED."""
    records = [
        _record("api.version-answers", CP, "passed"),
        _record(
            "api.mtls-required",
            CP,
            "skipped",
            no_reach_reason(CP, "10.0.0.2:50000", "no answer within 3s", "it needs Y"),
        ),
    ]
    verdict = decide_verdict(records, apply_gate(records, "low"))
    assert verdict.reasons == (
        "not run on any node: api.mtls-required",
        f"not judged (no direct reach to {CP} (10.0.0.2:50000 tried)): 1 check(s): "
        "api.mtls-required",
    )
    assert verdict.name == "INCOMPLETE"


def test_a_failure_stays_a_failure_beside_what_was_not_judged() -> None:
    skip = no_reach_reason(WORKER, "10.0.0.3:50000", "connection refused", "it needs Y")
    records = [
        _record("api.mtls-required", CP, "failed", "accepted"),
        _record("api.mtls-required", WORKER, "skipped", skip),
    ]
    verdict = decide_verdict(records, apply_gate(records, "low"))
    assert verdict.name == "FAILED"
    assert verdict.reasons[0] == "1 blocking failure(s)"
    assert verdict.reasons[1].startswith(f"not judged (no direct reach to {WORKER} (")


# --------------------------------------------------------------------------- the suite


def _suite(tmp_path: Path, *args: str) -> SuiteRun:
    paths = tuple(str(Path(__file__).resolve().parents[2] / "conformance" / a) for a in AREAS)
    return run_suite(
        ["--talos-emulator", "--talos-allow", "disruptive", *VARIANT, *args],
        tmp_path / "report",
        paths=paths,
    )


def _by(run: SuiteRun, node: str) -> dict[str, tuple[str, str]]:
    return {c["id"]: (c["outcome"], c["message"]) for c in run.checks if c["node"] == node}


def _verdict_line(run: SuiteRun) -> str:
    return next(line for line in run.output.splitlines() if line.startswith("conformance: verdict"))


@pytest.mark.slow
def test_endpoint_only_workers_are_not_judged_in_one_line_each(tmp_path: Path) -> None:
    """Before: the five TLS probes and certs.api-certificate errored with "nothing was
    tested: ... Connection refused" on the worker, and the port check failed it ("listening
    by Netstat but refused by the node"): verdict FAILED, seven blocking failures."""
    run = _suite(tmp_path)
    assert run.results is not None, run.describe()
    assert run.broken() == {}, run.describe()
    assert run.returncode == 0, run.describe()
    worker, cp = _by(run, WORKER), _by(run, CP)
    unjudged = {check for check, (outcome, message) in worker.items() if outcome == "skipped"}
    assert unjudged >= NOT_JUDGED, run.describe()
    targets = {t["name"]: t["address"] for t in run.results["run"]["targets"]}
    address = re.escape(f"{targets[WORKER]}:50000")
    for check in NOT_JUDGED:
        message = worker[check][1]
        assert re.match(
            rf"{re.escape(NO_DIRECT_REACH)}{WORKER} \({address} tried: connection refused\); "
            "it answers through the endpoint, but ",
            message,
        ), message
        assert "\n" not in message
        assert cp[check][0] == "passed", (check, cp[check])  # the endpoint's node is judged
    # Nothing else on the worker skips for want of reach; what it can, it judges.
    assert {c for c, (_, m) in worker.items() if m.startswith(NO_DIRECT_REACH)} == NOT_JUDGED
    assert worker["api.version-answers"][0] == "passed"
    line = _verdict_line(run)
    assert line.startswith(
        f"conformance: verdict PASSED (exit 0): not judged (no direct reach to {WORKER} ("
    ), line
    assert "tried)): 8 check(s): " in line, line
    assert run.results["verdict_reasons"][-1] == line.split("(exit 0): ", 1)[1]


@pytest.mark.slow
def test_port_faults_on_an_unreached_worker_still_fail_by_what_the_endpoint_shows(
    tmp_path: Path,
) -> None:
    faults = ("--talos-emulator-fault", "extra-port", "--talos-emulator-fault", "ssh-open")
    run = _suite(tmp_path, *faults, "-k", "only_expected_ports or no_shell")
    assert run.results is not None, run.describe()
    assert _by(run, CP)[PORTS][0] == "failed", run.describe()
    outcome, message = _by(run, WORKER)[PORTS]
    assert outcome == "failed", run.describe()
    assert "listening by Netstat, outside the allowlist, not reached by the scan: " in message
    assert "8080" in message
    assert "22" in message
    worker_ssh = next(c for c in run.checks if c["id"] == SSH and c["node"] == WORKER)
    assert worker_ssh["outcome"] == "failed", run.describe()
    assert worker_ssh["evidence"]["port 22"].startswith("listening by Netstat ("), worker_ssh


@pytest.mark.slow
def test_a_tls_fault_fails_where_reach_is_direct_and_is_not_judged_where_it_is_not(
    tmp_path: Path,
) -> None:
    run = _suite(tmp_path, "--talos-emulator-fault", "no-mtls", "-k", "without_certificate")
    assert run.results is not None, run.describe()
    assert _by(run, CP)["api.mtls-required"][0] == "failed", run.describe()
    outcome, message = _by(run, WORKER)["api.mtls-required"]
    assert outcome == "skipped", run.describe()
    assert message.startswith(NO_DIRECT_REACH + WORKER), message
    assert run.returncode == 1
    line = _verdict_line(run)
    assert line.startswith("conformance: verdict FAILED (exit 1): 1 blocking failure(s); "), line
    assert f"not judged (no direct reach to {WORKER} (" in line
