"""The transport over real TCP + mTLS on loopback: targeting, deadlines, failure mapping."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import pytest

from pytest_talos.client import TalosClient, TalosConfigWarning
from pytest_talos.emulator.pki import issue_client_cert, write_talosconfig
from pytest_talos.errors import (
    APIError,
    AuthenticationError,
    ConnectError,
    DeadlineExceeded,
    Internal,
    NodeError,
    PermissionDenied,
    TransportError,
    Unavailable,
)
from pytest_talos.models import Version
from tests.integration.conftest import (
    APID_HOST,
    CLUSTER,
    DOWN_NODE,
    OTHER_NODE,
    KeyTypeSetup,
    MakeClient,
    Pki,
)
from tests.integration.minimal_server import MinimalApid


def _metadata_of_last(apid: MinimalApid, method: str) -> list[tuple[str, str]]:
    return next(md for path, md in reversed(apid.calls) if path == method)


# --------------------------------------------------------------------------- happy paths


def test_ed25519_mtls_from_talosconfig(client: TalosClient, apid: MinimalApid) -> None:
    version = client.version()

    assert isinstance(version, Version)
    assert version.tag == "v1.13.9"
    assert version.platform_mode == "container"
    assert client.roles == ("os:admin",)
    metadata = _metadata_of_last(apid, "/machine.MachineService/Version")
    assert ("runtime", "Talos") in metadata
    assert ("context", CLUSTER) in metadata
    assert not any(key in ("node", "nodes") for key, _ in metadata)


def test_other_key_types_work(other_key_type: KeyTypeSetup, make_client: MakeClient) -> None:
    setup = other_key_type
    talos = make_client(setup.apid.endpoint, setup.client, setup.ca.cert_pem)

    assert talos.hostname() == "node-1"


def test_with_node_targets_another_node_over_the_same_connection(
    client: TalosClient, apid: MinimalApid
) -> None:
    other = client.with_node(OTHER_NODE)

    assert other.version().tag == "v1.13.8"
    assert other.version().node == OTHER_NODE
    assert other.async_client._transport is client.async_client._transport
    metadata = _metadata_of_last(apid, "/machine.MachineService/Version")
    assert ("node", OTHER_NODE) in metadata


def test_fanout_keeps_other_replies_when_a_node_fails(
    client: TalosClient, apid: MinimalApid
) -> None:
    results = client.fanout_version([APID_HOST, OTHER_NODE, DOWN_NODE])

    local, other = results[APID_HOST], results[OTHER_NODE]
    assert isinstance(local, Version)
    assert local.tag == "v1.13.9"
    assert isinstance(other, Version)
    assert (other.tag, other.node) == ("v1.13.8", OTHER_NODE)
    failed = results[DOWN_NODE]
    assert isinstance(failed, NodeError)
    assert failed.node == DOWN_NODE
    assert isinstance(failed.cause, Unavailable)
    assert "no route to host" in str(failed)
    metadata = _metadata_of_last(apid, "/machine.MachineService/Version")
    assert [value for key, value in metadata if key == "nodes"] == [
        APID_HOST,
        OTHER_NODE,
        DOWN_NODE,
    ]


def test_generic_fanout_converts_each_node(client: TalosClient) -> None:
    results = client.fanout("hostname", [APID_HOST, OTHER_NODE])

    assert results == {APID_HOST: "node-1", OTHER_NODE: "node-2"}


def test_single_node_call_to_a_down_node_raises_unavailable(client: TalosClient) -> None:
    with pytest.raises(Unavailable) as caught:
        client.with_node(DOWN_NODE).version()

    assert caught.value.node == DOWN_NODE
    assert caught.value.method == "/machine.MachineService/Version"


def test_several_default_nodes_need_with_node_for_single_node_calls(
    make_client: MakeClient, apid: MinimalApid
) -> None:
    talos = make_client(apid.endpoint, nodes=[APID_HOST, OTHER_NODE])

    with pytest.raises(APIError, match=r"with_node"):
        talos.version()
    assert set(talos.fanout_version()) == {APID_HOST, OTHER_NODE}


def test_server_hostname_override_accepts_a_cert_for_another_name(
    wrong_san_apid: MinimalApid, make_client: MakeClient
) -> None:
    talos = make_client(wrong_san_apid.endpoint, server_hostname=APID_HOST)

    assert talos.hostname() == "node-1"


def test_close_is_idempotent_and_later_calls_fail_clearly(
    talosconfig: Path,
) -> None:
    talos = TalosClient.from_talosconfig(talosconfig)
    derived = talos.with_node(OTHER_NODE)
    assert talos.hostname() == "node-1"

    talos.close()
    talos.close()
    derived.close()

    assert talos.closed
    with pytest.raises(TransportError, match="closed"):
        talos.version()
    with pytest.raises(TransportError, match="closed"):
        derived.version()


# --------------------------------------------------------------------------- certificates


def test_foreign_ca_in_talosconfig_is_an_authentication_error(
    apid: MinimalApid, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(apid.endpoint, ca_pem=pki.foreign_ca.cert_pem)

    with pytest.raises(AuthenticationError) as caught:
        talos.version()

    message = str(caught.value)
    assert "not signed by the CA in the talosconfig" in message
    assert "wrong CA in talosconfig" in message
    assert caught.value.method == "/machine.MachineService/Version"


def test_client_cert_from_a_foreign_ca_is_rejected(
    apid: MinimalApid, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(apid.endpoint, pki.foreign_admin)

    with pytest.raises(AuthenticationError, match="rejected the client certificate"):
        talos.version()


def test_expired_client_cert_is_rejected(
    apid: MinimalApid, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(apid.endpoint, pki.expired)

    with pytest.raises(AuthenticationError) as caught:
        talos.version()

    assert "rejected the client certificate" in str(caught.value)
    assert "expired" in str(caught.value)
    assert "PRIVATE KEY" not in str(caught.value)


def test_server_cert_without_the_endpoint_in_its_sans(
    wrong_san_apid: MinimalApid, make_client: MakeClient
) -> None:
    talos = make_client(wrong_san_apid.endpoint)

    with pytest.raises(AuthenticationError) as caught:
        talos.version()

    assert "does not list '127.0.0.3' in its SANs" in str(caught.value)
    assert "machine.certSANs" in str(caught.value)


def test_reader_calling_an_admin_method_is_told_which_role_is_needed(
    apid: MinimalApid, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(apid.endpoint, pki.reader)
    assert talos.hostname() == "node-1"  # reading is fine

    with pytest.raises(PermissionDenied) as caught:
        talos.read("/etc/os-release")

    error = caught.value
    assert error.details == "not authorized"
    assert "/machine.MachineService/Read needs one of os:admin" in str(error)
    assert "the client certificate carries os:reader" in str(error)


def test_operator_may_restart_but_not_apply(
    apid: MinimalApid, make_client: MakeClient, pki: Pki
) -> None:
    talos = make_client(apid.endpoint, pki.operator)

    assert talos.service_restart("kubelet") == 'Service "kubelet" restarted'
    with pytest.raises(PermissionDenied, match="carries os:operator"):
        talos.apply_configuration(b"version: v1alpha1\n")


# --------------------------------------------------------------------------- unreachable


def test_dns_failure(make_client: MakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real lookup of an unresolvable name would send a DNS query off this machine, and our
    # tests only ever talk to loopback. So the resolver answers "no such name" for this one
    # host, exactly as glibc does, and the test checks how the transport reports it.
    real_getaddrinfo = socket.getaddrinfo

    def fake_getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host == "apid.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    talos = make_client("apid.invalid:50000", timeout=5.0)

    with pytest.raises(ConnectError, match=r"cannot resolve 'apid\.invalid'"):
        talos.version()


def test_refused_port(make_client: MakeClient, closed_port: str) -> None:
    talos = make_client(closed_port)

    with pytest.raises(ConnectError) as caught:
        talos.version()

    assert str(caught.value).endswith(f"refused: is apid listening on {closed_port}?")


def test_endpoint_that_never_answers_fails_within_the_deadline(
    make_client: MakeClient, silent_endpoint: str
) -> None:
    talos = make_client(silent_endpoint, timeout=0.5)

    with pytest.raises(DeadlineExceeded) as caught:
        talos.version()

    assert caught.value.timeout == 0.5
    assert "accepted the TCP connection but finished no TLS handshake" in str(caught.value)


def test_plain_tcp_endpoint_is_not_tls(make_client: MakeClient, plaintext_endpoint: str) -> None:
    talos = make_client(plaintext_endpoint)

    with pytest.raises(ConnectError, match="not a TLS/Talos API endpoint"):
        talos.version()


# --------------------------------------------------------------------------- streams


def test_stream_error_surfaces_at_iteration_wrapped(client: TalosClient) -> None:
    with pytest.raises(Internal) as caught:
        client.read("/fail-midway")

    assert "input/output error" in str(caught.value)
    assert caught.value.method == "/machine.MachineService/Read"


def test_streamed_node_error_in_metadata(client: TalosClient) -> None:
    with pytest.raises(NodeError, match='log "nosuchservice" was not registered'):
        client.logs("nosuchservice")


def test_stream_idle_timeout(make_client: MakeClient, apid: MinimalApid) -> None:
    talos = make_client(apid.endpoint, timeout=0.5)

    with pytest.raises(DeadlineExceeded, match=r"sent nothing for 0\.5s \(idle timeout\)"):
        talos.read("/slow")


def test_event_stream_total_limit(client: TalosClient) -> None:
    events = client.events(tail_events=0, timeout=0.3)

    with pytest.raises(DeadlineExceeded, match=r"did not finish within 0\.3s"):
        next(events)


# --------------------------------------------------------------------------- talosconfig


def _write_config(path: Path, pki: Pki, apid: MinimalApid, **options: object) -> Path:
    client_cert = options.pop("client", pki.admin)
    write_talosconfig(
        path,
        context="ctx",
        endpoints=[apid.endpoint],
        ca_pem=pki.ca.cert_pem,
        client=client_cert,  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )
    return path


def test_talosconfig_nodes_and_node_override(tmp_path: Path, pki: Pki, apid: MinimalApid) -> None:
    path = _write_config(tmp_path / "config", pki, apid, nodes=[APID_HOST, OTHER_NODE])

    with TalosClient.from_talosconfig(path) as talos:
        assert talos.nodes == (APID_HOST, OTHER_NODE)
        assert set(talos.fanout("hostname").values()) == {"node-1", "node-2"}
    with TalosClient.from_talosconfig(path, node=OTHER_NODE, timeout=3.0) as talos:
        assert (talos.node, talos.nodes, talos.timeout) == (OTHER_NODE, (), 3.0)
        assert talos.hostname() == "node-2"


def test_talosconfig_from_the_environment_and_endpoint_override(
    tmp_path: Path, pki: Pki, apid: MinimalApid, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write_config(tmp_path / "config", pki, apid)
    monkeypatch.setenv("TALOSCONFIG", str(path))

    with TalosClient.from_talosconfig(endpoint="127.0.0.1:1", timeout=2.0) as talos:
        assert talos.endpoint == "127.0.0.1:1"
        with pytest.raises(ConnectError, match="refused"):
            talos.version()


def test_talosconfig_with_a_soon_expiring_cert_warns(
    tmp_path: Path, pki: Pki, apid: MinimalApid
) -> None:
    soon = issue_client_cert(pki.ca, roles=["os:admin"], validity=dt.timedelta(days=2))
    path = _write_config(tmp_path / "config", pki, apid, client=soon)

    with (
        pytest.warns(TalosConfigWarning, match="expires on"),
        TalosClient.from_talosconfig(path) as talos,
    ):
        assert talos.hostname() == "node-1"
