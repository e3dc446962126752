"""System services of an emulated node and their state machine.

facts §3 (Services): state strings, the last 64 events per service, health (``unknown`` when
a service has no health check), and the API rules: only ``kubelet`` and extension services
may be started, stopped or restarted. facts §13 B4: a kubelet that cannot start fails, is
restarted about every 5 s, and says why in its log and last event.

Transitions are scheduled on the :class:`~pytest_talos.emulator.clock.Clock`; nothing sleeps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pytest_talos.emulator.clock import Cancellable, Clock

__all__ = [
    "RESTART_DELAY",
    "Service",
    "ServiceEventRecord",
    "ServiceManager",
    "ServiceRefused",
    "services_for",
]

RESTART_DELAY = 5.0  # facts §13 B4: kubelet restarts about every 5 s
START_DELAY = 0.3  # Preparing -> Running (INFERRED)
HEALTH_DELAY = 1.0  # Running -> first successful health check (INFERRED; B5 heals < 3 s)
FAIL_DELAY = 0.5  # a kubelet with a bad flag exits right after it starts (INFERRED)
MAX_EVENTS = 64  # facts §3: ServiceEvents holds the last 64
MAX_LOG_LINES = 5000

# Services with a health check (the others report health unknown). INFERRED split.
_HEALTH_CHECKED = frozenset({"apid", "containerd", "cri", "etcd", "kubelet", "trustd"})
# facts §3: only kubelet and extension services allow start/stop/restart via the API.
_API_CONTROLLABLE = frozenset({"kubelet"})
# Services run as containerd tasks (their "Started task" event); the others are goroutines.
_CONTAINERD_TASKS = frozenset({"apid", "etcd", "kubelet", "trustd", "udevd"})


def services_for(
    *, controlplane: bool, platform: str, extension_services: Iterable[str] = ()
) -> list[str]:
    """Service ids of a node (facts §3 'Service IDs seen on a node'); sorted like talosctl."""
    ids = ["apid", "auditd", "containerd", "cri", "kubelet", "machined", "syslogd", "udevd"]
    if controlplane:
        ids += ["etcd", "trustd"]  # trustd issues worker certificates; control planes only
    if platform != "container":
        ids.append("dashboard")  # INFERRED: no console in a container
    ids += [f"ext-{name}" for name in extension_services]  # facts §3: extension services
    return sorted(ids)


# What a service waits for before it starts (its first event). INFERRED wording.
_WAITS = {
    "apid": 'Waiting for service "containerd" to be "up", api certificates',
    "trustd": 'Waiting for service "containerd" to be "up", time sync, network',
    "cri": "Waiting for network",
    "etcd": 'Waiting for service "cri" to be "up", time sync, network, etcd spec',
    "kubelet": 'Waiting for service "cri" to be "up", time sync, network, nodename',
}


class ServiceRefused(Exception):
    """A service API call Talos answers with a plain (code Unknown) error."""


@dataclass(frozen=True)
class ServiceEventRecord:
    msg: str
    state: str
    time: float  # emulated Unix seconds


@dataclass
class Health:
    unknown: bool = True
    healthy: bool = False
    last_message: str = ""
    last_change: float | None = None


@dataclass
class Service:
    id: str
    state: str = "Initialized"
    events: deque[ServiceEventRecord] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    health: Health = field(default_factory=Health)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    restarts: int = 0
    timer: Cancellable | None = None

    @property
    def health_checked(self) -> bool:
        return self.id in _HEALTH_CHECKED

    @property
    def api_controllable(self) -> bool:
        return self.id in _API_CONTROLLABLE or self.id.startswith("ext-")

    @property
    def running(self) -> bool:
        return self.state == "Running"

    @property
    def last_event(self) -> ServiceEventRecord | None:
        return self.events[-1] if self.events else None


# Hooks the node gives the manager: a state/health change, and a new log line.
ChangeHook = Callable[[Service, str], None]
LogHook = Callable[[Service, str], None]


class ServiceManager:
    """Runs the node's services: start, stop, restart, fail, crash-loop, heal."""

    def __init__(
        self,
        ids: Iterable[str],
        *,
        clock: Clock,
        on_change: ChangeHook,
        on_log: LogHook,
        failure_reason: Callable[[str], str | None],
    ) -> None:
        self.clock = clock
        self.services: dict[str, Service] = {sid: Service(sid) for sid in ids}
        self._on_change = on_change
        self._on_log = on_log
        self._failure_reason = failure_reason
        self._pid = 1000

    # ---- the API rules (facts §3) ------------------------------------------------------

    def _controllable(self, service_id: str, operation: str) -> Service:
        service = self.services.get(service_id)
        if service is None:
            raise ServiceRefused(f'service "{service_id}" not defined')
        if not service.api_controllable:
            raise ServiceRefused(
                f'service "{service_id}" doesn\'t support {operation} operation via API'
            )
        return service

    def api_start(self, service_id: str) -> str:
        service = self._controllable(service_id, "start")
        if not self._active(service):  # facts §3: starting a running service is a no-op
            self.launch(service)
        return f'Service "{service_id}" started'

    def api_stop(self, service_id: str) -> str:
        service = self._controllable(service_id, "stop")
        self.stop(service)  # facts §3: stopping a stopped service is a no-op
        return f'Service "{service_id}" stopped'

    def api_restart(self, service_id: str) -> str:
        service = self._controllable(service_id, "restart")
        self.stop(service)  # facts §3: restart of a stopped service = start
        self.launch(service)
        return f'Service "{service_id}" restarted'

    # ---- transitions ------------------------------------------------------------------

    @staticmethod
    def _active(service: Service) -> bool:
        return service.state in ("Preparing", "Waiting", "Starting", "Running")

    def _cancel(self, service: Service) -> None:
        if service.timer is not None:
            service.timer.cancel()
            service.timer = None

    def _later(self, service: Service, delay: float, action: Callable[[], None]) -> None:
        self._cancel(service)

        def fire() -> None:
            service.timer = None
            action()

        service.timer = self.clock.call_later(delay, fire)

    def record(self, service: Service, state: str, msg: str) -> None:
        service.state = state
        service.events.append(ServiceEventRecord(msg, state, self.clock.time()))
        if state != "Running":
            service.health = Health(last_change=self.clock.time())
        self._on_change(service, msg)

    def log(self, service: Service, line: str) -> None:
        service.log.append(line)
        self._on_log(service, line)

    def boot(self, *, down: Iterable[str] = ()) -> None:
        """Start every service (boot); ``down`` ones fail once and stay down."""
        for service in self.services.values():
            if service.id in down:
                self.launch(service, immediate=True)
                self.fail(service, "exit status 1", restart=False)
            else:
                self.launch(service, immediate=True)

    def launch(self, service: Service, *, immediate: bool = False) -> None:
        """Preparing -> Running -> healthy, or -> Failed if the service cannot run."""
        self._cancel(service)
        if service.id in _WAITS:
            self.record(service, "Waiting", _WAITS[service.id])
        self.record(service, "Preparing", "Running pre stage")
        self.record(service, "Preparing", "Creating service runner")
        if immediate:
            self._run(service, immediate=True)
        else:
            self._later(service, START_DELAY, lambda: self._run(service))

    def _started_message(self, service: Service) -> str:
        self._pid += 7
        if service.id in _CONTAINERD_TASKS:
            return f"Started task {service.id} (PID {self._pid}) for container {service.id}"
        return "Service started as goroutine"

    def _run(self, service: Service, *, immediate: bool = False) -> None:
        self.record(service, "Running", self._started_message(service))
        self.log(service, f"{service.id}: starting")
        reason = self._failure_reason(service.id)
        if reason is not None:
            self._later(service, FAIL_DELAY, lambda: self._crash(service, reason))
        elif service.health_checked:
            if immediate:
                self.set_health(service, healthy=True, message="Health check successful")
            else:
                self._later(
                    service,
                    HEALTH_DELAY,
                    lambda: self.set_health(service, True, "Health check successful"),
                )

    def _crash(self, service: Service, reason: str) -> None:
        for line in reason.splitlines():
            self.log(service, line)
        self.fail(service, "exit code 1", restart=True)

    def fail(self, service: Service, exit_status: str, *, restart: bool) -> None:
        """The service's process exited with an error (B4: Failed event, restart in 5 s)."""
        self._cancel(service)
        service.restarts += 1
        message = (
            f"Error running Containerd({service.id}), going to restart forever: "
            f'task "{service.id}" failed: {exit_status}'
            if restart
            else f'Error running Containerd({service.id}): task "{service.id}" failed: '
            f"{exit_status}"
        )
        self.record(service, "Failed", message)
        if restart:
            self._later(service, RESTART_DELAY, lambda: self.launch(service))

    def set_health(self, service: Service, healthy: bool, message: str) -> None:
        if service.state != "Running":
            return
        service.health = Health(
            unknown=False,
            healthy=healthy,
            last_message="" if healthy else message,
            last_change=self.clock.time(),
        )
        self.record_health(service, message)

    def record_health(self, service: Service, message: str) -> None:
        service.events.append(ServiceEventRecord(message, "Running", self.clock.time()))
        self._on_change(service, message)

    def stop(self, service: Service) -> None:
        self._cancel(service)  # also drops a pending crash-loop restart
        if not self._active(service):
            return
        self.record(service, "Stopping", "Service stopping")
        self.log(service, f"{service.id}: received stop signal")
        self.record(service, "Finished", "Service finished successfully")

    def restart_if_running(self, service_id: str) -> None:
        """A config change reaches a service: it is restarted (kubelet on extraArgs change)."""
        service = self.services.get(service_id)
        if service is None or service.state == "Finished":
            return
        if service.state != "Failed":  # a crash-looping service just restarts now
            self.stop(service)
        self.launch(service)

    def stop_all(self) -> None:
        for service in reversed(list(self.services.values())):
            self.stop(service)

    def cancel_all(self) -> None:
        for service in self.services.values():
            self._cancel(service)
