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

The service model (definitions, state, texts) is :mod:`.model`; this module is the
runner. Transitions are scheduled on the :class:`~...clock.Clock`;
nothing sleeps.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from pytest_talos.emulator.clock import Clock
from pytest_talos.emulator.errors import ServiceRefused
from pytest_talos.emulator.node.services.model import (
    CONDITIONS_DELAY,
    FAIL_DELAY,
    RESTART_DELAY,
    START_DELAY,
    Health,
    Runner,
    Service,
    ServiceDefinition,
    ServiceEventRecord,
    definition_of,
    go_quote,
    last_log,
    services_for,
)

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
    "start_lines",
]

_TICK_EPSILON = 1e-9  # emulated seconds: a health tick this close is the one just run


def _go_log_time(when: float) -> str:
    """Go's log flags Ldate|Ltime|Lmicroseconds, UTC: ``2026/01/02 15:04:05.000000``."""
    stamp = dt.datetime.fromtimestamp(when, dt.UTC)
    return stamp.strftime("%Y/%m/%d %H:%M:%S.%f")


def _iso(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def start_lines(service: Service, when: float) -> list[str]:
    """What the service writes to its log as it starts (emulated seconds ``when``).

    A process or containerd runner captures the program's stdout and stderr; a goroutine
    runner writes nothing itself and hands the writer to the service's main
    (system/runner/goroutine/goroutine.go wrappedMain), so syslogd (internal/app/syslogd/
    syslogd.go: only what arrives on /dev/log) and auditd's daemon (internal/app/auditd/
    auditd.go: only the kernel's audit records) write nothing of their own; trustd logs only
    CSR requests (internal/app/trustd/internal/reg/reg.go), systemd-udevd without --daemon
    no start line (systemd src/udev/udevd.c), the dashboard draws on its tty, an extension
    service's program is its own (nothing modelled). The texts are abridged (INFERRED
    fields left out).
    """
    sid = service.id
    if sid == "apid":  # internal/app/apid/service.go runService (log.Lshortfile)
        return [
            f"{_go_log_time(when)} service.go:36: starting apid with config: listen address "
            ":50000, skip client cert verify false, node routing disabled false, readonly "
            "role mode false"
        ]
    if sid in ("containerd", "cri"):  # hack/containerd.toml: [debug] level = "info"
        return [f'time="{_iso(when)}" level=info msg="starting containerd"']
    if sid == "etcd":  # etcd's zap logger (JSON, to stderr)
        return [
            f'{{"level":"info","ts":"{_iso(when)}","caller":"etcdmain/etcd.go","msg":"Running: "}}'
        ]
    if sid == "kubelet":  # klog to stderr
        stamp = dt.datetime.fromtimestamp(when, dt.UTC).strftime("%m%d %H:%M:%S.%f")
        return [f'I{stamp}    {service.pid} server.go] "Kubelet version"']
    if sid == "sandboxd":  # v1.14 sandboxd/init.go logf, to stderr (the service log)
        return ["sandboxd: started as PID 1 of the sandbox namespace; serving launch requests"]
    if sid == "machined":
        # system/services/machined.go Main: every request machined serves is logged
        # (factory.WithLog("machined ", ...), pkg/grpc/middleware/authz/authorizer.go);
        # INFERRED: one line stands for the requests of the boot, not each request
        return [
            f"machined/authz/authorizer {_go_log_time(when)} authorized "
            "([os:admin] includes [os:admin])"
        ]
    if sid == "registryd":  # system/services/registry/registry.go Run
        return [f'{_iso(when)}\tinfo\tstarting registry server\t{{"addr": "127.0.0.1:3172"}}']
    return []


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
        for line in start_lines(service, self.clock.time()):
            self.log(service, line)
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
        # A tick just run counts as run though float rounding left it 1e-16 early: a delay
        # that small added to the clock would not move it, and the loop would tick in place.
        elapsed = self.clock.monotonic() - service.run_started + _TICK_EPSILON
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
            if service.definition.runner is not Runner.GOROUTINE:  # its main writes nothing
                self.log(service, f"{service.id}: received stop signal")  # INFERRED text
        self._runner_done(service)
        self.record(service, "Finished", "Service finished successfully")

    def later(self, service_id: str, delay: float, action: Callable[[], None]) -> None:
        """Run ``action`` ``delay`` emulated seconds from now, unless the service's current
        run ends first (a timed fault's stage that belongs to the run)."""
        self._later(self.services[service_id], delay, action)

    def stick(self, service: Service) -> None:
        """Restart a service and let its pre-start step never end: it stays Preparing
        ("Running pre state", service_runner.go Run)."""
        self.stop(service)
        service.run += 1
        self.record(service, "Starting", "Starting service")
        self.record(service, "Preparing", "Running pre state")

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
