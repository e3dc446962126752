"""The immutability and services audit's findings against emulated nodes over real mTLS:
service logs as the daemons write them (F1), KubeSpan's socket (F2), the Events backlog
(F5), docker exec that never reached the container (F6) and the mounts the read-only root
check exempts (F7)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.immutability.rules import writable_image_mounts
from conformance.services.logs import log_problem
from pytest_talos.checks import assert_no_shell
from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.node.events import EventBuffer, RuntimeEvent, SequencePayload, new_xid
from pytest_talos.emulator.node.host.sockets import listeners_for
from pytest_talos.emulator.node.net.kubespan import kubespan_enabled
from pytest_talos.errors import ConformanceFailure, TalosError
from pytest_talos.node import TalosNode
from tests.integration.checks_support import TIME_SCALE, connected


@contextlib.contextmanager
def _cluster(**options: object) -> Iterator[TalosCluster]:
    with (
        EmulatedCluster(1, 0, time_scale=TIME_SCALE, **options) as emulator,  # type: ignore[arg-type]
        TalosCluster.connect(
            emulator.talosconfig_path, endpoints=[emulator.endpoint], env={}
        ) as cluster,
    ):
        yield cluster


@pytest.fixture(scope="module")
def metal() -> Iterator[TalosNode]:
    with _cluster(
        platform="metal", extensions=("iscsi-tools",), extension_services=("iscsid",)
    ) as c:
        yield c.controlplane()


@pytest.fixture(scope="module")
def container() -> Iterator[TalosNode]:
    with _cluster() as cluster:
        yield cluster.controlplane()


def _mounts(node: TalosNode) -> list[list[str]]:
    return [line.split() for line in node.files.read_text("/proc/mounts").splitlines()]


# ---- F1 ------------------------------------------------------------------------------------


def test_goroutine_and_quiet_daemons_write_nothing_at_start(metal: TalosNode) -> None:
    for service in ("syslogd", "udevd", "trustd"):
        assert metal.logs(service, tail=20) == "", service


def test_daemons_that_log_at_start_have_their_first_lines(metal: TalosNode) -> None:
    assert "starting apid with config: listen address :50000" in metal.logs("apid", tail=20)
    assert 'msg="starting containerd"' in metal.logs("cri", tail=20)
    assert "authorized" in metal.logs("machined", tail=20)
    for service in metal.services:
        size = len(metal.logs(service.id, tail=20))
        assert log_problem(service, size) is None, service.id


# ---- F2 ------------------------------------------------------------------------------------


def test_kubespan_opens_its_wireguard_port_whichever_way_it_is_enabled() -> None:
    base = b"version: v1alpha1\nmachine:\n  type: worker\ncluster: {}\n"
    legacy = b"version: v1alpha1\nmachine:\n  network:\n    kubespan:\n      enabled: true\n"
    document = b"---\napiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: true\n"
    off = b"---\napiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: false\n"
    assert not kubespan_enabled(base)
    assert kubespan_enabled(base + document)
    assert kubespan_enabled(legacy)
    assert not kubespan_enabled(legacy + off)  # the document wins
    udp = [(s.port, s.bind) for s in listeners_for(controlplane=False, proxy=True, kubespan=True)]
    assert (51820, "0.0.0.0") in udp
    assert 51820 not in {s.port for s in listeners_for(controlplane=False, proxy=True)}


# ---- F5 ------------------------------------------------------------------------------------


def test_the_event_buffer_keeps_cap_minus_gap() -> None:
    buffer = EventBuffer()
    for i in range(1000):
        buffer.append(RuntimeEvent(new_xid(100 + i), 100.0 + i, SequencePayload("boot", "START")))
    assert len(buffer.backlog(tail_events=-1, tail_id="", tail_seconds=0, now=0)) == 990


# ---- F6 ------------------------------------------------------------------------------------


def _fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_docker_exec_into_no_such_container_is_not_measured(
    container: TalosNode, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_docker(
        tmp_path,
        monkeypatch,
        "echo 'Error response from daemon: No such container: x' >&2\nexit 1\n",
    )
    with pytest.raises(TalosError) as raised:
        assert_no_shell(container, docker_container="x")
    assert not isinstance(raised.value, ConformanceFailure)
    assert str(raised.value) == (
        f"[node {container.name}] docker exec could not run in container 'x' (exit 1: "
        "Error response from daemon: No such container: x): the docker part of the check "
        "was not measured; --talos-docker expects local containers named after the nodes' "
        "hostnames and a reachable Docker daemon"
    )


def test_a_real_finding_wins_over_an_unmeasured_docker_exec(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_docker(tmp_path, monkeypatch, "echo 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    with (
        connected(["shell-present"], workers=0) as (_, cluster),
        pytest.raises(ConformanceFailure) as failure,
    ):
        assert_no_shell(cluster.controlplane(), docker_container="x")
    assert "shells on disk" in failure.value.evidence
    assert "docker exec could not run" in failure.value.evidence["docker exec sh (not measured)"]


# ---- F7 ------------------------------------------------------------------------------------


def test_metal_mounts_udev_and_extension_overlays_and_ro_etc_binds(metal: TalosNode) -> None:
    entries = _mounts(metal)
    by_point = {entry[1]: entry for entry in entries}
    assert by_point["/usr/lib/udev"][2] == "overlay"
    assert by_point["/usr/lib/udev"][3].startswith("rw,")
    assert by_point["/usr/local/lib/containers/iscsid"][3].startswith("rw,")
    for path in ("/etc/hosts", "/etc/resolv.conf", "/etc/machine-id", "/etc/extensions.yaml"):
        assert by_point[path][3].startswith("ro,"), path
    assert writable_image_mounts(entries, in_container=False) == []


def test_container_mode_shows_dockers_writable_etc_binds(container: TalosNode) -> None:
    entries = _mounts(container)
    rw = {e[1] for e in entries if e[1].startswith("/etc/") and e[3].startswith("rw,")}
    assert rw == {"/etc/cni", "/etc/kubernetes", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}
    assert next(e for e in entries if e[1] == "/etc/machine-id")[3].startswith("ro,")
    assert writable_image_mounts(entries, in_container=True) == []
