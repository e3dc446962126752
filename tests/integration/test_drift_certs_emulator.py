"""Drift and certificate hygiene against emulated clusters over real mTLS: the library, the
``python -m pytest_talos.drift`` CLI, the transport's peer certificate, and the emulator's
desired state and certificate faults."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pytest_talos.certs import (
    ExpiryPolicy,
    apid_certificate,
    certificate_facts,
    client_certificate,
    kubernetes_certificates,
)
from pytest_talos.cluster import TalosCluster
from pytest_talos.drift import check_nodes, load_desired
from pytest_talos.drift.__main__ import main as drift_main
from pytest_talos.emulator import EmulatedCluster


def _connect(emulator: EmulatedCluster) -> TalosCluster:
    return TalosCluster.connect(emulator.talosconfig_path, endpoints=[emulator.endpoint], env={})


@pytest.fixture(scope="module")
def drifted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatedCluster, Path]]:
    """A cluster whose worker drifted (a sysctl set by hand) and has a change staged."""
    with EmulatedCluster(1, 1, faults=["config-drift", "config-staged"], time_scale=20) as emulator:
        directory = tmp_path_factory.mktemp("desired")
        emulator.write_desired(directory)
        yield emulator, directory


@pytest.mark.parametrize(
    "variants", [(), ("metal",), ("domain",), ("kube-proxy-disabled", "discovery-disabled")]
)
def test_healthy_cluster_matches_the_desired_state_it_writes(
    tmp_path: Path, variants: tuple[str, ...]
) -> None:
    with EmulatedCluster(2, 1, variants=variants) as emulator, _connect(emulator) as cluster:
        mapping = emulator.write_desired(tmp_path)
        drifts = check_nodes(cluster.reachable, load_desired(tmp_path))
    assert [d.in_sync for d in drifts] == [True, True, True], [d.lines() for d in drifts]
    written = yaml.safe_load(mapping.read_text())
    assert written["base"] == {"controlplane": "controlplane.yaml", "worker": "worker.yaml"}
    assert sorted(written["nodes"]) == sorted(n.hostname for n in emulator.nodes)
    expected = [{"file": f"patches/{v}.yaml"} for v in variants if v != "metal" and v != "domain"]
    assert written["patches"] == expected
    assert "# " in (tmp_path / "worker.yaml").read_text()  # the generator's comments kept
    if "metal" in variants:  # booted from STATE: no persistent config, and that is fine
        assert {d.persistent_version for d in drifts} == {None}


def test_drifted_and_staged_node_are_reported_with_document_and_path(
    drifted: tuple[EmulatedCluster, Path],
) -> None:
    emulator, directory = drifted
    with _connect(emulator) as cluster:
        drifts = {d.node: d for d in check_nodes(cluster.reachable, load_desired(directory))}
    cp, worker = drifts["talos-default-controlplane-1"], drifts["talos-default-worker-1"]
    assert cp.in_sync
    assert worker.active.lines() == [
        'v1alpha1 machine.sysctls: desired <absent>, actual {"vm.max_map_count": "262144"}'
    ]
    assert worker.staged
    assert worker.persisted is not None
    assert worker.persisted.lines() == [
        'v1alpha1 machine.sysctls["net.core.somaxconn"]: active <absent>, persistent "65535"'
    ]


def test_drift_cli_prints_masked_diffs_and_exits_one_on_drift(
    drifted: tuple[EmulatedCluster, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator, directory = drifted
    worker = (directory / "worker.yaml").read_text()
    token = yaml.safe_load(worker.split("\n---")[0])["machine"]["token"]
    edited = tmp_path / "desired"
    edited.mkdir()
    for path in directory.iterdir():
        (edited / path.name).write_text(path.read_text())
    (edited / "worker.yaml").write_text(worker.replace(token, "zzzzzz.zzzzzzzzzzzzzzzz"))
    code = drift_main(
        [
            "--talosconfig",
            str(emulator.talosconfig_path),
            "--endpoint",
            emulator.endpoint,
            "--desired",
            str(edited),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "v1alpha1 machine.token: desired and actual differ (secret values masked)" in out
    assert token not in out
    assert "zzzzzz" not in out
    assert (
        "drift: 1 of 2 node(s) differ from the desired state (talos-default-worker-1); a "
        "change is waiting on talos-default-worker-1" in out
    )


def test_drift_cli_exits_zero_in_sync_and_two_when_it_cannot_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmulatedCluster(1, 1) as emulator:
        emulator.write_desired(tmp_path)
        args = ["--talosconfig", str(emulator.talosconfig_path), "--endpoint", emulator.endpoint]
        assert drift_main([*args, "--desired", str(tmp_path)]) == 0
        assert drift_main([*args, "--desired", str(tmp_path / "missing")]) == 2
    captured = capsys.readouterr()
    assert "drift: 0 of 2 node(s) differ from the desired state" in captured.out
    assert "error: the desired-state directory" in captured.err


def test_transport_exposes_the_verified_peer_certificate() -> None:
    with EmulatedCluster(1, 0) as emulator, _connect(emulator) as cluster:
        der = cluster.client.peer_certificate
        facts = certificate_facts(der) if der else None
    assert facts is not None
    assert facts.subject == "CN=talos-default-controlplane-1"
    assert facts.covers(emulator.nodes[0].address)


def test_healthy_certificates_pass_and_faulty_ones_fail() -> None:
    faults = ["client-cert-expiring", "apid-cert-missing-san", "kube-cert-expired"]
    policy = ExpiryPolicy()
    with EmulatedCluster(1, 1) as healthy, _connect(healthy) as cluster:
        assert cluster.talosconfig is not None
        context = cluster.talosconfig.context
        assert client_certificate(context, policy).findings == []
        for node in cluster.nodes:
            report = apid_certificate(node, context)
            assert report.findings == [], report.to_json()
        cp = cluster.controlplane()
        assert all(
            r.findings == [] for r in kubernetes_certificates(cp, cp.client.kubeconfig(), policy)
        )
    with EmulatedCluster(1, 1, faults=faults) as faulty, _connect(faulty) as cluster:
        assert cluster.talosconfig is not None
        context = cluster.talosconfig.context
        assert "in 3.0 days (fail under 7 days)" in client_certificate(context, policy).failures[0]
        cp, worker = cluster.controlplane(), cluster.worker()
        assert apid_certificate(cp, context).failures == []
        (missing,) = apid_certificate(worker, context).failures
        assert "does not name talos-default-worker-1" in missing
        failures = [
            f
            for r in kubernetes_certificates(cp, cp.client.kubeconfig(), policy)
            for f in r.failures
        ]
        assert len(failures) == 1
        assert "kube-apiserver's certificate at" in failures[0]
        assert "expired on" in failures[0]


def test_emulator_cli_writes_the_desired_state_the_drift_cli_finds_in_sync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    talosconfig, directory = tmp_path / "talosconfig", tmp_path / "desired"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_talos.emulator",
            "--talosconfig",
            str(talosconfig),
            "--write-desired",
            str(directory),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first == f"desired state: {directory / 'talos-desired.yaml'}\n"
        for _ in range(2):  # one line per node once every node serves
            process.stdout.readline()
        assert drift_main(["--talosconfig", str(talosconfig), "--desired", str(directory)]) == 0
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert "drift: 0 of 2 node(s) differ" in capsys.readouterr().out
