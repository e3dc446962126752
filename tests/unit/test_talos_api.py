"""The shared Talos API facts (pytest_talos.talos_api): one statement each, both sides use it."""

from __future__ import annotations

import pytest

from pytest_talos import pki, talos_api
from pytest_talos.client import _rpcs as rpcs
from pytest_talos.emulator.apid import servicers
from pytest_talos.emulator.cosi.registry import T as EmulatorTypes
from pytest_talos.talos_api import (
    ADMIN,
    ETCD_BACKUP,
    OPERATOR,
    READER,
    ROLE_RULES,
    allowed_roles,
    certificate_roles,
    roles_needed,
    split_host_port,
)
from pytest_talos.transport import split_endpoint


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.5.0.2", ("10.5.0.2", None)),
        ("10.5.0.2:50000", ("10.5.0.2", "50000")),
        ("node-1.example:443", ("node-1.example", "443")),
        ("[fd00::2]:50000", ("fd00::2", "50000")),
        ("[fd00::2]", ("fd00::2", None)),
        ("fd00::2", ("fd00::2", None)),  # a bare IPv6 address carries no port
        ("host:", ("host", "")),  # the port text is not judged here
        ("", ("", None)),
    ],
)
def test_split_host_port(text: str, expected: tuple[str, str | None]) -> None:
    assert split_host_port(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[fd00::2", r"'\[' without a closing '\]'"),
        ("[::1]50000", r"unexpected '50000' after '\]'"),
    ],
)
def test_split_host_port_refuses_malformed_brackets(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_host_port(text)


def test_every_side_splits_endpoints_alike() -> None:
    from pytest_talos.cluster import _endpoint_host
    from pytest_talos.emulator.apid.routing import host_of as apid_host_of
    from pytest_talos.emulator.apid.routing import port_of
    from pytest_talos.node import host_of

    for endpoint, host, port in [
        ("10.5.0.2:50000", "10.5.0.2", 50000),
        ("[fd00::2]:50001", "fd00::2", 50001),
    ]:
        assert split_endpoint(endpoint) == (host, port)
        assert host_of(endpoint) == _endpoint_host(endpoint) == apid_host_of(endpoint) == host
        assert port_of(endpoint) == port
    assert port_of("10.5.0.2") == talos_api.APID_PORT


def test_the_role_table_is_machineds() -> None:
    # internal/app/machined/pkg/system/services/machined.go, spot checks of each kind
    machine = "/machine.MachineService/"
    assert allowed_roles(machine + "Version") == {ADMIN, OPERATOR, READER}
    assert allowed_roles(machine + "Reboot") == {ADMIN, OPERATOR}
    assert allowed_roles(machine + "Read") == {ADMIN}
    assert allowed_roles(machine + "EtcdMemberList") == {ADMIN, OPERATOR, READER, ETCD_BACKUP}
    assert allowed_roles(machine + "EtcdSnapshot") == {ADMIN, OPERATOR, ETCD_BACKUP}
    assert allowed_roles(machine + "MetaWrite") == {ADMIN, "os:meta:writer"}
    assert allowed_roles(machine + "ApplyConfiguration") == {ADMIN, READER}  # maintenance
    assert allowed_roles("/machine.MachineService/NotInTheTable") == {ADMIN}


def test_a_running_node_needs_admin_to_apply() -> None:
    # v1alpha1_server.go ApplyConfiguration refuses a non-admin outside maintenance.
    assert roles_needed("/machine.MachineService/ApplyConfiguration") == (ADMIN,)
    assert roles_needed("/machine.MachineService/Reboot") == (ADMIN, OPERATOR)


def test_client_and_emulator_use_the_one_role_table() -> None:
    assert servicers.ROLE_RULES is ROLE_RULES
    assert servicers.allowed_roles is allowed_roles
    for rpc in (rpcs.VERSION, rpcs.READ, rpcs.REBOOT, rpcs.ETCD_MEMBER_LIST, rpcs.COSI_GET):
        assert rpc.roles == roles_needed(rpc.path)
    assert rpcs.APPLY_CONFIGURATION.roles == (ADMIN,)


def test_client_and_emulator_use_the_one_type_table() -> None:
    from pytest_talos.client import _resources

    assert EmulatorTypes is talos_api.ResourceType
    assert _resources.MACHINE_CONFIG_TYPE == talos_api.ResourceType.MACHINE_CONFIGS
    assert _resources.RD_TYPE == talos_api.ResourceType.RESOURCE_DEFINITIONS
    names = {v for k, v in vars(talos_api.ResourceType).items() if k.isupper()}
    assert set(_resources.SPEC_DECODERS) <= names


def test_certificate_roles_are_the_organizations() -> None:
    ca = pki.CertificateAuthority.generate()
    cert = pki.issue_client_cert(ca, roles=["os:operator", "os:etcd:backup"])

    assert certificate_roles(cert.cert_pem) == ("os:operator", "os:etcd:backup")
    assert certificate_roles(cert.cert) == ("os:operator", "os:etcd:backup")
    assert certificate_roles(b"not a certificate") == ()
