"""COSI resources through the client over a FakeTransport: type resolution, get, list,
watch, machine config (no socket).

The fake COSI state below is a dictionary of protobuf resources and answers Get, List and
Watch as the COSI state server does (a watch sends an empty reply first, then the current
state or a tombstone, bootstrap events on request). Against a full emulated node over real
mTLS the same calls are ``tests/integration/test_client_emulator_resources.py``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.resource.definitions.cluster import cluster_pb2
from pytest_talos._proto.resource.definitions.enums import enums_pb2
from pytest_talos._proto.resource.definitions.network import network_pb2
from pytest_talos._proto.resource.definitions.runtime import runtime_pb2
from pytest_talos._proto.resource.definitions.v1alpha1 import v1alpha1_pb2
from pytest_talos._proto.v1alpha1 import meta_pb2, resource_pb2, state_pb2
from pytest_talos.client import TalosClient
from pytest_talos.errors import InvalidArgument, NotFound, PermissionDenied
from pytest_talos.models import (
    HostnameStatusSpec,
    MachineConfigSpec,
    MachineStatusSpec,
    MemberSpec,
    NodeAddressSpec,
    ResourceDefinitionSpec,
    ServiceSpec,
    VersionSpec,
)
from pytest_talos.transport import FakeRequest, FakeStatus, FakeTransport

NODE = "10.5.0.2"
CONFIG = b"""# the machine config
version: v1alpha1
machine:
  type: controlplane
  token: not-a-real-token
---
apiVersion: v1alpha1
kind: HostnameConfig
hostname: node-1
"""
RD = "ResourceDefinitions.meta.cosi.dev"
SERVICES = "Services.v1alpha1.talos.dev"
MACHINE_CONFIGS = "MachineConfigs.config.talos.dev"
Key = tuple[str, str, str]

# (type, default namespace, aliases, sensitive); two types share "foo" for the ambiguity.
DEFINITIONS = (
    (RD, "meta", ("rd", "resourcedefinition"), False),
    (SERVICES, "runtime", ("svc", "service", "services"), False),
    (MACHINE_CONFIGS, "config", ("mc", "machineconfig", "machineconfigs"), True),
    ("Members.cluster.talos.dev", "cluster", ("member", "members", "members.cluster"), False),
    ("NodeAddresses.net.talos.dev", "network", ("nodeaddress", "nodeaddresses"), False),
    ("HostnameStatuses.net.talos.dev", "network", ("hostname", "hostnamestatus"), False),
    ("MachineStatuses.runtime.talos.dev", "runtime", ("machinestatus", "ms"), False),
    ("Versions.runtime.talos.dev", "runtime", ("version", "versions"), False),
    ("Foos.a.test.dev", "runtime", ("foo", "foos"), False),
    ("Foos.b.test.dev", "runtime", ("foo", "foos"), False),
)


def _ts() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    return stamp


def _resource(
    namespace: str, type_: str, id_: str, spec: Message, yaml_spec: Any, version: int = 1
) -> resource_pb2.Resource:
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(
            namespace=namespace,
            type=type_,
            id=id_,
            version=str(version),
            owner="test.Controller",
            phase="running",
            created=_ts(),
            updated=_ts(),
            labels={"talos.dev/test": "yes"},
        ),
        spec=resource_pb2.Spec(
            proto_spec=spec.SerializeToString(),
            yaml_spec=yaml.safe_dump(yaml_spec, sort_keys=False),
        ),
    )


def _definition(type_: str, namespace: str, aliases: tuple[str, ...], sensitive: bool) -> Any:
    sensitivity = meta_pb2.ResourceDefinitionSpec
    spec = meta_pb2.ResourceDefinitionSpec(
        resource_type=type_,
        display_type=type_.split(".")[0][:-1],
        default_namespace=namespace,
        aliases=list(aliases[:1]),
        all_aliases=list(aliases),
        sensitivity=sensitivity.SENSITIVE if sensitive else sensitivity.NON_SENSITIVE,
    )
    yaml_spec = {"type": type_, "defaultNamespace": namespace, "aliases": list(aliases)}
    return _resource("meta", RD, type_.lower(), spec, yaml_spec)


def _node_resources() -> list[resource_pb2.Resource]:
    ip = bytes([10, 5, 0, 2])
    found = [_definition(*d) for d in DEFINITIONS]
    for service in ("apid", "etcd", "kubelet"):
        spec = v1alpha1_pb2.ServiceSpec(running=True, healthy=True)
        yaml_spec = {"running": True, "healthy": True, "unknown": False}
        found.append(_resource("runtime", SERVICES, service, spec, yaml_spec))
    found += [
        _resource(
            "config",
            MACHINE_CONFIGS,
            "v1alpha1",
            config_pb2.MachineConfigSpec(yaml_marshalled=CONFIG),
            CONFIG.decode(),
        ),
        _resource(
            "runtime",
            "Versions.runtime.talos.dev",
            "version",
            runtime_pb2.VersionSpec(version="v1.13.9", name="Talos"),
            {"version": "v1.13.9", "name": "Talos"},
        ),
        _resource(
            "network",
            "HostnameStatuses.net.talos.dev",
            "hostname",
            network_pb2.HostnameStatusSpec(hostname="node-1", domainname="cluster.local"),
            {"hostname": "node-1", "domainname": "cluster.local"},
        ),
        _resource(
            "network",
            "NodeAddresses.net.talos.dev",
            "current",
            network_pb2.NodeAddressSpec(addresses=[common_pb2.NetIPPrefix(ip=ip, prefix_length=8)]),
            {"addresses": [f"{NODE}/8"]},
        ),
        _resource(
            "cluster",
            "Members.cluster.talos.dev",
            "node-1",
            cluster_pb2.MemberSpec(
                node_id="node-1",
                addresses=[common_pb2.NetIP(ip=ip)],
                hostname="node-1",
                machine_type=enums_pb2.TYPE_CONTROL_PLANE,
                control_plane=cluster_pb2.ControlPlane(api_server_port=6443),
            ),
            {"nodeId": "node-1", "machineType": "controlplane"},
        ),
        _resource(
            "runtime",
            "MachineStatuses.runtime.talos.dev",
            "machine",
            runtime_pb2.MachineStatusSpec(
                stage=enums_pb2.MACHINE_STAGE_RUNNING,
                status=runtime_pb2.MachineStatusStatus(ready=True),
            ),
            {"stage": "running", "status": {"ready": True}},
        ),
    ]
    return found


class FakeCosi:
    """The COSI state of one node: resources by key, watchers woken by changes."""

    def __init__(self, client_roles: tuple[str, ...] = ("os:admin",)) -> None:
        self.resources: dict[Key, resource_pb2.Resource] = {
            (r.metadata.namespace, r.metadata.type, r.metadata.id): r for r in _node_resources()
        }
        self.roles = client_roles
        self.changes: list[state_pb2.Event] = []
        self._changed: asyncio.Event | None = None

    def routes(self) -> dict[str, Any]:
        return {
            "/cosi.resource.State/Get": self.get,
            "/cosi.resource.State/List": self.list_resources,
            "/cosi.resource.State/Watch": self.watch,
            "ApplyConfiguration": self.apply,
        }

    def _check(self, type_: str) -> None:
        known = {d[0]: d for d in DEFINITIONS}
        if type_ not in known:
            raise FakeStatus("PERMISSION_DENIED", f'resource type "{type_}" is not supported')
        if known[type_][3] and "os:admin" not in self.roles:
            raise FakeStatus("PERMISSION_DENIED", "not authorized")

    def get(self, request: FakeRequest) -> state_pb2.GetResponse:
        sent: Any = request.message
        self._check(sent.type)
        found = self.resources.get((sent.namespace, sent.type, sent.id))
        if found is None:
            raise FakeStatus(
                "NOT_FOUND", f"resource {sent.type}({sent.namespace}/{sent.id}) doesn't exist"
            )
        return state_pb2.GetResponse(resource=found)

    def _of_kind(self, namespace: str, type_: str) -> list[resource_pb2.Resource]:
        return [
            r for (ns, t, _), r in sorted(self.resources.items()) if (ns, t) == (namespace, type_)
        ]

    def list_resources(self, request: FakeRequest) -> list[state_pb2.ListResponse]:
        sent: Any = request.message
        self._check(sent.type)
        return [
            state_pb2.ListResponse(resource=r) for r in self._of_kind(sent.namespace, sent.type)
        ]

    def _initial(self, sent: state_pb2.WatchRequest) -> list[state_pb2.Event]:
        if sent.HasField("id"):
            found = self.resources.get((sent.namespace, sent.type, sent.id))
            if found is not None:
                return [state_pb2.Event(event_type=state_pb2.CREATED, resource=found)]
            tombstone = resource_pb2.Resource(
                metadata=resource_pb2.Metadata(
                    namespace=sent.namespace, type=sent.type, id=sent.id, version="0"
                )
            )
            return [state_pb2.Event(event_type=state_pb2.DESTROYED, resource=tombstone)]
        if not sent.options.bootstrap_contents:
            return []
        events = [
            state_pb2.Event(event_type=state_pb2.CREATED, resource=r)
            for r in self._of_kind(sent.namespace, sent.type)
        ]
        return [*events, state_pb2.Event(event_type=state_pb2.BOOTSTRAPPED)]

    async def watch(self, request: FakeRequest) -> AsyncIterator[state_pb2.WatchResponse]:
        sent: Any = request.message
        self._check(sent.type)
        self._changed = asyncio.Event()  # on the client's loop, where handlers run
        yield state_pb2.WatchResponse()  # "the watch is set up"
        for event in self._initial(sent):
            yield state_pb2.WatchResponse(event=[event])
        while True:
            await self._changed.wait()
            self._changed.clear()
            while self.changes:
                yield state_pb2.WatchResponse(event=[self.changes.pop(0)])

    def apply(self, request: FakeRequest) -> m.ApplyConfigurationResponse:
        data = request.message.data  # type: ignore[attr-defined]
        key = ("config", MACHINE_CONFIGS, "v1alpha1")
        old = self.resources[key]
        version = int(old.metadata.version) + 1
        new = _resource(
            *key, config_pb2.MachineConfigSpec(yaml_marshalled=data), data.decode(), version
        )
        self.resources[key] = new
        self.changes.append(state_pb2.Event(event_type=state_pb2.UPDATED, resource=new, old=old))
        if self._changed is not None:
            self._changed.set()
        applied = m.ApplyConfiguration(mode=m.ApplyConfigurationRequest.NO_REBOOT)
        return m.ApplyConfigurationResponse(messages=[applied])


@pytest.fixture
def cosi() -> FakeCosi:
    return FakeCosi()


@pytest.fixture
def transport(cosi: FakeCosi) -> FakeTransport:
    return FakeTransport(cosi.routes())


@pytest.fixture
def client(transport: FakeTransport) -> Iterator[TalosClient]:
    with TalosClient.from_transport(transport) as talos:
        yield talos


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("svc", SERVICES),
        ("Services", SERVICES),
        ("services.v1alpha1.talos.dev", SERVICES),
        ("MC", MACHINE_CONFIGS),
        ("members", "Members.cluster.talos.dev"),
        ("members.cluster", "Members.cluster.talos.dev"),
    ],
)
def test_type_names_resolve_like_talosctl(client: TalosClient, name: str, expected: str) -> None:
    assert client.resolve_type(name).resource_type == expected


def test_unknown_and_ambiguous_type_names(client: TalosClient) -> None:
    with pytest.raises(NotFound, match='resource "nosuchthing" is not registered'):
        client.get("nosuchthing", "x")
    with pytest.raises(InvalidArgument, match=r"ambiguous: it matches Foos\.a\.test\.dev"):
        client.list_resources("foo")


def test_get_uses_the_default_namespace_and_decodes_the_spec(
    client: TalosClient, transport: FakeTransport
) -> None:
    service = client.get("svc", "apid")

    assert service.namespace == "runtime"
    assert service.type == SERVICES
    assert service.version == 1
    assert service.metadata.owner == "test.Controller"
    assert service.metadata.labels == {"talos.dev/test": "yes"}
    assert service.metadata.created is not None
    assert service.spec == {"running": True, "healthy": True, "unknown": False}
    assert service.typed_spec == ServiceSpec(running=True, healthy=True, unknown=False)
    get = next(r for r in reversed(transport.requests) if r.name == "Get")
    assert ("runtime", "Talos") in get.metadata
    assert (get.message.namespace, get.message.type) == ("runtime", SERVICES)  # type: ignore[attr-defined]


def test_typed_specs(client: TalosClient) -> None:
    member = client.get("members", "node-1").typed_spec
    assert isinstance(member, MemberSpec)
    assert (member.machine_type, member.addresses, member.api_server_port) == (
        "controlplane",
        (NODE,),
        6443,
    )
    addresses = client.get("nodeaddresses", "current").typed_spec
    assert addresses == NodeAddressSpec(addresses=(f"{NODE}/8",), sort_algorithm="v1")
    hostname = client.get("hostname", "hostname").typed_spec
    assert isinstance(hostname, HostnameStatusSpec)
    assert hostname.fqdn == "node-1.cluster.local"
    assert client.get("version", "version").typed_spec == VersionSpec("v1.13.9", "Talos")
    status = client.get("machinestatus", "machine").typed_spec
    assert status == MachineStatusSpec(stage="running", ready=True)
    definition = client.get("rd", "machineconfigs.config.talos.dev").typed_spec
    assert isinstance(definition, ResourceDefinitionSpec)
    assert definition.sensitive


def test_get_missing_resource(client: TalosClient) -> None:
    with pytest.raises(NotFound, match="doesn't exist"):
        client.get("svc", "no-such-service")


def test_list_resources(client: TalosClient) -> None:
    services = client.list_resources("services")

    assert [s.id for s in services] == ["apid", "etcd", "kubelet"]
    assert all(s.namespace == "runtime" for s in services)


def test_list_each_answers_every_list_in_order_and_a_refusal_in_its_place() -> None:
    cosi = FakeCosi(client_roles=("os:reader",))
    transport = FakeTransport(cosi.routes(), client_roles=("os:reader",))
    with TalosClient.from_transport(transport) as reader:
        services, config, unknown = reader.list_each(
            [(SERVICES, "runtime"), ("MachineConfigs.config.talos.dev", "config"), ("nope", None)]
        )

    assert not isinstance(services, Exception)
    assert [s.id for s in services] == ["apid", "etcd", "kubelet"]
    assert isinstance(config, PermissionDenied)  # sensitive: the reader is refused
    assert isinstance(unknown, NotFound)  # no such type: NotFound, and no List of it sent
    lists = [r.message.type for r in transport.requests if r.name == "List"]  # type: ignore[attr-defined]
    # the types read once for all three, and again only for the name not found in them
    definitions = "ResourceDefinitions.meta.cosi.dev"
    assert sorted(lists) == sorted(
        [definitions, definitions, SERVICES, "MachineConfigs.config.talos.dev"]
    )


def test_list_each_when_even_the_types_are_refused_says_so_for_each_list() -> None:
    cosi = FakeCosi()
    routes = cosi.routes()

    def refuse_everything(request: FakeRequest) -> list[state_pb2.ListResponse]:
        raise FakeStatus("PERMISSION_DENIED", "not authorized")

    routes["/cosi.resource.State/List"] = refuse_everything
    with TalosClient.from_transport(FakeTransport(routes)) as client:
        found = client.list_each([(SERVICES, "runtime"), ("MachineConfigs.config.talos.dev", None)])

    assert [type(f) for f in found] == [PermissionDenied, PermissionDenied]


def test_machine_config(client: TalosClient) -> None:
    config = client.machine_config()

    assert config.raw == CONFIG  # byte for byte, comments included
    assert config.documents[0]["machine"]["type"] == "controlplane"
    assert config.kinds == ("v1alpha1", "HostnameConfig")
    assert config.version == client.get("mc", "v1alpha1").version
    resource = client.get("mc", "v1alpha1")
    assert isinstance(resource.typed_spec, MachineConfigSpec)
    assert "not-a-real-token" not in repr(config)
    assert "not-a-real-token" not in repr(resource.typed_spec)


def test_reader_may_not_read_the_sensitive_machine_config() -> None:
    cosi = FakeCosi(client_roles=("os:reader",))
    transport = FakeTransport(cosi.routes(), client_roles=("os:reader",))
    with TalosClient.from_transport(transport) as reader:
        assert reader.get("svc", "apid").id == "apid"

        with pytest.raises(PermissionDenied) as caught:
            reader.machine_config()

    assert "sensitive resources such as MachineConfig need os:admin" in str(caught.value)


def test_watch_one_resource_follows_an_apply(client: TalosClient) -> None:
    before = client.machine_config().version
    patched = yaml.safe_dump({"version": "v1alpha1", "machine": {"type": "worker"}}).encode()

    with client.watch("mc", "v1alpha1", timeout=10) as watch:
        current = next(watch)
        assert current.type == "created"
        assert current.resource is not None
        assert current.resource.version == before

        client.apply_configuration(patched)
        updated = next(watch)

    assert updated.type == "updated"
    assert updated.resource is not None
    assert updated.resource.version == before + 1
    assert updated.old is not None
    assert updated.old.version == before
    assert client.machine_config().raw == patched


def test_watch_of_an_absent_resource_starts_with_a_tombstone(client: TalosClient) -> None:
    with client.watch("svc", "not-running", timeout=10) as watch:
        first = next(watch)

    assert first.type == "destroyed"
    assert first.resource is not None
    assert first.resource.id == "not-running"


def test_watch_kind_bootstraps(client: TalosClient, transport: FakeTransport) -> None:
    seen = []
    with client.watch("svc", timeout=10) as watch:
        for event in watch:
            seen.append(event)
            if event.type == "bootstrapped":
                break

    assert [(e.type, e.resource.id if e.resource else None) for e in seen] == [
        ("created", "apid"),
        ("created", "etcd"),
        ("created", "kubelet"),
        ("bootstrapped", None),
    ]
    sent: Any = next(r for r in transport.requests if r.name == "Watch").message
    assert sent.options.bootstrap_contents
    assert sent.api_version == 1


def test_resource_definitions_are_cached_per_node(
    client: TalosClient, transport: FakeTransport
) -> None:
    client.resolve_type("svc")
    calls_before = len(transport.requests)

    client.resolve_type("members")
    client.get("svc", "apid")
    client.with_node("10.5.0.3").resolve_type("svc")  # another node: its own list

    lists = [(r.name, r.node) for r in transport.requests[calls_before:] if r.name == "List"]
    assert lists == [("List", "10.5.0.3")]
