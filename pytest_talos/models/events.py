"""Runtime events (the Events stream) and their payloads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SequenceEvent:
    sequence: str
    action: str  # "NOOP" | "START" | "STOP"
    error: str | None = None
    error_code: str | None = None  # "FATAL" | "LOCKED" | "CANCELED"


@dataclass(frozen=True)
class PhaseEvent:
    phase: str
    action: str  # "START" | "STOP"


@dataclass(frozen=True)
class TaskEvent:
    task: str
    action: str  # "START" | "STOP"


@dataclass(frozen=True)
class ServiceStateEvent:
    service: str
    action: str  # "INITIALIZED" ... "RUNNING" ... "STARTING"
    message: str
    healthy: bool = False
    health_unknown: bool = True
    health_message: str = ""

    @property
    def state(self) -> str:
        """The state as ServiceInfo spells it (``"Running"``)."""
        return self.action.capitalize()


@dataclass(frozen=True)
class RestartEvent:
    cmd: int


@dataclass(frozen=True)
class ConfigLoadErrorEvent:
    error: str


@dataclass(frozen=True)
class ConfigValidationErrorEvent:
    error: str


@dataclass(frozen=True)
class AddressEvent:
    hostname: str
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class UnmetCondition:
    name: str
    reason: str


@dataclass(frozen=True)
class MachineStatusEvent:
    stage: str  # "BOOTING", "RUNNING", ...
    ready: bool
    unmet_conditions: tuple[UnmetCondition, ...] = ()


EventPayload = (
    SequenceEvent
    | PhaseEvent
    | TaskEvent
    | ServiceStateEvent
    | RestartEvent
    | ConfigLoadErrorEvent
    | ConfigValidationErrorEvent
    | AddressEvent
    | MachineStatusEvent
)


@dataclass(frozen=True)
class Event:
    """A runtime event; ``id`` is an rs/xid string (sortable by time)."""

    id: str
    actor_id: str
    payload: EventPayload
    node: str | None = None
