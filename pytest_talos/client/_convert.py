"""Protobuf replies of the machine API -> models. Pure functions, no I/O."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Callable
from typing import Any

from google.protobuf import any_pb2, duration_pb2, timestamp_pb2
from google.protobuf.message import DecodeError, Message

from pytest_talos import models
from pytest_talos._proto.cluster import cluster_pb2
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m

EVENT_TYPE_PREFIX = "talos/runtime/"

APPLY_MODES: dict[str, int] = {
    "reboot": m.ApplyConfigurationRequest.REBOOT,
    "auto": m.ApplyConfigurationRequest.AUTO,
    "no-reboot": m.ApplyConfigurationRequest.NO_REBOOT,
    "staged": m.ApplyConfigurationRequest.STAGED,
    "try": m.ApplyConfigurationRequest.TRY,
}
_APPLY_MODE_NAMES: dict[int, models.ApplyMode] = {
    m.ApplyConfigurationRequest.REBOOT: "reboot",
    m.ApplyConfigurationRequest.AUTO: "auto",
    m.ApplyConfigurationRequest.NO_REBOOT: "no-reboot",
    m.ApplyConfigurationRequest.STAGED: "staged",
    m.ApplyConfigurationRequest.TRY: "try",
}


# --------------------------------------------------------------------------- helpers


def timestamp(message: Message, name: str) -> dt.datetime | None:
    """A Timestamp field as an aware UTC datetime, None when unset."""
    if not message.HasField(name):
        return None
    value: timestamp_pb2.Timestamp = getattr(message, name)
    return value.ToDatetime(tzinfo=dt.UTC)


def seconds_to_duration(seconds: float | dt.timedelta) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    if isinstance(seconds, dt.timedelta):
        duration.FromTimedelta(seconds)
    else:
        duration.FromNanoseconds(round(seconds * 1e9))
    return duration


def enum_name(enum: Any, value: int) -> str:
    """The proto enum name for a number, or the number itself if this proto is older."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


def net_ip(raw: bytes) -> str:
    """common.NetIP bytes (4 or 16) -> text; anything else -> hex so nothing is lost."""
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return raw.hex()


def node_of(metadata: common_pb2.Metadata, fallback: str | None) -> str | None:
    return metadata.hostname or fallback


# --------------------------------------------------------------------------- machine API


def version(message: m.Version, node: str | None) -> models.Version:
    info, platform = message.version, message.platform
    return models.Version(
        tag=info.tag,
        sha=info.sha,
        go_version=info.go_version,
        os=info.os,
        arch=info.arch,
        platform=platform.name,
        platform_mode=platform.mode,
        rbac=message.features.rbac if message.HasField("features") else None,
        node=node_of(message.metadata, node),
        built=info.built,
    )


def hostname(message: m.Hostname, node: str | None) -> str:
    return message.hostname


def _service_event(event: m.ServiceEvent) -> models.ServiceEvent:
    return models.ServiceEvent(msg=event.msg, state=event.state, ts=timestamp(event, "ts"))


def service(info: m.ServiceInfo, node: str | None) -> models.ServiceInfo:
    health = info.health
    return models.ServiceInfo(
        id=info.id,
        state=info.state,
        healthy=health.healthy,
        health_unknown=health.unknown if info.HasField("health") else True,
        last_message=health.last_message,
        last_change=timestamp(health, "last_change"),
        events=tuple(_service_event(e) for e in info.events.events),
        node=node,
    )


def services(message: m.ServiceList, node: str | None) -> list[models.ServiceInfo]:
    where = node_of(message.metadata, node)
    return [service(info, where) for info in message.services]


def apply_result(message: m.ApplyConfiguration, node: str | None) -> models.ApplyResult:
    return models.ApplyResult(
        mode=_APPLY_MODE_NAMES.get(message.mode, "reboot"),
        mode_details=message.mode_details,
        warnings=tuple(message.warnings),
        node=node_of(message.metadata, node),
    )


def file_info(message: m.FileInfo, node: str | None) -> models.FileInfo:
    modified = dt.datetime.fromtimestamp(message.modified, dt.UTC) if message.modified else None
    return models.FileInfo(
        name=message.name,
        size=message.size,
        mode=message.mode,
        modified=modified,
        is_dir=message.is_dir,
        error=message.error,
        link=message.link,
        relative_name=message.relative_name,
        uid=message.uid,
        gid=message.gid,
        node=node_of(message.metadata, node),
    )


def process(info: m.ProcessInfo, node: str | None) -> models.ProcessInfo:
    return models.ProcessInfo(
        pid=info.pid,
        ppid=info.ppid,
        state=info.state,
        threads=info.threads,
        cpu_time=info.cpu_time,
        virtual_memory=info.virtual_memory,
        resident_memory=info.resident_memory,
        command=info.command,
        executable=info.executable,
        args=info.args,
        label=info.label,
        node=node,
    )


def processes(message: m.Process, node: str | None) -> list[models.ProcessInfo]:
    where = node_of(message.metadata, node)
    return [process(info, where) for info in message.processes]


def connect_record(record: m.ConnectRecord, node: str | None) -> models.ConnectRecord:
    has_process = record.HasField("process") and (record.process.pid or record.process.name)
    return models.ConnectRecord(
        l4proto=record.l4proto,
        local_ip=record.localip,
        local_port=record.localport,
        remote_ip=record.remoteip,
        remote_port=record.remoteport,
        state=enum_name(m.ConnectRecord.State, record.state),
        pid=record.process.pid if has_process else None,
        process_name=record.process.name,
        uid=record.uid,
        inode=record.inode,
        netns=record.netns,
        node=node,
    )


def netstat(message: m.Netstat, node: str | None) -> list[models.ConnectRecord]:
    where = node_of(message.metadata, node)
    return [connect_record(record, where) for record in message.connectrecord]


def memory(message: m.Memory, node: str | None) -> models.MemInfo:
    info = message.meminfo
    return models.MemInfo(
        total_kb=info.memtotal,
        free_kb=info.memfree,
        available_kb=info.memavailable,
        buffers_kb=info.buffers,
        cached_kb=info.cached,
        swap_total_kb=info.swaptotal,
        swap_free_kb=info.swapfree,
        node=node_of(message.metadata, node),
    )


def mounts(message: m.Mounts, node: str | None) -> list[models.MountStat]:
    where = node_of(message.metadata, node)
    return [
        models.MountStat(
            filesystem=stat.filesystem,
            size=stat.size,
            available=stat.available,
            mounted_on=stat.mounted_on,
            node=where,
        )
        for stat in message.stats
    ]


def logs_containers(message: m.LogsContainer, node: str | None) -> list[str]:
    return list(message.ids)


def etcd_members(message: m.EtcdMembers, node: str | None) -> list[models.EtcdMember]:
    return [
        models.EtcdMember(
            id=member.id,
            hostname=member.hostname,
            peer_urls=tuple(member.peer_urls),
            client_urls=tuple(member.client_urls),
            is_learner=member.is_learner,
        )
        for member in message.members
    ]


def client_configuration(
    message: m.GenerateClientConfiguration, node: str | None
) -> models.ClientConfiguration:
    return models.ClientConfiguration(
        ca_pem=message.ca,
        crt_pem=message.crt,
        key_pem=message.key,
        talosconfig=message.talosconfig,
        node=node_of(message.metadata, node),
    )


def upgrade_result(message: m.Upgrade, node: str | None) -> models.UpgradeResult:
    return models.UpgradeResult(
        ack=message.ack, actor_id=message.actor_id, node=node_of(message.metadata, node)
    )


def health_progress(
    message: cluster_pb2.HealthCheckProgress, node: str | None
) -> models.HealthProgress:
    return models.HealthProgress(message=message.message, node=node_of(message.metadata, node))


# --------------------------------------------------------------------------- events


def _sequence_event(message: m.SequenceEvent) -> models.SequenceEvent:
    failed = message.HasField("error") and bool(message.error.message)
    return models.SequenceEvent(
        sequence=message.sequence,
        action=enum_name(m.SequenceEvent.Action, message.action),
        error=message.error.message if failed else None,
        error_code=enum_name(common_pb2.Code, message.error.code) if failed else None,
    )


def _phase_event(message: m.PhaseEvent) -> models.PhaseEvent:
    return models.PhaseEvent(
        phase=message.phase, action=enum_name(m.PhaseEvent.Action, message.action)
    )


def _task_event(message: m.TaskEvent) -> models.TaskEvent:
    return models.TaskEvent(task=message.task, action=enum_name(m.TaskEvent.Action, message.action))


def _service_state_event(message: m.ServiceStateEvent) -> models.ServiceStateEvent:
    health = message.health
    return models.ServiceStateEvent(
        service=message.service,
        action=enum_name(m.ServiceStateEvent.Action, message.action),
        message=message.message,
        healthy=health.healthy,
        health_unknown=health.unknown if message.HasField("health") else True,
        health_message=health.last_message,
    )


def _restart_event(message: m.RestartEvent) -> models.RestartEvent:
    return models.RestartEvent(cmd=message.cmd)


def _config_load_error(message: m.ConfigLoadErrorEvent) -> models.ConfigLoadErrorEvent:
    return models.ConfigLoadErrorEvent(error=message.error)


def _config_validation_error(
    message: m.ConfigValidationErrorEvent,
) -> models.ConfigValidationErrorEvent:
    return models.ConfigValidationErrorEvent(error=message.error)


def _address_event(message: m.AddressEvent) -> models.AddressEvent:
    return models.AddressEvent(hostname=message.hostname, addresses=tuple(message.addresses))


def _machine_status_event(message: m.MachineStatusEvent) -> models.MachineStatusEvent:
    status = message.status
    return models.MachineStatusEvent(
        stage=enum_name(m.MachineStatusEvent.MachineStage, message.stage),
        ready=status.ready,
        unmet_conditions=tuple(
            models.UnmetCondition(name=c.name, reason=c.reason) for c in status.unmet_conditions
        ),
    )


def _decoder(
    cls: type[Any], convert: Callable[[Any], models.EventPayload]
) -> tuple[str, tuple[type[Any], Callable[[Any], models.EventPayload]]]:
    return EVENT_TYPE_PREFIX + cls.DESCRIPTOR.full_name, (cls, convert)


# The nine payload types talosctl knows (pkg/machinery/client/events.go); others are dropped.
EVENT_DECODERS: dict[str, tuple[type[Any], Callable[[Any], models.EventPayload]]] = dict(
    [
        _decoder(m.SequenceEvent, _sequence_event),
        _decoder(m.PhaseEvent, _phase_event),
        _decoder(m.TaskEvent, _task_event),
        _decoder(m.ServiceStateEvent, _service_state_event),
        _decoder(m.RestartEvent, _restart_event),
        _decoder(m.ConfigLoadErrorEvent, _config_load_error),
        _decoder(m.ConfigValidationErrorEvent, _config_validation_error),
        _decoder(m.AddressEvent, _address_event),
        _decoder(m.MachineStatusEvent, _machine_status_event),
    ]
)


def event_payload(data: any_pb2.Any) -> models.EventPayload | None:
    """Decode a ``talos/runtime/<name>`` Any; None for the hello event and unknown types."""
    decoder = EVENT_DECODERS.get(data.type_url)
    if decoder is None:
        return None
    cls, convert = decoder
    try:
        message = cls.FromString(data.value)
    except DecodeError:
        return None
    return convert(message)


def event(message: m.Event, node: str | None) -> models.Event | None:
    payload = event_payload(message.data)
    if payload is None:
        return None
    return models.Event(
        id=message.id,
        actor_id=message.actor_id,
        payload=payload,
        node=node_of(message.metadata, node),
    )
