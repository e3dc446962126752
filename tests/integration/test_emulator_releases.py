"""The emulator at each release (``talos_version=`` / ``--talos-emulator-version``), over real
gRPC and mTLS: the Version reply, the services and the listeners of that release, and the
kit's checks judging the node by its own release's entry (and failing by another's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_talos.checks.open_ports import assert_only_expected_ports
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import ConfigError, ConformanceFailure
from pytest_talos.node import TalosNode, default_expected_ports, expected_ports_for
from pytest_talos.releases import ETCD_CLIENT_HTTP_PORT, RELEASES, V1_13, V1_14, Release

_SCANNED = [50000, 50001, 2379, 2380, ETCD_CLIENT_HTTP_PORT, 6443, 10250, 10256]


def _connect(emulator: EmulatedCluster) -> TalosCluster:
    return TalosCluster.connect(
        emulator.talosconfig_path, endpoints=[emulator.endpoint], env={}, timeout=10.0
    )


@pytest.fixture(scope="module", params=sorted(RELEASES), ids=lambda line: line)
def metal(request: pytest.FixtureRequest) -> Iterator[tuple[Release, TalosNode]]:
    release = RELEASES[request.param]
    with EmulatedCluster(1, 0, talos_version=f"{release.line}.x", variants=["metal"]) as emu:
        cluster = _connect(emu)  # kept open while the module's tests use its node
        yield release, cluster.nodes[0]
        cluster.close()


def test_version_reply_is_the_release_read(metal: tuple[Release, TalosNode]) -> None:
    release, node = metal
    version = node.version
    assert version.tag == release.tag
    assert version.sha == release.commit
    assert version.go_version == release.go_version
    assert version.platform_mode == "metal"


def test_sandboxd_runs_only_where_the_release_starts_it(metal: tuple[Release, TalosNode]) -> None:
    release, node = metal
    services = {s.id: s for s in node.services}
    if release.has_sandboxd:  # v1.14 generates SecurityProfileConfig workloadIsolation: true
        assert services["sandboxd"].running
        assert services["sandboxd"].healthy
    else:
        assert "sandboxd" not in services


def test_etcd_listeners_follow_the_release(metal: tuple[Release, TalosNode]) -> None:
    release, node = metal
    tcp = {r.local_port for r in node.listeners if r.l4proto.startswith("tcp")}
    assert {2379, 2380} <= tcp
    assert (ETCD_CLIENT_HTTP_PORT in tcp) == (ETCD_CLIENT_HTTP_PORT in release.etcd_extra_ports)
    assert expected_ports_for(node) >= release.etcd_extra_ports


def test_ports_pass_by_the_nodes_own_release(metal: tuple[Release, TalosNode]) -> None:
    _release, node = metal
    assert_only_expected_ports(node, port_spec=_SCANNED, timeout=1.0)


def test_v1_14_node_judged_by_v1_13_flags_2383(metal: tuple[Release, TalosNode]) -> None:
    release, node = metal
    if release is not V1_14:
        pytest.skip("the difference is v1.14's")
    wrong = default_expected_ports(node.role, node.machine_config, V1_13)
    with pytest.raises(ConformanceFailure, match=str(ETCD_CLIENT_HTTP_PORT)):
        assert_only_expected_ports(node, wrong, port_spec=_SCANNED, timeout=1.0)


def test_container_mode_v1_14_has_2383_but_no_sandboxd() -> None:
    with EmulatedCluster(1, 0, talos_version="v1.14.x") as emu:
        cluster = _connect(emu)
        node = cluster.nodes[0]
        assert node.version.platform_mode == "container"
        assert "sandboxd" not in {s.id for s in node.services}
        assert ETCD_CLIENT_HTTP_PORT in {r.local_port for r in node.listeners}
        cluster.close()


def test_unknown_emulator_release_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"v1\.12\.x, v1\.13\.x, v1\.14\.x"):
        EmulatedCluster(1, 0, talos_version="v1.15.x")
