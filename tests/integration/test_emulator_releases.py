"""The emulator at each release (``talos_version=`` / ``--talos-emulator-version``), over real
gRPC and mTLS: the Version reply, the services and the listeners of that release, and the
kit's checks judging the node by its own release's entry (and failing by another's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from pytest_talos.checks.open_ports import assert_only_expected_ports
from pytest_talos.client import TalosClient
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import ConfigError, ConformanceFailure
from pytest_talos.models import VersionSpec
from pytest_talos.node import TalosNode, default_expected_ports, expected_ports_for
from pytest_talos.releases import ETCD_CLIENT_HTTP_PORT, RELEASES, V1_13, V1_14, Release
from tests.integration.emulator_support import poll

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


# --------------------------------------------------------------------------- across minors


def _tag_of(node: TalosClient) -> Callable[[], str]:
    """The Versions resource's tag: a booting node publishes it afresh (the Version API
    already tells the new tag while the node is on its way down)."""

    def tag() -> str:
        spec = node.get("version", "version").typed_spec
        return spec.version if isinstance(spec, VersionSpec) else ""

    return tag


def _tcp_ports(node: TalosClient) -> set[int]:
    return {r.local_port for r in node.netstat() if r.l4proto.startswith("tcp")}


def test_upgrade_across_minors_on_metal_follows_the_new_release_and_rollback_goes_back() -> None:
    with (
        EmulatedCluster(1, 0, talos_version="v1.13.x", variants=["metal"], time_scale=20) as emu,
        TalosClient.from_talosconfig(emu.talosconfig_path, timeout=2.0, env={}) as talos,
    ):
        node = talos.with_node(emu.nodes[0].address)
        config = node.machine_config().raw
        assert ETCD_CLIENT_HTTP_PORT not in _tcp_ports(node)

        node.upgrade(f"ghcr.io/siderolabs/installer:{V1_14.tag}")
        poll(_tag_of(node), lambda tag: tag == V1_14.tag, "the node back on v1.14")
        version = node.version()
        assert (version.tag, version.sha, version.go_version) == (
            V1_14.tag,
            V1_14.commit,
            V1_14.go_version,
        )
        assert node.machine_config().raw == config  # the config is kept
        poll(lambda: _tcp_ports(node), lambda p: ETCD_CLIENT_HTTP_PORT in p, "etcd's 2383")
        # An upgraded cluster has no SecurityProfileConfig: no sandboxd (enabled.go)
        assert "sandboxd" not in {s.id for s in node.services()}

        node.rollback()
        poll(_tag_of(node), lambda tag: tag == V1_13.tag, "the node back on v1.13")
        assert node.version().go_version == V1_13.go_version
        poll(lambda: _tcp_ports(node), lambda p: ETCD_CLIENT_HTTP_PORT not in p, "no 2383")
