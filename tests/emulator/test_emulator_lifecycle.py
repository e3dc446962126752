"""The machine's stages over the wire: MachineStatus events and resource on boot, reboot,
upgrade, reset and shutdown (machine.proto Events, §8 MachineStatuses, §10), and the Kubernetes
Node of a node whose kubelet stopped posting status."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from google.protobuf import empty_pb2
from grpclib.exceptions import GRPCError, StreamTerminatedError
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.client._calls import untar_kubeconfig
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.patches import apply_patches

from .conftest import RawClient, wait_for

M = "/machine.MachineService/"
EMPTY = empty_pb2.Empty()
MACHINE_STATUS = "talos/runtime/machine.MachineStatusEvent"
SEQUENCE = "talos/runtime/machine.SequenceEvent"
Stage = m.MachineStatusEvent.MachineStage
FLAG_PATCH = "machine:\n  kubelet:\n    extraArgs:\n      no-such-flag: 'true'\n"
UNFLAG_PATCH = "machine:\n  kubelet:\n    extraArgs:\n      no-such-flag:\n        $patch: delete\n"
UPGRADE_IMAGE = "ghcr.io/siderolabs/installer:v1.13.10"


def _status(event: m.Event) -> tuple[str, bool, list[tuple[str, str]]]:
    payload = m.MachineStatusEvent.FromString(event.data.value)
    unmet = [(c.name, c.reason) for c in payload.status.unmet_conditions]
    return Stage.Name(payload.stage), payload.status.ready, unmet


def _statuses(events: list[m.Event]) -> list[tuple[str, bool, list[tuple[str, str]]]]:
    return [_status(event) for event in events if event.data.type_url == MACHINE_STATUS]


def _resource_status(client: RawClient, address: str) -> tuple[str, bool, list[tuple[str, str]]]:
    request = s.GetRequest(
        namespace="runtime", type="MachineStatuses.runtime.talos.dev", id="machine"
    )
    reply = client.call(address, "/cosi.resource.State/Get", request)
    spec = yaml.safe_load(reply.resource.spec.yaml_spec)
    unmet = [(c["name"], c["reason"]) for c in spec["status"]["unmetConditions"] or []]
    return spec["stage"].upper().replace(" ", "_"), spec["status"]["ready"], unmet


def _backlog(
    client: RawClient, address: str, until: Callable[[list[m.Event]], bool]
) -> list[m.Event]:
    """Every buffered event, then new ones, until ``until(received)`` holds."""
    return client.collect(address, M + "Events", m.EventsRequest(tail_events=-1), until=until)


def _running_seen(events: list[m.Event]) -> bool:
    return any(stage == "RUNNING" for stage, _, _ in _statuses(events))


def _version(client: RawClient, address: str) -> str | None:
    try:
        return str(client.call(address, M + "Version", EMPTY, timeout=2).messages[0].version.tag)
    except (GRPCError, OSError, StreamTerminatedError):
        return None


# ---- boot ----------------------------------------------------------------------------------


def test_boot_goes_from_booting_to_running_ready(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0)
    client, address = client_for(cluster), cluster.nodes[0].address
    statuses = _statuses(_backlog(client, address, _running_seen))
    booting, running = statuses[0], statuses[-1]
    assert booting[:2] == ("BOOTING", False)
    assert booting[2][0][0] == "services"
    # machine_status.go servicesCheck: each required service that has no Services resource
    assert booting[2][0][1] == (
        "apid not running, machined not running, kubelet not running, etcd not running, "
        "trustd not running"
    )
    assert running == ("RUNNING", True, [])
    assert [stage for stage, _, _ in statuses] == ["BOOTING", "RUNNING"]
    assert _resource_status(client, address) == running  # v1alpha2_state.go: the same status


def test_machine_status_follows_a_crash_looping_kubelet(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, time_scale=10)
    client, address = client_for(cluster), cluster.nodes[0].address
    config = cluster.node(address).run(lambda state: state.active_config)
    apply = m.ApplyConfigurationRequest(
        data=apply_patches(config, [FLAG_PATCH]), mode=m.ApplyConfigurationRequest.NO_REBOOT
    )
    client.call(address, M + "ApplyConfiguration", apply)  # B4: kubelet crash-loops
    unready = ("RUNNING", False, [("services", "kubelet not running")])
    _backlog(client, address, lambda got: unready in _statuses(got))
    assert _resource_status(client, address)[0] == "RUNNING"
    apply.data = apply_patches(apply.data, [UNFLAG_PATCH])  # B5: kubelet heals
    client.call(address, M + "ApplyConfiguration", apply)
    wait_for(lambda: _resource_status(client, address), lambda got: got[1], what="ready again")
    healed: tuple[str, bool, list[tuple[str, str]]] = ("RUNNING", True, [])

    def healed_after_failing(got: list[m.Event]) -> bool:
        statuses = _statuses(got)
        return unready in statuses and statuses[-1] == healed

    _backlog(client, address, healed_after_failing)
    assert _resource_status(client, address) == healed


# ---- going down ----------------------------------------------------------------------------


def _events_while_going_down(
    client: RawClient, address: str, method: str, request: Any
) -> tuple[str, list[m.Event], list[str | None]]:
    """The actor of ``method``, the events until the API went down, and the Version tag
    answered after each of them."""

    async def run() -> tuple[str, list[m.Event], list[str | None]]:
        events: list[m.Event] = []
        versions: list[str | None] = []
        try:
            async with client.stream(address, M + "Events", m.EventsRequest()) as stream:
                await stream.recv_message()  # hello
                reply = await client.acall(address, M + method, request)
                actor = reply.messages[0].actor_id
                while (event := await stream.recv_message()) is not None:
                    events.append(event)
                    try:
                        version = await client.acall(address, M + "Version", EMPTY, timeout=2)
                        versions.append(version.messages[0].version.tag)
                    except (GRPCError, OSError, StreamTerminatedError):
                        versions.append(None)
        except (GRPCError, OSError, StreamTerminatedError):
            pass  # the node went down under the stream
        return actor, events, versions

    result: tuple[str, list[m.Event], list[str | None]] = client.run(run(), 30)
    return result


@pytest.mark.parametrize(
    ("platform", "method", "request_", "sequence", "stage"),
    [
        ("metal", "Reboot", m.RebootRequest(), "reboot", "REBOOTING"),
        ("metal", "Shutdown", m.ShutdownRequest(), "shutdown", "SHUTTING_DOWN"),
        ("metal", "Upgrade", m.UpgradeRequest(image=UPGRADE_IMAGE), "upgrade", "UPGRADING"),
        ("container", "Reset", m.ResetRequest(graceful=True), "reset", "RESETTING"),
    ],
)
def test_lifecycle_stage_is_announced_before_the_node_goes_down(
    make_cluster: Callable[..., EmulatedCluster],
    client_for: Callable[..., RawClient],
    platform: str,
    method: str,
    request_: Any,
    sequence: str,
    stage: str,
) -> None:
    cluster = make_cluster(workers=0, platform=platform)
    client, address = client_for(cluster), cluster.nodes[0].address
    actor, events, versions = _events_while_going_down(client, address, method, request_)
    first = m.SequenceEvent.FromString(events[0].data.value)
    assert (events[0].data.type_url, first.sequence, events[0].actor_id) == (
        SEQUENCE,
        sequence,
        actor,
    )
    statuses = _statuses(events)
    assert statuses, "no MachineStatus event before the node went down"
    assert {event.actor_id for event in events if event.data.type_url == MACHINE_STATUS} == {actor}
    assert {status[0] for status in statuses} == {stage}
    # machine_status.go getReadinessChecks: no readiness check outside booting and running
    assert statuses[0][1:] == (True, [])
    # Until the node is down it is the old system: an upgrade shows only after the reboot.
    assert set(versions) <= {"v1.13.9", None}
    assert "v1.13.9" in versions
    wait_for(lambda: not cluster.node(address).serving, what="the API to go down")


def test_upgrade_boots_the_new_version_with_a_fresh_boot(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, platform="metal", time_scale=5)
    client, address = client_for(cluster), cluster.nodes[0].address
    node = cluster.node(address)
    client.call(address, M + "Upgrade", m.UpgradeRequest(image=UPGRADE_IMAGE))
    wait_for(lambda: not node.serving, what="the API to go down")
    wait_for(lambda: node.serving, what="the API to come back", timeout=15)
    fresh = client_for(cluster)
    assert wait_for(lambda: _version(fresh, address), what="Version after the upgrade") == (
        "v1.13.10"
    )
    request = s.GetRequest(namespace="runtime", type="Versions.runtime.talos.dev", id="version")
    versions = fresh.call(address, "/cosi.resource.State/Get", request).resource.spec.yaml_spec
    assert yaml.safe_load(versions)["version"] == "v1.13.10"
    statuses = _statuses(_backlog(fresh, address, _running_seen))
    assert [stage for stage, _, _ in statuses] == ["BOOTING", "RUNNING"]
    assert statuses[-1] == ("RUNNING", True, [])


# ---- files -----------------------------------------------------------------------------------


def test_files_and_directories_carry_the_image_build_time(
    admin: RawClient, shared_cluster: EmulatedCluster
) -> None:
    cp = shared_cluster.nodes[0].address
    listed = admin.call(cp, M + "List", m.ListRequest(root="/etc", recurse=True))
    stamps = {info.modified for info in listed}
    assert len(stamps) == 1  # one image, built once: files and directories alike
    built = stamps.pop()
    assert any(info.is_dir for info in listed)
    assert (
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
        < built
        < dt.datetime.now(dt.UTC).timestamp()
    )
    copied = admin.call(cp, M + "Copy", m.CopyRequest(root_path="/etc"))
    archive = b"".join(frame.bytes for frame in copied)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        assert {member.mtime for member in tar.getmembers()} == {built}


# ---- Kubernetes: a kubelet that stopped posting status ------------------------------------------


def _core_api(client: RawClient, address: str, tmp_path: Path) -> k8s.CoreV1Api:
    archive = b"".join(f.bytes for f in client.call(address, M + "Kubeconfig", EMPTY))
    (tmp_path / "kubeconfig").write_bytes(untar_kubeconfig(archive))
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(tmp_path / "kubeconfig"), client_configuration=configuration
    )
    configuration.retries = urllib3.Retry(total=0)
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


def test_crash_looping_kubelet_turns_the_node_unknown_then_ready_again(
    make_cluster: Callable[..., EmulatedCluster],
    client_for: Callable[..., RawClient],
    tmp_path: Path,
) -> None:
    # 40 s node-monitor grace period (emulated) = 1 s real at time scale 40; the exact
    # period is checked on a manual clock in test_emulator_parts.
    cluster = make_cluster(workers=0, time_scale=40)
    client, address = client_for(cluster), cluster.nodes[0].address
    api = _core_api(client, address, tmp_path)
    hostname = cluster.nodes[0].hostname

    def conditions() -> dict[str, tuple[str, str, str]]:
        node: Any = api.read_node(hostname, _request_timeout=10)
        return {c.type: (c.status, c.reason, c.message) for c in node.status.conditions}

    assert conditions()["Ready"][0] == "True"
    config = cluster.node(address).run(lambda state: state.active_config)
    apply = m.ApplyConfigurationRequest(
        data=apply_patches(config, [FLAG_PATCH]), mode=m.ApplyConfigurationRequest.NO_REBOOT
    )
    client.call(address, M + "ApplyConfiguration", apply)  # B4: kubelet crash-loops
    unknown = wait_for(conditions, lambda c: c["Ready"][0] == "Unknown", what="Ready=Unknown")
    assert unknown["Ready"] == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    assert {status for status, _, _ in unknown.values()} == {"Unknown"}
    apply.data = apply_patches(apply.data, [UNFLAG_PATCH])  # B5: kubelet heals
    client.call(address, M + "ApplyConfiguration", apply)
    ready = wait_for(conditions, lambda c: c["Ready"][0] == "True", what="Ready again")
    assert ready["Ready"][1] == "KubeletReady"
