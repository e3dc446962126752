"""Shared by the client-against-emulator tests (``test_client_emulator_*.py``).

The real TalosClient talks to the emulated cluster over real Ed25519 mutual TLS on loopback.
Every client method is called the way talosctl calls it: through the control plane's apid,
with ``node`` metadata for one node (``with_node``) and ``nodes`` for fan-out (director.go).
Expected values come from talos-facts.md or, where the emulator is the truth (its node state,
its event buffer, its log lines), from the emulated node itself.

The cluster (``emulated_cluster``, conftest) is shared by the session: a test that changes
the worker's config puts the original bytes back (``restore_worker_config``), and tests
that take a node down (reset, reboots) start a cluster of their own. Waits follow COSI
watches and event streams, each with a deadline; nothing sleeps before asserting.

The test modules bind the fixtures below to their own names, so that pytest finds them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_talos.client import Connection, TalosClient
from pytest_talos.emulator import EmulatedCluster, NodeInfo
from pytest_talos.errors import TalosError
from pytest_talos.models import MachineConfig, MachineStatusSpec, ResourceEvent, ServiceSpec
from pytest_talos.talosconfig import load_talosconfig
from pytest_talos.transport import GrpcTransport, build_ssl_context

__all__ = [
    "SERVICES_TYPE",
    "WAIT",
    "changes_until_healthy",
    "cp",
    "cp_node",
    "first",
    "items_until",
    "poll",
    "reader_path",
    "restore_worker_config",
    "spec_of",
    "talos",
    "wait_until_ready",
    "with_transport",
    "worker",
    "worker_node",
]

T = TypeVar("T")

WAIT = 10.0  # seconds: the deadline of every watch, event stream and poll
SERVICES_TYPE = "Services.v1alpha1.talos.dev"


# --------------------------------------------------------------------------- helpers


def first(stream: Iterable[T], wanted: Callable[[T], bool], what: str) -> T:
    """The first item of a (deadline-bounded) stream that satisfies ``wanted``."""
    for item in stream:
        if wanted(item):
            return item
    raise AssertionError(f"the stream ended before {what}")


def items_until(stream: Iterable[T], last: Callable[[T], bool], what: str) -> list[T]:
    """The items of a (deadline-bounded) stream up to and including the first ``last`` one."""
    seen: list[T] = []
    for item in stream:
        seen.append(item)
        if last(item):
            return seen
    raise AssertionError(f"the stream ended before {what}")


def poll(probe: Callable[[], T], done: Callable[[T], bool], what: str) -> T:
    """For what no stream reports (a node whose API is down, the server side of a closed
    stream): call until ``done``, or fail."""
    deadline = time.monotonic() + WAIT
    last: T | TalosError | None = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except TalosError as exc:  # the node is rebooting or gone: keep asking
            last = exc
        else:
            if done(last):
                return last
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {WAIT}s; last answer: {last!r}")


def spec_of(event: ResourceEvent) -> Any:
    return event.resource.typed_spec if event.resource is not None else None


def wait_until_ready(node: TalosClient) -> None:
    with node.watch("machinestatus", "machine", timeout=WAIT) as watch:
        first(
            watch,
            lambda e: isinstance(spec_of(e), MachineStatusSpec) and spec_of(e).ready,
            "the node reported ready",
        )


def changes_until_healthy(watch: Iterable[ResourceEvent]) -> list[ResourceEvent]:
    """Changes of one Services resource, from an open watch, until it reports healthy."""
    seen: list[ResourceEvent] = []
    for event in watch:
        seen.append(event)
        spec = spec_of(event)
        if event.type != "destroyed" and isinstance(spec, ServiceSpec) and spec.healthy:
            return seen
    raise AssertionError(f"the service never became healthy; saw {[e.type for e in seen]}")


async def with_transport(path: Path, use: Callable[[Connection], Awaitable[T]]) -> T:
    """A bare transport (no client) from the talosconfig, for calls the client does not make."""
    context = load_talosconfig(path, env={}).context
    transport = Connection(
        GrpcTransport(
            context.endpoints[0],
            build_ssl_context(context.ca_pem, context.crt_pem, context.key_pem),
        ),
        timeout=WAIT,
    )
    try:
        return await use(transport)
    finally:
        await transport.aclose()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cp_node(emulated_cluster: EmulatedCluster) -> NodeInfo:
    return next(n for n in emulated_cluster.nodes if n.role == "controlplane")


@pytest.fixture(scope="module")
def worker_node(emulated_cluster: EmulatedCluster) -> NodeInfo:
    return next(n for n in emulated_cluster.nodes if n.role == "worker")


@pytest.fixture(scope="module")
def talos(emulated_cluster: EmulatedCluster) -> Iterator[TalosClient]:
    """The admin client of the cluster's own talosconfig (endpoint: the control plane)."""
    with TalosClient.from_talosconfig(emulated_cluster.talosconfig_path, env={}) as client:
        for node in emulated_cluster.nodes:
            wait_until_ready(client.with_node(node.address))
        yield client


@pytest.fixture
def cp(talos: TalosClient, cp_node: NodeInfo) -> TalosClient:
    return talos.with_node(cp_node.address)


@pytest.fixture
def worker(talos: TalosClient, worker_node: NodeInfo) -> TalosClient:
    """The worker, reached through the control plane's apid (one-to-one proxying)."""
    return talos.with_node(worker_node.address)


@pytest.fixture
def restore_worker_config(worker: TalosClient) -> Iterator[MachineConfig]:
    """The worker's config before the test; the same bytes are applied back afterwards.

    Re-applying with no-reboot also cancels a pending try-mode timer and replaces a staged
    config (ApplyConfiguration), so the next test finds the node exactly as configured before.
    """
    original = worker.machine_config()
    yield original
    worker.apply_configuration(original.raw, mode="no-reboot")
    assert worker.machine_config().raw == original.raw


@pytest.fixture
def reader_path(emulated_cluster: EmulatedCluster, tmp_path: Path) -> Path:
    identity = emulated_cluster.issue_client(["os:reader"], path=tmp_path / "reader")
    assert identity.path is not None
    return identity.path
