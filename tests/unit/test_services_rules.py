"""The immutability and services audit's findings, as rules that need no node: which service
logs may be empty (F1), KubeSpan's and Cilium's UDP ports and the UDP hook (F2, F3), a
one-shot extension service finishing (F4), the Events backlog of 990 (F5), docker exec
errors that measure nothing (F6)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any, cast

import pytest

from conformance.immutability.port_reads import expected_udp_ports
from conformance.services.logs import QUIET_SERVICES, log_problem
from pytest_talos import hookspecs, models
from pytest_talos.checks import expected_udp_ports_for
from pytest_talos.checks.open_ports import CUSTOM_CNI_UDP_PORTS, KUBESPAN_PORT, kubespan_enabled
from pytest_talos.checks.shell import docker_unmeasured
from pytest_talos.emulator.node.events import new_xid
from pytest_talos.node import TalosNode
from pytest_talos.restarts import NODE_EVENTS_KEPT, TimedServiceEvent, stream_misses
from pytest_talos.restarts.episodes import restart_episodes

T0 = 1_800_000_000.0
V1ALPHA1: dict[str, Any] = {"version": "v1alpha1", "machine": {"type": "worker"}, "cluster": {}}


def _running(service: str) -> models.ServiceInfo:
    return models.ServiceInfo(service, "Running", True, False, "")


# ---- F1: services.logs-readable ---------------------------------------------------------


@pytest.mark.parametrize("service", ["syslogd", "udevd", "auditd", "trustd", "dashboard"])
def test_a_quiet_daemon_may_run_with_an_empty_log(service: str) -> None:
    assert service in QUIET_SERVICES
    assert log_problem(_running(service), 0) is None


@pytest.mark.parametrize("service", ["apid", "containerd", "cri", "etcd", "kubelet", "machined"])
def test_a_daemon_that_logs_at_start_must_not_have_an_empty_log(service: str) -> None:
    assert log_problem(_running(service), 0) == "Running, but its log is empty"
    assert log_problem(_running(service), 12) is None


def test_extension_and_stopped_services_may_have_empty_logs() -> None:
    assert log_problem(_running("ext-iscsid"), 0) is None
    stopped = models.ServiceInfo("apid", "Finished", False, True, "")
    assert log_problem(stopped, 0) is None


# ---- F2 and F3: the UDP allowlist ---------------------------------------------------------


def _node(*documents: dict[str, Any], role: str = "worker") -> TalosNode:
    config = models.MachineConfig(b"", list(documents), 1)
    return cast(TalosNode, SimpleNamespace(machine_config=config, role=role))


def test_a_kubespan_config_document_enables_kubespan() -> None:
    document = {"apiVersion": "v1alpha1", "kind": "KubeSpanConfig", "enabled": True}
    assert KUBESPAN_PORT in expected_udp_ports_for(_node(V1ALPHA1, document))
    assert KUBESPAN_PORT not in expected_udp_ports_for(_node(V1ALPHA1))


def test_the_kubespan_document_wins_over_v1alpha1() -> None:
    legacy = {**V1ALPHA1, "machine": {"network": {"kubespan": {"enabled": True}}}}
    off = {"apiVersion": "v1alpha1", "kind": "KubeSpanConfig", "enabled": False}
    unset = {"apiVersion": "v1alpha1", "kind": "KubeSpanConfig"}
    assert kubespan_enabled(models.MachineConfig(b"", [legacy], 1))
    assert not kubespan_enabled(models.MachineConfig(b"", [legacy, off], 1))
    assert not kubespan_enabled(models.MachineConfig(b"", [V1ALPHA1, unset], 1))


def test_cilium_wireguard_is_allowed_with_a_custom_cni() -> None:
    custom = {**V1ALPHA1, "cluster": {"network": {"cni": {"name": "none"}}}}
    assert 51871 in CUSTOM_CNI_UDP_PORTS
    assert 51871 in expected_udp_ports_for(_node(custom))
    assert 51871 not in expected_udp_ports_for(_node(V1ALPHA1))  # Flannel


def test_the_udp_hook_edits_the_allowlist_in_place() -> None:
    assert callable(hookspecs.pytest_talos_expected_udp_ports)
    seen: list[tuple[str, frozenset[int]]] = []

    def implementation(node: TalosNode, role: str, ports: set[int]) -> None:
        seen.append((role, frozenset(ports)))
        ports.add(51871)
        ports.discard(68)

    hook = SimpleNamespace(pytest_talos_expected_udp_ports=implementation)
    config = cast(pytest.Config, SimpleNamespace(hook=hook))
    allowed = expected_udp_ports(config, _node(V1ALPHA1))
    assert seen == [("worker", frozenset({68, 546, 4789}))]
    assert allowed == frozenset({546, 4789, 51871})


# ---- F4: a one-shot extension service --------------------------------------------------


def _event(at: float, service: str, action: str, message: str) -> TimedServiceEvent:
    return TimedServiceEvent(T0 + at, service, action, message)


DONE = "Service finished successfully"


def test_a_one_shot_extension_service_that_finishes_is_no_restart() -> None:
    events = [
        _event(1, "ext-setup", "RUNNING", "Started task ext-setup (PID 9) for container x"),
        _event(3, "ext-setup", "FINISHED", DONE),
    ]
    assert restart_episodes(events) == []


def test_a_stopped_extension_service_and_a_finished_talos_service_still_count() -> None:
    stopped = [
        _event(1, "ext-tool", "RUNNING", "Started task"),
        _event(2, "ext-tool", "STOPPING", "Sending SIGTERM to task ext-tool"),
        _event(3, "ext-tool", "FINISHED", DONE),
    ]
    assert [e.kind for e in restart_episodes(stopped)] == ["stop"]
    finished = [_event(1, "syslogd", "RUNNING", "started"), _event(2, "syslogd", "FINISHED", DONE)]
    assert [(e.service, e.kind) for e in restart_episodes(finished)] == [("syslogd", "stop")]


# ---- F5: the Events backlog is cap-gap = 990 -------------------------------------------


def test_a_backlog_of_990_events_may_have_lost_older_ones() -> None:
    assert NODE_EVENTS_KEPT == 990
    filler = models.MachineStatusEvent("RUNNING", True)
    records = [models.Event(new_xid(T0 + 50 + i / 100), "", filler) for i in range(990)]
    older = models.ServiceEvent("started", "Running", dt.datetime.fromtimestamp(T0 + 10, dt.UTC))
    info = models.ServiceInfo("cri", "Running", True, False, "", events=(older,))
    assert stream_misses(records, [info], T0, T0 + 100) == []  # dropped by the node's buffer
    assert len(stream_misses(records[:989], [info], T0, T0 + 100)) == 1


# ---- F6: docker exec that never reached the container ----------------------------------


@pytest.mark.parametrize(
    "output",
    [
        "Error response from daemon: No such container: talos-default-worker-1",
        "Error response from daemon: container 4f2a is not running",
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker "
        "daemon running?",
        "permission denied while trying to connect to the Docker daemon socket at "
        "unix:///var/run/docker.sock",
    ],
)
def test_docker_errors_measure_nothing(output: str) -> None:
    assert docker_unmeasured(1, output)


def test_exit_codes_of_the_exec_itself_are_measured() -> None:
    assert not docker_unmeasured(127, 'exec: "sh": executable file not found in $PATH')
    assert not docker_unmeasured(0, "ok")
    assert not docker_unmeasured(1, "")
