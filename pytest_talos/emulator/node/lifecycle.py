"""Power and lifecycle of an emulated node: reboot, shutdown, reset, upgrade, rollback.

``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`` acknowledges each
request at once and runs its sequence after; ``runtime/mode.go`` refuses the metal-only ones
in container mode. :class:`Lifecycle` owns the sequence timers and the version the next boot
runs; the node (:class:`PoweredNode`) carries out each step.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Protocol

from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.errors import RPCFailure
from pytest_talos.emulator.node.events import Payload, SequencePayload
from pytest_talos.errors import StatusCode

__all__ = [
    "CONTAINER_ONLY",
    "LIFECYCLE_DELAY",
    "REBOOT_DOWNTIME",
    "SHUTDOWN_DELAY",
    "Lifecycle",
    "PoweredNode",
]

REBOOT_DOWNTIME = 5.0  # emulated seconds the API is down during a reboot (INFERRED)
LIFECYCLE_DELAY = 0.1  # emulated seconds from the reply to the start of the sequence (INFERRED)
# Emulated seconds from the stage change (services stopping) to apid going down (INFERRED):
# long enough for the Events streams to deliver the sequence's first events.
SHUTDOWN_DELAY = 0.5
CONTAINER_ONLY = "method is not supported in container mode"  # runtime/mode.go capabilities


class PoweredNode(Protocol):
    """The steps of a sequence, as the node carries them out."""

    @property
    def container(self) -> bool: ...

    @property
    def powered(self) -> bool: ...

    @property
    def talos_version(self) -> str: ...

    @property
    def previous_version(self) -> str: ...

    def emit(self, payload: Payload, actor_id: str = "") -> object: ...

    def enter_stage(self, stage: str) -> None:
        """The stage changes and every service but apid stops (a try is reverted)."""

    def power_off(self) -> None:
        """apid stops too and the node is off."""

    def boot_version(self, version: str | None) -> None:
        """Power on and boot (``version``: the other one, after an upgrade or rollback)."""


class Lifecycle:
    """The lifecycle sequences of one node; call from the cluster's event loop thread."""

    def __init__(self, node: PoweredNode, clock: Clock) -> None:
        self._node = node
        self._clock = clock
        self._timer: Cancellable | None = None
        self._next_version: str | None = None  # booted by the next power-on
        self.sequence_actor = ""  # actor id of the lifecycle sequence running, if any

    def _require_metal(self) -> None:
        if self._node.container:
            raise RPCFailure(StatusCode.FAILED_PRECONDITION, CONTAINER_ONLY)

    def reboot(self) -> str:
        self._require_metal()
        actor = str(uuid.uuid4())
        self._clock.call_later(LIFECYCLE_DELAY, lambda: self.reboot_sequence(actor, "reboot"))
        return actor

    def shutdown(self) -> str:
        self._require_metal()
        actor = str(uuid.uuid4())
        self._clock.call_later(
            LIFECYCLE_DELAY, lambda: self._go_down(actor, "shutdown", "shutting down")
        )
        return actor

    def reset(self) -> str:
        # container.go: accepted in container mode, where it stops services and shuts down.
        actor = str(uuid.uuid4())
        self._clock.call_later(LIFECYCLE_DELAY, lambda: self._go_down(actor, "reset", "resetting"))
        return actor

    def upgrade(self, image: str) -> str:
        """Acknowledge now; go down as ``upgrading``; only the booted system is the new version."""
        self._require_metal()
        actor = str(uuid.uuid4())
        tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
        new_version = tag if tag.startswith("v") else self._node.talos_version
        self._clock.call_later(
            LIFECYCLE_DELAY,
            lambda: self.reboot_sequence(actor, "upgrade", "upgrading", next_version=new_version),
        )
        return actor

    def rollback(self) -> None:
        """Reboot into the previous version (the A/B switch takes effect at the next boot)."""
        self._require_metal()
        actor = str(uuid.uuid4())
        self._clock.call_later(
            LIFECYCLE_DELAY,
            lambda: self.reboot_sequence(actor, "reboot", next_version=self._node.previous_version),
        )

    def _go_down(
        self, actor: str, sequence: str, stage: str, then: Callable[[], None] | None = None
    ) -> None:
        """The stage changes and services stop; SHUTDOWN_DELAY later apid stops and the node
        is off (then ``then`` runs, e.g. the reboot's power-on timer)."""
        if self._timer is not None:
            self._timer.cancel()
        self.sequence_actor = actor
        self._node.emit(SequencePayload(sequence, "START"), actor)
        self._node.enter_stage(stage)
        self._timer = self._clock.call_later(SHUTDOWN_DELAY, lambda: self._power_off(then))

    def _power_off(self, then: Callable[[], None] | None) -> None:
        self._timer = None
        self._node.power_off()
        if then is not None:
            then()

    def reboot_sequence(
        self,
        actor: str,
        sequence: str,
        stage: str = "rebooting",
        *,
        next_version: str | None = None,
    ) -> None:
        """API down for a while, then boot the persisted config (staged applied, try dropped)
        and, after an upgrade or rollback, the other version."""
        self._next_version = next_version

        def stay_down() -> None:
            self._timer = self._clock.call_later(REBOOT_DOWNTIME, self.power_on)

        self._go_down(actor, sequence, stage, then=stay_down)

    def power_on(self) -> None:
        """Boot the node (after a reboot; tests may also power a shut-down node back on)."""
        if self._node.powered:
            return
        self._timer = None
        version, self._next_version = self._next_version, None
        self._node.boot_version(version)

    def cancel(self) -> None:
        """The cluster is stopping: no sequence step runs any more."""
        if self._timer is not None:
            self._timer.cancel()
