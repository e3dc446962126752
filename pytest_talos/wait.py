"""Waits with deadlines that follow the node's own change feeds instead of sleep-polling.

* Services: a COSI watch of the ``Services`` resource (it exists only while the service runs
  and carries its health), which starts with the current state and then reports every change.
* The machine config: a COSI watch of ``MachineConfigs`` ``v1alpha1``.
* Anything without a feed (a Kubernetes condition, say): :func:`wait_until`, polling with
  backoff.

Every wait ends with :class:`~pytest_talos.errors.WaitTimeout` carrying the last observation
and the time waited. Given ``cancelled`` (a callable), a wait also asks it at least every
``CANCEL_CHECK`` seconds and ends with :class:`~pytest_talos.errors.WaitCancelled` once it
says so: how a check run on a thread is stopped when its run stops. Observations never
include config bytes (they hold secrets): configs are summarised by version, size and digest.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from pytest_talos import models
from pytest_talos.errors import (
    DeadlineExceeded,
    NotFound,
    TalosError,
    WaitCancelled,
    WaitTimeout,
)
from pytest_talos.node import TalosNode

__all__ = [
    "CANCEL_CHECK",
    "MACHINE_CONFIG_RESOURCE",
    "SERVICES_RESOURCE",
    "Cancelled",
    "ServiceState",
    "StabilityReport",
    "config_summary",
    "wait_for_config",
    "wait_for_service",
    "wait_service_stable",
    "wait_until",
]

T = TypeVar("T")
Clock = Callable[[], float]
Cancelled = Callable[[], bool]

SERVICES_RESOURCE = ("Services.v1alpha1.talos.dev", "runtime")
MACHINE_CONFIG_RESOURCE = ("MachineConfigs.config.talos.dev", "v1alpha1", "config")
# A watch shorter than this is not worth opening (a proxied one may not even connect in time).
_MIN_WATCH = 0.25
# Real seconds a cancellable wait goes at most without asking whether it should stop.
CANCEL_CHECK = 1.0


def _stop_if_cancelled(cancelled: Cancelled | None, description: str, node: str | None) -> None:
    if cancelled is not None and cancelled():
        raise WaitCancelled(f"stopped waiting for {description}: the run is stopping", node=node)


@dataclass(frozen=True)
class ServiceState:
    """A service as its ``Services`` resource shows it (absent = not Running)."""

    service: str
    running: bool
    healthy: bool
    health_unknown: bool

    @property
    def good(self) -> bool:
        return self.running and self.healthy

    def __str__(self) -> str:
        if not self.running:
            return f"{self.service}: not running"
        health = (
            "health unknown"
            if self.health_unknown
            else ("healthy" if self.healthy else "unhealthy")
        )
        return f"{self.service}: running, {health}"


@dataclass
class StabilityReport:
    """What :func:`wait_service_stable` saw: each state change with its time offset."""

    service: str
    stable_for: float
    elapsed: float = 0.0
    changes: list[tuple[float, ServiceState]] = field(default_factory=list)
    restarts: int = 0  # times the service stopped running after it had run

    @property
    def last(self) -> ServiceState | None:
        return self.changes[-1][1] if self.changes else None

    def __repr__(self) -> str:
        return (
            f"<{self.service}: {len(self.changes)} changes, {self.restarts} restarts, "
            f"last {self.last or 'unseen'}>"
        )

    def timeline(self) -> str:
        return "\n".join(f"+{at:6.2f}s {state}" for at, state in self.changes) or "(no change)"


def config_summary(raw: bytes, version: int | None = None) -> str:
    """A safe one-line description of a machine config (no content)."""
    digest = hashlib.sha256(raw).hexdigest()[:12]
    prefix = f"version {version}, " if version is not None else ""
    return f"{prefix}{len(raw)} bytes, sha256 {digest}"


# --------------------------------------------------------------------------- services


def _service_state(service_id: str, event: models.ResourceEvent) -> ServiceState:
    if event.type == "errored":
        raise TalosError(f"the watch of service {service_id} failed: {event.error}")
    spec = event.resource.typed_spec if event.resource is not None else None
    if event.type == "destroyed" or not isinstance(spec, models.ServiceSpec):
        return ServiceState(service_id, running=False, healthy=False, health_unknown=True)
    return ServiceState(service_id, spec.running, spec.healthy, spec.unknown)


def _service_events(node: TalosNode, service_id: str, timeout: float) -> Iterator[ServiceState]:
    """The service's current state, then each change, until ``timeout`` (then stops)."""
    kind, namespace = SERVICES_RESOURCE
    try:  # the watch is set up by the call itself, so its deadline may pass there too
        with node.client.watch(kind, service_id, namespace, timeout=timeout) as stream:
            for event in stream:
                if event.type in ("bootstrapped", "noop"):
                    continue
                yield _service_state(service_id, event)
    except DeadlineExceeded:
        return


def _current_state(node: TalosNode, service_id: str) -> ServiceState:
    try:
        info = node.service(service_id)
    except NotFound:
        return ServiceState(service_id, running=False, healthy=False, health_unknown=True)
    return ServiceState(service_id, info.running, info.healthy, info.health_unknown)


def wait_for_service(
    node: TalosNode,
    service_id: str,
    *,
    healthy: bool = True,
    timeout: float = 60.0,
    clock: Clock = time.monotonic,
) -> ServiceState:
    """Until ``service_id`` runs (and, with ``healthy``, passes its health check)."""
    started = clock()
    last: ServiceState | None = None
    remaining = timeout
    while remaining > _MIN_WATCH:
        for state in _service_events(node, service_id, remaining):
            last = state
            if state.running and (state.healthy or not healthy):
                return state
        remaining = started + timeout - clock()
    wanted = "running and healthy" if healthy else "running"
    raise WaitTimeout(
        f"service {service_id} did not become {wanted}",
        last_observation=str(last) if last else "no state seen",
        elapsed=clock() - started,
        node=node.name,
    )


def wait_service_stable(
    node: TalosNode,
    service_id: str,
    *,
    stable_for: float,
    timeout: float,
    max_restarts: int | None = 3,
    clock: Clock = time.monotonic,
) -> StabilityReport:
    """Until the service has been running and healthy for ``stable_for`` seconds on end.

    Every time it stops running or turns unhealthy the window starts again. Gives up with
    WaitTimeout after ``timeout`` seconds, or as soon as the service has stopped
    ``max_restarts`` times (a crash loop: no point waiting longer). The timeout's
    ``last_observation`` is the :class:`StabilityReport`.
    """
    report = StabilityReport(service_id, stable_for)
    started = clock()
    window_start: float | None = None
    was_running = False
    while True:
        now = clock()
        report.elapsed = now - started
        if window_start is not None and now - window_start >= stable_for:
            return report
        if now - started >= timeout or (max_restarts and report.restarts >= max_restarts):
            break
        wake = started + timeout
        if window_start is not None:
            wake = min(wake, window_start + stable_for)
        if wake - now <= _MIN_WATCH:
            # Too short to open a watch for: wait it out, then look once more.
            clock_until(clock, wake)
            states: Iterable[ServiceState] = [_current_state(node, service_id)]
        else:
            states = _service_events(node, service_id, wake - now)
        for state in states:
            if report.last != state:
                report.changes.append((clock() - started, state))
            if was_running and not state.running:
                report.restarts += 1
            was_running = state.running
            if not state.good:
                window_start = None
            elif window_start is None:
                window_start = clock()
                break  # reopen the watch with the window's end as its deadline
            if max_restarts and report.restarts >= max_restarts:
                break
    report.elapsed = clock() - started
    why = (
        "kept restarting"
        if max_restarts and report.restarts >= max_restarts
        else (f"was not running and healthy for {stable_for:g}s on end")
    )
    raise WaitTimeout(
        f"service {service_id} {why}",
        last_observation=report,
        elapsed=report.elapsed,
        node=node.name,
    )


def clock_until(clock: Clock, moment: float) -> None:
    """Sleep the few milliseconds left before ``moment`` (too short to open a watch for)."""
    remaining = moment - clock()
    if remaining > 0:
        time.sleep(remaining)


# --------------------------------------------------------------------------- machine config


def _config_of(event: models.ResourceEvent) -> bytes | None:
    if event.type == "errored":
        raise TalosError(f"the watch of the machine config failed: {event.error}")
    spec = event.resource.typed_spec if event.resource is not None else None
    if event.type == "destroyed" or not isinstance(spec, models.MachineConfigSpec):
        return None
    return spec.yaml


def wait_for_config(
    node: TalosNode,
    predicate: Callable[[bytes], bool],
    *,
    timeout: float,
    description: str = "the machine config to change",
    clock: Clock = time.monotonic,
    cancelled: Cancelled | None = None,
) -> bytes:
    """Until the active machine config's bytes satisfy ``predicate``; returns them.

    With ``cancelled``, the watch is reopened every ``CANCEL_CHECK`` seconds to ask it
    (each new watch starts with the current config, so no state is skipped for long)."""
    kind, ident, namespace = MACHINE_CONFIG_RESOURCE
    started = clock()
    last = "no config seen"
    remaining = timeout
    while remaining > _MIN_WATCH:
        _stop_if_cancelled(cancelled, description, node.name)
        window = remaining if cancelled is None else min(remaining, CANCEL_CHECK)
        try:  # the watch is set up by the call itself, so its deadline may pass there too
            with node.client.watch(kind, ident, namespace, timeout=window) as stream:
                for event in stream:
                    raw = _config_of(event)
                    if raw is None:
                        continue
                    version = event.resource.version if event.resource is not None else None
                    last = config_summary(raw, version)
                    if predicate(raw):
                        return raw
        except DeadlineExceeded:
            pass
        remaining = started + timeout - clock()
    raise WaitTimeout(
        f"gave up waiting for {description}",
        last_observation=last,
        elapsed=clock() - started,
        node=node.name,
    )


# --------------------------------------------------------------------------- polling fallback


def wait_until(
    probe: Callable[[], T],
    predicate: Callable[[T], bool],
    *,
    timeout: float,
    description: str,
    interval: float = 0.2,
    max_interval: float = 2.0,
    node: str | None = None,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    cancelled: Cancelled | None = None,
) -> T:
    """Call ``probe`` until ``predicate(result)`` holds, backing off between calls.

    For conditions nothing streams. A TalosError from ``probe`` counts as an observation
    (the node may be restarting) and the wait goes on.
    """
    started = clock()
    last: object = "nothing observed yet"
    delay = min(interval, CANCEL_CHECK) if cancelled is not None else interval
    max_interval = min(max_interval, CANCEL_CHECK) if cancelled is not None else max_interval
    while True:
        _stop_if_cancelled(cancelled, description, node)
        try:
            value = probe()
        except TalosError as exc:
            last = exc
        else:
            if predicate(value):
                return value
            last = value
        elapsed = clock() - started
        if elapsed >= timeout:
            raise WaitTimeout(
                f"gave up waiting for {description}",
                last_observation=last,
                elapsed=elapsed,
                node=node,
            )
        sleep(min(delay, max(timeout - elapsed, 0.0)))
        delay = min(delay * 2, max_interval)
