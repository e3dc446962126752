"""System services of an emulated node: which ones run, how each is run, and their events.

Everything here follows siderolabs/talos v1.13.9 (paths below are in that repository):

* which services a node loads: ``internal/app/machined/pkg/runtime/v1alpha1/
  v1alpha1_sequencer.go`` (container mode starts apid, machined and containerd; metal adds
  udevd, auditd, syslogd and dashboard) and ``v1alpha1_sequencer_tasks.go``
  (``StartAllServices``: cri, and trustd and etcd on control planes; kubelet is loaded there
  and started by ``controllers/k8s/kubelet_service.go``);
* how one start runs: ``internal/app/machined/pkg/system/service_runner.go`` (``Starting
  service``, ``Waiting for <conditions>``, ``Running pre state``, ``Creating service
  runner``, then the runner's own events) and ``system/system.go`` (``Service finished
  successfully``, ``Failed`` with the capitalised error, the API start/stop/restart rules);
* the runners' texts: ``system/runner/containerd/containerd.go`` (``Started task ...``),
  ``runner/process/process.go`` (``Process Process([...]) started with PID <n>``),
  ``runner/goroutine/goroutine.go`` (``Service started as goroutine``);
* a crash: ``system/runner/restart/restart.go`` restarts the runner forever, every 5 s, and
  records it as ``Waiting`` (never ``Failed``) without repeating the pre-start events;
* health: ``system/health/{check,settings,status}.go`` (first check after the initial delay,
  then every period; an event only when healthy flips) and each service's settings in
  ``system/services/<id>.go``.

Transitions are scheduled on the :class:`~pytest_talos.emulator.clock.Clock`; nothing sleeps.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.errors import ServiceRefused

__all__ = [
    "RESTART_DELAY",
    "Service",
    "ServiceDefinition",
    "ServiceEventRecord",
    "ServiceManager",
    "ServiceRefused",
    "definition_of",
    "go_quote",
    "services_for",
]

RESTART_DELAY = 5.0  # restart.go DefaultOptions: RestartInterval 5 s
CONDITIONS_DELAY = 0.1  # Waiting -> Preparing: conditions met at boot speed (INFERRED)
START_DELAY = 0.3  # Starting -> Running (INFERRED)
FAIL_DELAY = 0.5  # a kubelet with a bad flag exits right after it starts (INFERRED)
MAX_EVENTS = 64  # system/events/events.go MaxEventsToKeep
MAX_LOG_LINES = 5000
LAST_LOG_LIMIT = 512  # system/runner/internal/lastlog/lastlog.go: the last 512 bytes

SYSTEM_CONTAINERD = "/system/run/containerd/containerd.sock"  # constants.SystemContainerdAddress
MACHINE_SOCKET = "/system/run/machined/machine.sock"  # constants.MachineSocketPath


class Runner(enum.Enum):
    CONTAINERD = "containerd"  # runner/containerd/containerd.go
    PROCESS = "process"  # runner/process/process.go
    GOROUTINE = "goroutine"  # runner/goroutine/goroutine.go


@dataclass(frozen=True)
class HealthSettings:
    """system/health/settings.go: when the first check runs and how often after that."""

    initial_delay: float = 1.0
    period: float = 5.0


DEFAULT_HEALTH = HealthSettings()  # health.DefaultSettings


@dataclass(frozen=True)
class ServiceDefinition:
    """How Talos runs one service (system/services/<id>.go)."""

    id: str
    runner: Runner
    args: tuple[str, ...] = ()  # the process runner's ProcessArgs (shown in its texts)
    restarts: bool = True  # wrapped in restart.New(..., restart.Forever)
    health: HealthSettings | None = DEFAULT_HEALTH  # None: not a HealthcheckedService
    waits: tuple[str, ...] = ()  # the condition descriptions, in service_runner.go order
    api: frozenset[str] = frozenset()  # start / stop / restart allowed via the API
    # What the health check says when the service does not answer (the check's own error).
    unreachable: str = "service not running"

    def runner_name(self) -> str:
        """The runner's String(): what restart.go names in its Waiting event."""
        if self.runner is Runner.CONTAINERD:
            return f"Containerd({self.id})"
        if self.runner is Runner.PROCESS:
            return f"Process({go_string_list(self.args)})"
        return f"Goroutine({go_quote(self.id)})"


def _volumes(*paths: str) -> str:
    # system/volumes.go volumesMountedCondition.String
    return f"volumes {', '.join(paths)} to be mounted"


def _service_up(service_id: str) -> str:
    return f'service "{service_id}" to be "up"'  # system/service_events.go serviceCondition


_CRI_VOLUMES = ("/var/lib", "/var/lib/cni", "/var/lib/containerd", "/var/run", "/var/run/lock")
# constants.Overlays: CRI mounts them too outside containers (services/cri.go Volumes)
_OVERLAYS = ("/etc/cni", "/etc/kubernetes", "/usr/libexec/kubernetes", "/opt")
_KUBELET_VOLUMES = (
    "/var/lib",
    "/var/lib/kubelet",
    "/var/log",
    "/var/log/audit",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/kubelet/seccomp",
    "/var/lib/kubelet/seccomp/profiles",
    "/var/log/audit/kube",
    "/var/mnt",
)


def _definitions(*, container: bool) -> dict[str, ServiceDefinition]:
    cri_volumes = _CRI_VOLUMES if container else _CRI_VOLUMES + _OVERLAYS
    found = [
        # services/apid.go: DependsOn containerd; secrets.APIReadyCondition, APIServiceConfig
        ServiceDefinition(
            "apid",
            Runner.CONTAINERD,
            waits=(_service_up("containerd"), "api certificates", "config to be ready"),
            unreachable="dial tcp 127.0.0.1:50000: connect: connection refused",
        ),
        # services/containerd.go: the system containerd, no conditions
        ServiceDefinition(
            "containerd",
            Runner.PROCESS,
            args=(
                "/bin/containerd",
                "--address",
                SYSTEM_CONTAINERD,
                "--state",
                "/system/run/containerd",
                "--root",
                "/system/var/lib/containerd",
            ),
            unreachable=f"dial unix {SYSTEM_CONTAINERD}: connect: connection refused",
        ),
        # services/cri.go: volumes, then network ready
        ServiceDefinition(
            "cri",
            Runner.PROCESS,
            args=(
                "/bin/containerd",
                "--address",
                "/run/containerd/containerd.sock",
                "--config",
                "/etc/cri/containerd.toml",
            ),
            waits=(_volumes(*cri_volumes), "network"),
            unreachable="dial unix /run/containerd/containerd.sock: connect: connection refused",
        ),
        # services/etcd.go: volumes /var/lib and ETCD; DependsOn cri; time, network, etcd spec
        ServiceDefinition(
            "etcd",
            Runner.CONTAINERD,
            waits=(
                _volumes("/var/lib", "ETCD"),
                _service_up("cri"),
                "time sync",
                "network",
                "etcd spec",
            ),
            unreachable="dial tcp 127.0.0.1:2379: connect: connection refused",
        ),
        # services/kubelet.go: health InitialDelay 2 s; API start and restart, never stop
        ServiceDefinition(
            "kubelet",
            Runner.CONTAINERD,
            health=HealthSettings(initial_delay=2.0),
            waits=(_volumes(*_KUBELET_VOLUMES), _service_up("cri"), "time sync", "network"),
            api=frozenset({"start", "restart"}),
            unreachable=(
                'Get "http://127.0.0.1:10248/healthz": dial tcp 127.0.0.1:10248: connect: '
                "connection refused"
            ),
        ),
        # services/machined.go: a goroutine runner without a restart wrapper; health dials
        # the machine socket
        ServiceDefinition(
            "machined",
            Runner.GOROUTINE,
            restarts=False,
            unreachable=f"dial unix {MACHINE_SOCKET}: connect: connection refused",
        ),
        # services/trustd.go: DependsOn containerd; time sync, network
        ServiceDefinition(
            "trustd",
            Runner.CONTAINERD,
            waits=(_service_up("containerd"), "time sync", "network"),
            unreachable="dial tcp 127.0.0.1:50001: connect: connection refused",
        ),
        # services/udevd.go: health InitialDelay 100 ms, Period 1 min
        ServiceDefinition(
            "udevd",
            Runner.PROCESS,
            args=("/sbin/systemd-udevd", "--resolve-names=never"),
            health=HealthSettings(initial_delay=0.1, period=60.0),
            unreachable='file "/run/udev/control" does not exist',  # INFERRED wording
        ),
        # services/auditd.go: a goroutine with restart.Forever; its check always passes
        ServiceDefinition("auditd", Runner.GOROUTINE),
        # services/syslogd.go: a goroutine without a restart wrapper; DependsOn machined
        ServiceDefinition(
            "syslogd", Runner.GOROUTINE, restarts=False, waits=(_service_up("machined"),)
        ),
        # services/dashboard.go: no health check; waits for machined and its socket
        ServiceDefinition(
            "dashboard",
            Runner.PROCESS,
            args=("/sbin/dashboard",),
            health=None,
            waits=(_service_up("machined"), f'file "{MACHINE_SOCKET}" to exist'),
        ),
        # services/registryd.go: only with the image cache (not started by this emulator)
        ServiceDefinition("registryd", Runner.GOROUTINE, restarts=False),
    ]
    return {definition.id: definition for definition in found}


_CONTAINER_DEFINITIONS = _definitions(container=True)
_METAL_DEFINITIONS = _definitions(container=False)


def definition_of(service_id: str, *, container: bool = True) -> ServiceDefinition:
    """How Talos runs ``service_id``; extension services (``ext-<name>``) as extension.go."""
    table = _CONTAINER_DEFINITIONS if container else _METAL_DEFINITIONS
    known = table.get(service_id)
    if known is not None:
        return known
    # services/extension.go: containerd runner, DependsOn containerd, no health check,
    # restart: always (the default) -> restart.Forever; start, stop and restart via the API
    return ServiceDefinition(
        service_id,
        Runner.CONTAINERD,
        health=None,
        waits=(_service_up("containerd"),),
        api=frozenset({"start", "stop", "restart"}),
    )


def services_for(
    *, controlplane: bool, platform: str, extension_services: Iterable[str] = ()
) -> list[str]:
    """Service ids a booted node lists, sorted as ServiceList sorts them (system.go List).

    Container mode: apid, machined, containerd (initialize), cri and kubelet, plus trustd and
    etcd on control planes (boot). Elsewhere the initialize sequence also starts udevd,
    auditd, syslogd and the dashboard (v1alpha1_sequencer.go Initialize).
    """
    ids = ["apid", "containerd", "cri", "kubelet", "machined"]
    if controlplane:
        ids += ["etcd", "trustd"]
    if platform != "container":
        ids += ["udevd", "auditd", "syslogd", "dashboard"]
    ids += [f"ext-{name}" for name in extension_services]
    return sorted(ids)


# --------------------------------------------------------------------------- Go formatting


def go_quote(text: str) -> str:
    """``text`` as Go's ``%q`` prints a string (strconv.Quote)."""
    escapes = {
        "\a": r"\a",
        "\b": r"\b",
        "\f": r"\f",
        "\n": r"\n",
        "\r": r"\r",
        "\t": r"\t",
        "\v": r"\v",
        "\\": r"\\",
        '"': r"\"",
    }
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def go_string_list(items: Iterable[str]) -> str:
    """A ``[]string`` as Go's ``%q`` prints it: ``["a" "b"]``."""
    return "[" + " ".join(go_quote(item) for item in items) + "]"


def last_log(lines: Iterable[str]) -> str:
    """What lastlog.Writer keeps of a run's output: the last whole lines within 512 bytes,
    trailing newlines trimmed (system/runner/internal/lastlog/lastlog.go)."""
    kept: list[str] = []
    size = 0
    for line in reversed(list(lines)):
        size += len(line.encode()) + 1
        if size > LAST_LOG_LIMIT:
            break
        kept.append(line)
    return "\n".join(reversed(kept))


# --------------------------------------------------------------------------- state


@dataclass(frozen=True)
class ServiceEventRecord:
    msg: str
    state: str
    time: float  # emulated Unix seconds


@dataclass
class Health:
    """system/health/status.go Status: ``unknown`` until a first result (Healthy nil)."""

    unknown: bool = True
    healthy: bool = False
    last_message: str = ""
    last_change: float | None = None


@dataclass
class Service:
    id: str
    definition: ServiceDefinition
    state: str = "Initialized"
    events: deque[ServiceEventRecord] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    health: Health = field(default_factory=Health)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    log_registered: bool = False  # logging/circular.go: only a runner's Writer() registers it
    restarts: int = 0  # crashes the restart runner restarted
    pid: int = 0
    run: int = 0  # bumped by every start (a new ServiceRunner.Run)
    run_started: float = 0.0  # emulated seconds when the runner (and its health loop) began
    runner_active: bool = False  # the runner runs (Running, or waiting to restart)
    health_fault: str | None = None  # a failing health check's error while Running
    run_log: list[str] = field(default_factory=list)  # this run's output (for lastlog)
    timer: Cancellable | None = None
    health_timer: Cancellable | None = None

    @property
    def health_checked(self) -> bool:
        return self.definition.health is not None

    @property
    def api_controllable(self) -> bool:
        return bool(self.definition.api)

    @property
    def running(self) -> bool:
        return self.state == "Running"

    @property
    def active(self) -> bool:
        """ServiceRunner.Run is under way (system.go IsRunning): from Starting until it ends."""
        return self.state in ("Starting", "Waiting", "Preparing", "Running", "Stopping")

    @property
    def up(self) -> bool:
        """system/service_runner.go StateEventUp: running and, if checked, healthy."""
        if self.state in ("Finished", "Skipped"):
            return True
        return self.running and (not self.health_checked or self.health.healthy)

    @property
    def last_event(self) -> ServiceEventRecord | None:
        return self.events[-1] if self.events else None


# Hooks the node gives the manager: a state/health change (with the event's message, or None
# when only what ServiceList shows changed: no event is published), and a new log line.
ChangeHook = Callable[[Service, str | None], None]
LogHook = Callable[[Service, str], None]


class ServiceManager:
    """Runs the node's services: start, stop, crash and restart, health checks."""

    def __init__(
        self,
        ids: Iterable[str],
        *,
        clock: Clock,
        on_change: ChangeHook,
        on_log: LogHook,
        failure_reason: Callable[[str], str | None],
        container: bool = True,
    ) -> None:
        self.clock = clock
        self.services: dict[str, Service] = {
            sid: Service(sid, definition_of(sid, container=container)) for sid in ids
        }
        self._on_change = on_change
        self._on_log = on_log
        self._failure_reason = failure_reason
        self._pid = 1000

    # ---- the API rules (system.go APIStart / APIStop / APIRestart) ---------------------

    def _known(self, service_id: str) -> Service:
        service = self.services.get(service_id)
        if service is None:
            raise ServiceRefused(f'service "{service_id}" not defined')
        return service

    @staticmethod
    def _refuse(service: Service, operation: str) -> ServiceRefused:
        return ServiceRefused(
            f'service "{service.id}" doesn\'t support {operation} operation via API'
        )

    def api_start(self, service_id: str) -> str:
        service = self._known(service_id)
        if not service.active:  # a running service: a no-op, whoever it is
            if "start" not in service.definition.api:
                raise self._refuse(service, "start")
            self.launch(service)
        return f'Service "{service_id}" started'

    def api_stop(self, service_id: str) -> str:
        service = self._known(service_id)
        if service.active:  # a stopped service: a no-op, whoever it is
            if "stop" not in service.definition.api:
                raise self._refuse(service, "stop")
            self.stop(service)
        return f'Service "{service_id}" stopped'

    def api_restart(self, service_id: str) -> str:
        service = self._known(service_id)
        if not service.active:  # restart of a stopped service = start
            self.api_start(service_id)
        elif "restart" not in service.definition.api:
            raise self._refuse(service, "restart")
        else:
            self.stop(service)
            self.launch(service)
        return f'Service "{service_id}" restarted'

    # ---- timers ----------------------------------------------------------------------

    def _cancel(self, service: Service) -> None:
        if service.timer is not None:
            service.timer.cancel()
            service.timer = None

    def _cancel_health(self, service: Service) -> None:
        if service.health_timer is not None:
            service.health_timer.cancel()
            service.health_timer = None

    def _later(self, service: Service, delay: float, action: Callable[[], None]) -> None:
        self._cancel(service)
        run = service.run

        def fire() -> None:
            service.timer = None
            if service.run == run:
                action()

        service.timer = self.clock.call_later(delay, fire)

    # ---- events and logs -------------------------------------------------------------

    def record(self, service: Service, state: str, msg: str) -> None:
        """A state change (ServiceRunner.UpdateState)."""
        service.state = state
        service.events.append(ServiceEventRecord(msg, state, self.clock.time()))
        self._on_change(service, msg)

    def _runner_event(self, service: Service, state: str, msg: str) -> None:
        """An event from the runner: service_runner.go run() also marks a checked service
        unhealthy ("service not running") whenever the runner reports another state."""
        self.record(service, state, msg)
        if state != "Running" and service.health_checked:
            self._health_result(service, healthy=False, message="service not running")

    def log(self, service: Service, line: str) -> None:
        service.log.append(line)
        service.run_log.append(line)
        self._on_log(service, line)

    # ---- starting --------------------------------------------------------------------

    def boot(self, order: Iterable[str] | None = None) -> None:
        """Start services at once (the boot sequence); ``order`` as the sequencer starts them."""
        for service_id in order if order is not None else list(self.services):
            service = self.services.get(service_id)
            if service is not None and not service.active:
                self.launch(service, immediate=True)

    def launch(self, service: Service, *, immediate: bool = False) -> None:
        """One ServiceRunner.Run: Starting, Waiting (if it has conditions), Preparing twice,
        then the runner (service_runner.go Run)."""
        self._cancel(service)
        self._cancel_health(service)
        service.run += 1
        self.record(service, "Starting", "Starting service")
        waits = service.definition.waits
        if waits:
            self.record(service, "Waiting", f"Waiting for {', '.join(waits)}")
        if immediate:
            self._prepare(service, immediate=True)
        else:
            self._later(service, CONDITIONS_DELAY if waits else 0.0, lambda: self._prepare(service))

    def _prepare(self, service: Service, *, immediate: bool = False) -> None:
        self.record(service, "Preparing", "Running pre state")
        self.record(service, "Preparing", "Creating service runner")
        if immediate:
            self._run(service, immediate=True)
        else:
            self._later(service, START_DELAY - CONDITIONS_DELAY, lambda: self._run(service))

    def _started_message(self, service: Service) -> str:
        self._pid += 7
        service.pid = self._pid
        definition = service.definition
        if definition.runner is Runner.CONTAINERD:
            return f"Started task {service.id} (PID {service.pid}) for container {service.id}"
        if definition.runner is Runner.PROCESS:
            return f"Process {definition.runner_name()} started with PID {service.pid}"
        return "Service started as goroutine"

    def _run(self, service: Service, *, immediate: bool = False) -> None:
        """The runner starts, and with it the health loop (status.go Init: "Unknown")."""
        service.runner_active = True
        service.run_started = self.clock.monotonic()
        if service.health_checked:
            service.health = Health(last_message="Unknown", last_change=self.clock.time())
        serving = self._start_process(service)
        settings = service.definition.health
        if settings is not None:
            if immediate and serving:  # boot: the first result at once (INFERRED timing)
                self._check_health(service)
            else:
                self._schedule_health(service, settings.initial_delay)

    def _start_process(self, service: Service) -> bool:
        """The wrapped runner's Run: the log registered, Running, and a crash if the process
        cannot run. True when it serves (its health check can pass)."""
        service.log_registered = True  # containerd.go / process.go Run: ServiceLog(id).Writer()
        service.run_log = []
        self.record(service, "Running", self._started_message(service))
        self.log(service, f"{service.id}: starting")
        reason = self._failure_reason(service.id)
        if reason is not None:
            self._later(service, FAIL_DELAY, lambda: self._crash(service, reason))
        return reason is None

    # ---- health (system/health/check.go Run, status.go Update) ------------------------

    def _schedule_health(self, service: Service, delay: float) -> None:
        self._cancel_health(service)
        run = service.run

        def fire() -> None:
            service.health_timer = None
            if service.run == run and service.runner_active:
                self._check_health(service)

        service.health_timer = self.clock.call_later(max(0.0, delay), fire)

    def _next_tick(self, service: Service) -> float:
        """Emulated seconds until the health loop's next tick (InitialDelay, then Period)."""
        settings = service.definition.health
        assert settings is not None
        elapsed = self.clock.monotonic() - service.run_started
        if elapsed < settings.initial_delay:
            return settings.initial_delay - elapsed
        since_first = elapsed - settings.initial_delay
        return settings.period - (since_first % settings.period) or settings.period

    def _check_health(self, service: Service) -> None:
        if not service.running or self._failure_reason(service.id) is not None:
            self._health_result(service, False, service.definition.unreachable)
        elif service.health_fault is not None:
            self._health_result(service, False, service.health_fault)
        else:
            self._health_result(service, True, "")
        if not service.health.healthy:  # a healthy steady service changes nothing later
            self._schedule_health(service, self._next_tick(service))

    def _health_result(self, service: Service, healthy: bool, message: str) -> None:
        """status.go Update: the message always, the flip (and an event) only on a change;
        service_runner.go healthUpdate records the event only while Running."""
        health = service.health
        flipped = health.unknown or health.healthy != healthy
        if not flipped and health.last_message == message:
            return
        service.health = Health(
            unknown=False,
            healthy=healthy,
            last_message=message,
            last_change=self.clock.time() if flipped else health.last_change,
        )
        if flipped and service.running:
            text = "Health check successful" if healthy else f"Health check failed: {message}"
            service.events.append(ServiceEventRecord(text, "Running", self.clock.time()))
            self._on_change(service, text)
        else:
            self._on_change(service, None)  # what ServiceList shows changed, but no event

    def set_health_fault(self, service_id: str, message: str | None) -> None:
        """Make a service's health check fail with ``message`` (None: pass again)."""
        service = self.services[service_id]
        service.health_fault = message
        if service.running and service.health_checked:
            self._schedule_health(service, self._next_tick(service))

    # ---- crashes (restart.go) and stops (system.go Stop) -------------------------------

    def _crash(self, service: Service, reason: str) -> None:
        for line in reason.splitlines():
            self.log(service, line)
        self.fail(service, "exit code 1")

    def exit_error(self, service: Service, status: str) -> str:
        """The runner's error when its process exits with ``status`` (containerd.go, process.go)."""
        tail = go_quote(last_log(service.run_log))
        if service.definition.runner is Runner.CONTAINERD:
            code = status.removeprefix("exit code ").removeprefix("exit status ")
            return f'task "{service.id}" failed: exit code {code} (last log {tail})'
        if service.definition.runner is Runner.PROCESS:
            return f"{status} (last log {tail})"
        return status

    def fail(self, service: Service, status: str) -> None:
        """The running process exits with an error: the restart runner records Waiting and
        runs it again 5 s later; a runner without one ends the service Failed."""
        if not service.running:
            return
        self._cancel(service)
        error = self.exit_error(service, status)
        if service.definition.restarts:
            service.restarts += 1
            self._runner_event(
                service,
                "Waiting",
                f"Error running {service.definition.runner_name()}, going to restart forever: "
                f"{error}",
            )
            self._later(service, RESTART_DELAY, lambda: self._restarted(service))
        else:
            self._runner_done(service)
            # system.go Start: the error of Run, capitalised (service_runner.go wraps it twice)
            self.record(
                service, "Failed", f"Failed running service: error running service: {error}"
            )

    def _restarted(self, service: Service) -> None:
        self._start_process(service)
        if service.health_checked and service.health_timer is None:
            self._schedule_health(service, self._next_tick(service))

    def _runner_done(self, service: Service) -> None:
        service.runner_active = False
        self._cancel_health(service)

    def _stopping_message(self, service: Service) -> str:
        if not service.running:
            return "Aborting restart sequence"  # restart.go: stopped while waiting to restart
        definition = service.definition
        if definition.runner is Runner.CONTAINERD:
            return (
                f"Sending SIGTERM to task {service.id} (PID {service.pid}, container {service.id})"
            )
        if definition.runner is Runner.PROCESS:
            return f"Sending SIGTERM to {definition.runner_name()}"
        return "Service stopping"

    def stop(self, service: Service) -> None:
        """system.go Stop: the run is cancelled; it ends Finished (a no-op when not running)."""
        self._cancel(service)  # also drops a pending start or crash-loop restart
        if not service.active:
            return
        if service.runner_active:
            self._runner_event(service, "Stopping", self._stopping_message(service))
            self.log(service, f"{service.id}: received stop signal")
        self._runner_done(service)
        self.record(service, "Finished", "Service finished successfully")

    def health_fault_later(self, service_id: str, delay: float, message: str) -> None:
        """Make a service's health check fail with ``message`` from ``delay`` s from now."""
        service = self.services[service_id]
        self._later(service, delay, lambda: self.set_health_fault(service_id, message))

    def stop_later(self, service_id: str, delay: float) -> None:
        """Stop a service ``delay`` emulated seconds from now (and leave it stopped)."""
        service = self.services[service_id]
        self._later(service, delay, lambda: self.stop(service))

    def stick_later(self, service_id: str, delay: float) -> None:
        """Restart a service ``delay`` emulated seconds from now, and let its pre-start step
        never end: it stays Preparing ("Running pre state", service_runner.go Run)."""
        service = self.services[service_id]

        def stick() -> None:
            self.stop(service)
            service.run += 1
            self.record(service, "Starting", "Starting service")
            self.record(service, "Preparing", "Running pre state")

        self._later(service, delay, stick)

    def restart_if_running(self, service_id: str) -> None:
        """kubelet_service.go on a KubeletSpec change: stop it if it runs, then start it."""
        service = self.services.get(service_id)
        if service is None:
            return
        self.stop(service)
        self.launch(service)

    def all_up(self) -> bool:
        """Every loaded service is up: what StartAllServices waits for before boot ends."""
        return all(service.up for service in self.services.values())

    def stop_all(self) -> None:
        for service in reversed(list(self.services.values())):
            self.stop(service)

    def cancel_all(self) -> None:
        for service in self.services.values():
            self._cancel(service)
            self._cancel_health(service)
