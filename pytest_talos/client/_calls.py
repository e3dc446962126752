"""Request builders and reply helpers of AsyncTalosClient (pure functions, no I/O)."""

from __future__ import annotations

import datetime as dt
import io
import tarfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from google.protobuf.message import Message

from pytest_talos import models
from pytest_talos._proto.cluster import cluster_pb2
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.client import _convert as convert
from pytest_talos.client import _rpcs as rpcs
from pytest_talos.errors import TalosError
from pytest_talos.transport import Rpc

T = TypeVar("T")
Converter = Callable[[Any, str | None], T]
FanoutCall = Literal[
    "version",
    "hostname",
    "services",
    "memory",
    "mounts",
    "processes",
    "netstat",
    "logs_containers",
    "etcd_members",
]

KUBECONFIG_MEMBER = "kubeconfig"
KUBECONFIG_LIMIT = 16 << 20  # a kubeconfig is a few kB; refuse to inflate anything huge
REBOOT_MODES = {"default": 0, "powercycle": 1, "force": 2}
WIPE_MODES = {"all": 0, "system-disk": 1, "user-disks": 2}
LIST_TYPES = {"regular": 0, "directory": 1, "symlink": 2}


def netstat_request(listening: bool) -> m.NetstatRequest:
    return m.NetstatRequest(
        filter=m.NetstatRequest.LISTENING if listening else m.NetstatRequest.ALL,
        feature=m.NetstatRequest.Feature(pid=True),
        l4proto=m.NetstatRequest.L4proto(tcp=True, tcp6=True, udp=True, udp6=True),
        netns=m.NetstatRequest.NetNS(hostnetwork=True),
    )


def apply_request(
    data: bytes | str,
    mode: models.ApplyMode,
    dry_run: bool,
    try_timeout: float | dt.timedelta | None,
) -> m.ApplyConfigurationRequest:
    request = m.ApplyConfigurationRequest(
        data=data.encode() if isinstance(data, str) else data,
        mode=choice("apply mode", mode, convert.APPLY_MODES),  # type: ignore[arg-type]
        dry_run=dry_run,
    )
    if try_timeout is not None:
        request.try_mode_timeout.CopyFrom(convert.seconds_to_duration(try_timeout))
    return request


def events_request(
    tail_events: int, tail_id: str | None, tail_seconds: int, actor_id: str | None
) -> m.EventsRequest:
    return m.EventsRequest(
        tail_events=tail_events,
        tail_id=tail_id or "",
        tail_seconds=tail_seconds,
        with_actor_id=actor_id or "",
    )


def logs_request(service_id: str, tail: int, kubernetes: bool) -> m.LogsRequest:
    return m.LogsRequest(
        namespace="k8s.io" if kubernetes else "system",
        id=service_id,
        driver=common_pb2.CRI if kubernetes else common_pb2.CONTAINERD,
        follow=False,
        tail_lines=tail,
    )


def list_request(
    path: str, recurse: bool, depth: int, types: Sequence[str] | None
) -> m.ListRequest:
    return m.ListRequest(
        root=path,
        recurse=recurse,
        recursion_depth=depth,
        types=[choice("file type", t, LIST_TYPES) for t in types or ()],  # type: ignore[misc]
    )


def reset_request(
    graceful: bool,
    reboot: bool,
    mode: str,
    system_partitions_to_wipe: Sequence[str],
    user_disks_to_wipe: Sequence[str],
) -> m.ResetRequest:
    return m.ResetRequest(
        graceful=graceful,
        reboot=reboot,
        mode=choice("wipe mode", mode, WIPE_MODES),  # type: ignore[arg-type]
        system_partitions_to_wipe=[
            m.ResetPartitionSpec(label=label, wipe=True) for label in system_partitions_to_wipe
        ],
        user_disks_to_wipe=list(user_disks_to_wipe),
    )


def upgrade_request(
    image: str, preserve: bool, stage: bool, force: bool, reboot_mode: str
) -> m.UpgradeRequest:
    return m.UpgradeRequest(
        image=image,
        preserve=preserve,
        stage=stage,
        force=force,
        reboot_mode=choice("reboot mode", reboot_mode, REBOOT_MODES),  # type: ignore[arg-type]
    )


def health_check_request(
    wait_timeout: float | dt.timedelta,
    control_plane_nodes: Sequence[str],
    worker_nodes: Sequence[str],
    force_endpoint: str,
) -> cluster_pb2.HealthCheckRequest:
    return cluster_pb2.HealthCheckRequest(
        wait_timeout=convert.seconds_to_duration(wait_timeout),
        cluster_info=cluster_pb2.ClusterInfo(
            control_plane_nodes=list(control_plane_nodes),
            worker_nodes=list(worker_nodes),
            force_endpoint=force_endpoint,
        ),
    )


FANOUT: dict[str, tuple[Rpc[Any, Any], Callable[[], Message], Converter[Any]]] = {
    "version": (rpcs.VERSION, rpcs.Empty, convert.version),
    "hostname": (rpcs.HOSTNAME, rpcs.Empty, convert.hostname),
    "services": (rpcs.SERVICE_LIST, rpcs.Empty, convert.services),
    "memory": (rpcs.MEMORY, rpcs.Empty, convert.memory),
    "mounts": (rpcs.MOUNTS, rpcs.Empty, convert.mounts),
    "processes": (rpcs.PROCESSES, rpcs.Empty, convert.processes),
    "netstat": (rpcs.NETSTAT, lambda: netstat_request(True), convert.netstat),
    "logs_containers": (rpcs.LOGS_CONTAINERS, rpcs.Empty, convert.logs_containers),
    "etcd_members": (rpcs.ETCD_MEMBER_LIST, m.EtcdMemberListRequest, convert.etcd_members),
}


def choice(kind: str, value: str, choices: Mapping[str, int]) -> int:
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; use one of {', '.join(choices)}")
    return choices[value]


def untar_kubeconfig(data: bytes) -> bytes:
    """The ``kubeconfig`` file of the Kubeconfig .tar.gz stream.

    machined never closes its tar writer (v1alpha1_server.go Kubeconfig closes only the gzip
    one), so a real reply ends right after the file's bytes: no padding, no end-of-archive
    blocks. Like talosctl's extractor (cmd/talosctl/pkg/talos/helpers/archive.go), the
    first member is read and the rest of the stream is not: it must be the kubeconfig.
    """
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            member = archive.next()
            if member is None or member.name.removeprefix("./") != KUBECONFIG_MEMBER:
                name = "nothing" if member is None else repr(member.name)
                raise TalosError(
                    f"the Kubeconfig reply should hold one file named kubeconfig, it holds {name}"
                )
            if not member.isfile() or member.size > KUBECONFIG_LIMIT:
                raise TalosError("the Kubeconfig reply's kubeconfig is not a small regular file")
            handle = archive.extractfile(member)
            content = handle.read() if handle is not None else b""
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise TalosError(
            f"the Kubeconfig reply is not a valid .tar.gz ({type(exc).__name__}: {exc})"
        ) from None
    if len(content) != member.size:
        raise TalosError(
            f"the Kubeconfig reply's kubeconfig is cut short ({len(content)} of {member.size} "
            "bytes)"
        )
    return content
