"""COSI resources through the client: type resolution, get, list, watch, machine config."""

from __future__ import annotations

import pytest
import yaml

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
from tests.integration.conftest import APID_HOST, OTHER_NODE, MakeClient, Pki
from tests.integration.minimal_server import DEFAULT_CONFIG, MinimalApid


@pytest.fixture
def node2(client: TalosClient) -> TalosClient:
    """A node whose config the tests may change without disturbing the others."""
    return client.with_node(OTHER_NODE)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("svc", "Services.v1alpha1.talos.dev"),
        ("Services", "Services.v1alpha1.talos.dev"),
        ("services.v1alpha1.talos.dev", "Services.v1alpha1.talos.dev"),
        ("MC", "MachineConfigs.config.talos.dev"),
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
    client: TalosClient, apid: MinimalApid
) -> None:
    service = client.get("svc", "apid")

    assert service.namespace == "runtime"
    assert service.type == "Services.v1alpha1.talos.dev"
    assert service.version == 1
    assert service.metadata.owner == "test.Controller"
    assert service.metadata.labels == {"talos.dev/test": "yes"}
    assert service.metadata.created is not None
    assert service.spec == {"running": True, "healthy": True, "unknown": False}
    assert service.typed_spec == ServiceSpec(running=True, healthy=True, unknown=False)
    metadata = next(md for path, md in reversed(apid.calls) if path.endswith("State/Get"))
    assert ("runtime", "Talos") in metadata


def test_typed_specs(client: TalosClient) -> None:
    member = client.get("members", "node-1").typed_spec
    assert isinstance(member, MemberSpec)
    assert (member.machine_type, member.addresses, member.api_server_port) == (
        "controlplane",
        (APID_HOST,),
        6443,
    )
    addresses = client.get("nodeaddresses", "current").typed_spec
    assert addresses == NodeAddressSpec(addresses=(f"{APID_HOST}/8",), sort_algorithm="v1")
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
    with pytest.raises(NotFound):
        client.get("svc", "no-such-service")


def test_list_resources(client: TalosClient) -> None:
    services = client.list_resources("services")

    assert [s.id for s in services] == ["apid", "etcd", "kubelet"]
    assert all(s.namespace == "runtime" for s in services)


def test_machine_config(client: TalosClient) -> None:
    client.apply_configuration(DEFAULT_CONFIG)  # other tests may have changed it

    config = client.machine_config()

    assert config.raw == DEFAULT_CONFIG  # byte for byte, comments included
    assert config.documents[0]["machine"]["type"] == "controlplane"
    assert config.kinds == ("v1alpha1", "HostnameConfig")
    assert config.version == client.get("mc", "v1alpha1").version
    resource = client.get("mc", "v1alpha1")
    assert isinstance(resource.typed_spec, MachineConfigSpec)
    assert "not-a-real-token" not in repr(config)
    assert "not-a-real-token" not in repr(resource.typed_spec)


def test_reader_may_not_read_the_sensitive_machine_config(
    apid: MinimalApid, make_client: MakeClient, pki: Pki
) -> None:
    reader = make_client(apid.endpoint, pki.reader)
    assert reader.get("svc", "apid").id == "apid"

    with pytest.raises(PermissionDenied) as caught:
        reader.machine_config()

    assert "sensitive resources such as MachineConfig need os:admin" in str(caught.value)


def test_watch_one_resource_follows_an_apply(node2: TalosClient) -> None:
    before = node2.machine_config().version
    patched = yaml.safe_dump({"version": "v1alpha1", "machine": {"type": "worker"}}).encode()

    with node2.watch("mc", "v1alpha1", timeout=10) as watch:
        current = next(watch)
        assert current.type == "created"
        assert current.resource is not None
        assert current.resource.version == before

        node2.apply_configuration(patched)
        updated = next(watch)

    assert updated.type == "updated"
    assert updated.resource is not None
    assert updated.resource.version == before + 1
    assert updated.old is not None
    assert updated.old.version == before
    assert node2.machine_config().raw == patched


def test_watch_of_an_absent_resource_starts_with_a_tombstone(client: TalosClient) -> None:
    with client.watch("svc", "not-running", timeout=10) as watch:
        first = next(watch)

    assert first.type == "destroyed"
    assert first.resource is not None
    assert first.resource.id == "not-running"


def test_watch_kind_bootstraps(client: TalosClient, apid: MinimalApid) -> None:
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


def test_resource_definitions_are_cached_per_node(client: TalosClient, apid: MinimalApid) -> None:
    client.resolve_type("svc")
    calls_before = len(apid.calls)

    client.resolve_type("members")
    client.get("svc", "apid")

    rd_lists = [path for path, _ in apid.calls[calls_before:] if path.endswith("State/List")]
    assert rd_lists == []
