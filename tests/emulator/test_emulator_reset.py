"""EmulatedCluster.reset(): back to the state start() left, as moto's backends reset.

Real clients over mTLS see it: a stopped extension service runs again, an applied config is
gone, the call log is empty, and the talosconfig a client already holds still works."""

from __future__ import annotations

import time

from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster

TIME_SCALE = 50.0


def _wait_running(client: TalosClient, service_id: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = client.service(service_id).state
        if state == "Running":
            break
        time.sleep(0.05)
    return state


def test_reset_undoes_a_stopped_service_and_keeps_the_clients_credentials() -> None:
    with EmulatedCluster(
        controlplanes=1, workers=1, time_scale=TIME_SCALE, extension_services=["demo"]
    ) as cluster:
        worker = cluster.emulated_nodes[1]
        with TalosClient.from_talosconfig(
            cluster.talosconfig_path, endpoint=worker.address, node=worker.address, env={}
        ) as client:
            assert _wait_running(client, "ext-demo") == "Running"
            worker.run(lambda state: state.service_stop("ext-demo"))
            assert client.service("ext-demo").state != "Running"
            assert cluster.call_log
            first_state = worker.state

            cluster.reset()

            assert worker.state is not first_state
            assert [record for record in cluster.call_log] == []
            assert _wait_running(client, "ext-demo") == "Running"
            assert client.version().tag == cluster.talos_version


def test_reset_brings_back_the_generated_config() -> None:
    with EmulatedCluster(controlplanes=1, workers=0, time_scale=TIME_SCALE) as cluster:
        node = cluster.emulated_nodes[0]
        generated = node.run(lambda state: state.active_config)
        node.run(lambda state: setattr(state, "active_config", generated + b"\n# changed\n"))
        assert node.run(lambda state: state.active_config) != generated

        cluster.reset()

        assert node.run(lambda state: state.active_config) == generated
        assert node.run(lambda state: state.powered)
