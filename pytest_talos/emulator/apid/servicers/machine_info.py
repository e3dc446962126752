"""machine.MachineService, the read-only half: version, system data, files, services, logs,
events (``api/machine/machine.proto``, ``v1alpha1_server.go``)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
import weakref
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from google.protobuf import any_pb2, empty_pb2

from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator.apid.servicers import Call, RPCFailure
from pytest_talos.emulator.apid.servicers.messages import (
    at_max_depth,
    children_index,
    encode_event,
    file_info,
    listen_record,
    service_info,
)
from pytest_talos.emulator.faults import MachineApiQuirk
from pytest_talos.emulator.node.events import (
    RuntimeEvent,
    new_xid,
)
from pytest_talos.emulator.node.host import system
from pytest_talos.errors import StatusCode
from pytest_talos.releases import Release
from pytest_talos.talos_api import EMULATOR_BUILT

if TYPE_CHECKING:
    from pytest_talos.emulator.node.state import NodeState

__all__ = ["MachineInfoServicer"]

CHUNK = 64 * 1024
_KERNEL_LOG = (
    "[    0.000000] Linux version 6.18.24-talos (@buildkitsandbox) (gcc (GCC) 15.2.0) #1 SMP",
    "[    0.412345] x86/fpu: Supporting XSAVE feature 0x001: 'x87 floating point registers'",
    "[    1.023456] EXT4-fs (loop0): mounted filesystem",
    "[    2.345678] [talos] [initramfs] booting Talos",
)


_SERVICE_LISTS: weakref.WeakKeyDictionary[NodeState, tuple[int, m.ServiceListResponse]] = (
    weakref.WeakKeyDictionary()
)


def _chunks(data: bytes) -> Iterable[bytes]:
    for start in range(0, len(data), CHUNK):
        yield data[start : start + CHUNK]


def _sha_for(release: Release, tag: str) -> str:
    """The short commit of ``tag``: the release table's for the tag it was read at (v1.13.9
    is commit 3ebd10a7c1bd...), a hash of the tag otherwise (INFERRED)."""
    if tag == release.tag:
        return release.commit
    return hashlib.sha1(tag.encode(), usedforsecurity=False).hexdigest()[:9]


class MachineInfoServicer:
    """Version, system data, files, services, logs and events."""

    async def Version(self, request: empty_pb2.Empty, call: Call) -> m.VersionResponse:
        state = call.state
        platform = state.identity.platform
        version = m.Version(
            version=m.VersionInfo(
                tag=state.api_version_tag(),
                sha=_sha_for(state.release, state.talos_version),
                # Real builds leave ``built`` empty (pkg/machinery/version/version.go):
                # the emulator names itself there, so it is never taken for a real node.
                built=EMULATOR_BUILT,
                go_version=state.release.go_version,  # INFERRED from the tag's go.mod
                os="linux",
                arch="amd64",
            ),
            # platform/container/container.go, runtime/mode.go: name `container`, mode `container`.
            platform=m.PlatformInfo(name=platform, mode=platform),
            features=m.FeaturesInfo(rbac=True),  # a config is loaded: rbac on
        )
        if state.quirk(MachineApiQuirk.VERSION_OMITS_FEATURES):
            version.ClearField("features")  # answers like maintenance mode
        return m.VersionResponse(messages=[version])

    async def Hostname(self, request: empty_pb2.Empty, call: Call) -> m.HostnameResponse:
        return m.HostnameResponse(messages=[m.Hostname(hostname=call.state.hostname)])

    async def Memory(self, request: empty_pb2.Empty, call: Call) -> m.MemoryResponse:
        return m.MemoryResponse(messages=[m.Memory(meminfo=m.MemInfo(**system.meminfo()))])

    async def Mounts(self, request: empty_pb2.Empty, call: Call) -> m.MountsResponse:
        stats = [
            m.MountStat(
                filesystem=mount.device,
                size=mount.size,
                available=mount.available,
                mounted_on=mount.mountpoint,
            )
            for mount in call.state.mounts()
        ]
        return m.MountsResponse(messages=[m.Mounts(stats=stats)])

    async def Processes(self, request: empty_pb2.Empty, call: Call) -> m.ProcessesResponse:
        infos = [
            m.ProcessInfo(
                pid=p.pid,
                ppid=p.ppid,
                state=p.state,
                threads=p.threads,
                cpu_time=1.25,
                virtual_memory=p.vms,
                resident_memory=p.rss,
                command=p.command,
                executable=p.executable,
                args=p.args,
            )
            for p in call.state.processes()
        ]
        return m.ProcessesResponse(messages=[m.Process(processes=infos)])

    async def Netstat(self, request: m.NetstatRequest, call: Call) -> m.NetstatResponse:
        # internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Netstat: only the
        # protocols flagged are read; the host namespace only with netns.hostnetwork
        # (NoHostNetwork = !hostnetwork), pod namespaces with allnetns or by name.
        listening = (m.NetstatRequest.ALL, m.NetstatRequest.LISTENING)
        if request.filter not in (*listening, m.NetstatRequest.CONNECTED):
            raise RPCFailure(StatusCode.INVALID_ARGUMENT, f"invalid filter: {request.filter}")
        netns = request.netns
        records: list[m.ConnectRecord] = []
        if request.filter in listening:  # the node has only listeners, no connections
            pids: dict[tuple[str, str], int] = {}
            for process in reversed(call.state.processes()):  # the first of each name wins
                pids[(process.pod, process.command)] = process.pid
                pids[("*", process.command)] = process.pid
            records = [
                listen_record(
                    listener, call.state.identity.address, pids if request.feature.pid else None
                )
                for listener in call.state.listeners()
                if not listener.hidden  # FaultProfile.hidden_ports
                and getattr(request.l4proto, listener.l4proto, False)
                and (
                    netns.hostnetwork
                    if not listener.netns
                    else netns.allnetns or listener.netns in netns.netns
                )
            ]
        return m.NetstatResponse(messages=[m.Netstat(connectrecord=records)])

    # ---- files ----------------------------------------------------------------------------

    def _entry(self, call: Call, path: str) -> system.FileEntry:
        entry = call.state.file(path)
        if entry is None:
            raise RPCFailure(StatusCode.NOT_FOUND, f"lstat {path}: no such file or directory")
        return entry

    async def List(self, request: m.ListRequest, call: Call) -> AsyncIterator[m.FileInfo]:
        # v1alpha1_server.go List: the root made absolute, a trailing / dropped; the walker's
        # errors are returned as they are (code Unknown): pkg/archiver/walker.go.
        root = "/" + request.root.lstrip("/") if not request.root.startswith("/") else request.root
        root = root.rstrip("/") or "/"
        top = call.state.file(root)
        if top is None:
            raise RPCFailure(StatusCode.UNKNOWN, f"lstat {root}: no such file or directory")
        if top.kind == "symlink":  # walker.go: a symlinked root is followed (EvalSymlinks)
            resolved = system.resolve(call.state.rootfs, root)
            found = call.state.rootfs.get(resolved)
            if found is None:
                raise RPCFailure(StatusCode.UNKNOWN, f"lstat {resolved}: no such file or directory")
            root, top = resolved, found
        # recurse with depth 0 = unlimited (-1); without recurse the walker's depth is 0
        depth = (request.recursion_depth or -1) if request.recurse else 0
        kinds = {
            m.ListRequest.REGULAR: "file",
            m.ListRequest.DIRECTORY: "dir",
            m.ListRequest.SYMLINK: "symlink",
        }
        wanted = {kinds[t] for t in request.types if t in kinds} if request.types else None
        children = children_index(call.state.rootfs)
        pending = [top]
        while pending:
            entry = pending.pop(0)
            if wanted is not None and entry.kind not in wanted:
                # walker.go returns nil for a filtered-out entry before its depth check, so
                # a filtered-out directory is always walked into
                descend = entry.kind == "dir"
            else:
                yield file_info(entry, root)
                descend = entry.kind == "dir" and not at_max_depth(depth, root, entry.path)
            if descend:
                pending[0:0] = children.get(entry.path, [])

    async def Read(self, request: m.ReadRequest, call: Call) -> AsyncIterator[common_pb2.Data]:
        # v1alpha1_server.go Read: os.Stat (symlinks followed); missing -> NotFound with the
        # stat error, anything but a regular file -> a plain error (code Unknown)
        entry = call.state.file(request.path, follow=True)
        if entry is None:
            raise RPCFailure(
                StatusCode.NOT_FOUND, f"stat {request.path}: no such file or directory"
            )
        if entry.kind != "file":
            raise RPCFailure(StatusCode.UNKNOWN, "path must be a regular file")
        for chunk in _chunks(entry.content):
            yield common_pb2.Data(bytes=chunk)

    async def Copy(self, request: m.CopyRequest, call: Call) -> AsyncIterator[common_pb2.Data]:
        if not request.root_path.startswith("/"):
            raise RPCFailure(
                StatusCode.INVALID_ARGUMENT, "path must be absolute"
            )  # v1alpha1_server.go Copy
        self._entry(call, request.root_path)
        archive = self._tar_gz(call, request.root_path)
        for chunk in _chunks(archive):
            yield common_pb2.Data(bytes=chunk)

    def _tar_gz(self, call: Call, root: str) -> bytes:
        buffer = io.BytesIO()
        base = root.rstrip("/").rsplit("/", 1)[-1] or "."
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for path, entry in sorted(call.state.rootfs.items()):
                if path != root and not path.startswith(root.rstrip("/") + "/"):
                    continue
                info = tarfile.TarInfo(base + path[len(root.rstrip("/")) :])
                info.mode, info.mtime = entry.perm, entry.mtime
                if entry.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    archive.addfile(info)
                elif entry.kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, entry.link
                    archive.addfile(info)
                else:
                    info.size = len(entry.content)
                    archive.addfile(info, io.BytesIO(entry.content))
        return buffer.getvalue()

    async def Dmesg(self, request: m.DmesgRequest, call: Call) -> AsyncIterator[common_pb2.Data]:
        if not (request.follow and request.tail):
            yield common_pb2.Data(bytes="".join(f"{line}\n" for line in _KERNEL_LOG).encode())
        if request.follow:
            await asyncio.Event().wait()  # nothing new ever; ends when the client cancels

    # ---- services --------------------------------------------------------------------------

    async def ServiceList(self, request: empty_pb2.Empty, call: Call) -> m.ServiceListResponse:
        # Built once per change of the services (a hot path under load); replies are never
        # modified afterwards (the router copies before filling per-node metadata).
        state = call.state
        cached = _SERVICE_LISTS.get(state)
        if cached is not None and cached[0] == state.services_revision:
            return cached[1]
        services = sorted(state.services.services.values(), key=lambda s: s.id)
        infos = [service_info(service) for service in services]
        reply = m.ServiceListResponse(messages=[m.ServiceList(services=infos)])
        _SERVICE_LISTS[state] = (state.services_revision, reply)
        return reply

    async def ServiceStart(
        self, request: m.ServiceStartRequest, call: Call
    ) -> m.ServiceStartResponse:
        text = call.state.service_start(request.id)
        return m.ServiceStartResponse(messages=[m.ServiceStart(resp=text)])

    async def ServiceStop(self, request: m.ServiceStopRequest, call: Call) -> m.ServiceStopResponse:
        text = call.state.service_stop(request.id)
        return m.ServiceStopResponse(messages=[m.ServiceStop(resp=text)])

    async def ServiceRestart(
        self, request: m.ServiceRestartRequest, call: Call
    ) -> m.ServiceRestartResponse:
        text = call.state.service_restart(request.id)
        return m.ServiceRestartResponse(messages=[m.ServiceRestart(resp=text)])

    # ---- logs --------------------------------------------------------------------------------

    async def LogsContainers(
        self, request: empty_pb2.Empty, call: Call
    ) -> m.LogsContainersResponse:
        ids = sorted(call.state.services.services)
        return m.LogsContainersResponse(messages=[m.LogsContainer(ids=ids)])

    async def Logs(self, request: m.LogsRequest, call: Call) -> AsyncIterator[common_pb2.Data]:
        # v1alpha1_server.go Logs: namespace "system" or id "kubelet" -> the service log.
        if request.namespace != "system" and request.id != "kubelet":
            if not request.namespace:
                raise RPCFailure(StatusCode.INVALID_ARGUMENT, "namespace can't be empty")
            raise RPCFailure(
                StatusCode.NOT_FOUND, f'container "{request.id}" not found'
            )  # INFERRED
        lines = call.state.service_log(request.id)
        if request.tail_lines >= 0:
            lines = lines[-request.tail_lines :] if request.tail_lines else []
        queue: asyncio.Queue[str] = asyncio.Queue()
        unsubscribe = call.state.subscribe_logs(
            lambda sid, line: queue.put_nowait(line) if sid == request.id else None
        )
        try:
            for start in range(0, len(lines), 200):
                yield common_pb2.Data(
                    bytes="".join(f"{line}\n" for line in lines[start : start + 200]).encode()
                )
            while request.follow:
                line = await queue.get()
                yield common_pb2.Data(bytes=f"{line}\n".encode())
        finally:
            unsubscribe()

    # ---- events ------------------------------------------------------------------------------

    async def Events(self, request: m.EventsRequest, call: Call) -> AsyncIterator[m.Event]:
        options = [request.tail_events != 0, bool(request.tail_id), request.tail_seconds != 0]
        if sum(options) > 1:  # v1alpha1_server.go Events: one tail option (wording INFERRED)
            raise RPCFailure(
                StatusCode.INVALID_ARGUMENT,
                "only one of tail_events, tail_id, tail_seconds can be set",
            )
        state = call.state
        queue: asyncio.Queue[RuntimeEvent] = asyncio.Queue()
        unsubscribe = state.events.subscribe(queue.put_nowait)
        backlog = state.events.backlog(
            tail_events=request.tail_events,
            tail_id=request.tail_id,
            tail_seconds=request.tail_seconds,
            now=call.node.clock.time(),
        )
        if request.tail_seconds and state.quirk(MachineApiQuirk.EVENTS_TAIL_SECONDS_DROPS_HISTORY):
            backlog = []  # no history, only new events
        actor = request.with_actor_id
        try:
            if not state.quirk(MachineApiQuirk.EVENTS_SKIP_HELLO):
                # v1alpha1_server.go Events: an empty "hello" event first (actor id as asked)
                yield m.Event(
                    data=any_pb2.Any(), id=new_xid(call.node.clock.time()), actor_id=actor
                )
            for event in backlog:
                if not actor or event.actor_id == actor:
                    yield encode_event(event)
            while True:
                event = await queue.get()
                if not actor or event.actor_id == actor:
                    yield encode_event(event)
        finally:
            unsubscribe()
