"""The latency model (``EmulatedCluster(latency=...)``, :mod:`pytest_talos.emulator.apid.latency`):
one round trip per hop as apid sees it. Only lower bounds are asserted (a loaded machine
can only make a call slower); the hops are counted by what each call must cross."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from google.protobuf import empty_pb2

from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.apid.latency import Latency, parse_latency
from pytest_talos.emulator.faults.catalogue import EXTRA_PORT
from pytest_talos.errors import ConfigError

from .conftest import RawClient, tls_from_talosconfig

M = "/machine.MachineService/"
EMPTY = empty_pb2.Empty()
RTT = 0.2  # seconds: well above the loopback's own cost of a call


def _seconds(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


@pytest.fixture(scope="module")
def slow_cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(controlplanes=1, workers=2, latency=RTT) as cluster:
        yield cluster


@pytest.fixture
def slow_client(slow_cluster: EmulatedCluster) -> Iterator[RawClient]:
    client = RawClient(tls_from_talosconfig(slow_cluster.talosconfig_bytes))
    yield client
    client.close()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20ms", 0.02), ("20", 0.02), ("0.5s", 0.5), (" 1.5 MS ", 0.0015), ("0", 0.0)],
)
def test_latency_is_read_as_milliseconds_or_seconds(text: str, seconds: float) -> None:
    assert parse_latency(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["fast", "-1ms", "6s", "nan", "20 m s"])
def test_a_latency_that_is_no_round_trip_time_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 20ms or 0\.02s"):
        parse_latency(text)


def test_the_cluster_refuses_a_latency_out_of_range() -> None:
    with pytest.raises(ConfigError, match="between 0 and 5 seconds"):
        EmulatedCluster(latency=-0.1)


def test_no_latency_sets_no_timer() -> None:
    latency = Latency()
    assert not latency
    assert latency.setup == 0.0
    asyncio.run(asyncio.wait_for(latency.hop(), 0.05))  # returns at once, no sleep(0) loop


def test_a_call_crosses_one_hop_and_a_new_connection_two_more(
    slow_cluster: EmulatedCluster, slow_client: RawClient
) -> None:
    endpoint = slow_cluster.nodes[0].address
    first = _seconds(lambda: slow_client.call(endpoint, M + "Version", EMPTY))
    again = _seconds(lambda: slow_client.call(endpoint, M + "Version", EMPTY))
    assert first >= 3 * RTT  # TCP + TLS set-up (2 round trips), then the call's own
    assert again >= RTT  # the channel is reused: the call's round trip only


def test_a_forwarded_call_crosses_two_hops(
    slow_cluster: EmulatedCluster, slow_client: RawClient
) -> None:
    endpoint, worker = slow_cluster.nodes[0].address, slow_cluster.nodes[1].address
    slow_client.call(endpoint, M + "Version", EMPTY, node=worker)  # the channels exist now
    forwarded = _seconds(lambda: slow_client.call(endpoint, M + "Version", EMPTY, node=worker))
    assert forwarded >= 2 * RTT  # runner -> endpoint, endpoint -> worker


def test_one_to_many_crosses_the_hops_to_every_target_at_once(
    slow_cluster: EmulatedCluster, slow_client: RawClient
) -> None:
    endpoint = slow_cluster.nodes[0].address
    workers = [node.address for node in slow_cluster.nodes[1:]]
    slow_client.call(endpoint, M + "Version", EMPTY, nodes=workers)
    reply = slow_client.call(endpoint, M + "Version", EMPTY, nodes=workers)
    assert [m.metadata.hostname for m in reply.messages] == workers
    many = _seconds(lambda: slow_client.call(endpoint, M + "Version", EMPTY, nodes=workers))
    assert many >= 2 * RTT


def test_a_greeting_arrives_one_round_trip_after_the_connect() -> None:
    with EmulatedCluster(controlplanes=1, workers=0, latency=RTT, faults=["extra-port"]) as c:

        async def greeting() -> tuple[float, bytes]:
            # from before the connect: the node's delay starts at its accept, which can come
            # before this side's connect returns on a busy machine (a lower bound only)
            started = time.monotonic()
            reader, writer = await asyncio.open_connection(c.nodes[0].address, EXTRA_PORT)
            data = await asyncio.wait_for(reader.read(64), 10)
            waited = time.monotonic() - started
            writer.close()
            return waited, data

        waited, data = asyncio.run(greeting())
    assert data.startswith(b"HTTP/1.1 200 OK")
    assert waited >= RTT
