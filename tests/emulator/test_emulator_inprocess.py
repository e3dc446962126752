"""Forwarded calls handed to the target's apid in process (emulator/inprocess.py): no second
TLS connection, and what the target sees and answers is what the wire delivered."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable

import pytest
from google.protobuf import empty_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.apid.inprocess import relay_until

from .conftest import RawClient, tls_from_talosconfig

M = "/machine.MachineService/"
EMPTY = empty_pb2.Empty()


def test_a_forwarded_call_opens_no_connection_to_the_target(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster()
    client = client_for(cluster)
    cp, worker = cluster.emulated_nodes
    before = len(cluster.call_log)
    reply = client.call(cp.address, M + "Hostname", EMPTY, node=worker.address)
    assert reply.messages[0].hostname == worker.hostname
    assert worker.server is not None
    assert not worker.server._peers.transports  # nothing connected to the worker's apid
    served = [r for r in cluster.call_log[before:] if r.node == worker.hostname]
    assert len(served) == 1
    record = served[0]
    assert record.forwarded
    assert record.roles == ("os:admin",)  # talos-role from the caller
    assert record.client_serial != cluster.admin_client_identity.serial  # the impersonator's
    assert record.targets == ()  # node / nodes are not forwarded


def test_the_target_judges_the_callers_roles_not_the_impersonators(
    make_cluster: Callable[..., EmulatedCluster],
) -> None:
    cluster = make_cluster()
    reader = cluster.issue_client(["os:reader"])
    client = RawClient(tls_from_talosconfig(reader.talosconfig))
    try:
        cp, worker = cluster.emulated_nodes
        with pytest.raises(GRPCError) as refused:
            client.call(cp.address, M + "Kubeconfig", EMPTY, node=worker.address)
        assert (refused.value.status, refused.value.message) == (
            Status.PERMISSION_DENIED,
            "not authorized",
        )
        record = [r for r in cluster.call_log if r.node == worker.hostname][-1]
        assert record.roles == ("os:reader",)
        assert record.client_serial not in (reader.serial, "")
    finally:
        client.close()


def test_one_to_many_replies_are_marked_per_target_and_cached_replies_stay_unmarked(
    make_cluster: Callable[..., EmulatedCluster], client_for: Callable[..., RawClient]
) -> None:
    cluster = make_cluster(workers=2)
    client = client_for(cluster)
    cp = cluster.emulated_nodes[0]
    workers = [n.address for n in cluster.emulated_nodes[1:]]
    for _ in range(2):  # the second time from any reply the targets may have cached
        reply = client.call(cp.address, M + "Version", EMPTY, nodes=workers)
        assert [m.metadata.hostname for m in reply.messages] == workers
    direct = client.call(workers[0], M + "Version", EMPTY)
    assert direct.messages[0].metadata.hostname == ""  # a direct call is not marked


def test_a_relay_cancelled_as_the_target_stream_ends_leaves_no_unretrieved_error() -> None:
    """The caller goes away (a killed client) in the loop step where the target's stream
    ends: the step's StopAsyncIteration must be read, not logged by asyncio as "Task
    exception was never retrieved" on the emulator's stderr."""
    unretrieved: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: unretrieved.append(context["message"]))
        ends = asyncio.Event()

        async def target_stream() -> AsyncIterator[int]:
            await ends.wait()
            return
            yield 0  # pragma: no cover - makes this an async generator

        async def caller() -> None:
            async for _ in relay_until(target_stream(), asyncio.Event(), timeout=None):
                pass  # pragma: no cover - the stream yields nothing

        relay = asyncio.ensure_future(caller())
        await asyncio.sleep(0)  # the relay now waits on the stream's first step
        ends.set()  # the step ends with StopAsyncIteration in the next loop step ...
        relay.cancel()  # ... the very one in which the caller is cancelled
        await asyncio.gather(relay, return_exceptions=True)
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert unretrieved == []
