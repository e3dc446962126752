"""What a node's services show beyond the runner: their events, the Services resources, their
logs and why kubelet cannot run (the runner itself is :mod:`.runner`)."""

from __future__ import annotations

from collections.abc import Callable

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.cosi.store import ResourceStore
from pytest_talos.emulator.errors import RPCFailure
from pytest_talos.emulator.faults import ServiceQuirk
from pytest_talos.emulator.node.events import ServiceStatePayload
from pytest_talos.emulator.node.services.runner import Service, ServiceManager
from pytest_talos.errors import StatusCode

__all__ = [
    "OWNER_SERVICES",
    "LogFanout",
    "failure_reason",
    "publish_service_resource",
    "service_event",
    "service_log",
]

OWNER_SERVICES = "v1alpha1.ServiceController"


def service_event(service: Service, message: str) -> ServiceStatePayload:
    """system/events/events.go AsProto: an event carries the health only when it is a
    Running one (service_runner.go UpdateState, healthUpdate); else the zero Status."""
    health = service.health if service.running else None
    return ServiceStatePayload(
        service.id,
        service.state.upper(),
        message,
        healthy=health.healthy if health else False,
        unknown=health.unknown if health else True,
        last_message=health.last_message if health else "",
    )


def publish_service_resource(
    store: ResourceStore, service: Service, *, quirk: Callable[[ServiceQuirk], bool]
) -> None:
    """controllers/v1alpha1/service.go: the Services resource exists only while the service is
    Running (created or updated on each RUNNING event, else destroyed)."""
    if service.running:
        spec = {
            "running": True,
            "healthy": service.health.healthy,
            "unknown": service.health.unknown,
        }
        store.put("runtime", T.SERVICES, service.id, spec, owner=OWNER_SERVICES)
    elif not quirk(ServiceQuirk.SERVICE_RESOURCE_OUTLIVES_STOP):
        store.destroy("runtime", T.SERVICES, service.id)


def failure_reason(
    service_id: str, *, config: bytes, quirk: Callable[[ServiceQuirk], bool]
) -> str | None:
    """Why a service cannot run right now, as the lines it logs before it exits.

    A kubelet given an unknown flag exits at once and is restarted every 5 s; the cause
    shows only in its last event and its log (observed on Talos v1.13.10 nodes).
    """
    if service_id != "kubelet":
        return None
    unknown = mc.unknown_kubelet_flags(config)
    if unknown:
        flag = unknown[0]
        return (
            f"Error: failed to parse kubelet flag: unknown flag: --{flag}\n"
            f'E0000 command failed err="failed to parse kubelet flag: unknown flag: --{flag}"'
        )
    if quirk(ServiceQuirk.KUBELET_EXITS_AFTER_START):
        return (
            'E0000 command failed err="failed to run Kubelet: validate service connection: '
            'CRI v1 runtime API is not implemented for endpoint"'
        )
    return None


def service_log(
    services: ServiceManager, service_id: str, *, quirk: Callable[[ServiceQuirk], bool]
) -> list[str]:
    """A service's log; runtime/logging/circular.go: a log exists once the service's
    runner first wrote to it, else `log "<id>" was not registered`."""
    service = services.services.get(service_id)
    # containerd runs, but its log is not registered
    broken = service_id == "containerd" and quirk(ServiceQuirk.CONTAINERD_LOG_UNREGISTERED)
    if service is None or not service.log_registered or broken:
        raise RPCFailure(StatusCode.UNKNOWN, f'log "{service_id}" was not registered')
    if service_id == "apid" and quirk(ServiceQuirk.APID_LOG_EMPTY):
        return []  # apid runs, but its log holds nothing
    return list(service.log)


class LogFanout:
    """Who follows the node's service logs (the Logs RPC with follow)."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[str, str], None]] = []

    def publish(self, service: Service, line: str) -> None:
        for subscriber in list(self._subscribers):
            subscriber(service.id, line)

    @property
    def subscriber_count(self) -> int:
        """How many Logs streams with follow are open on the node."""
        return len(self._subscribers)

    def subscribe(self, subscriber: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``subscriber(service_id, line)`` for every new service log line."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe
