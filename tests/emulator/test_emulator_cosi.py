"""cosi.resource.State on the emulator: Get/List/Watch semantics and Talos's access rules.

Server: cosi-project/runtime ``pkg/state/protobuf/server``; filter: siderolabs/talos
``internal/app/resources/access.go``; definitions: ``pkg/machinery/resources/**`` and cosi's
``pkg/resource/meta/spec/resource_definition.go``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml
from google.protobuf import empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.resource.definitions.cluster import cluster_pb2
from pytest_talos._proto.resource.definitions.k8s import k8s_pb2
from pytest_talos._proto.resource.definitions.runtime import runtime_pb2
from pytest_talos._proto.resource.definitions.v1alpha1 import v1alpha1_pb2
from pytest_talos._proto.v1alpha1 import meta_pb2
from pytest_talos._proto.v1alpha1 import resource_pb2 as r
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.emulator import EmulatedCluster

from .conftest import RawClient, tls_from_talosconfig, wait_for

C = "/cosi.resource.State/"
RD = "ResourceDefinitions.meta.cosi.dev"
SERVICES = "Services.v1alpha1.talos.dev"


@pytest.fixture(scope="module")
def cp(shared_cluster: EmulatedCluster) -> str:
    return shared_cluster.nodes[0].address


def _list(client: RawClient, address: str, namespace: str, type_: str) -> list[r.Resource]:
    return [
        reply.resource
        for reply in client.call(
            address, C + "List", s.ListRequest(namespace=namespace, type=type_)
        )
    ]


def test_resource_definitions_resolve_talosctl_names(admin: RawClient, cp: str) -> None:
    definitions = {}
    for resource in _list(admin, cp, "meta", RD):
        spec = meta_pb2.ResourceDefinitionSpec.FromString(resource.spec.proto_spec)
        definitions[resource.metadata.id] = spec
        assert yaml.safe_load(resource.spec.yaml_spec)["type"] == spec.resource_type
    mc = definitions["machineconfigs.config.talos.dev"]
    assert mc.sensitivity == meta_pb2.ResourceDefinitionSpec.SENSITIVE
    assert {"machineconfig", "machineconfigs", "mc", "machineconfigs.config"} <= set(mc.all_aliases)
    services = definitions["services.v1alpha1.talos.dev"]
    assert services.default_namespace == "runtime"
    assert {"svc", "service"} <= set(services.all_aliases)
    assert [c.name for c in services.print_columns] == ["Running", "Healthy", "Health Unknown"]
    assert "hostname" in definitions["hostnamestatuses.net.talos.dev"].all_aliases
    assert "members.cluster" in definitions["members.cluster.talos.dev"].all_aliases


def test_definition_aliases_follow_cosi_fill(admin: RawClient, cp: str) -> None:
    # resource_definition.go Fill: the singular name and the initials (+ "s" unless they end
    # in "S") go into `aliases`; `allAliases` is the plural, its suffix prefixes, then those.
    found = {res.metadata.id: res for res in _list(admin, cp, "meta", RD)}
    mc = meta_pb2.ResourceDefinitionSpec.FromString(
        found["machineconfigs.config.talos.dev"].spec.proto_spec
    )
    assert list(mc.aliases) == ["machineconfig", "mc", "mcs"]
    assert list(mc.all_aliases) == [
        "machineconfigs",
        "machineconfigs.config",
        "machineconfigs.config.talos",
        "machineconfig",
        "mc",
        "mcs",
    ]
    hostname = meta_pb2.ResourceDefinitionSpec.FromString(
        found["hostnamestatuses.net.talos.dev"].spec.proto_spec
    )
    assert list(hostname.aliases) == ["hostname", "hostnamestatus", "hs"]  # no "hss"
    services = yaml.safe_load(found["services.v1alpha1.talos.dev"].spec.yaml_spec)
    assert services["aliases"] == ["svc", "service"]
    assert list(services) == [
        "type",
        "displayType",
        "defaultNamespace",
        "aliases",
        "allAliases",
        "printColumns",
    ]  # sensitivity.go: non-sensitive is "" and omitted
    assert (
        yaml.safe_load(found["machineconfigs.config.talos.dev"].spec.yaml_spec)["sensitivity"]
        == "sensitive"
    )


def test_machine_type_is_a_bare_scalar(admin: RawClient, cp: str) -> None:
    # config/machine_type.go: the spec marshals as machine.Type's name; proto resource.config.
    request = s.GetRequest(
        namespace="config", type="MachineTypes.config.talos.dev", id="machine-type"
    )
    resource = admin.call(cp, C + "Get", request).resource
    assert resource.spec.yaml_spec == "controlplane\n"
    spec = config_pb2.MachineTypeSpec.FromString(resource.spec.proto_spec)
    assert spec.machine_type == config_pb2.CONTROL_PLANE
    assert config_pb2.DESCRIPTOR.package == "resource.config"
    definition = admin.call(
        cp,
        C + "Get",
        s.GetRequest(namespace="meta", type=RD, id="machinetypes.config.talos.dev"),
    ).resource
    columns = meta_pb2.ResourceDefinitionSpec.FromString(definition.spec.proto_spec).print_columns
    assert [(c.name, c.json_path) for c in columns] == [("Type", "{@}")]


def test_nodename_spec_fields(admin: RawClient, cp: str) -> None:
    request = s.GetRequest(namespace="k8s", type="Nodenames.kubernetes.talos.dev", id="nodename")
    resource = admin.call(cp, C + "Get", request).resource
    spec = k8s_pb2.NodenameSpec.FromString(resource.spec.proto_spec)
    assert spec.nodename == yaml.safe_load(resource.spec.yaml_spec)["nodename"]
    assert [field.number for field in k8s_pb2.NodenameSpec.DESCRIPTOR.fields] == [1, 2, 3]


def test_every_definition_lists_without_error(admin: RawClient, cp: str) -> None:
    namespaces = {res.metadata.id for res in _list(admin, cp, "meta", "Namespaces.meta.cosi.dev")}
    assert {"meta", "runtime", "config", "cluster", "network", "etcd", "k8s"} <= namespaces
    for resource in _list(admin, cp, "meta", RD):
        spec = meta_pb2.ResourceDefinitionSpec.FromString(resource.spec.proto_spec)
        _list(admin, cp, spec.default_namespace, spec.resource_type)


def test_version_resource_matches_the_version_api(admin: RawClient, cp: str) -> None:
    reply = admin.call(
        cp,
        C + "Get",
        s.GetRequest(namespace="runtime", type="Versions.runtime.talos.dev", id="version"),
    )
    spec = runtime_pb2.VersionSpec.FromString(reply.resource.spec.proto_spec)
    assert spec.version == "v1.13.9"
    assert yaml.safe_load(reply.resource.spec.yaml_spec)["version"] == "v1.13.9"
    assert reply.resource.metadata.version == "1"


def test_members_list_every_node(
    admin: RawClient, shared_cluster: EmulatedCluster, cp: str
) -> None:
    members = _list(admin, cp, "cluster", "Members.cluster.talos.dev")
    specs = [cluster_pb2.MemberSpec.FromString(res.spec.proto_spec) for res in members]
    assert sorted(spec.hostname for spec in specs) == sorted(
        n.hostname for n in shared_cluster.nodes
    )
    assert all(spec.addresses[0].ip for spec in specs)


def test_other_singletons(admin: RawClient, cp: str) -> None:
    for namespace, type_, id_ in [
        ("runtime", "MachineStatuses.runtime.talos.dev", "machine"),
        ("network", "NodeAddresses.net.talos.dev", "current"),
        ("network", "HostnameStatuses.net.talos.dev", "hostname"),
        ("config", "MachineTypes.config.talos.dev", "machine-type"),
        ("cluster", "Identities.cluster.talos.dev", "local"),
        ("cluster", "Infos.cluster.talos.dev", "current"),
        ("etcd", "EtcdMembers.etcd.talos.dev", "local"),
    ]:
        reply = admin.call(cp, C + "Get", s.GetRequest(namespace=namespace, type=type_, id=id_))
        assert reply.resource.metadata.id == id_
    status = admin.call(
        cp,
        C + "Get",
        s.GetRequest(namespace="runtime", type="MachineStatuses.runtime.talos.dev", id="machine"),
    )
    assert yaml.safe_load(status.resource.spec.yaml_spec)["stage"] == "running"
    assert not _list(admin, cp, "runtime", "ExtensionStatuses.runtime.talos.dev")


def test_get_missing_is_not_found(admin: RawClient, cp: str) -> None:
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, C + "Get", s.GetRequest(namespace="runtime", type=SERVICES, id="nope"))
    assert caught.value.status == Status.NOT_FOUND


@pytest.mark.parametrize(
    ("namespace", "type_", "message"),
    [
        ("runtime", "Nope.talos.dev", 'resource type "Nope.talos.dev" is not supported'),
        ("nowhere", SERVICES, 'namespace "nowhere" is not supported'),
    ],
)
def test_unknown_type_or_namespace(
    admin: RawClient, cp: str, namespace: str, type_: str, message: str
) -> None:
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, C + "Get", s.GetRequest(namespace=namespace, type=type_, id="x"))
    assert (caught.value.status, caught.value.message) == (Status.PERMISSION_DENIED, message)


def test_access_filter_order(shared_cluster: EmulatedCluster, admin: RawClient, cp: str) -> None:
    # access.go: writes are refused first, then the type, the sensitivity, the namespace
    # (of a resource cosi could decode: server.go decodes before the filter runs).
    unknown = _well_formed("nowhere", "Nope.talos.dev", "x")
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, C + "Create", s.CreateRequest(resource=unknown))
    assert caught.value.message == "write access is not allowed"
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, C + "Get", s.GetRequest(namespace="nowhere", type="Nope.talos.dev", id="x"))
    assert caught.value.message == 'resource type "Nope.talos.dev" is not supported'
    reader = RawClient(tls_from_talosconfig(shared_cluster.issue_client(["os:reader"]).talosconfig))
    try:
        mc = "MachineConfigs.config.talos.dev"
        with pytest.raises(GRPCError) as caught:
            reader.call(cp, C + "Get", s.GetRequest(namespace="nowhere", type=mc, id="v1alpha1"))
        assert (caught.value.status, caught.value.message) == (
            Status.PERMISSION_DENIED,
            "not authorized",
        )
    finally:
        reader.close()


def test_access_filter_finds_the_definition_by_lower_case_type(admin: RawClient, cp: str) -> None:
    # The filter looks the ResourceDefinition up by id (the lower-cased type); the state
    # itself keys by the exact type, so the lower-cased one passes the filter and finds nothing.
    request = s.GetRequest(namespace="runtime", type=SERVICES.lower(), id="apid")
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, C + "Get", request)
    assert caught.value.status == Status.NOT_FOUND


def _well_formed(namespace: str, type_: str, id_: str, yaml_spec: str = "") -> r.Resource:
    """A resource cosi's State server decodes: a version and phase that parse, a spec."""
    metadata = r.Metadata(namespace=namespace, type=type_, id=id_, version="1", phase="running")
    return r.Resource(metadata=metadata, spec=r.Spec(yaml_spec=yaml_spec))


def test_writes_are_refused(admin: RawClient, cp: str) -> None:
    resource = _well_formed("runtime", SERVICES, "x")
    for path, request in [
        ("Create", s.CreateRequest(resource=resource)),
        ("Update", s.UpdateRequest(new_resource=resource)),
        ("Destroy", s.DestroyRequest(namespace="runtime", type=SERVICES, id="apid")),
    ]:
        with pytest.raises(GRPCError) as caught:
            admin.call(cp, C + path, request)
        assert (caught.value.status, caught.value.message) == (
            Status.PERMISSION_DENIED,
            "write access is not allowed",
        )


def test_list_with_id_and_label_queries(admin: RawClient, cp: str) -> None:
    by_regexp = admin.call(
        cp,
        C + "List",
        s.ListRequest(
            namespace="runtime",
            type=SERVICES,
            options=s.ListOptions(id_query=r.IDQuery(regexp="^(apid|etcd)$")),
        ),
    )
    assert sorted(reply.resource.metadata.id for reply in by_regexp) == ["apid", "etcd"]
    none = admin.call(
        cp,
        C + "List",
        s.ListRequest(
            namespace="runtime",
            type=SERVICES,
            options=s.ListOptions(
                label_query=[
                    r.LabelQuery(terms=[r.LabelTerm(key="missing", op=r.LabelTerm.EXISTS)])
                ]
            ),
        ),
    )
    assert none == []


def test_services_resources_are_the_running_services(admin: RawClient, cp: str) -> None:
    resources = _list(admin, cp, "runtime", SERVICES)
    services = admin.call(cp, "/machine.MachineService/ServiceList", empty_pb2.Empty())
    running = {svc.id for svc in services.messages[0].services if svc.state == "Running"}
    assert {res.metadata.id for res in resources} == running
    apid = next(res for res in resources if res.metadata.id == "apid")
    spec = v1alpha1_pb2.ServiceSpec.FromString(apid.spec.proto_spec)
    assert (spec.running, spec.healthy, spec.unknown) == (True, True, False)
    assert apid.metadata.owner == "v1alpha1.ServiceController"


# ---- watch ----------------------------------------------------------------------------------


def test_watch_kind_bootstrap_then_bootstrapped(admin: RawClient, cp: str) -> None:
    request = s.WatchRequest(
        namespace="runtime",
        type=SERVICES,
        api_version=1,
        options=s.WatchOptions(bootstrap_contents=True),
    )
    responses = admin.collect(
        cp,
        C + "Watch",
        request,
        until=lambda got: any(e.event_type == s.BOOTSTRAPPED for resp in got for e in resp.event),
    )
    assert responses[0] == s.WatchResponse()  # cosi server: an empty response first
    events = [e for resp in responses[1:] for e in resp.event]
    assert all(e.event_type == s.CREATED for e in events[:-1])
    assert events[-1].event_type == s.BOOTSTRAPPED
    assert len(events) - 1 == len(_list(admin, cp, "runtime", SERVICES))


def test_watch_without_api_version_sends_no_bootstrapped(admin: RawClient, cp: str) -> None:
    request = s.WatchRequest(
        namespace="runtime",
        type="Versions.runtime.talos.dev",
        options=s.WatchOptions(bootstrap_contents=True, aggregated=True),
    )
    responses = admin.collect_for(cp, C + "Watch", request, seconds=0.3)
    assert [len(resp.event) for resp in responses] == [0, 1]
    assert responses[1].event[0].event_type == s.CREATED


def test_watch_single_resource_reports_current_state(admin: RawClient, cp: str) -> None:
    present = s.WatchRequest(namespace="runtime", type=SERVICES, id="apid", api_version=1)
    got = admin.collect(cp, C + "Watch", present, until=lambda got: len(got) >= 2)
    assert got[1].event[0].event_type == s.CREATED
    assert got[1].event[0].resource.metadata.id == "apid"
    absent = s.WatchRequest(namespace="runtime", type=SERVICES, id="nope", api_version=1)
    got = admin.collect(cp, C + "Watch", absent, until=lambda got: len(got) >= 2)
    assert got[1].event[0].event_type == s.DESTROYED
    assert got[1].event[0].resource.metadata.id == "nope"


def test_watch_single_resource_refuses_bootstrap(admin: RawClient, cp: str) -> None:
    request = s.WatchRequest(
        namespace="runtime",
        type=SERVICES,
        id="apid",
        options=s.WatchOptions(bootstrap_contents=True),
    )
    with pytest.raises(GRPCError) as caught:
        admin.collect(cp, C + "Watch", request, until=lambda got: len(got) >= 2)
    assert caught.value.status == Status.UNIMPLEMENTED


def test_watch_sees_a_service_disappear_and_return(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, time_scale=10)
    client, address = client_for(cluster), cluster.nodes[0].address
    request = s.WatchRequest(namespace="runtime", type=SERVICES, id="kubelet", api_version=1)

    def restart_once(got: list[s.WatchResponse]) -> bool:
        if len(got) == 2:  # initial state seen: now restart kubelet
            cluster.node(address).run(lambda st: st.service_restart("kubelet"))
        kinds = [e.event_type for resp in got for e in resp.event]
        return (
            s.DESTROYED in kinds
            and kinds[-1] in (s.CREATED, s.UPDATED)
            and kinds.index(s.DESTROYED) < len(kinds) - 1
        )

    got = client.collect(address, C + "Watch", request, until=restart_once)
    kinds = [e.event_type for resp in got for e in resp.event]
    assert kinds[0] == s.CREATED
    assert s.DESTROYED in kinds[1:]


def test_watch_reports_machine_config_updates_with_old(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0)
    client, address = client_for(cluster), cluster.nodes[0].address
    state = cluster.node(address)
    request = s.WatchRequest(
        namespace="config", type="MachineConfigs.config.talos.dev", id="v1alpha1", api_version=1
    )

    def touch(got: list[s.WatchResponse]) -> bool:
        if len(got) == 2:
            state.run(
                lambda st: st.store.bump("config", "MachineConfigs.config.talos.dev", "v1alpha1")
            )
        return len(got) >= 3

    got = client.collect(address, C + "Watch", request, until=touch)
    update = got[2].event[0]
    assert update.event_type == s.UPDATED
    assert (update.old.metadata.version, update.resource.metadata.version) == ("1", "2")


def test_cosi_writable_fault_accepts_writes(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, faults=["cosi-writable"])
    client, address = client_for(cluster), cluster.nodes[0].address
    resource = _well_formed("runtime", SERVICES, "sshd", "running: true\n")
    client.call(address, C + "Create", s.CreateRequest(resource=resource))
    found = wait_for(
        lambda: client.call(
            address, C + "Get", s.GetRequest(namespace="runtime", type=SERVICES, id="sshd")
        ),
        what="created resource",
    )
    assert found.resource.spec.yaml_spec == "running: true\n"


def test_extension_statuses_list_the_profile_extensions(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=0, extensions=["iscsi-tools", "util-linux-tools"])
    client, address = client_for(cluster), cluster.nodes[0].address
    statuses = _list(client, address, "runtime", "ExtensionStatuses.runtime.talos.dev")
    names = [yaml.safe_load(res.spec.yaml_spec)["metadata"]["name"] for res in statuses]
    assert names == ["iscsi-tools", "util-linux-tools"]
