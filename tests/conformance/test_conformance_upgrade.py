"""Post-upgrade verification end to end: snapshot before, upgrade the emulated nodes through
the API, compare after — and each comparison check failing when its fact changed.

The emulated cluster runs in this process (metal platform, so it can upgrade); the suite
runs in a subprocess against it like against a real cluster, through its talosconfig — which
advertises the emulated clock's 20x rate, so the suite's watch windows last 1/20 of their
node time. The tests that only read the cluster share one (``shared_cluster``); those that
upgrade it or change its config get their own (``cluster``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.wait import wait_until
from tests.conformance.suite_runner import SUITE, SuiteRun, run_suite, target_args

UPGRADE = str(SUITE / "upgrade")
NEW_VERSION = "v1.13.10"
LABEL = "conformance.pytest-talos.dev/snapshot-probe"


TIME_SCALE = 20


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 1, platform="metal", time_scale=TIME_SCALE) as emulated:
        yield emulated


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[EmulatedCluster]:
    """For tests that change nothing on the nodes (they read, or edit only files)."""
    with EmulatedCluster(1, 1, platform="metal", time_scale=TIME_SCALE) as emulated:
        yield emulated


@pytest.fixture
def client(cluster: EmulatedCluster) -> Iterator[TalosClient]:
    with TalosClient.from_talosconfig(cluster.talosconfig_path, env={}) as talos:
        yield talos


def suite(cluster: EmulatedCluster, tmp_path: Path, name: str, *args: str) -> SuiteRun:
    return run_suite([*target_args(cluster), *args], tmp_path / name, paths=[UPGRADE])


def save(cluster: EmulatedCluster, tmp_path: Path) -> Path:
    snapshot = tmp_path / "pre-upgrade.json"
    result = suite(cluster, tmp_path, "save", "--talos-snapshot", "save", str(snapshot))
    assert result.outcomes()["upgrade.snapshot-recorded"] == {"passed"}, result.describe()
    return snapshot


def compare(cluster: EmulatedCluster, tmp_path: Path, snapshot: Path, *args: str) -> SuiteRun:
    return suite(cluster, tmp_path, "compare", "--talos-snapshot", "compare", str(snapshot), *args)


def patch_label(client: TalosClient, node: str, value: str | None) -> None:
    from pytest_talos.patches import apply_patches

    target = client.with_node(node)
    current = target.machine_config().raw
    label = {LABEL: value} if value is not None else {LABEL: {"$patch": "delete"}}
    target.apply_configuration(apply_patches(current, [{"machine": {"nodeLabels": label}}]))


def talos_tag(target: TalosClient) -> str:
    return target.version().tag


def test_snapshot_holds_digests_and_labels_but_no_secrets(
    shared_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    data = json.loads(save(shared_cluster, tmp_path).read_text())
    assert data["format"] == "pytest-talos-snapshot/1"
    worker = data["nodes"]["talos-default-worker-1"]
    assert worker["talos_version"] == "v1.13.9"
    assert worker["config_digest"].startswith("sha256:")
    assert worker["node_labels"]["kubernetes.io/hostname"] == "talos-default-worker-1"
    assert "PRIVATE KEY" not in json.dumps(data)


@pytest.mark.slow
def test_upgrade_through_the_api_then_compare_passes_with_the_new_version(
    cluster: EmulatedCluster, client: TalosClient, tmp_path: Path
) -> None:
    snapshot = save(cluster, tmp_path)
    # The endpoint (the first control plane) last: it reboots right after it answers.
    for node in reversed(cluster.nodes):
        client.with_node(node.address).upgrade(f"ghcr.io/siderolabs/installer:{NEW_VERSION}")
    for node in cluster.nodes:
        wait_until(
            functools.partial(talos_tag, client.with_node(node.address)),
            lambda tag: tag == NEW_VERSION,
            timeout=30,
            description=f"{node.hostname} to run {NEW_VERSION}",
        )
    result = compare(
        cluster,
        tmp_path,
        snapshot,
        "--talos-expect-version",
        "v1.13.x",
        "--talos-expect-kubernetes-version",
        "v1.36.0",
    )
    assert result.returncode == 0, result.describe()
    outcomes = result.outcomes()
    assert outcomes.pop("upgrade.snapshot-recorded") == {"skipped"}  # compare mode
    assert {o for found in outcomes.values() for o in found} == {"passed"}
    stale = compare(cluster, tmp_path, snapshot, "--talos-expect-version", "v1.13.9")
    assert stale.broken() == {"upgrade.talos-version": "failed"}, stale.describe()


def test_wrong_expected_kubernetes_version_fails(
    shared_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    result = suite(shared_cluster, tmp_path, "k8s", "--talos-expect-kubernetes-version", "v1.35")
    assert result.broken() == {"upgrade.kubernetes-version": "failed"}, result.describe()
    assert "v1.36.0" in result.output


def test_the_suite_learns_the_emulated_clock_rate_from_the_talosconfig(
    shared_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    result = suite(shared_cluster, tmp_path, "rate")
    assert result.outcomes()["upgrade.nodes-running"] == {"passed"}, result.describe()
    # One line for the run's one window, both nodes in it, at the rate the file advertises.
    lines = [line for line in result.output.splitlines() if "watching" in line]
    assert lines == [
        "conformance: watching 2 nodes at once for 36s (machine running and ready 36s once "
        "booted); the node clock runs 20x (advertised by the talosconfig "
        f"{shared_cluster.talosconfig_path}), so 1.8s real"
    ], result.describe()


@pytest.mark.slow
def test_config_and_label_changes_after_the_snapshot_fail_their_checks(
    cluster: EmulatedCluster, client: TalosClient, tmp_path: Path
) -> None:
    worker = cluster.nodes[1]
    patch_label(client, worker.address, "before")
    snapshot = save(cluster, tmp_path)
    patch_label(client, worker.address, None)
    result = compare(cluster, tmp_path, snapshot)
    assert result.broken() == {
        "upgrade.config-unchanged": "failed",
        "upgrade.node-labels-unchanged": "failed",
    }, result.describe()
    failing = {(c["id"], c["node"]) for c in result.checks if c["outcome"] == "failed"}
    assert failing == {
        ("upgrade.config-unchanged", worker.hostname),
        ("upgrade.node-labels-unchanged", worker.hostname),
    }
    assert f"{LABEL} missing" in result.output
    # It says which section changed and the versions, by digests only (no config content).
    changed = next(c for c in result.checks if c["id"] == "upgrade.config-unchanged")
    assert "removed: machine.nodeLabels" in changed["message"], changed
    assert changed["evidence"]["sections removed"] == "machine.nodeLabels", changed
    assert "(version " in changed["message"], changed
    assert "BEGIN" not in json.dumps(changed)
    assert "ca:" not in json.dumps(changed)


@pytest.mark.slow
def test_extension_missing_since_the_snapshot_fails(
    shared_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    snapshot = save(shared_cluster, tmp_path)
    data = json.loads(snapshot.read_text())
    data["nodes"]["talos-default-worker-1"]["extensions"] = {"iscsi-tools": "v0.2.0"}
    snapshot.write_text(json.dumps(data))
    result = compare(shared_cluster, tmp_path, snapshot)
    assert result.broken() == {"upgrade.extensions-unchanged": "failed"}, result.describe()
    assert "missing: iscsi-tools" in result.output


def test_unwritable_snapshot_path_fails_the_recording(
    shared_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = suite(
        shared_cluster, tmp_path, "save", "--talos-snapshot", "save", str(blocker / "snap.json")
    )
    assert result.broken() == {"upgrade.snapshot-recorded": "failed"}, result.describe()
    assert "cannot write the snapshot" in result.output


def test_compare_with_a_missing_snapshot_file_is_an_error_naming_the_fix(
    shared_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    # Found at start, before any check runs: a usage error (exit 4) naming the fix.
    result = compare(shared_cluster, tmp_path, tmp_path / "nowhere.json")
    assert result.returncode == 4, result.describe()
    assert "nowhere.json: no such file" in result.output
    assert "Take the snapshot before the upgrade with --talos-snapshot save PATH" in result.output
