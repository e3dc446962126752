"""What a system service of an emulated node is: its definition (which runner, conditions,
health settings, per ``internal/app/machined/pkg/system/services/<id>.go``), which services a
node loads, its state as the runner leaves it, and Go's formatting of the texts it shows.
The runner that moves a service through its states is :mod:`.runner`.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from pytest_talos.emulator.clock import Cancellable

__all__ = [
    "CONDITIONS_DELAY",
    "DEFAULT_HEALTH",
    "FAIL_DELAY",
    "LAST_LOG_LIMIT",
    "MACHINE_SOCKET",
    "MAX_EVENTS",
    "MAX_LOG_LINES",
    "RESTART_DELAY",
    "START_DELAY",
    "SYSTEM_CONTAINERD",
    "Health",
    "HealthSettings",
    "Runner",
    "Service",
    "ServiceDefinition",
    "ServiceEventRecord",
    "definition_of",
    "go_quote",
    "go_string_list",
    "last_log",
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
        # v1.14 services/sandboxd.go: restart.Forever around the sandboxd runner (a process),
        # no conditions or dependencies, health DefaultSettings; its command line is INFERRED
        ServiceDefinition("sandboxd", Runner.PROCESS, args=("/sbin/sandboxd",)),
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
    *,
    controlplane: bool,
    platform: str,
    extension_services: Iterable[str] = (),
    sandboxd: bool = False,
) -> list[str]:
    """Service ids a booted node lists, sorted as ServiceList sorts them (system.go List).

    Container mode: apid, machined, containerd (initialize), cri and kubelet, plus trustd and
    etcd on control planes (boot). Elsewhere the initialize sequence also starts udevd,
    auditd, syslogd and the dashboard (v1alpha1_sequencer.go Initialize). ``sandboxd``: the
    node is a v1.14 one with workload isolation (:mod:`..sandbox`), StartAllServices starts
    sandboxd before the rest.
    """
    ids = ["apid", "containerd", "cri", "kubelet", "machined"]
    if controlplane:
        ids += ["etcd", "trustd"]
    if platform != "container":
        ids += ["udevd", "auditd", "syslogd", "dashboard"]
    if sandboxd and platform != "container":
        ids.append("sandboxd")
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
