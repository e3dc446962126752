"""The machine and cluster API streams a client subscribes to: Events and HealthCheck.

Both are opened through :meth:`Caller.open`, so a stream is handed out only once the node
confirmed it with its first message (see :class:`~pytest_talos.client._streams.OpenedStream`).
"""

from __future__ import annotations

from pytest_talos import models
from pytest_talos._proto.cluster import cluster_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.client import _convert as convert
from pytest_talos.client import _rpcs as rpcs
from pytest_talos.client._caller import Caller
from pytest_talos.client._streams import OpenedStream

__all__ = ["open_events", "open_health_check"]


async def open_events(
    caller: Caller, request: m.EventsRequest, timeout: float
) -> OpenedStream[models.Event]:
    """Runtime events of the client's node; the hello and unknown payload types skipped."""
    target = caller.target(rpcs.EVENTS.path)

    def events_of(message: m.Event) -> list[models.Event]:
        event = convert.event(message, target.node)
        return [event] if event is not None else []

    return await caller.open(rpcs.EVENTS, request, target, events_of, total_timeout=timeout)


async def open_health_check(
    caller: Caller, request: cluster_pb2.HealthCheckRequest, timeout: float
) -> OpenedStream[models.HealthProgress]:
    """The server-side health check's progress lines, within ``timeout`` seconds."""
    target = caller.target(rpcs.HEALTH_CHECK.path)

    def progress_of(message: cluster_pb2.HealthCheckProgress) -> list[models.HealthProgress]:
        return [convert.health_progress(message, target.node)]

    return await caller.open(rpcs.HEALTH_CHECK, request, target, progress_of, total_timeout=timeout)
