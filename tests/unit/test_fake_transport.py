"""FakeTransport itself: routing, the wire copy, error mapping, deadlines, targeting metadata.

It must behave like the real transport wherever a client can tell, so that a client unit
test over it means what it says.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Iterator

import pytest
from google.protobuf import empty_pb2

from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.client import AsyncTalosClient, TalosClient
from pytest_talos.errors import (
    APIError,
    ConnectError,
    DeadlineExceeded,
    InvalidArgument,
    NodeError,
    TransportError,
    Unavailable,
    Unimplemented,
)
from pytest_talos.models import Version
from pytest_talos.transport import (
    FakeRequest,
    FakeStatus,
    FakeTransport,
    GrpcTransport,
    Transport,
)

VERSION = "/machine.MachineService/Version"
NODES = ("10.5.0.2", "10.5.0.3", "10.5.0.4")


def _version(tag: str, hostname: str = "") -> m.Version:
    return m.Version(
        metadata=common_pb2.Metadata(hostname=hostname),
        version=m.VersionInfo(tag=tag),
        platform=m.PlatformInfo(name="container", mode="container"),
    )


def _one_version(_: FakeRequest) -> m.VersionResponse:
    return m.VersionResponse(messages=[_version("v1.13.9")])


def _fanout_version(request: FakeRequest) -> m.VersionResponse:
    """As apid answers ``nodes``: one element per node, each tagged; a node that cannot be
    reached carries its error in the metadata (director.go)."""
    reply = m.VersionResponse()
    for node in request.nodes:
        if node == NODES[2]:
            element = reply.messages.add()
            element.metadata.hostname = node
            element.metadata.error = "connect: no route to host"
            element.metadata.status.code = 14  # UNAVAILABLE
            element.metadata.status.message = "connect: no route to host"
        else:
            reply.messages.append(_version(f"tag-of-{node}", node))
    return reply


@pytest.fixture
def transport() -> FakeTransport:
    return FakeTransport(
        {
            "Version": _one_version,
            "Hostname": lambda _: m.HostnameResponse(messages=[m.Hostname(hostname="node-1")]),
        },
    )


@pytest.fixture
def client(transport: FakeTransport) -> Iterator[TalosClient]:
    with TalosClient.from_transport(transport, cluster="minimal") as talos:
        yield talos


def test_calls_carry_the_metadata_talosctl_sends(
    client: TalosClient, transport: FakeTransport
) -> None:
    assert client.version().tag == "v1.13.9"

    (sent,) = transport.requests
    assert sent.method == VERSION
    assert isinstance(sent.message, empty_pb2.Empty)
    assert ("runtime", "Talos") in sent.metadata
    assert ("context", "minimal") in sent.metadata
    assert not any(key in ("node", "nodes") for key, _ in sent.metadata)
    assert client.roles == ("os:admin",)


def test_with_node_targets_another_node_over_the_same_transport(
    client: TalosClient, transport: FakeTransport
) -> None:
    other = client.with_node(NODES[1])

    assert other.version().node == NODES[1]
    assert other.async_client._transport is client.async_client._transport
    assert transport.requests[-1].node == NODES[1]
    assert ("node", NODES[1]) in transport.requests[-1].metadata


def test_fanout_sends_one_nodes_value_per_node_and_keeps_a_failing_node() -> None:
    transport = FakeTransport({"Version": _fanout_version})
    with TalosClient.from_transport(transport) as client:
        results = client.fanout_version(list(NODES))

    assert [value for key, value in transport.requests[-1].metadata if key == "nodes"] == list(
        NODES
    )
    # apid waits up to 20 s to connect to a silent node (backend/apid.go MinConnectTimeout):
    # the call lasts longer, so that apid answers for the others instead of the call failing
    assert transport.requests[-1].timeout >= 25
    first, second = results[NODES[0]], results[NODES[1]]
    assert isinstance(first, Version)
    assert isinstance(second, Version)
    assert first.tag == f"tag-of-{NODES[0]}"
    assert second.node == NODES[1]
    failed = results[NODES[2]]
    assert isinstance(failed, NodeError)
    assert isinstance(failed.cause, Unavailable)
    assert "no route to host" in str(failed)


def test_several_default_nodes_need_with_node_for_single_node_calls() -> None:
    transport = FakeTransport({"Version": _fanout_version})
    with TalosClient.from_transport(transport, nodes=NODES[:2]) as talos:
        with pytest.raises(APIError, match=r"with_node"):
            talos.version()
        assert transport.requests == []  # refused before sending
        assert set(talos.fanout_version()) == set(NODES[:2])


def test_routes_by_path_or_short_name_and_unknown_methods_are_unimplemented() -> None:
    transport = FakeTransport({VERSION: _one_version})
    with TalosClient.from_transport(transport) as talos:
        assert talos.version().tag == "v1.13.9"
        with pytest.raises(Unimplemented, match="unknown method Hostname") as caught:
            talos.hostname()

    assert caught.value.method == "/machine.MachineService/Hostname"
    assert caught.value.node == "fake.invalid"


def test_requests_and_replies_cross_as_encoded_bytes() -> None:
    kept: list[m.Version] = []

    def handler(request: FakeRequest) -> m.VersionResponse:
        reply = m.VersionResponse(messages=[_version("v1")])
        kept.append(reply.messages[0])
        return reply

    with TalosClient.from_transport(FakeTransport(handler)) as talos:
        version = talos.version()
        kept[0].version.tag = "changed by the handler afterwards"
        assert version.tag == "v1"


def test_a_reply_of_the_wrong_type_is_a_bug_of_the_test() -> None:
    handler = {"Version": lambda _: m.HostnameResponse()}
    with (
        TalosClient.from_transport(FakeTransport(handler)) as talos,
        pytest.raises(TypeError, match=r"returned a HostnameResponse for .*VersionResponse"),
    ):
        talos.version()


def test_an_exception_of_the_handler_is_re_raised_unchanged() -> None:
    def handler(_: FakeRequest) -> m.VersionResponse:
        raise KeyError("a bug in the test")

    with (
        TalosClient.from_transport(FakeTransport(handler)) as talos,
        pytest.raises(KeyError, match="a bug in the test"),
    ):
        talos.version()


def test_statuses_errors_and_timeouts_map_as_on_the_wire() -> None:
    def refuse(_: FakeRequest) -> m.VersionResponse:
        raise FakeStatus("invalid_argument", "bad request")

    def unreachable(_: FakeRequest) -> m.VersionResponse:
        raise ConnectError("connection to fake.invalid:50000 refused")

    def slow(_: FakeRequest) -> m.VersionResponse:
        raise TimeoutError

    routes = {"Version": refuse}
    with TalosClient.from_transport(FakeTransport(routes), timeout=2.5) as talos:
        with pytest.raises(InvalidArgument, match="bad request") as status:
            talos.version()
        assert status.value.code == "INVALID_ARGUMENT"
        routes["Version"] = unreachable
        with pytest.raises(ConnectError, match="refused") as connect:
            talos.version()
        assert connect.value.method == VERSION
        routes["Version"] = slow
        with pytest.raises(DeadlineExceeded, match=r"no reply within 2\.5s") as deadline:
            talos.version()
        assert deadline.value.timeout == 2.5


def test_an_idle_stream_ends_with_the_idle_deadline() -> None:
    async def silent(_: FakeRequest) -> AsyncIterator[common_pb2.Data]:
        yield common_pb2.Data(bytes=b"then nothing")
        await asyncio.Event().wait()

    async def read() -> bytes:
        client = AsyncTalosClient.from_transport(FakeTransport({"Read": silent}), timeout=0.05)
        try:
            return await client.read("/slow")
        finally:
            await client.close()

    with pytest.raises(DeadlineExceeded, match=r"sent nothing for 0\.05s \(idle timeout\)"):
        asyncio.run(read())


def test_a_closed_transport_refuses_calls(client: TalosClient) -> None:
    derived = client.with_node(NODES[1])
    assert client.hostname() == "node-1"

    client.close()
    client.close()

    assert client.closed
    with pytest.raises(TransportError, match="closed"):
        client.version()
    with pytest.raises(TransportError, match="closed"):
        derived.version()


def test_the_async_client_closes_its_transport() -> None:
    transport = FakeTransport({"Version": _one_version})

    async def use() -> None:
        async with AsyncTalosClient.from_transport(transport) as client:
            assert (await client.version()).tag == "v1.13.9"

    asyncio.run(use())
    assert transport.closed
    assert repr(transport) == "FakeTransport('fake.invalid:50000', roles=('os:admin',))"


# --------------------------------------------------------------------------- the seam


def test_both_transports_are_siblings_of_the_transport_protocol() -> None:
    fake = FakeTransport({})
    real = GrpcTransport("10.5.0.2", ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))

    assert isinstance(fake, Transport)
    assert isinstance(real, Transport)
    assert not isinstance(fake, GrpcTransport)  # no longer a subclass copying its policy


def test_a_client_takes_a_transport_in_its_constructor() -> None:
    transport = FakeTransport({"Version": _one_version})

    with TalosClient(transport=transport, cluster="lab", timeout=3.0) as talos:
        assert talos.version().tag == "v1.13.9"
        assert talos.timeout == 3.0
    assert ("context", "lab") in transport.requests[-1].metadata
    assert transport.requests[-1].timeout == 3.0
    assert transport.closed


def test_a_client_takes_credentials_or_a_transport_not_both() -> None:
    with pytest.raises(ValueError, match="either endpoint and credentials, or transport="):
        AsyncTalosClient("10.5.0.2", transport=FakeTransport({}))
    with pytest.raises(TypeError, match="needs endpoint, ca_pem, crt_pem and key_pem"):
        AsyncTalosClient("10.5.0.2")


def test_fake_calls_are_logged_by_the_same_policy_as_real_ones(
    client: TalosClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pytest_talos.transport")

    client.version()
    with pytest.raises(Unimplemented):
        client.with_node(NODES[1]).memory()

    lines = [r.getMessage() for r in caplog.records if r.name == "pytest_talos.transport"]
    assert len(lines) == 2
    assert lines[0].startswith(f"{VERSION} to the endpoint via fake.invalid:50000: ok in ")
    assert lines[1].startswith(
        f"/machine.MachineService/Memory to {NODES[1]} via fake.invalid:50000: failed: "
        "Unimplemented in "
    )
