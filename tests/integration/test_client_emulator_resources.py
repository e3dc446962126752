"""TalosClient's COSI resource API against the emulated cluster (types, get, list, watch),
and access: roles, forwarding and certificates (see ``emulator_support``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from pytest_talos import pki
from pytest_talos._proto.v1alpha1 import resource_pb2, state_pb2
from pytest_talos.client import Connection, TalosClient
from pytest_talos.emulator import EmulatedCluster, NodeInfo
from pytest_talos.errors import (
    AuthenticationError,
    ConnectError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    TalosError,
    Unknown,
)
from pytest_talos.models import (
    MachineConfigSpec,
    MachineStatusSpec,
    MachineTypeSpec,
    MemberSpec,
    NodeAddressSpec,
    ServiceSpec,
)
from pytest_talos.transport import Rpc, Target
from tests.integration import emulator_support as support
from tests.integration.emulator_support import (
    SERVICES_TYPE,
    WAIT,
    changes_until_healthy,
    poll,
    with_transport,
)

# The shared fixtures, bound in this module so that pytest finds them.
cp_node, worker_node, talos, cp, worker = (
    support.cp_node,
    support.worker_node,
    support.talos,
    support.cp,
    support.worker,
)
reader_path = support.reader_path

# Raw RPCs the client deliberately does not offer (COSI writes).
COSI_GET = Rpc("/cosi.resource.State/Get", state_pb2.GetRequest, state_pb2.GetResponse)
COSI_CREATE = Rpc("/cosi.resource.State/Create", state_pb2.CreateRequest, state_pb2.CreateResponse)
COSI_UPDATE = Rpc("/cosi.resource.State/Update", state_pb2.UpdateRequest, state_pb2.UpdateResponse)
COSI_DESTROY = Rpc(
    "/cosi.resource.State/Destroy", state_pb2.DestroyRequest, state_pb2.DestroyResponse
)


# --------------------------------------------------------------------------- helpers


async def _refusal(call: Awaitable[object]) -> TalosError:
    try:
        await call
    except TalosError as exc:
        return exc
    raise AssertionError("the call was accepted")


def _fake_service(version: str) -> resource_pb2.Resource:
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(
            namespace="runtime", type=SERVICES_TYPE, id="apid", version=version, phase="running"
        ),
        spec=resource_pb2.Spec(yaml_spec="running: true\nhealthy: false\nunknown: false\n"),
    )


def _store_listeners(cluster: EmulatedCluster, address: str) -> list[object]:
    """The node's live resource watches (the emulator's own record, read on its loop)."""
    return cluster.node(address).run(lambda state: list(state.store._listeners))


# --------------------------------------------------------------------------- resources (COSI)


@pytest.mark.parametrize(
    ("name", "resource_type", "namespace"),
    [
        ("mc", "MachineConfigs.config.talos.dev", "config"),
        ("members", "Members.cluster.talos.dev", "cluster"),
        ("svc", SERVICES_TYPE, "runtime"),  # v1alpha2_state.go: runtime, not v1alpha1
        ("Services", SERVICES_TYPE, "runtime"),
        ("members.cluster", "Members.cluster.talos.dev", "cluster"),
        ("MachineStatus", "MachineStatuses.runtime.talos.dev", "runtime"),
        ("rd", "ResourceDefinitions.meta.cosi.dev", "meta"),
    ],
)
def test_type_aliases_resolve_like_talosctl(
    worker: TalosClient, name: str, resource_type: str, namespace: str
) -> None:
    definition = worker.resolve_type(name)

    assert (definition.resource_type, definition.default_namespace) == (resource_type, namespace)


def test_resource_definitions_mark_sensitive_types(worker: TalosClient) -> None:
    definitions = {d.resource_type: d for d in worker.resource_definitions()}

    assert definitions["MachineConfigs.config.talos.dev"].sensitive
    assert not definitions[SERVICES_TYPE].sensitive
    machine_configs = definitions["MachineConfigs.config.talos.dev"]
    assert {"mc", "machineconfig"} <= set(machine_configs.all_aliases)


def test_resource_definitions_are_listed_once_per_node(
    emulated_cluster: EmulatedCluster, talos: TalosClient, worker_node: NodeInfo
) -> None:
    worker = talos.with_node(worker_node.address)  # shares the client's definition cache
    worker.resolve_type("svc")
    calls_before = len(emulated_cluster.call_log)

    worker.resolve_type("members")
    worker.get("svc", "apid")
    talos.with_node(worker_node.address).list_resources("mc")

    lists = [
        c
        for c in emulated_cluster.call_log[calls_before:]
        if c.method == "/cosi.resource.State/List" and c.address == worker_node.address
    ]
    assert len(lists) == 1  # list_resources' own List; no second ResourceDefinitions List


def test_get_machine_config_resource(worker: TalosClient) -> None:
    resource = worker.get("mc", "v1alpha1")
    config = worker.machine_config()

    assert (resource.namespace, resource.type) == ("config", "MachineConfigs.config.talos.dev")
    assert resource.metadata.annotations.get("talos.dev/yaml-spec") == "1"
    assert isinstance(resource.typed_spec, MachineConfigSpec)
    assert resource.typed_spec.yaml == config.raw  # the submitted bytes, comments included
    assert resource.spec == config.raw.decode()  # yaml_spec: one string scalar (v1alpha2_state.go)
    assert config.version == resource.version
    assert config.kinds[0] == "v1alpha1"
    assert config.documents[0]["machine"]["type"] == "worker"


def test_members_list_every_node(cp: TalosClient, cp_node: NodeInfo, worker_node: NodeInfo) -> None:
    members = {m.id: m.typed_spec for m in cp.list_resources("members")}

    specs = {s.hostname: s for s in members.values() if isinstance(s, MemberSpec)}
    assert set(specs) == {cp_node.hostname, worker_node.hostname} == set(members)
    assert (specs[cp_node.hostname].machine_type, specs[cp_node.hostname].addresses) == (
        "controlplane",
        (cp_node.address,),
    )
    assert specs[cp_node.hostname].api_server_port is not None
    assert (specs[worker_node.hostname].machine_type, specs[worker_node.hostname].addresses) == (
        "worker",
        (worker_node.address,),
    )
    assert specs[worker_node.hostname].api_server_port is None


def test_services_resources_agree_with_the_service_list(worker: TalosClient) -> None:
    listed = {info.id: info for info in worker.services()}
    resources = {r.id: r for r in worker.list_resources("svc")}

    assert set(resources) == {sid for sid, info in listed.items() if info.running}
    for service_id, resource in resources.items():
        info = listed[service_id]
        assert resource.namespace == "runtime"
        assert resource.typed_spec == ServiceSpec(
            running=True, healthy=info.healthy, unknown=info.health_unknown
        )
        assert resource.spec == {
            "running": True,
            "healthy": info.healthy,
            "unknown": info.health_unknown,
        }


def test_singleton_resources(worker: TalosClient, worker_node: NodeInfo) -> None:
    status = worker.get("machinestatus", "machine").typed_spec
    assert status == MachineStatusSpec(stage="running", ready=True)
    assert worker.get("mt", "machine-type").typed_spec == MachineTypeSpec("worker")
    addresses = worker.get("nodeaddresses", "current").typed_spec
    assert isinstance(addresses, NodeAddressSpec)
    assert f"{worker_node.address}/24" in addresses.addresses


def test_get_errors(worker: TalosClient) -> None:
    with pytest.raises(NotFound):
        worker.get("svc", "no-such-service")
    with pytest.raises(NotFound, match='resource "nosuchthing" is not registered'):
        worker.get("nosuchthing", "x")
    with pytest.raises(PermissionDenied) as caught:
        worker.get("svc", "apid", namespace="nope")
    assert caught.value.details == 'namespace "nope" is not supported'


def test_watch_a_kind_bootstraps(worker: TalosClient) -> None:
    running = sorted(info.id for info in worker.services() if info.running)

    with worker.watch("svc", timeout=WAIT) as watch:
        seen = []
        for event in watch:
            seen.append(event)
            if event.type == "bootstrapped":
                break

    assert [e.type for e in seen] == ["created"] * len(running) + ["bootstrapped"]
    assert sorted(e.resource.id for e in seen if e.resource is not None) == running


def test_watch_of_an_absent_resource_starts_with_a_tombstone(worker: TalosClient) -> None:
    with worker.watch("svc", "not-running", timeout=WAIT) as watch:
        first = next(watch)

    assert first.type == "destroyed"
    assert first.resource is not None
    assert (first.resource.id, first.resource.namespace) == ("not-running", "runtime")


def test_a_watch_opened_before_a_restart_sees_all_of_it(worker: TalosClient) -> None:
    # watch() returns once the server's empty first reply has arrived (cosi server.go): without
    # bootstrap nothing is replayed, so only a watch that is already set up sees the restart.
    with worker.watch("svc", bootstrap=False, timeout=WAIT) as watch:
        assert worker.service_restart("kubelet") == 'Service "kubelet" restarted'
        kubelet = (e for e in watch if e.resource is not None and e.resource.id == "kubelet")
        changes = changes_until_healthy(kubelet)

    # v1alpha2_state.go: the Services resource exists only while the service runs.
    assert [e.type for e in changes] == ["destroyed", "created", "updated"]


def test_closing_a_watch_ends_it_on_the_node(
    emulated_cluster: EmulatedCluster, worker: TalosClient, worker_node: NodeInfo
) -> None:
    def listeners() -> list[object]:
        return _store_listeners(emulated_cluster, worker_node.address)

    before = listeners()
    watch = worker.watch("svc", timeout=WAIT)

    # Set up by the time the call returned: the node holds exactly one more watch.
    (ours,) = [listener for listener in listeners() if listener not in before]
    watch.close()
    poll(listeners, lambda now: ours not in now, "the end of the watch on the node")


def test_cosi_writes_and_fanout_are_refused(
    emulated_cluster: EmulatedCluster,
    worker: TalosClient,
    cp_node: NodeInfo,
    worker_node: NodeInfo,
) -> None:
    before = worker.get("svc", "apid").version
    one = Target(node=worker_node.address)

    async def attempts(transport: Connection) -> list[TalosError]:
        destroy = state_pb2.DestroyRequest(namespace="runtime", type=SERVICES_TYPE, id="apid")
        get = state_pb2.GetRequest(namespace="runtime", type=SERVICES_TYPE, id="apid")
        unknown = state_pb2.GetRequest(namespace="runtime", type="Foos.example.dev", id="x")
        both = Target(nodes=(cp_node.address, worker_node.address))
        create = state_pb2.CreateRequest(resource=_fake_service("1"))
        update = state_pb2.UpdateRequest(new_resource=_fake_service(str(before)))
        return [
            await _refusal(transport.unary(COSI_CREATE, create, one)),
            await _refusal(transport.unary(COSI_UPDATE, update, one)),
            await _refusal(transport.unary(COSI_DESTROY, destroy, one)),
            await _refusal(transport.unary(COSI_GET, unknown, one)),
            await _refusal(transport.unary(COSI_GET, get, both)),
        ]

    create, update, destroy, unknown, fanout = asyncio.run(
        with_transport(emulated_cluster.talosconfig_path, attempts)
    )

    for refused in (create, update, destroy):  # cosi server.go: Talos's access policy
        assert isinstance(refused, PermissionDenied)
        assert refused.details == "write access is not allowed"
    assert isinstance(unknown, PermissionDenied)
    assert unknown.details == 'resource type "Foos.example.dev" is not supported'
    assert isinstance(fanout, InvalidArgument)  # director.go: COSI is one-to-one only
    assert fanout.details == (
        "one-2-many proxying is not supported for method /cosi.resource.State/Get"
    )
    apid = worker.get("svc", "apid")
    assert (apid.version, apid.typed_spec) == (before, ServiceSpec(True, True, False))


# --------------------------------------------------------------------------- roles, forwarding


def test_reader_may_read_but_not_apply_nor_see_the_machine_config(
    reader_path: Path, worker: TalosClient, worker_node: NodeInfo
) -> None:
    before = worker.machine_config()

    with TalosClient.from_talosconfig(reader_path, env={}) as reader_client:
        reader = reader_client.with_node(worker_node.address)
        assert reader.roles == ("os:reader",)
        assert reader.hostname() == worker_node.hostname
        assert reader.get("svc", "apid").id == "apid"

        with pytest.raises(PermissionDenied) as apply:
            reader.apply_configuration(before.raw, mode="no-reboot")
        with pytest.raises(PermissionDenied) as config:
            reader.machine_config()
        with pytest.raises(PermissionDenied) as sensitive:
            reader.get("mc", "v1alpha1")
        with pytest.raises(PermissionDenied) as watched:  # by the call, which sets it up
            reader.watch("mc", "v1alpha1", timeout=WAIT)

    for refused in (apply, config, sensitive, watched):
        assert refused.value.details == "not authorized"  # director.go
    assert "sensitive resources such as MachineConfig need os:admin" in str(config.value)
    after = worker.machine_config()
    assert (after.version, after.raw) == (before.version, before.raw)


def test_operator_passes_the_role_check_for_service_actions_but_not_apply(
    emulated_cluster: EmulatedCluster, tmp_path: Path, worker_node: NodeInfo
) -> None:
    identity = emulated_cluster.issue_client(["os:operator"], path=tmp_path / "operator")
    assert identity.path is not None

    with TalosClient.from_talosconfig(identity.path, env={}) as operator_client:
        operator = operator_client.with_node(worker_node.address)
        # Past the role check, the handler itself refuses apid (machine.proto).
        with pytest.raises(Unknown, match="doesn't support restart operation via API"):
            operator.service_restart("apid")
        with pytest.raises(PermissionDenied, match="carries os:operator"):
            operator.apply_configuration(b"version: v1alpha1\n")


def test_a_worker_endpoint_refuses_to_forward(
    emulated_cluster: EmulatedCluster, cp_node: NodeInfo, worker_node: NodeInfo
) -> None:
    with TalosClient.from_talosconfig(
        emulated_cluster.talosconfig_path, endpoint=f"{worker_node.address}:50000", env={}
    ) as via_worker:
        assert via_worker.with_node(worker_node.address).hostname() == worker_node.hostname

        with pytest.raises(PermissionDenied) as caught:
            via_worker.with_node(cp_node.address).version()
        with pytest.raises(PermissionDenied) as fanout:
            via_worker.fanout_version([cp_node.address, worker_node.address])

    # director.go: only control planes hold the os:impersonator certificate that forwarding needs.
    assert caught.value.details == fanout.value.details == "no request forwarding"


# --------------------------------------------------------------------------- certificates


def _write_config(
    path: Path, cluster: EmulatedCluster, ca_pem: bytes, client: pki.CertAndKey
) -> Path:
    pki.write_talosconfig(
        path, context="test", endpoints=[cluster.endpoint], ca_pem=ca_pem, client=client
    )
    return path


def test_a_talosconfig_with_another_clusters_ca_fails_the_handshake(
    emulated_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    foreign = pki.CertificateAuthority.generate()
    admin = pki.issue_client_cert(emulated_cluster.ca, roles=["os:admin"])
    path = _write_config(tmp_path / "config", emulated_cluster, foreign.cert_pem, admin)

    with (
        TalosClient.from_talosconfig(path, env={}) as talos,
        pytest.raises(AuthenticationError, match="not signed by the CA in the talosconfig"),
    ):
        talos.version()  # no nodes in this talosconfig: the endpoint's own node answers


@pytest.mark.parametrize("problem", ["foreign-ca", "expired", "server-usage"])
def test_apid_rejects_bad_client_certificates(
    emulated_cluster: EmulatedCluster, problem: str
) -> None:
    now = dt.datetime.now(dt.UTC)
    if problem == "foreign-ca":
        cert = pki.issue_client_cert(pki.CertificateAuthority.generate(), roles=["os:admin"])
    elif problem == "expired":
        cert = pki.issue_client_cert(
            emulated_cluster.ca,
            roles=["os:admin"],
            not_before=now - dt.timedelta(days=3),
            not_after=now - dt.timedelta(days=1),
        )
    else:  # apid service.go: apid wants ExtKeyUsage exactly [ClientAuth]
        cert = pki.issue_client_cert(
            emulated_cluster.ca,
            roles=["os:admin"],
            ext_key_usage=(ExtendedKeyUsageOID.SERVER_AUTH,),
        )

    # The constructor, not a talosconfig: the talosconfig loader refuses expired certs itself.
    with (
        TalosClient(
            emulated_cluster.endpoint,
            emulated_cluster.ca.cert_pem,
            cert.cert_pem,
            cert.key_pem_talos,
        ) as talos,
        pytest.raises(AuthenticationError, match="rejected the client certificate"),
    ):
        talos.hostname()


def test_an_endpoint_that_is_not_apid(emulated_cluster: EmulatedCluster, cp_node: NodeInfo) -> None:
    # trustd's port accepts TCP and speaks no TLS there (emulator); a quick, clear failure.
    with TalosClient.from_talosconfig(
        emulated_cluster.talosconfig_path, endpoint=f"{cp_node.address}:50001", env={}
    ) as talos:
        node = talos.with_node(cp_node.address)
        with pytest.raises(ConnectError, match="not a TLS/Talos API endpoint"):
            node.version()
        # A stream is set up by the call itself, so the call fails the same way.
        with pytest.raises(ConnectError, match="not a TLS/Talos API endpoint"):
            node.events(timeout=WAIT)
