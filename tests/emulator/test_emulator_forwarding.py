"""Forwarding by a control plane when the target goes away, hangs or the client gives up
(director.go: a failing node is a per-node error for ``nodes``, the gRPC status for ``node``)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.protobuf import empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator import EmulatedCluster

from .conftest import RawClient, wait_for

M = "/machine.MachineService/"
EMPTY = empty_pb2.Empty()
FOREVER = m.EventsRequest(tail_events=0)  # a stream that never ends by itself


def _dial_error(address: str) -> str:
    return (
        'connection error: desc = "transport: Error while dialing: dial tcp '
        f'{address}:50000: connect: connection refused"'
    )


def _errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if record.levelno >= logging.ERROR
    ]


@pytest.fixture
def silent_listener(shared_cluster: EmulatedCluster) -> Iterator[str]:
    """``host:port`` in the cluster's /24 that accepts TCP connections and never answers."""
    with socket.create_server((shared_cluster.vacant_address, 0)) as server:
        yield f"{shared_cluster.vacant_address}:{server.getsockname()[1]}"


# ---- the target goes down --------------------------------------------------------------------


def test_forwarded_stream_to_a_node_going_down_is_unavailable(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(time_scale=5)
    client = client_for(cluster)
    cp, worker = cluster.nodes[0].address, cluster.nodes[1].address

    async def follow_while_reset() -> tuple[list[m.Event], list[m.Event], BaseException]:
        one: list[m.Event] = []
        many: list[m.Event] = []
        try:
            async with (
                client.stream(cp, M + "Events", FOREVER, node=worker) as one_to_one,
                client.stream(cp, M + "Events", FOREVER, nodes=[worker]) as one_to_many,
            ):
                one.append(await one_to_one.recv_message())  # the hello: both are forwarded
                many.append(await one_to_many.recv_message())
                await client.acall(worker, M + "Reset", m.ResetRequest())
                while (message := await one_to_many.recv_message()) is not None:
                    many.append(message)
                while (message := await one_to_one.recv_message()) is not None:
                    one.append(message)
        except GRPCError as exc:
            return one, many, exc
        raise AssertionError("the forwarded one-to-one stream ended without an error")

    one, many, error = client.run(follow_while_reset())
    assert isinstance(error, GRPCError)
    # director.go, node: the gRPC status itself, worded like any unreachable node.
    assert (error.status, error.message) == (Status.UNAVAILABLE, _dial_error(worker))
    # director.go, nodes: the failing node sends one frame with metadata error and status.
    last = many[-1].metadata
    assert (last.hostname, last.status.code) == (worker, Status.UNAVAILABLE.value)
    assert last.status.message == _dial_error(worker)
    assert last.error == f"rpc error: code = Unavailable desc = {_dial_error(worker)}"
    assert len(one) > 1  # events of the reset arrived before the node went down

    with pytest.raises(GRPCError) as later:
        client.call(cp, M + "Version", EMPTY, node=worker)
    assert (later.value.status, later.value.message) == (Status.UNAVAILABLE, _dial_error(worker))
    node = cluster.node(worker)
    node.run(lambda state: state.power_on())
    wait_for(lambda: node.serving, what="the worker to serve again")
    reply = client.call(cp, M + "Version", EMPTY, node=worker)
    assert reply.messages[0].version.tag == "v1.13.9"


# ---- the client gives up -------------------------------------------------------------------


def _open_streams(cluster: EmulatedCluster, address: str) -> int:
    return cluster.node(address).run(lambda state: state.events.subscriber_count)


def test_client_deadline_cancels_a_forwarded_stream_without_errors(
    admin: RawClient, shared_cluster: EmulatedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cp, worker = shared_cluster.nodes[0].address, shared_cluster.nodes[-1].address
    before = _open_streams(shared_cluster, worker)

    async def follow_until_the_deadline() -> None:
        async with admin.stream(cp, M + "Events", FOREVER, node=worker, timeout=0.5) as stream:
            assert (await stream.recv_message()) is not None  # the hello: forwarded
            assert _open_streams(shared_cluster, worker) == before + 1
            await stream.recv_message()  # nothing comes: the deadline ends it

    with pytest.raises((asyncio.TimeoutError, GRPCError)) as caught:
        admin.run(follow_until_the_deadline())
    if isinstance(caught.value, GRPCError):
        assert caught.value.status == Status.DEADLINE_EXCEEDED
    # The control plane cancelled the forwarded call: the worker's stream is gone too.
    wait_for(lambda: _open_streams(shared_cluster, worker), lambda n: n == before)
    assert _errors_logged(caplog) == []


@pytest.mark.parametrize("one_to_many", [False, True])
def test_client_cancel_cancels_a_forwarded_stream_without_errors(
    admin: RawClient,
    shared_cluster: EmulatedCluster,
    caplog: pytest.LogCaptureFixture,
    one_to_many: bool,
) -> None:
    caplog.set_level(logging.INFO)
    cp, worker = shared_cluster.nodes[0].address, shared_cluster.nodes[-1].address
    before = _open_streams(shared_cluster, worker)
    nodes = [cp, worker] if one_to_many else None
    got = admin.collect(
        cp,
        M + "Events",
        FOREVER,
        node=None if one_to_many else worker,
        nodes=nodes,
        until=lambda events: len(events) >= len(nodes or [worker]),
    )
    assert [event.data.type_url for event in got] == [""] * len(got)  # hellos, then cancel
    wait_for(lambda: _open_streams(shared_cluster, worker), lambda n: n == before)
    assert _errors_logged(caplog) == []


# ---- the target hangs ----------------------------------------------------------------------


@pytest.fixture
def short_forward_timeout(shared_cluster: EmulatedCluster) -> Iterator[None]:
    server = shared_cluster.node(shared_cluster.nodes[0].address).server
    assert server is not None
    saved, server.forward_timeout = server.forward_timeout, 0.3
    yield
    server.forward_timeout = saved


@pytest.mark.usefixtures("short_forward_timeout")
def test_forward_timeout_is_deadline_exceeded(
    admin: RawClient,
    shared_cluster: EmulatedCluster,
    silent_listener: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cp = shared_cluster.nodes[0].address
    # Without a client deadline, a unary forward gets the server's own timeout.
    with pytest.raises(GRPCError) as caught:
        admin.call(cp, M + "Version", EMPTY, node=silent_listener, send_deadline=False)
    assert (caught.value.status, caught.value.message) == (
        Status.DEADLINE_EXCEEDED,
        "context deadline exceeded",
    )
    reply: Any = admin.call(
        cp, M + "Version", EMPTY, nodes=[cp, silent_listener], send_deadline=False
    )
    by_host = {message.metadata.hostname: message for message in reply.messages}
    assert by_host[cp].version.tag == "v1.13.9"
    hung = by_host[silent_listener].metadata
    assert hung.status.code == Status.DEADLINE_EXCEEDED.value
    assert hung.error == "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
    assert _errors_logged(caplog) == []
