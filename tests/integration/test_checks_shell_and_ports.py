"""assert_no_shell, assert_only_expected_ports, assert_only_api_port against emulated nodes."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_talos import models
from pytest_talos.checks import (
    assert_no_shell,
    assert_only_api_port,
    assert_only_expected_ports,
    assert_pod_listeners_expected,
    default_expected_ports,
    expected_udp_ports_for,
    judge_ports,
    observe_ports,
)
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import APIError, ConformanceFailure, NotFound, PermissionDenied, Unknown
from pytest_talos.node import NodeFiles, TalosNode, expected_ports_for
from tests.integration.checks_support import connected

# Enough to cover every port Talos or a fault opens, and quick: full scans are shown once.
TALOS_RANGE = "1-11000,49000-51000"


@pytest.fixture(scope="module")
def healthy() -> Iterator[TalosCluster]:
    with connected() as (_, cluster):
        yield cluster


@pytest.fixture(scope="module")
def faulty() -> Iterator[TalosCluster]:
    with connected(["shell-present", "ssh-open", "extra-port"]) as (_, cluster):
        yield cluster


# --------------------------------------------------------------------------- no shell


@pytest.mark.parametrize("role", ["controlplane", "worker"])
def test_no_shell_passes_on_a_healthy_node(healthy: TalosCluster, role: str) -> None:
    node = healthy.controlplane() if role == "controlplane" else healthy.worker()
    result = assert_no_shell(node)
    assert result.check == "immutability.no-shell-or-ssh"
    assert result.evidence["port 22"] == "closed"
    assert result.notes == []


def test_no_shell_fails_on_shells_sshd_and_port_22(faulty: TalosCluster) -> None:
    with pytest.raises(ConformanceFailure) as failure:
        assert_no_shell(faulty.worker())
    text = str(failure.value)
    assert text.startswith(
        "immutability.no-shell-or-ssh on talos-default-worker-1: "
        "the node offers a way in besides the Talos API\n"
        "  expected: no shell, no busybox, no sshd, port 22 closed\n"
    )
    # the usr-merged root: /bin, /sbin and /usr/sbin all list /usr/bin; each shell once
    assert "  shells on disk: /usr/bin/bash, /usr/bin/busybox, /usr/bin/sh\n" in text
    assert re.search(r"  shell or remote-login processes: pid \d+: /usr/bin/sshd", text)
    assert re.search(r"  port 22: open \(tcp 0\.0\.0\.0:22 pid \d+ \(sshd\)\)", text)
    assert set(failure.value.evidence) == {
        "shells on disk",
        "shell or remote-login processes",
        "port 22",
    }


def test_no_shell_fails_on_shell_present_alone() -> None:
    with (
        connected(["shell-present"], workers=0) as (_, cluster),
        pytest.raises(
            ConformanceFailure,
            match=r"shells on disk: /usr/bin/bash, /usr/bin/busybox, /usr/bin/sh",
        ) as failure,
    ):
        assert_no_shell(cluster.controlplane())
    assert set(failure.value.evidence) == {"shells on disk"}


def test_no_shell_counts_missing_directories_as_empty(healthy: TalosCluster) -> None:
    """/usr/local/bin and /usr/local/sbin do not exist on a stock image: List answers
    Unknown ``lstat <path>: no such file or directory``, which is not an error."""
    result = assert_no_shell(healthy.worker())
    assert result.evidence["directories absent"] == "/usr/local/bin, /usr/local/sbin"
    assert "shells in pods (not the host's)" not in result.evidence


@pytest.mark.parametrize("error", [Unknown, NotFound])
def test_no_shell_treats_no_such_file_as_absent_whatever_the_code(
    healthy: TalosCluster, monkeypatch: pytest.MonkeyPatch, error: type[APIError]
) -> None:
    real_list = NodeFiles.list

    def listing(self: NodeFiles, path: str = "/", **kwargs: Any) -> list[models.FileInfo]:
        if path == "/usr/sbin":
            raise error(f"lstat {path}: no such file or directory")
        return real_list(self, path, **kwargs)

    monkeypatch.setattr(NodeFiles, "list", listing)
    result = assert_no_shell(healthy.worker())
    assert result.evidence["directories absent"] == "/usr/sbin, /usr/local/bin, /usr/local/sbin"


def test_no_shell_raises_any_other_list_error(
    healthy: TalosCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def listing(self: NodeFiles, path: str = "/", **kwargs: Any) -> list[models.FileInfo]:
        raise Unknown(f"lstat {path}: permission denied")

    monkeypatch.setattr(NodeFiles, "list", listing)
    with pytest.raises(Unknown, match="permission denied"):
        assert_no_shell(healthy.worker())


def test_no_shell_passes_with_a_shell_in_a_pod() -> None:
    """Variant pod-shell: a pod whose entrypoint is /bin/sh runs under a k8s.io shim."""
    with connected(variants=["pod-shell"], workers=0) as (_, cluster):
        result = assert_no_shell(cluster.controlplane())
    in_pods = result.evidence["shells in pods (not the host's)"].splitlines()
    assert [re.sub(r"pid \d+", "pid N", line) for line in in_pods] == [
        "pid N: /bin/busybox /bin/sh -c while true; do sleep 3600; done",
        "pid N: /bin/busybox sleep 3600",  # busybox's sleep, in the same pod
    ]


def test_no_shell_fails_on_a_shell_on_the_host() -> None:
    with (
        connected(["host-shell-process"], workers=0) as (_, cluster),
        pytest.raises(ConformanceFailure) as failure,
    ):
        assert_no_shell(cluster.controlplane())
    assert set(failure.value.evidence) == {"shell or remote-login processes"}
    assert re.fullmatch(
        r"pid \d+: /tmp/busybox sh", failure.value.evidence["shell or remote-login processes"]
    )


def test_no_shell_docker_part_is_skipped_without_docker(
    healthy: TalosCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker command anywhere
    result = assert_no_shell(healthy.worker(), docker_container="talos-default-worker-1")
    assert result.notes == ["docker exec check skipped: the docker command is not installed"]


def test_no_shell_docker_part_requires_exit_127(
    healthy: TalosCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A stand-in docker whose container *has* a shell: exec succeeds.
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho ok\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConformanceFailure) as failure:
        assert_no_shell(healthy.worker(), docker_container="vendor-node")
    assert failure.value.evidence == {"docker exec sh": "exit 0 (expected 127): ok"}


# --------------------------------------------------------------------------- ports


def test_only_expected_ports_passes_on_a_full_scan(healthy: TalosCluster) -> None:
    result = assert_only_expected_ports(healthy.worker())
    assert result.evidence["open"] == [10250, 10256, 50000]
    assert "65535 ports" in result.evidence["scan"]


def test_only_expected_ports_passes_on_a_control_plane(healthy: TalosCluster) -> None:
    result = assert_only_expected_ports(healthy.controlplane(), port_spec=TALOS_RANGE)
    assert result.evidence["open"] == [2379, 2380, 6443, 10250, 10256, 50000, 50001]


def test_only_expected_ports_fails_on_extra_ports_naming_the_listener(
    faulty: TalosCluster,
) -> None:
    with pytest.raises(ConformanceFailure) as failure:
        assert_only_expected_ports(faulty.worker(), port_spec=TALOS_RANGE)
    text = str(failure.value)
    assert text.startswith(
        "immutability.only-expected-ports on talos-default-worker-1: "
        "unexpected open TCP ports: 22, 8080\n"
        "  expected: at most 10250, 10256, 50000 open\n"
        "  observed: open: 22, 8080, 10250, 10256, 50000\n"
    )
    listeners = failure.value.evidence["listeners (node's Netstat)"]
    assert re.fullmatch(
        r"22: tcp 0\.0\.0\.0:22 pid \d+ \(sshd\)\n8080: tcp 0\.0\.0\.0:8080 pid \d+ \(.+\)",
        listeners,
    )


def test_allowlist_can_be_given_or_taken_from_the_node(faulty: TalosCluster) -> None:
    worker = faulty.worker()
    assert_only_expected_ports(worker, {22, 8080, 10250, 10256, 50000}, port_spec=TALOS_RANGE)
    worker.expected_ports = frozenset({22, 8080, 10250, 10256, 50000})
    try:
        assert_only_expected_ports(worker, port_spec=TALOS_RANGE)
    finally:
        worker.expected_ports = None


def test_expected_ports_come_from_the_machine_config() -> None:
    """Variant kube-proxy-disabled (cluster.proxy.disabled: true): no 10256, none expected."""
    with connected(variants=["kube-proxy-disabled"]) as (_, cluster):
        worker = cluster.worker()
        assert expected_ports_for(worker) == {50000, 10250}
        assert expected_ports_for(cluster.controlplane()) == {50000, 50001, 6443, 2379, 2380, 10250}
        result = assert_only_expected_ports(worker, port_spec=TALOS_RANGE)
    assert result.evidence["open"] == [10250, 50000]


def test_kube_proxy_port_fails_where_the_config_disables_kube_proxy(
    healthy: TalosCluster,
) -> None:
    """A node whose config disables kube-proxy must not have 10256 open. kube-proxy is a
    DaemonSet pod on Talos: its listener is a pod's, so the pod check judges it (issue 21);
    the host check lists it."""
    worker = healthy.worker()
    disabled = {"version": "v1alpha1", "cluster": {"proxy": {"disabled": True}}}
    config = models.MachineConfig(raw=b"", documents=[disabled], version=1)
    allowed = default_expected_ports(worker.role, config)
    result = assert_only_expected_ports(worker, allowed, port_spec=TALOS_RANGE)
    listed = result.evidence["host-network pod listeners (not judged here)"]
    assert "tcp6 :::10256 pod sandbox" in listed
    with pytest.raises(ConformanceFailure, match="outside its allowlist: 10256"):
        assert_pod_listeners_expected(worker, allowed)


def test_expected_ports_without_admin_assume_talos_defaults(
    healthy: TalosCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(self: TalosNode) -> models.MachineConfig:
        raise PermissionDenied("not authorized")

    monkeypatch.setattr(TalosNode, "machine_config", property(refused))
    assert expected_ports_for(healthy.worker()) == {50000, 10250, 10256}


def test_only_api_port_fails_where_kubernetes_runs(healthy: TalosCluster) -> None:
    with pytest.raises(ConformanceFailure) as failure:
        assert_only_api_port(healthy.worker(), port_spec=TALOS_RANGE)
    text = str(failure.value)
    assert (
        "immutability.only-api-port on talos-default-worker-1: "
        "unexpected open TCP ports: 10250, 10256\n" in text
    )
    assert "  expected: at most 50000 open\n" in text
    assert re.search(r"10250: tcp6 :::10250 pid \d+ \(kubelet\)", text)
    assert re.search(r"10256: tcp6 :::10256 pid \d+ \(kube-proxy\)", text)


def test_only_api_port_passes_on_the_talos_range(healthy: TalosCluster) -> None:
    result = assert_only_api_port(healthy.worker(), port_spec="49000-51000")
    assert result.evidence["open"] == [50000]


# --------------------------------------------------------------------------- every address, Netstat


def _ipv6_loopback_works() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def _old_check_passes(node: TalosNode) -> bool:
    """What the check did before: one TCP scan of the node address against the allowlist."""
    return set(node.scan_ports(TALOS_RANGE).open_ports) <= expected_ports_for(node)


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("hidden-listener", "open but hidden from the node's Netstat: 10250 on 127."),
        ("udp-listener", "unexpected UDP listener: 69 on 0.0.0.0"),
        (
            "netstat-ghost",
            "listening by Netstat, outside the allowlist, not reached by the scan: 9100",
        ),
    ],
)
def test_netstat_faults_the_old_scan_passed_now_fail(fault: str, message: str) -> None:
    with connected([fault]) as (_, cluster):
        for node in (cluster.worker(), cluster.controlplane()):
            assert _old_check_passes(node)
            with pytest.raises(ConformanceFailure) as failure:
                assert_only_expected_ports(node, port_spec=TALOS_RANGE)
            assert message in str(failure.value)
            assert "unexpected open TCP port" not in str(failure.value)


def test_healthy_node_agrees_with_its_netstat(healthy: TalosCluster) -> None:
    result = assert_only_expected_ports(healthy.controlplane(), port_spec=TALOS_RANGE)
    assert result.evidence["UDP allowed off loopback"] == "68, 546, 4789"  # Flannel's VXLAN
    assert result.evidence["addresses"] == [healthy.controlplane().host]


def test_an_extra_address_apid_does_not_answer_on_is_noted_not_scanned(
    healthy: TalosCluster,
) -> None:
    worker = healthy.worker()
    result = assert_only_expected_ports(worker, port_spec=TALOS_RANGE, addresses=["127.0.0.253/8"])
    assert result.evidence["addresses"] == [worker.host]
    assert result.notes == [
        "127.0.0.253: apid's port 50000 is closed there: not reachable from this machine, "
        "not scanned"
    ]


@pytest.mark.skipif(not _ipv6_loopback_works(), reason="IPv6 loopback (::1) is not available")
def test_every_address_is_scanned_ipv6_too(healthy: TalosCluster) -> None:
    """An IPv6 address of the node (here ::1, where a stand-in apid answers) gets its own
    full scan: a port open only there fails the check, and so do the node's wildcard (::)
    listeners that do not answer there."""
    worker = healthy.worker()
    servers = []
    try:
        for port in (50000, 0):
            server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind(("::1", port))
            except OSError:
                server.close()
                pytest.skip("[::1]:50000 is taken on this machine")
            server.listen()
            servers.append(server)
        extra = servers[1].getsockname()[1]
        with pytest.raises(ConformanceFailure) as failure:
            assert_only_expected_ports(
                worker, port_spec=f"{TALOS_RANGE},{extra}", addresses=["::1/128"]
            )
        text = str(failure.value)
        assert f"unexpected open TCP port: {extra};" in text
        # kubelet's :::10250 is dual-stack by Netstat, so it must answer on ::1 as well
        assert "listening by Netstat but refused by the node: 10250 on ::1" in text
        assert failure.value.evidence["addresses scanned"] == f"{worker.host}, ::1"
        assert f"{extra}: no listener" in failure.value.evidence["listeners (node's Netstat)"]
    finally:
        for server in servers:
            server.close()


def test_which_listeners_answer_where() -> None:
    from pytest_talos.checks.listeners import covers, exposed

    def record(ip: str) -> models.ConnectRecord:
        return models.ConnectRecord("tcp6" if ":" in ip else "tcp", ip, 1, "", 0, "LISTEN")

    assert covers(record("::"), "10.5.0.2")
    assert covers(record("::"), "fd00::2")
    assert covers(record("0.0.0.0"), "10.5.0.2")
    assert not covers(record("0.0.0.0"), "fd00::2")
    assert covers(record("fd00:0::2"), "fd00::2")
    assert not covers(record("10.5.0.3"), "10.5.0.2")
    assert not any(map(exposed, ["127.0.0.53", "169.254.116.108", "::1", "fe80::1"]))
    assert all(map(exposed, ["0.0.0.0", "::", "10.5.0.2", "2001:db8::2"]))


# --------------------------------------------------------------------------- observe, then judge

_ELAPSED = re.compile(r" in \d+\.\d\ds")


def _untimed(value: Any) -> Any:
    """Evidence with the scans' durations taken out (two scans never take the same time)."""
    if isinstance(value, str):
        return _ELAPSED.sub(" in -s", value)
    if isinstance(value, dict):
        return {key: _untimed(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_untimed(item) for item in value)
    return value


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        result = run()
    except ConformanceFailure as failure:
        return "failed", _untimed(
            (
                failure.check,
                failure.node,
                str(failure),  # the message, expected, observed and evidence as shown
                failure.evidence,
            )
        )
    return "passed", _untimed((result.check, result.node, result.evidence, result.notes))


def _judged(node: TalosNode, **observe: Any) -> tuple[str, Any]:
    allow = expected_ports_for(node)
    observation = observe_ports(node, port_spec=TALOS_RANGE, **observe)
    return _outcome(
        lambda: judge_ports(node, observation, allow, expected_udp_ports_for(node), allow)
    )


@pytest.mark.parametrize(
    "fault", [None, "extra-port", "hidden-listener", "udp-listener", "netstat-ghost"]
)
def test_observe_then_judge_gives_what_the_check_gives(fault: str | None) -> None:
    """The two halves, called apart, give the check's verdict, message and evidence; so does
    the check handed an observation made earlier."""
    with connected([fault] if fault else []) as (_, cluster):
        for node in (cluster.worker(), cluster.controlplane()):
            whole = _outcome(lambda n=node: assert_only_expected_ports(n, port_spec=TALOS_RANGE))
            assert whole[0] == ("passed" if fault is None else "failed")
            assert _judged(node) == whole
            earlier = observe_ports(node, port_spec=TALOS_RANGE)
            handed = _outcome(
                lambda n=node, o=earlier: assert_only_expected_ports(n, observation=o)
            )
            assert handed == whole


def test_an_observation_keeps_the_extra_addresses_it_did_not_scan(healthy: TalosCluster) -> None:
    worker = healthy.worker()
    observation = observe_ports(worker, port_spec=TALOS_RANGE, addresses=["127.0.0.253/8"])
    assert [address for address, _ in observation.scans] == [worker.host]
    assert [address for address, _ in observation.skipped] == ["127.0.0.253"]
    assert observation.addresses == ("127.0.0.253/8",)
    assert observation.before  # Netstat read before the scans
    assert observation.after  # and after them
    result = assert_only_expected_ports(worker, observation=observation)
    assert result.notes == [
        "127.0.0.253: apid's port 50000 is closed there: not reachable from this machine, "
        "not scanned"
    ]


def test_another_nodes_observation_is_refused(healthy: TalosCluster) -> None:
    observation = observe_ports(healthy.worker(), port_spec="50000")
    with pytest.raises(ValueError, match="pass the node's own observation"):
        assert_only_expected_ports(healthy.controlplane(), observation=observation)
