"""Machine API replies: version, services, files, processes, sockets, apply, upgrade."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

ApplyMode = Literal["reboot", "auto", "no-reboot", "staged", "try"]

# Go os.FileMode type bits, as List reports them.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_DEVICE = 1 << 26
_MODE_NAMED_PIPE = 1 << 25
_MODE_SOCKET = 1 << 24
_MODE_CHAR_DEVICE = 1 << 21
_MODE_IRREGULAR = 1 << 19
_MODE_TYPE = (
    _MODE_DIR
    | _MODE_SYMLINK
    | _MODE_DEVICE
    | _MODE_NAMED_PIPE
    | _MODE_SOCKET
    | _MODE_CHAR_DEVICE
    | _MODE_IRREGULAR
)


@dataclass(frozen=True)
class Version:
    """``talosctl version`` for one node."""

    tag: str
    sha: str
    go_version: str
    os: str
    arch: str
    platform: str  # e.g. "container", "metal", "aws"
    platform_mode: str  # "cloud" | "container" | "metal" | "metal-agent"
    rbac: bool | None  # None before a machine config is loaded (maintenance mode)
    node: str | None = None
    built: str = ""  # empty on real Talos builds; the pytest-talos emulator names itself

    @property
    def in_container(self) -> bool:
        return self.platform_mode == "container"


@dataclass(frozen=True)
class ServiceEvent:
    """One entry of a service's event history (the last 64 are kept)."""

    msg: str
    state: str  # "Running", "Waiting", "Failed", ...
    ts: dt.datetime | None


@dataclass(frozen=True)
class ServiceInfo:
    """A service as ``talosctl services`` shows it."""

    id: str
    state: str  # "Running", "Finished", "Failed", ... ("Unknown" fallback)
    healthy: bool
    health_unknown: bool  # no health result (yet)
    last_message: str
    last_change: dt.datetime | None = None
    events: tuple[ServiceEvent, ...] = ()
    node: str | None = None

    @property
    def running(self) -> bool:
        return self.state == "Running"

    @property
    def last_event(self) -> ServiceEvent | None:
        return self.events[-1] if self.events else None


@dataclass(frozen=True)
class ApplyResult:
    """What ApplyConfiguration did: the final mode, its details and any warnings."""

    mode: ApplyMode
    mode_details: str
    warnings: tuple[str, ...] = ()
    node: str | None = None


@dataclass(frozen=True)
class FileInfo:
    """One entry of a List call. ``mode`` holds Go ``os.FileMode`` bits."""

    name: str
    size: int
    mode: int
    modified: dt.datetime | None
    is_dir: bool
    error: str = ""  # per-entry error (e.g. permission denied); the listing goes on
    link: str = ""  # symlink target
    relative_name: str = ""
    uid: int = 0
    gid: int = 0
    node: str | None = None

    @property
    def permissions(self) -> int:
        return self.mode & 0o777

    @property
    def is_symlink(self) -> bool:
        return bool(self.mode & _MODE_SYMLINK)

    @property
    def is_regular(self) -> bool:
        return not self.mode & _MODE_TYPE


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    state: str
    threads: int
    cpu_time: float
    virtual_memory: int
    resident_memory: int
    command: str
    executable: str
    args: str
    label: str = ""
    node: str | None = None


@dataclass(frozen=True)
class ConnectRecord:
    """One socket from Netstat. ``state`` is the TCP state name (``"LISTEN"``, ...)."""

    l4proto: str  # "tcp", "tcp6", "udp", "udp6", ...
    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    state: str
    pid: int | None = None  # None when the server did not report a process
    process_name: str = ""
    uid: int = 0
    inode: int = 0
    netns: str = ""
    node: str | None = None

    @property
    def listening(self) -> bool:
        return self.state == "LISTEN" or (self.l4proto.startswith("udp") and self.remote_port == 0)


@dataclass(frozen=True)
class MountStat:
    """A mounted filesystem; sizes in bytes."""

    filesystem: str
    size: int
    available: int
    mounted_on: str
    node: str | None = None


@dataclass(frozen=True)
class MemInfo:
    """The most used /proc/meminfo values, in kB (as the API reports them)."""

    total_kb: int
    free_kb: int
    available_kb: int
    buffers_kb: int
    cached_kb: int
    swap_total_kb: int
    swap_free_kb: int
    node: str | None = None


@dataclass(frozen=True)
class EtcdMember:
    id: int
    hostname: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_learner: bool


@dataclass(frozen=True)
class UpgradeResult:
    ack: str  # "Upgrade request received"
    actor_id: str
    node: str | None = None


@dataclass(frozen=True)
class ClientConfiguration:
    """Credentials returned by GenerateClientConfiguration. ``repr`` hides the key."""

    ca_pem: bytes
    crt_pem: bytes
    key_pem: bytes = field(repr=False)
    talosconfig: bytes = field(repr=False)  # holds the key too
    node: str | None = None


@dataclass(frozen=True)
class HealthProgress:
    """One line of server-side ``talosctl health`` progress."""

    message: str
    node: str | None = None
