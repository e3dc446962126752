"""The post-upgrade walk-through of docs/conformance.md across minors, on the emulator: a
snapshot on v1.13, ``talosctl upgrade`` of every node to v1.14 through the API, then the
``post-upgrade`` profile (every directory it selects) compares and passes, judging each node
by the release it now runs; a node left behind, or rolled back, fails with the version it ran
before and the one it runs.

The cluster runs in this process (metal: only metal upgrades), so the same nodes live through
the snapshot, the upgrade and the compare; the suite runs in a subprocess against it through
its talosconfig, as against a real cluster (tests/conformance/test_conformance_upgrade.py does
the same within one minor).

The installer image names the release: the emulator boots the tag after the colon
(``lifecycle.py`` ``Lifecycle.upgrade``), played by that tag's release entry
(``releases.release_of``). ``installer:v1.14.0`` is what a user upgrades to, and what
``--talos-expect-version v1.14.x`` names; the table's own v1.14 tag is a pre-release
(``v1.14.0-rc.1``), which ``v1.14.x`` does not match (docs/conformance.md: a pre-release matches
only when named in full).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.errors import NotSupportedInMode
from pytest_talos.models import VersionSpec
from pytest_talos.releases import ETCD_CLIENT_HTTP_PORT, RELEASES, V1_13, V1_14
from tests.conformance.suite_runner import SUITE, SuiteRun, run_suite, target_args
from tests.integration.emulator_support import poll

TIME_SCALE = 20
NEW_RELEASE = "v1.14.0"  # the installer tag; the emulator plays the v1.14 entry for it
INSTALLER = f"ghcr.io/siderolabs/installer:{NEW_RELEASE}"
PORTS_CHECK = str(
    SUITE / "immutability" / "test_immutability.py::test_only_expected_ports_are_open"
)


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[EmulatedCluster]:
    workers = getattr(request, "param", 1)
    with EmulatedCluster(
        1, workers, platform="metal", talos_version="v1.13.x", time_scale=TIME_SCALE
    ) as emulated:
        yield emulated


@pytest.fixture
def client(cluster: EmulatedCluster) -> Iterator[TalosClient]:
    with TalosClient.from_talosconfig(cluster.talosconfig_path, timeout=2.0, env={}) as talos:
        yield talos


def post_upgrade(cluster: EmulatedCluster, tmp_path: Path, name: str, *args: str) -> SuiteRun:
    """``talos-conformance --talos-suite post-upgrade ...`` as the walk-through runs it."""
    return run_suite(
        [*target_args(cluster), "--talos-suite", "post-upgrade", *args], tmp_path / name
    )


def save(cluster: EmulatedCluster, tmp_path: Path) -> Path:
    snapshot = tmp_path / "pre-upgrade.json"
    result = post_upgrade(cluster, tmp_path, "save", "--talos-snapshot", "save", str(snapshot))
    assert result.returncode == 0, result.describe()
    assert result.outcomes()["upgrade.snapshot-recorded"] == {"passed"}, result.describe()
    return snapshot


def compare(
    cluster: EmulatedCluster, tmp_path: Path, snapshot: Path, name: str, kubelet: str
) -> SuiteRun:
    return post_upgrade(
        cluster,
        tmp_path,
        name,
        "--talos-snapshot",
        "compare",
        str(snapshot),
        "--talos-expect-version",
        "v1.14.x",
        "--talos-expect-kubernetes-version",
        kubelet,
    )


def _tag_of(node: TalosClient) -> Callable[[], str]:
    """The Versions resource's tag, which the node publishes afresh when it has booted."""

    def tag() -> str:
        spec = node.get("version", "version").typed_spec
        return spec.version if isinstance(spec, VersionSpec) else ""

    return tag


def upgrade(client: TalosClient, addresses: list[str]) -> None:
    """``talosctl upgrade --image installer:v1.14.0`` of each, then wait for it to be back."""
    for address in addresses:  # the endpoint last: it reboots right after it answers
        client.with_node(address).upgrade(INSTALLER)
    for address in addresses:
        poll(_tag_of(client.with_node(address)), lambda t: t == NEW_RELEASE, f"{address} on v1.14")


def kubelet_version(client: TalosClient, address: str) -> str:
    """What the node's kubelet runs (the machine config's kubelet image, which an upgrade of
    Talos keeps: only ``talosctl upgrade-k8s`` changes it)."""
    config = client.with_node(address).machine_config()
    v1alpha1 = next(doc for doc in config.documents if doc.get("version") == "v1alpha1")
    return str(v1alpha1["machine"]["kubelet"]["image"]).rpartition(":")[2]


def failed_on(result: SuiteRun) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for check in result.checks:
        if check["outcome"] in ("failed", "error"):
            found.setdefault(check["id"], set()).add(check["node"])
    return found


@pytest.mark.slow
def test_walk_through_across_minors_passes_once_every_node_runs_v1_14(
    cluster: EmulatedCluster, client: TalosClient, tmp_path: Path
) -> None:
    addresses = [node.address for node in reversed(cluster.nodes)]
    kubelet = kubelet_version(client, cluster.nodes[0].address)
    snapshot = save(cluster, tmp_path)
    upgrade(client, addresses)
    controlplane = client.with_node(cluster.nodes[0].address)
    poll(
        lambda: {r.local_port for r in controlplane.netstat() if r.l4proto.startswith("tcp")},
        lambda ports: ETCD_CLIENT_HTTP_PORT in ports,
        "etcd's v1.14 client HTTP listener",
    )

    result = compare(cluster, tmp_path, snapshot, "compare", kubelet)
    assert result.returncode == 0, result.describe()
    outcomes = result.outcomes()
    assert outcomes.pop("upgrade.snapshot-recorded") == {"skipped"}  # compare mode
    # Every check of the profile ran and passed: services, Kubernetes and the cluster too,
    # each judged by v1.14 (its etcd listeners, its service set).
    assert {"upgrade.talos-version", "services.expected-running-healthy"} <= set(outcomes)
    assert {o for found in outcomes.values() for o in found} == {"passed"}, result.describe()
    talos = next(c for c in result.checks if c["id"] == "upgrade.talos-version")
    assert talos["evidence"]["running"] == NEW_RELEASE
    assert talos["evidence"]["before the upgrade (snapshot)"] == V1_13.tag

    # The open ports are judged by v1.14 now: etcd's 2383 is expected, not flagged.
    ports = run_suite([*target_args(cluster)], tmp_path / "ports", paths=[PORTS_CHECK])
    assert ports.outcomes() == {"immutability.only-expected-ports": {"passed"}}, ports.describe()


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_a_node_left_behind_and_a_node_rolled_back_fail_with_before_and_after(
    cluster: EmulatedCluster, client: TalosClient, tmp_path: Path
) -> None:
    controlplane, behind, rolled = cluster.nodes
    kubelet = kubelet_version(client, controlplane.address)
    snapshot = save(cluster, tmp_path)
    upgrade(client, [rolled.address, controlplane.address])  # `behind` is not upgraded
    client.with_node(rolled.address).rollback()
    poll(_tag_of(client.with_node(rolled.address)), lambda t: t == V1_13.tag, "the rollback")

    result = compare(cluster, tmp_path, snapshot, "compare", kubelet)
    assert failed_on(result) == {"upgrade.talos-version": {behind.hostname, rolled.hostname}}, (
        result.describe()
    )
    verdicts = {c["node"]: c for c in result.checks if c["id"] == "upgrade.talos-version"}
    assert verdicts[controlplane.hostname]["outcome"] == "passed"
    for node in (behind, rolled):
        evidence = verdicts[node.hostname]["evidence"]
        assert evidence["before the upgrade (snapshot)"] == V1_13.tag, evidence
        assert evidence["running"] == V1_13.tag, evidence
        assert evidence["expected"] == "v1.14.x", evidence
        assert f"still runs {V1_13.tag}" in verdicts[node.hostname]["message"]


@pytest.mark.slow
def test_the_table_s_own_v1_14_pre_release_is_not_v1_14_x_and_the_failure_says_so(
    cluster: EmulatedCluster, client: TalosClient, tmp_path: Path
) -> None:
    addresses = [node.address for node in reversed(cluster.nodes)]
    snapshot = save(cluster, tmp_path)
    for address in addresses:
        client.with_node(address).upgrade(f"ghcr.io/siderolabs/installer:{V1_14.tag}")
    for address in addresses:
        poll(_tag_of(client.with_node(address)), lambda t: t == V1_14.tag, f"{address} on rc.1")
    result = post_upgrade(
        cluster,
        tmp_path,
        "rc",
        "--talos-snapshot",
        "compare",
        str(snapshot),
        "--talos-expect-version",
        "v1.14.x",
        "--talos-leave-out",
        "upgrade-kubernetes-version",
    )
    assert result.broken() == {"upgrade.talos-version": "failed"}, result.describe()
    message = next(c for c in result.checks if c["outcome"] == "failed")["message"]
    assert f"{V1_14.tag} is a pre-release or build of v1.14.0" in message, message
    assert f"--talos-expect-version {V1_14.tag}" in message, message
    exact = post_upgrade(
        cluster,
        tmp_path,
        "exact",
        "--talos-snapshot",
        "compare",
        str(snapshot),
        "--talos-expect-version",
        V1_14.tag,
        "--talos-leave-out",
        "upgrade-kubernetes-version",
    )
    assert exact.broken() == {}, exact.describe()


# Container mode: Upgrade and Rollback are refused before anything happens, at every release
# (v1alpha1_server.go Upgrade/Rollback -> checkSupported: FailedPrecondition "method is not
# supported in container mode"; pkg/runtime/mode.go drops Upgrade|Rollback for container, the
# same at v1.12.11, v1.13.9 and v1.14.0-rc.1).
CONTAINER_REFUSAL = "method is not supported in container mode"


@pytest.mark.parametrize("line", sorted(RELEASES))
def test_container_mode_refuses_an_upgrade_to_the_next_minor_and_a_rollback(line: str) -> None:
    release = RELEASES[line]
    with (
        EmulatedCluster(1, 0, talos_version=f"{line}.x", time_scale=TIME_SCALE) as emulated,
        TalosClient.from_talosconfig(emulated.talosconfig_path, timeout=2.0, env={}) as talos,
    ):
        node = talos.with_node(emulated.nodes[0].address)
        assert node.version().platform_mode == "container"
        for call in (lambda: node.upgrade(INSTALLER), node.rollback):
            with pytest.raises(NotSupportedInMode) as refused:
                call()
            assert refused.value.details == CONTAINER_REFUSAL
        assert node.version().tag == release.tag  # still the release it booted
        assert _tag_of(node)() == release.tag


def _connects(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=2.0):
        return True
    return False


def test_the_sockets_follow_the_booted_release_through_upgrade_and_rollback() -> None:
    """Netstat and a TCP connect agree after each boot: etcd's 2383 is bound on v1.14 and
    gone again after the rollback (the sockets were the first boot's before)."""
    with (
        EmulatedCluster(1, 0, platform="metal", talos_version="v1.13.x", time_scale=20) as emu,
        TalosClient.from_talosconfig(emu.talosconfig_path, timeout=2.0, env={}) as talos,
    ):
        address = emu.nodes[0].address
        node = talos.with_node(address)
        assert not _connects(address, ETCD_CLIENT_HTTP_PORT)
        node.upgrade(INSTALLER)
        poll(_tag_of(node), lambda t: t == NEW_RELEASE, "the node on v1.14")
        poll(lambda: _connects(address, ETCD_CLIENT_HTTP_PORT), bool, "a connect to 2383")
        node.rollback()
        poll(_tag_of(node), lambda t: t == V1_13.tag, "the node back on v1.13")
        poll(lambda: _connects(address, ETCD_CLIENT_HTTP_PORT), lambda up: not up, "2383 gone")
