"""The pure rules behind the immutability checks: expected ports from the machine config,
pod workloads in the process table, missing paths, and what PID 1 must look like."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.immutability.rules import is_machined
from pytest_talos import models
from pytest_talos.checks import default_expected_ports, pod_workload_pids
from pytest_talos.errors import NotFound, PermissionDenied, Unknown
from pytest_talos.node import is_missing_path

WORKER = {50000, 10250}
CONTROL_PLANE = {50000, 50001, 2379, 2380, 6443, 10250}


def _config(cluster: dict[str, Any]) -> models.MachineConfig:
    documents: list[dict[str, Any]] = [
        {"version": "v1alpha1", "machine": {"type": "worker"}, "cluster": cluster},
        {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"},
    ]
    return models.MachineConfig(raw=b"", documents=documents, version=1)


# ---- expected ports --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "cluster", "expected"),
    [
        ("worker", {}, WORKER | {10256}),
        ("worker", {"proxy": {"disabled": False}}, WORKER | {10256}),
        ("worker", {"proxy": {"disabled": True}}, WORKER),
        ("controlplane", {"proxy": {"disabled": True}}, CONTROL_PLANE),
        (
            "controlplane",
            {"controlPlane": {"localAPIServerPort": 7443}},
            CONTROL_PLANE - {6443} | {7443, 10256},
        ),
        # kube-proxy flags in cluster.proxy.extraArgs move or hide its ports
        ("worker", {"proxy": {"extraArgs": {"healthz-bind-address": "127.0.0.1:10256"}}}, WORKER),
        (
            "worker",
            {"proxy": {"extraArgs": {"healthz-bind-address": "0.0.0.0:12256"}}},
            WORKER | {12256},
        ),
        ("worker", {"proxy": {"extraArgs": {"healthz-bind-address": ""}}}, WORKER),
        (
            "worker",
            {"proxy": {"extraArgs": {"metrics-bind-address": "0.0.0.0:10249"}}},
            WORKER | {10256, 10249},
        ),
        (
            "worker",
            {"proxy": {"extraArgs": {"metrics-bind-address": ["[::]:10249"]}}},
            WORKER | {10256, 10249},
        ),
        ("worker", {"proxy": {"extraArgs": {"healthz-bind-address": "odd"}}}, WORKER | {10256}),
    ],
)
def test_expected_ports_follow_role_and_machine_config(
    role: str, cluster: dict[str, Any], expected: set[int]
) -> None:
    assert default_expected_ports(role, _config(cluster)) == expected


def _main(cluster: dict[str, Any], machine: dict[str, Any]) -> models.MachineConfig:
    documents: list[dict[str, Any]] = [
        {"version": "v1alpha1", "machine": {"type": "controlplane", **machine}, "cluster": cluster}
    ]
    return models.MachineConfig(raw=b"", documents=documents, version=1)


@pytest.mark.parametrize(
    ("role", "cluster", "machine", "added"),
    [
        # etcd's metrics on the node address (system/services/etcd.go passes extraArgs on)
        (
            "controlplane",
            {"etcd": {"extraArgs": {"listen-metrics-urls": "http://0.0.0.0:2381"}}},
            {},
            {2381},
        ),
        (
            "controlplane",
            {
                "etcd": {
                    "extraArgs": {"listen-metrics-urls": "http://127.0.0.1:2381,http://[::]:2382"}
                }
            },
            {},
            {2382},
        ),
        (
            "controlplane",
            {"etcd": {"extraArgs": {"listen-metrics-urls": "http://localhost:2381"}}},
            {},
            set(),
        ),
        # controller-manager and scheduler bound off loopback (control_plane_static_pod.go)
        (
            "controlplane",
            {
                "controllerManager": {"extraArgs": {"bind-address": "0.0.0.0"}},
                "scheduler": {"extraArgs": {"bind-address": "0.0.0.0"}},
            },
            {},
            {10257, 10259},
        ),
        (
            "controlplane",
            {"scheduler": {"extraArgs": {"bind-address": "0.0.0.0", "secure-port": "11259"}}},
            {},
            {11259},
        ),
        ("controlplane", {"scheduler": {"extraArgs": {"bind-address": "127.0.0.1"}}}, {}, set()),
        # a worker has no control-plane components, whatever its config says
        (
            "worker",
            {"etcd": {"extraArgs": {"listen-metrics-urls": "http://0.0.0.0:2381"}}},
            {},
            set(),
        ),
        # kubelet's read-only port (kubelet_spec.go merges extraConfig; a flag wins)
        ("worker", {}, {"kubelet": {"extraConfig": {"readOnlyPort": 10255}}}, {10255}),
        (
            "worker",
            {},
            {
                "kubelet": {
                    "extraArgs": {"read-only-port": "10266"},
                    "extraConfig": {"readOnlyPort": 10255},
                }
            },
            {10266},
        ),
        ("worker", {}, {"kubelet": {"extraConfig": {"readOnlyPort": 0}}}, set()),
    ],
)
def test_metrics_ports_from_extra_args_are_expected(
    role: str, cluster: dict[str, Any], machine: dict[str, Any], added: set[int]
) -> None:
    base = CONTROL_PLANE if role == "controlplane" else WORKER
    assert default_expected_ports(role, _main(cluster, machine)) == base | {10256} | added


def test_expected_ports_ignore_documents_other_than_v1alpha1() -> None:
    config = models.MachineConfig(
        raw=b"",
        documents=[{"kind": "HostnameConfig", "cluster": {"proxy": {"disabled": True}}}],
        version=1,
    )
    assert default_expected_ports("worker", config) == WORKER | {10256}


# ---- missing paths ---------------------------------------------------------------------------


def test_a_missing_path_is_missing_whatever_the_code() -> None:
    assert is_missing_path(Unknown("lstat /usr/local/bin: no such file or directory"))
    assert is_missing_path(NotFound("stat /bin/sh: no such file or directory"))
    assert not is_missing_path(Unknown("lstat /root: permission denied"))
    assert not is_missing_path(PermissionDenied("not authorized"))


# ---- pod workloads ---------------------------------------------------------------------------


def _proc(pid: int, ppid: int, command: str, executable: str, args: str) -> models.ProcessInfo:
    return models.ProcessInfo(pid, ppid, "S", 1, 0.0, 0, 0, command, executable, args)


SHIM = "/usr/bin/containerd-shim-runc-v2"


def test_pod_workloads_are_the_descendants_of_k8s_shims() -> None:
    processes = [
        _proc(1, 0, "init", "/usr/bin/init", "/sbin/init"),
        _proc(10, 1, "containerd-shim", SHIM, f"{SHIM} -namespace system -id apid -address x"),
        _proc(11, 10, "apid", "/apid", "/apid"),
        _proc(20, 1, "containerd-shim", SHIM, f"{SHIM} -namespace k8s.io -id abc -address y"),
        _proc(21, 20, "pause", "/pause", "/pause"),
        _proc(22, 20, "sh", "/bin/busybox", "/bin/sh -c sleep 1"),
        _proc(23, 22, "sleep", "/bin/busybox", "sleep 1"),
        _proc(30, 1, "containerd-shim", SHIM, f"{SHIM} --namespace=k8s.io -id def"),
        _proc(31, 30, "bash", "/usr/bin/bash", "bash"),
        _proc(40, 1, "sh", "/tmp/busybox", "sh"),  # a host shell
        _proc(50, 49, "sh", "/bin/sh", "sh"),  # its parent is gone: a host process
    ]
    assert pod_workload_pids(processes) == {21, 22, 23, 31}


def test_a_fake_shim_is_not_a_pod_shim() -> None:
    processes = [
        _proc(20, 1, "containerd-shim", "/tmp/evil", "/tmp/evil -namespace k8s.io"),
        _proc(22, 20, "sh", "/bin/sh", "sh"),
        _proc(30, 1, "containerd-shim", SHIM, f"{SHIM} -id x"),  # no namespace
        _proc(31, 30, "sh", "/bin/sh", "sh"),
    ]
    assert pod_workload_pids(processes) == set()


# ---- PID 1 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "executable", "args", "machined"),
    [
        ("init", "/usr/bin/init", "/sbin/init", True),  # v1.13: usr-merged root
        ("init", "/sbin/init", "/sbin/init", True),  # images before the usr-merge
        ("systemd", "/usr/lib/systemd/systemd", "/sbin/init", False),  # systemd via a link
        ("systemd", "/sbin/init", "/sbin/init", False),  # systemd copied to /sbin/init
        ("init", "/usr/lib/systemd/systemd", "/sbin/init", False),
        ("init", "/sbin/init", "/usr/lib/systemd/systemd --system", False),
        ("init", "/bin/busybox", "init", False),  # busybox init
        ("sh", "/bin/sh", "/bin/sh", False),
        ("tini", "/sbin/tini", "/sbin/tini -- /sbin/init", False),
        ("init", "/sbin/init", "init [2]", False),  # sysvinit after its runlevel change
        ("init", "/usr/bin/init", "", False),
    ],
)
def test_pid1_must_be_machined(command: str, executable: str, args: str, machined: bool) -> None:
    assert is_machined(_proc(1, 0, command, executable, args)) is machined


# ---- the client's Netstat request -----------------------------------------------------------


def test_netstat_asks_for_the_host_network_namespace() -> None:
    """v1alpha1_server.go Netstat: without netns.hostnetwork no host socket is returned."""
    from pytest_talos.client._calls import netstat_request

    for listening in (True, False):
        request = netstat_request(listening)
        assert request.netns.hostnetwork
        assert (request.l4proto.tcp, request.l4proto.tcp6) == (True, True)
