"""A minimal apid for the client's integration tests.

Built on our generated grpclib stubs and served over real mTLS on a 127.0.0.x address, it
answers the way talos-facts.md says apid/machined do: ``node`` metadata proxies one-to-one,
``nodes`` fans out with per-node metadata (errors in ``metadata.error``/``status``), roles
come from the client certificate's Organization, COSI serves ResourceDefinitions and
refuses writes. The "other nodes" behind the endpoint are simulated in-process.

It is deliberately small; the full emulator (pytest_talos.emulator) replaces it for
behaviour tests.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import ssl
import tarfile
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import yaml
from google.protobuf import any_pb2
from google.protobuf.message import Message
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream
from multidict import MultiDict

from pytest_talos._proto.cluster import cluster_grpc, cluster_pb2
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_grpc
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.resource.definitions.cluster import cluster_pb2 as cluster_spec
from pytest_talos._proto.resource.definitions.enums import enums_pb2
from pytest_talos._proto.resource.definitions.network import network_pb2
from pytest_talos._proto.resource.definitions.runtime import runtime_pb2
from pytest_talos._proto.resource.definitions.v1alpha1 import v1alpha1_pb2
from pytest_talos._proto.v1alpha1 import meta_pb2, resource_pb2, state_grpc, state_pb2
from pytest_talos.emulator.pki import CertAndKey, CertificateAuthority, issue_client_cert
from pytest_talos.talosconfig import load_client_identity

ADMIN = frozenset({"os:admin"})
OPERATOR = ADMIN | {"os:operator"}
READER = OPERATOR | {"os:reader"}

_RBAC: dict[str, frozenset[str]] = {
    "ApplyConfiguration": ADMIN,
    "Read": ADMIN,
    "Kubeconfig": ADMIN,
    "Reset": ADMIN,
    "Rollback": ADMIN,
    "Upgrade": ADMIN,
    "GenerateClientConfiguration": ADMIN,
    "ServiceStart": OPERATOR,
    "ServiceStop": OPERATOR,
    "ServiceRestart": OPERATOR,
    "Reboot": OPERATOR,
    "Shutdown": OPERATOR,
}
_RESTARTABLE = ("kubelet",)
SENSITIVE_TYPES = frozenset({"MachineConfigs.config.talos.dev"})

DEFAULT_CONFIG = b"""# the machine config
version: v1alpha1
machine:
  type: controlplane
  token: not-a-real-token
cluster:
  clusterName: minimal
---
apiVersion: v1alpha1
kind: HostnameConfig
hostname: node-1
"""


# --------------------------------------------------------------------------- node state


def _ts(moment: dt.datetime) -> Any:
    from google.protobuf import timestamp_pb2

    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


@dataclass
class FakeService:
    id: str
    state: str = "Running"
    healthy: bool = True
    unknown: bool = False
    message: str = "Health check successful"

    def to_proto(self, now: dt.datetime) -> m.ServiceInfo:
        return m.ServiceInfo(
            id=self.id,
            state=self.state,
            events=m.ServiceEvents(
                events=[
                    m.ServiceEvent(msg="Starting service", state="Starting", ts=_ts(now)),
                    m.ServiceEvent(msg=self.message, state=self.state, ts=_ts(now)),
                ]
            ),
            health=m.ServiceHealth(
                unknown=self.unknown,
                healthy=self.healthy,
                last_message=self.message,
                last_change=_ts(now),
            ),
        )


def _kubeconfig_tar(members: Iterable[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o600
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class FakeNode:
    """What one simulated node knows. Mutate only on the server's loop (``server.call``)."""

    address: str
    hostname: str
    tag: str = "v1.13.9"
    machine_type: str = "controlplane"
    down: bool = False  # unreachable through the endpoint
    services: list[FakeService] = field(
        default_factory=lambda: [FakeService("apid"), FakeService("etcd"), FakeService("kubelet")]
    )
    files: dict[str, bytes] = field(
        default_factory=lambda: {
            "/etc/os-release": b'NAME="Talos"\nID=talos\nVERSION_ID=v1.13.9\n',
            "/etc/hostname": b"node-1\n",
        }
    )
    logs: dict[str, bytes] = field(
        default_factory=lambda: {
            "apid": b"apid line 1\napid line 2\napid line 3\n",
            "kubelet": b"kubelet started\n",
        }
    )
    kubeconfig: bytes = field(
        default_factory=lambda: _kubeconfig_tar([("kubeconfig", b"apiVersion: v1\nkind: Config\n")])
    )
    config: bytes = DEFAULT_CONFIG
    config_version: int = 1
    events: list[m.Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.events:
            self.events = [
                _event(m.ServiceStateEvent(service=s.id, action=m.ServiceStateEvent.RUNNING))
                for s in self.services
            ]
            self.events.append(_event(m.PhaseEvent(phase="boot", action=m.PhaseEvent.STOP)))
            # A payload type the client does not know: must be dropped, not fail.
            unknown = any_pb2.Any(type_url="talos/runtime/machine.FutureEvent", value=b"\x08\x01")
            self.events.append(m.Event(data=unknown, id=_xid()))


def _xid() -> str:
    return uuid.uuid4().hex[:20]


def _event(payload: Message, actor: str = "") -> m.Event:
    data = any_pb2.Any(
        type_url="talos/runtime/" + payload.DESCRIPTOR.full_name, value=payload.SerializeToString()
    )
    return m.Event(data=data, id=_xid(), actor_id=actor)


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class _Definition:
    type: str
    namespace: str
    aliases: tuple[str, ...]
    sensitive: bool = False


DEFINITIONS = (
    _Definition("ResourceDefinitions.meta.cosi.dev", "meta", ("rd", "resourcedefinition")),
    _Definition("Services.v1alpha1.talos.dev", "runtime", ("svc", "service", "services")),
    _Definition(
        "MachineConfigs.config.talos.dev",
        "config",
        ("mc", "machineconfig", "machineconfigs"),
        sensitive=True,
    ),
    _Definition("MachineTypes.config.talos.dev", "config", ("machinetype", "machinetypes")),
    _Definition("Members.cluster.talos.dev", "cluster", ("member", "members", "members.cluster")),
    _Definition("NodeAddresses.net.talos.dev", "network", ("nodeaddress", "nodeaddresses")),
    _Definition("HostnameStatuses.net.talos.dev", "network", ("hostname", "hostnamestatus")),
    _Definition("MachineStatuses.runtime.talos.dev", "runtime", ("machinestatus", "ms")),
    _Definition("Versions.runtime.talos.dev", "runtime", ("version", "versions")),
    # Two types sharing an alias, for the "ambiguous" path.
    _Definition("Foos.a.test.dev", "runtime", ("foo", "foos")),
    _Definition("Foos.b.test.dev", "runtime", ("foo", "foos")),
)


def _resource(
    namespace: str, rtype: str, rid: str, spec: Message | None, yaml_spec: Any, version: int = 1
) -> resource_pb2.Resource:
    now = dt.datetime.now(dt.UTC)
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(
            namespace=namespace,
            type=rtype,
            id=rid,
            version=str(version),
            owner="test.Controller",
            phase="running",
            created=_ts(now),
            updated=_ts(now),
            labels={"talos.dev/test": "yes"},
        ),
        spec=resource_pb2.Spec(
            proto_spec=spec.SerializeToString() if spec is not None else b"",
            yaml_spec=yaml.safe_dump(yaml_spec, sort_keys=False),
        ),
    )


def _definition_resource(d: _Definition) -> resource_pb2.Resource:
    spec = meta_pb2.ResourceDefinitionSpec(
        resource_type=d.type,
        display_type=d.type.split(".")[0][:-1],
        default_namespace=d.namespace,
        aliases=list(d.aliases[:1]),
        all_aliases=list(d.aliases),
        sensitivity=(
            meta_pb2.ResourceDefinitionSpec.SENSITIVE
            if d.sensitive
            else meta_pb2.ResourceDefinitionSpec.NON_SENSITIVE
        ),
    )
    yaml_spec = {"type": d.type, "defaultNamespace": d.namespace, "aliases": list(d.aliases)}
    return _resource("meta", "ResourceDefinitions.meta.cosi.dev", d.type.lower(), spec, yaml_spec)


def node_resources(node: FakeNode) -> dict[tuple[str, str, str], resource_pb2.Resource]:
    """The COSI view of a node (recomputed from its state on every call)."""
    found = [_definition_resource(d) for d in DEFINITIONS]
    for service in node.services:
        if service.state == "Running":
            spec = v1alpha1_pb2.ServiceSpec(running=True, healthy=service.healthy)
            yaml_spec = {"running": True, "healthy": service.healthy, "unknown": service.unknown}
            found.append(
                _resource("runtime", "Services.v1alpha1.talos.dev", service.id, spec, yaml_spec)
            )
    found.append(
        _resource(
            "config",
            "MachineConfigs.config.talos.dev",
            "v1alpha1",
            config_pb2.MachineConfigSpec(yaml_marshalled=node.config),
            node.config.decode(),
            version=node.config_version,
        )
    )
    found.append(
        _resource(
            "runtime",
            "Versions.runtime.talos.dev",
            "version",
            runtime_pb2.VersionSpec(version=node.tag, name="Talos"),
            {"version": node.tag, "name": "Talos"},
        )
    )
    found.append(
        _resource(
            "network",
            "HostnameStatuses.net.talos.dev",
            "hostname",
            network_pb2.HostnameStatusSpec(hostname=node.hostname, domainname="cluster.local"),
            {"hostname": node.hostname, "domainname": "cluster.local"},
        )
    )
    ip = bytes(int(part) for part in node.address.split("."))
    found.append(
        _resource(
            "network",
            "NodeAddresses.net.talos.dev",
            "current",
            network_pb2.NodeAddressSpec(addresses=[common_pb2.NetIPPrefix(ip=ip, prefix_length=8)]),
            {"addresses": [f"{node.address}/8"]},
        )
    )
    found.append(
        _resource(
            "cluster",
            "Members.cluster.talos.dev",
            node.hostname,
            cluster_spec.MemberSpec(
                node_id=node.hostname,
                addresses=[common_pb2.NetIP(ip=ip)],
                hostname=node.hostname,
                machine_type=enums_pb2.TYPE_CONTROL_PLANE,
                operating_system="Talos (v1.13.9)",
                control_plane=cluster_spec.ControlPlane(api_server_port=6443),
            ),
            {"nodeId": node.hostname, "machineType": "controlplane"},
        )
    )
    found.append(
        _resource(
            "runtime",
            "MachineStatuses.runtime.talos.dev",
            "machine",
            runtime_pb2.MachineStatusSpec(
                stage=enums_pb2.MACHINE_STAGE_RUNNING,
                status=runtime_pb2.MachineStatusStatus(ready=True),
            ),
            {"stage": "running", "status": {"ready": True}},
        )
    )
    return {(r.metadata.namespace, r.metadata.type, r.metadata.id): r for r in found}


# --------------------------------------------------------------------------- request context


def peer_roles(stream: Stream[Any, Any]) -> frozenset[str]:
    """Roles = the client certificate's Subject Organization values (multi-valued RDN)."""
    cert = stream.peer.cert() if stream.peer is not None else None
    subject = cert.get("subject", ()) if cert else ()
    return frozenset(value for rdn in subject for key, value in rdn if key == "organizationName")


def _allowed(method: str) -> frozenset[str]:
    return _RBAC.get(method.rsplit("/", 1)[-1], READER)


class _Context:
    """Per-call view: who calls, which node(s) they address."""

    def __init__(self, apid: MinimalApid, stream: Stream[Any, Any], method: str) -> None:
        self.apid = apid
        self.method = method
        self.roles = peer_roles(stream)
        metadata: Any = stream.metadata if stream.metadata is not None else MultiDict()
        self.node_values = list(metadata.getall("node", []))
        self.nodes_values = list(metadata.getall("nodes", []))
        apid.calls.append((method, list(metadata.items())))

    def authorize(self) -> None:
        if not self.roles & _allowed(self.method):
            raise GRPCError(Status.PERMISSION_DENIED, "not authorized")

    def single(self) -> FakeNode:
        if len(self.node_values) > 1:
            raise GRPCError(Status.INVALID_ARGUMENT, "node metadata must be single-valued")
        if self.node_values:
            return self.apid.reach(self.node_values[0])
        if len(self.nodes_values) == 1:
            return self.apid.reach(self.nodes_values[0])
        return self.apid.local


# --------------------------------------------------------------------------- servicers


Builder = Callable[[FakeNode, Any], Message]


class _Base:
    def __init__(self, apid: MinimalApid) -> None:
        self.apid = apid

    async def _unary(
        self, stream: Stream[Any, Any], method: str, reply_cls: type[Message], build: Builder
    ) -> None:
        request: Any = await stream.recv_message()
        ctx = _Context(self.apid, stream, method)
        reply: Any = reply_cls()
        if ctx.nodes_values and not ctx.node_values:  # one-to-many, even for one node
            for name in ctx.nodes_values:
                element = reply.messages.add()
                try:
                    node = self.apid.reach(name)
                    ctx.authorize()
                    element.CopyFrom(build(node, request))
                except GRPCError as error:
                    element.metadata.error = error.message or ""
                    element.metadata.status.code = error.status.value
                    element.metadata.status.message = error.message or ""
                element.metadata.hostname = name
        else:
            node = ctx.single()
            ctx.authorize()
            reply.messages.append(build(node, request))
        await stream.send_message(reply)

    async def _stream(
        self,
        stream: Stream[Any, Any],
        method: str,
        produce: Callable[[FakeNode, Any], Awaitable[None]],
    ) -> None:
        request: Any = await stream.recv_message()
        ctx = _Context(self.apid, stream, method)
        node = ctx.single()
        ctx.authorize()
        await produce(node, request)


def _unimplemented() -> GRPCError:
    return GRPCError(Status.UNIMPLEMENTED, "not implemented in the minimal test apid")


class MachineServicer(_Base, machine_grpc.MachineServiceBase):
    async def Version(self, stream: Stream[Any, Any]) -> None:
        def build(node: FakeNode, _: Any) -> Message:
            return m.Version(
                version=m.VersionInfo(
                    tag=node.tag, sha="abc123", go_version="go1.24.4", os="linux", arch="amd64"
                ),
                platform=m.PlatformInfo(name="container", mode="container"),
                features=m.FeaturesInfo(rbac=True),
            )

        await self._unary(stream, "/machine.MachineService/Version", m.VersionResponse, build)

    async def Hostname(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/Hostname",
            m.HostnameResponse,
            lambda node, _: m.Hostname(hostname=node.hostname),
        )

    async def ServiceList(self, stream: Stream[Any, Any]) -> None:
        def build(node: FakeNode, _: Any) -> Message:
            now = dt.datetime.now(dt.UTC)
            return m.ServiceList(services=[s.to_proto(now) for s in node.services])

        await self._unary(
            stream, "/machine.MachineService/ServiceList", m.ServiceListResponse, build
        )

    def _service_action(self, verb: str, reply: type[Message]) -> Builder:
        def build(node: FakeNode, request: Any) -> Message:
            service = next((s for s in node.services if s.id == request.id), None)
            if service is None:
                raise GRPCError(Status.UNKNOWN, f'service "{request.id}" not defined')
            if service.id not in _RESTARTABLE:
                raise GRPCError(
                    Status.UNKNOWN,
                    f'service "{request.id}" doesn\'t support {verb} operation via API',
                )
            return reply(resp=f'Service "{request.id}" {verb}ed'.replace("stoped", "stopped"))

        return build

    async def ServiceStart(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/ServiceStart",
            m.ServiceStartResponse,
            self._service_action("start", m.ServiceStart),
        )

    async def ServiceStop(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/ServiceStop",
            m.ServiceStopResponse,
            self._service_action("stop", m.ServiceStop),
        )

    async def ServiceRestart(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/ServiceRestart",
            m.ServiceRestartResponse,
            self._service_action("restart", m.ServiceRestart),
        )

    async def ApplyConfiguration(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/ApplyConfiguration",
            m.ApplyConfigurationResponse,
            self.apid.apply,
        )

    async def Logs(self, stream: Stream[Any, Any]) -> None:
        async def produce(node: FakeNode, request: m.LogsRequest) -> None:
            if request.id not in node.logs:
                error = f'log "{request.id}" was not registered'
                await stream.send_message(
                    common_pb2.Data(
                        metadata=common_pb2.Metadata(hostname=node.address, error=error)
                    )
                )
                return
            lines = node.logs[request.id].splitlines(keepends=True)
            if request.tail_lines >= 0:
                lines = lines[-request.tail_lines :] if request.tail_lines else []
            for line in lines:
                await stream.send_message(common_pb2.Data(bytes=line))

        await self._stream(stream, "/machine.MachineService/Logs", produce)

    async def LogsContainers(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/LogsContainers",
            m.LogsContainersResponse,
            lambda node, _: m.LogsContainer(ids=sorted(node.logs)),
        )

    async def Read(self, stream: Stream[Any, Any]) -> None:
        async def produce(node: FakeNode, request: m.ReadRequest) -> None:
            if request.path == "/fail-midway":
                await stream.send_message(common_pb2.Data(bytes=b"first chunk"))
                raise GRPCError(Status.INTERNAL, "read /fail-midway: input/output error")
            if request.path == "/slow":
                await stream.send_message(common_pb2.Data(bytes=b"then nothing"))
                await asyncio.sleep(30)
            if request.path not in node.files:
                raise GRPCError(Status.NOT_FOUND, f"open {request.path}: no such file or directory")
            data = node.files[request.path]
            for start in range(0, len(data), 4096):
                await stream.send_message(common_pb2.Data(bytes=data[start : start + 4096]))

        await self._stream(stream, "/machine.MachineService/Read", produce)

    async def List(self, stream: Stream[Any, Any]) -> None:
        async def produce(node: FakeNode, request: m.ListRequest) -> None:
            root = request.root or "/"
            await stream.send_message(
                m.FileInfo(
                    name=root,
                    is_dir=True,
                    mode=(1 << 31) | 0o755,
                    modified=1700000000,
                    relative_name=".",
                )
            )
            for path, data in sorted(node.files.items()):
                directory, _, base = path.rpartition("/")
                if (directory or "/") == root.rstrip("/") or (
                    request.recurse and path.startswith(root)
                ):
                    await stream.send_message(
                        m.FileInfo(
                            name=path,
                            size=len(data),
                            mode=0o644,
                            modified=1700000000,
                            relative_name=base,
                        )
                    )

        await self._stream(stream, "/machine.MachineService/List", produce)

    async def Kubeconfig(self, stream: Stream[Any, Any]) -> None:
        async def produce(node: FakeNode, _: Any) -> None:
            data = node.kubeconfig
            for start in range(0, len(data), 100):
                await stream.send_message(common_pb2.Data(bytes=data[start : start + 100]))

        await self._stream(stream, "/machine.MachineService/Kubeconfig", produce)

    async def Netstat(self, stream: Stream[Any, Any]) -> None:
        def build(node: FakeNode, request: m.NetstatRequest) -> Message:
            records = [
                m.ConnectRecord(
                    l4proto="tcp6",
                    localip="::",
                    localport=50000,
                    remoteip="::",
                    state=m.ConnectRecord.LISTEN,
                    process=m.ConnectRecord.Process(pid=1234, name="apid"),
                ),
                m.ConnectRecord(
                    l4proto="tcp",
                    localip=node.address,
                    localport=50000,
                    remoteip="127.0.0.1",
                    remoteport=41000,
                    state=m.ConnectRecord.ESTABLISHED,
                ),
            ]
            if request.filter == m.NetstatRequest.LISTENING:
                records = [r for r in records if r.state == m.ConnectRecord.LISTEN]
            return m.Netstat(connectrecord=records)

        await self._unary(stream, "/machine.MachineService/Netstat", m.NetstatResponse, build)

    async def Processes(self, stream: Stream[Any, Any]) -> None:
        def build(node: FakeNode, _: Any) -> Message:
            return m.Process(
                processes=[
                    m.ProcessInfo(
                        pid=1,
                        ppid=0,
                        state="S",
                        threads=12,
                        cpu_time=1.5,
                        virtual_memory=1 << 20,
                        resident_memory=1 << 19,
                        command="machined",
                        executable="/sbin/init",
                        args="/sbin/init",
                    ),
                ]
            )

        await self._unary(stream, "/machine.MachineService/Processes", m.ProcessesResponse, build)

    async def Memory(self, stream: Stream[Any, Any]) -> None:
        def build(node: FakeNode, _: Any) -> Message:
            return m.Memory(
                meminfo=m.MemInfo(
                    memtotal=4_000_000,
                    memfree=1_000_000,
                    memavailable=3_000_000,
                    buffers=1000,
                    cached=2000,
                    swaptotal=0,
                    swapfree=0,
                )
            )

        await self._unary(stream, "/machine.MachineService/Memory", m.MemoryResponse, build)

    async def Mounts(self, stream: Stream[Any, Any]) -> None:
        def build(node: FakeNode, _: Any) -> Message:
            return m.Mounts(
                stats=[
                    m.MountStat(
                        filesystem="overlay", size=10 << 30, available=5 << 30, mounted_on="/"
                    )
                ]
            )

        await self._unary(stream, "/machine.MachineService/Mounts", m.MountsResponse, build)

    async def Events(self, stream: Stream[Any, Any]) -> None:
        async def produce(node: FakeNode, request: m.EventsRequest) -> None:
            hello = m.Event(data=any_pb2.Any(), id=_xid(), actor_id=request.with_actor_id)
            await stream.send_message(hello)
            buffered = list(node.events)
            if request.tail_events > 0:
                buffered = buffered[-request.tail_events :]
            elif request.tail_events == 0:
                buffered = []
            for event in buffered:
                await stream.send_message(event)
            await asyncio.Event().wait()  # follow: nothing new happens here

        await self._stream(stream, "/machine.MachineService/Events", produce)

    async def Reboot(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/Reboot",
            m.RebootResponse,
            lambda node, _: m.Reboot(actor_id=str(uuid.uuid4())),
        )

    async def Shutdown(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/Shutdown",
            m.ShutdownResponse,
            lambda node, _: m.Shutdown(actor_id=str(uuid.uuid4())),
        )

    async def Reset(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/Reset",
            m.ResetResponse,
            lambda node, _: m.Reset(actor_id=str(uuid.uuid4())),
        )

    async def Upgrade(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/Upgrade",
            m.UpgradeResponse,
            lambda node, _: m.Upgrade(ack="Upgrade request received", actor_id=str(uuid.uuid4())),
        )

    async def Rollback(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/Rollback",
            m.RollbackResponse,
            lambda node, _: m.Rollback(),
        )

    async def EtcdMemberList(self, stream: Stream[Any, Any]) -> None:
        def build(node: FakeNode, _: Any) -> Message:
            member = m.EtcdMember(
                id=42,
                hostname=node.hostname,
                peer_urls=[f"https://{node.address}:2380"],
                client_urls=[f"https://{node.address}:2379"],
            )
            return m.EtcdMembers(members=[member])

        await self._unary(
            stream, "/machine.MachineService/EtcdMemberList", m.EtcdMemberListResponse, build
        )

    async def GenerateClientConfiguration(self, stream: Stream[Any, Any]) -> None:
        await self._unary(
            stream,
            "/machine.MachineService/GenerateClientConfiguration",
            m.GenerateClientConfigurationResponse,
            self.apid.generate_client,
        )

    async def Bootstrap(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented()

    async def Copy(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented()

    async def Dmesg(self, stream: Stream[Any, Any]) -> None:
        raise _unimplemented()


class ClusterServicer(_Base, cluster_grpc.ClusterServiceBase):
    async def HealthCheck(self, stream: Stream[Any, Any]) -> None:
        async def produce(node: FakeNode, _: Any) -> None:
            for check in ("etcd to be healthy", "apid to be ready", "kubelet to be healthy"):
                await stream.send_message(
                    cluster_pb2.HealthCheckProgress(message=f"waiting for {check}: OK")
                )

        await self._stream(stream, "/cluster.ClusterService/HealthCheck", produce)


class StateServicer(_Base, state_grpc.StateBase):
    def _lookup(self, ctx: _Context, namespace: str, rtype: str) -> FakeNode:
        if ctx.nodes_values:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"one-2-many proxying is not supported for method {ctx.method}",
            )
        node = ctx.single()
        ctx.authorize()
        known = {d.type: d for d in DEFINITIONS}
        if rtype not in known:
            raise GRPCError(Status.PERMISSION_DENIED, f'resource type "{rtype}" is not supported')
        if rtype in SENSITIVE_TYPES and "os:admin" not in ctx.roles:
            raise GRPCError(Status.PERMISSION_DENIED, "not authorized")
        return node

    async def Get(self, stream: Stream[Any, Any]) -> None:
        request: Any = await stream.recv_message()
        ctx = _Context(self.apid, stream, "/cosi.resource.State/Get")
        node = self._lookup(ctx, request.namespace, request.type)
        found = node_resources(node).get((request.namespace, request.type, request.id))
        if found is None:
            raise GRPCError(
                Status.NOT_FOUND,
                f"resource {request.type}({request.namespace}/{request.id}) not found",
            )
        await stream.send_message(state_pb2.GetResponse(resource=found))

    async def List(self, stream: Stream[Any, Any]) -> None:
        request: Any = await stream.recv_message()
        ctx = _Context(self.apid, stream, "/cosi.resource.State/List")
        node = self._lookup(ctx, request.namespace, request.type)
        for (ns, rtype, _), found in sorted(node_resources(node).items()):
            if ns == request.namespace and rtype == request.type:
                await stream.send_message(state_pb2.ListResponse(resource=found))

    async def Watch(self, stream: Stream[Any, Any]) -> None:
        request: Any = await stream.recv_message()
        ctx = _Context(self.apid, stream, "/cosi.resource.State/Watch")
        node = self._lookup(ctx, request.namespace, request.type)
        queue: asyncio.Queue[state_pb2.Event] = asyncio.Queue()
        self.apid.watchers.append((node, request, queue))
        try:
            await stream.send_message(state_pb2.WatchResponse())  # "watch is set up"
            for event in _initial_events(node, request):
                await stream.send_message(state_pb2.WatchResponse(event=[event]))
            while True:
                await stream.send_message(state_pb2.WatchResponse(event=[await queue.get()]))
        finally:
            self.apid.watchers.remove((node, request, queue))

    async def Create(self, stream: Stream[Any, Any]) -> None:
        await stream.recv_message()
        raise GRPCError(Status.PERMISSION_DENIED, "write access is not allowed")

    async def Update(self, stream: Stream[Any, Any]) -> None:
        await stream.recv_message()
        raise GRPCError(Status.PERMISSION_DENIED, "write access is not allowed")

    async def Destroy(self, stream: Stream[Any, Any]) -> None:
        await stream.recv_message()
        raise GRPCError(Status.PERMISSION_DENIED, "write access is not allowed")


def _initial_events(node: FakeNode, request: state_pb2.WatchRequest) -> list[state_pb2.Event]:
    current = node_resources(node)
    if request.HasField("id"):
        found = current.get((request.namespace, request.type, request.id))
        if found is not None:
            return [state_pb2.Event(event_type=state_pb2.CREATED, resource=found)]
        tombstone = resource_pb2.Resource(
            metadata=resource_pb2.Metadata(
                namespace=request.namespace, type=request.type, id=request.id, version="0"
            )
        )
        return [state_pb2.Event(event_type=state_pb2.DESTROYED, resource=tombstone)]
    if not request.options.bootstrap_contents:
        return []
    events = [
        state_pb2.Event(event_type=state_pb2.CREATED, resource=found)
        for (ns, rtype, _), found in sorted(current.items())
        if ns == request.namespace and rtype == request.type
    ]
    if request.api_version >= 1:
        events.append(state_pb2.Event(event_type=state_pb2.BOOTSTRAPPED))
    return events


# --------------------------------------------------------------------------- the server


_APPLY_DETAILS = {
    m.ApplyConfigurationRequest.NO_REBOOT: "Applied configuration without a reboot",
    m.ApplyConfigurationRequest.STAGED: "Staged configuration to be applied after the next reboot",
    m.ApplyConfigurationRequest.REBOOT: "Applied configuration with a reboot",
}


def server_ssl_context(ca_pem: bytes, server: CertAndKey) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=ca_pem.decode())
    load_client_identity(ctx, server.cert_pem, server.key_pem)
    ctx.set_alpn_protocols(["h2"])
    return ctx


class MinimalApid:
    """One listening apid (``host``) fronting ``nodes``; the first node is the endpoint's own.

    Runs its own event loop on a daemon thread. ``calls`` records (method, metadata).
    """

    def __init__(
        self,
        host: str,
        ca: CertificateAuthority,
        server_cert: CertAndKey,
        nodes: list[FakeNode] | None = None,
    ) -> None:
        self.host = host
        self.port = 0
        self.ca = ca
        self.nodes = {n.address: n for n in (nodes or [FakeNode(host, "node-1")])}
        self.local = next(iter(self.nodes.values()))
        self.calls: list[tuple[str, list[tuple[str, str]]]] = []
        self.watchers: list[
            tuple[FakeNode, state_pb2.WatchRequest, asyncio.Queue[state_pb2.Event]]
        ] = []
        self._ssl = server_ssl_context(ca.cert_pem, server_cert)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name=f"minimal-apid-{host}"
        )
        self._server: Server | None = None

    def __enter__(self) -> MinimalApid:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server loop (state changes must happen there)."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def start(self) -> None:
        async def listen() -> Server:
            # grpclib binds a Server to the loop it is created on: create it on ours.
            server = Server([MachineServicer(self), ClusterServicer(self), StateServicer(self)])
            await server.start(self.host, 0, ssl=self._ssl)
            return server

        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(listen(), self._loop).result(10)
        listening = cast(asyncio.Server, self._server._server)
        sockets = listening.sockets
        self.port = sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- behaviour shared by servicers

    def reach(self, address: str) -> FakeNode:
        node = self.nodes.get(address)
        if node is None or node.down:
            raise GRPCError(
                Status.UNAVAILABLE,
                f'connection error: desc = "transport: Error while dialing: dial tcp '
                f'{address}:50000: connect: no route to host"',
            )
        return node

    def apply(self, node: FakeNode, request: m.ApplyConfigurationRequest) -> Message:
        try:
            documents = [d for d in yaml.safe_load_all(request.data) if d is not None]
        except yaml.YAMLError as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, f"decode error: {exc}") from None
        if not any(isinstance(d, dict) and d.get("version") == "v1alpha1" for d in documents):
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                "the applied machine configuration doesn't contain v1alpha1 config, did you "
                "mean to patch the machine config instead?",
            )
        mode = request.mode
        if mode == m.ApplyConfigurationRequest.AUTO:
            mode = m.ApplyConfigurationRequest.NO_REBOOT
        if request.dry_run:
            return m.ApplyConfiguration(mode=mode, mode_details="Dry run summary:\nNo changes.")
        details = _APPLY_DETAILS.get(mode, "Applied configuration without a reboot")
        if mode == m.ApplyConfigurationRequest.TRY:
            seconds = request.try_mode_timeout.ToTimedelta().total_seconds() or 60
            details += (
                "\nThe config is applied in 'try' mode and will be automatically "
                f"reverted back in {int(seconds)}s"
            )
        if mode in (m.ApplyConfigurationRequest.NO_REBOOT, m.ApplyConfigurationRequest.TRY):
            self._set_config(node, request.data)
        return m.ApplyConfiguration(
            mode=mode, mode_details=details, warnings=["a harmless warning"]
        )

    def _set_config(self, node: FakeNode, data: bytes) -> None:
        old = node_resources(node)[("config", "MachineConfigs.config.talos.dev", "v1alpha1")]
        node.config, node.config_version = data, node.config_version + 1
        new = node_resources(node)[("config", "MachineConfigs.config.talos.dev", "v1alpha1")]
        for watched_node, request, queue in self.watchers:
            if (
                watched_node is node
                and request.type == new.metadata.type
                and (not request.HasField("id") or request.id == new.metadata.id)
            ):
                queue.put_nowait(
                    state_pb2.Event(event_type=state_pb2.UPDATED, resource=new, old=old)
                )

    def generate_client(self, node: FakeNode, request: Any) -> Message:
        if request.crt_ttl.ToTimedelta() <= dt.timedelta(0):
            raise GRPCError(Status.INVALID_ARGUMENT, "crt_ttl should be positive")
        issued = issue_client_cert(
            self.ca, roles=list(request.roles), validity=request.crt_ttl.ToTimedelta()
        )
        return m.GenerateClientConfiguration(
            ca=self.ca.cert_pem,
            crt=issued.cert_pem,
            key=issued.key_pem_talos,
            talosconfig=b"context: x\n",
        )
