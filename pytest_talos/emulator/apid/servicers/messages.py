"""Machine API messages made from the node's state: pure translations, no decisions
(``api/machine/machine.proto``; event type URLs from ``pkg/machinery/client/events.go``)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from google.protobuf import any_pb2, timestamp_pb2
from google.protobuf.message import Message

from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator.node.events import (
    AddressPayload,
    MachineStatusPayload,
    PhasePayload,
    RuntimeEvent,
    SequencePayload,
    ServiceStatePayload,
    TaskPayload,
)
from pytest_talos.emulator.node.host import system
from pytest_talos.emulator.node.services.runner import Service

__all__ = [
    "at_max_depth",
    "children_index",
    "encode_event",
    "file_info",
    "listen_record",
    "payload_message",
    "service_info",
    "timestamp",
]


def timestamp(seconds: float | None) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    if seconds is not None:
        stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def children_index(rootfs: Mapping[str, system.FileEntry]) -> dict[str, list[system.FileEntry]]:
    """Each directory's entries in the order filepath.Walk visits them (by name)."""
    index: dict[str, list[system.FileEntry]] = {}
    for path in sorted(rootfs):
        if path != "/":
            index.setdefault(posixpath.dirname(path), []).append(rootfs[path])
    return index


def at_max_depth(depth: int, root: str, path: str) -> bool:
    """pkg/archiver/walker.go atMaxDepth: separators counted against the root's."""
    if depth < 0 or path == root:
        return False
    return path.count("/") - root.count("/") >= depth


def listen_record(
    listener: system.Listener, node_address: str, pids: dict[tuple[str, str], int] | None
) -> m.ConnectRecord:
    """A listening socket as Netstat reports it. ``pids`` maps (pod, command) and
    ("*", command) to a PID: a listener of a pod is its process's there, else the first
    process of that name; unknown names are PID 1's (INFERRED)."""
    local = node_address if listener.bind == "node" else listener.bind
    record = m.ConnectRecord(
        l4proto=listener.l4proto,
        localip=local,
        localport=listener.port,
        remoteip="::" if ":" in local else "0.0.0.0",
        remoteport=0,
        # Linux socket states: a listening TCP socket is LISTEN, a bound UDP one CLOSE
        state=m.ConnectRecord.CLOSE if listener.udp else m.ConnectRecord.LISTEN,
        inode=0 if not listener.process else 20000 + listener.port,  # kernel: no inode
        netns=listener.netns,
        process=m.ConnectRecord.Process(),
    )
    if pids is not None and listener.process:
        pid = pids.get((listener.pod, listener.process)) or pids.get(("*", listener.process), 1)
        record.process.CopyFrom(m.ConnectRecord.Process(pid=pid, name=listener.process))
    return record


def file_info(entry: system.FileEntry, root: str) -> m.FileInfo:
    if entry.path == root:
        relative = "." if entry.kind == "dir" else posixpath.basename(root)
    else:
        relative = posixpath.relpath(entry.path, root)
    return m.FileInfo(
        name=entry.path,
        size=entry.size,
        mode=entry.mode,
        modified=entry.mtime,
        is_dir=entry.kind == "dir",
        link=entry.link,
        relative_name=relative,
        uid=0,
        gid=0,
    )


def service_info(service: Service) -> m.ServiceInfo:
    health = service.health
    return m.ServiceInfo(
        id=service.id,
        state=service.state,
        events=m.ServiceEvents(
            events=[
                m.ServiceEvent(msg=e.msg, state=e.state, ts=timestamp(e.time))
                for e in service.events
            ]
        ),
        health=m.ServiceHealth(
            unknown=health.unknown,
            healthy=health.healthy,
            last_message=health.last_message,
            last_change=timestamp(health.last_change),
        ),
    )


def payload_message(event: RuntimeEvent) -> Message:
    payload = event.payload
    if isinstance(payload, ServiceStatePayload):
        return m.ServiceStateEvent(
            service=payload.service,
            action=payload.action,
            message=payload.message,
            health=m.ServiceHealth(
                unknown=payload.unknown,
                healthy=payload.healthy,
                last_message=payload.last_message,
                last_change=timestamp(event.time),
            ),
        )
    if isinstance(payload, SequencePayload):
        error = common_pb2.Error(message=payload.error) if payload.error else None
        return m.SequenceEvent(sequence=payload.sequence, action=payload.action, error=error)
    if isinstance(payload, PhasePayload):
        return m.PhaseEvent(phase=payload.phase, action=payload.action)
    if isinstance(payload, TaskPayload):
        return m.TaskEvent(task=payload.task, action=payload.action)
    if isinstance(payload, MachineStatusPayload):
        status = m.MachineStatusEvent.MachineStatus(ready=payload.ready)
        for name, reason in payload.unmet:
            status.unmet_conditions.add(name=name, reason=reason)
        return m.MachineStatusEvent(stage=payload.stage, status=status)
    assert isinstance(payload, AddressPayload)
    return m.AddressEvent(hostname=payload.hostname, addresses=list(payload.addresses))


def encode_event(event: RuntimeEvent) -> m.Event:
    message = payload_message(event)
    # pkg/machinery/client/events.go: type_url talos/runtime/<full name>, not type.googleapis.com/.
    data = any_pb2.Any(
        type_url=f"talos/runtime/{message.DESCRIPTOR.full_name}",
        value=message.SerializeToString(),
    )
    return m.Event(data=data, id=event.id, actor_id=event.actor_id)
