"""TalosCluster.connect describes every target node (hostname and role, read at once for
several nodes) and keeps a node that does not answer, marked unreachable."""

from __future__ import annotations

from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster


def test_every_node_is_described_and_a_silent_one_kept_unreachable(
    emulated_cluster: EmulatedCluster,
) -> None:
    # The emulator's apid never dials outside 127.0.0.0/8: 192.0.2.1 (TEST-NET-1) never answers.
    addresses = [*(n.address for n in emulated_cluster.nodes), "192.0.2.1"]
    with TalosCluster.connect(
        emulated_cluster.talosconfig_path,
        endpoints=[emulated_cluster.endpoint],
        nodes=addresses,
        timeout=5.0,
        env={},
    ) as cluster:
        described = {node.address: (node.name, node.role) for node in cluster.reachable}
        assert described == {n.address: (n.hostname, n.role) for n in emulated_cluster.nodes}
        silent = [node for node in cluster.nodes if not node.reachable]
        assert [(node.address, node.role) for node in silent] == [("192.0.2.1", "unknown")]
        assert silent[0].unreachable is not None
