"""Fixtures for the emulator tests: emulated clusters and a raw Talos API client.

The client is deliberately tiny and independent of ``pytest_talos.client``/``transport``:
the generated grpclib stubs, a stdlib ``ssl`` context built from talosconfig bytes, and a
private event loop in the test thread. Everything goes over real TCP and real mutual TLS on
loopback; every call has a timeout.
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest
import yaml
from grpclib.client import Channel

from pytest_talos._proto.cluster import cluster_grpc
from pytest_talos._proto.machine import machine_grpc
from pytest_talos._proto.v1alpha1 import state_grpc
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.apid.tls import load_cert_chain

T = TypeVar("T")
TIMEOUT = 10.0
_STUBS = {
    "machine.MachineService": machine_grpc.MachineServiceStub,
    "cluster.ClusterService": cluster_grpc.ClusterServiceStub,
    "cosi.resource.State": state_grpc.StateStub,
}


def _relabel(key_pem: bytes) -> bytes:
    # talosctl writes Ed25519 keys as "ED25519 PRIVATE KEY" around PKCS#8.
    return re.sub(
        rb"-----(BEGIN|END) ED25519 PRIVATE KEY-----", rb"-----\1 PRIVATE KEY-----", key_pem
    )


def tls_from_talosconfig(talosconfig: bytes) -> ssl.SSLContext:
    document = yaml.safe_load(talosconfig)
    context = document["contexts"][document["context"]]
    ca, crt, key = (base64.b64decode(context[k]) for k in ("ca", "crt", "key"))
    return tls_context(ca, crt, _relabel(key))


def tls_context(ca_pem: bytes, cert_pem: bytes | None, key_pem: bytes | None) -> ssl.SSLContext:
    tls = ssl.create_default_context(cadata=ca_pem.decode())
    if cert_pem is not None and key_pem is not None:
        load_cert_chain(tls, cert_pem, key_pem)
    tls.set_alpn_protocols(["h2"])
    return tls


class RawClient:
    """Calls ``/<service>/<Method>`` on one address with optional node/nodes metadata."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        self._tls = tls
        self._loop = asyncio.new_event_loop()
        self._channels: dict[str, Channel] = {}

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()

    def run(self, coro: Any, timeout: float = TIMEOUT) -> Any:
        return self._loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def _channel(self, address: str) -> Channel:
        if address not in self._channels:

            async def make() -> Channel:
                return Channel(address, 50000, ssl=self._tls)

            if self._loop.is_running():  # called from inside one of our coroutines
                self._channels[address] = Channel(address, 50000, ssl=self._tls)
            else:
                self._channels[address] = self._loop.run_until_complete(make())
        return self._channels[address]

    @staticmethod
    def _metadata(node: str | None, nodes: Sequence[str] | None) -> list[tuple[str, str]]:
        pairs = [("runtime", "Talos")]
        if node is not None:
            pairs.append(("node", node))
        for target in nodes or ():
            pairs.append(("nodes", target))
        return pairs

    def _method(self, address: str, path: str) -> Any:
        service, name = path.strip("/").split("/")
        stub = _STUBS[service](self._channel(address))
        return getattr(stub, name)

    def call(
        self,
        address: str,
        path: str,
        request: Any,
        *,
        node: str | None = None,
        nodes: Sequence[str] | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        timeout: float = TIMEOUT,
        send_deadline: bool = True,
    ) -> Any:
        """A unary reply, or the list of all messages of a server stream.

        Without ``send_deadline`` the server gets no ``grpc-timeout`` (the call is still
        bounded here, by ``timeout``).
        """
        method = self._method(address, path)
        pairs = self._metadata(node, nodes) + list(metadata)
        deadline = timeout if send_deadline else None
        return self.run(method(request, metadata=pairs, timeout=deadline), timeout + 1)

    async def acall(
        self,
        address: str,
        path: str,
        request: Any,
        *,
        node: str | None = None,
        timeout: float = TIMEOUT,
    ) -> Any:
        """:meth:`call` from inside a coroutine running on this client's loop."""
        method = self._method(address, path)
        return await method(request, metadata=self._metadata(node, None), timeout=timeout)

    def stream(
        self,
        address: str,
        path: str,
        request: Any,
        *,
        node: str | None = None,
        nodes: Sequence[str] | None = None,
        timeout: float = TIMEOUT,
    ) -> Any:
        """An open server stream (async context manager; use inside :meth:`run`)."""
        return self._open(address, path, request, self._metadata(node, nodes), timeout)

    @asynccontextmanager
    async def _open(
        self,
        address: str,
        path: str,
        request: Any,
        pairs: list[tuple[str, str]],
        timeout: float,
    ) -> AsyncIterator[Any]:
        method = self._method(address, path)
        async with method.open(metadata=pairs, timeout=timeout) as stream:
            await stream.send_message(request, end=True)
            yield stream

    def collect(
        self,
        address: str,
        path: str,
        request: Any,
        *,
        until: Callable[[list[Any]], bool],
        node: str | None = None,
        nodes: Sequence[str] | None = None,
        timeout: float = TIMEOUT,
    ) -> list[Any]:
        """Messages of an endless stream until ``until(messages)`` holds; then cancel."""
        pairs = self._metadata(node, nodes)

        async def run() -> list[Any]:
            received: list[Any] = []
            async with self._open(address, path, request, pairs, timeout) as stream:
                while not until(received):
                    message = await stream.recv_message()
                    if message is None:
                        break
                    received.append(message)
                await stream.cancel()
            return received

        result: list[Any] = self.run(run(), timeout + 1)
        return result

    def collect_for(
        self,
        address: str,
        path: str,
        request: Any,
        *,
        seconds: float,
        node: str | None = None,
    ) -> list[Any]:
        """Every message a stream delivers within ``seconds`` (to prove nothing arrives)."""
        pairs = self._metadata(node, None)

        async def run() -> list[Any]:
            received: list[Any] = []
            async with self._open(address, path, request, pairs, seconds + TIMEOUT) as stream:

                async def reader() -> None:
                    while (message := await stream.recv_message()) is not None:
                        received.append(message)

                task = asyncio.ensure_future(reader())
                await asyncio.wait([task], timeout=seconds)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await stream.cancel()
            return received

        result: list[Any] = self.run(run(), seconds + TIMEOUT)
        return result


def wait_for(
    probe: Callable[[], T],
    until: Callable[[T], object] = bool,
    *,
    timeout: float = TIMEOUT,
    what: str = "condition",
) -> T:
    """Poll ``probe()`` until ``until(value)`` holds and return that value (no timed asserts)."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not until(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value {value!r}")
        time.sleep(0.02)
        value = probe()
    return value


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[EmulatedCluster]:
    """Two control planes and a worker, for tests that only read."""
    with EmulatedCluster(controlplanes=2, workers=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def admin(shared_cluster: EmulatedCluster) -> Iterator[RawClient]:
    client = RawClient(tls_from_talosconfig(shared_cluster.talosconfig_bytes))
    yield client
    client.close()


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., EmulatedCluster]]:
    """Start a fresh cluster (for tests that change it); stopped at teardown."""
    started: list[EmulatedCluster] = []

    def make(**kwargs: Any) -> EmulatedCluster:
        kwargs.setdefault("controlplanes", 1)
        kwargs.setdefault("workers", 1)
        cluster = EmulatedCluster(**kwargs)
        cluster.__enter__()
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        cluster.__exit__(None, None, None)


@pytest.fixture
def client_for() -> Iterator[Callable[[EmulatedCluster], RawClient]]:
    """An admin RawClient for a cluster made in the test; closed at teardown."""
    clients: list[RawClient] = []

    def make(cluster: EmulatedCluster, talosconfig: bytes | None = None) -> RawClient:
        client = RawClient(tls_from_talosconfig(talosconfig or cluster.talosconfig_bytes))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
