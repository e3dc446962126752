"""The faults that act on a node's services after boot, through the services runner.

:class:`ServiceFaults` arms them at each boot and owns their timers; the runner
(:class:`~.runner.ServiceManager`) carries them out as it
would a real failure (``runner/restart/restart.go``, ``system/health/check.go``).
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.faults import Quirk
from pytest_talos.emulator.node.services.runner import ServiceManager

__all__ = [
    "CRI_UNHEALTHY",
    "FAULT_AFTER_BOOT",
    "FLAP_PERIOD",
    "HEALTH_FLAP_DOWN",
    "HEALTH_FLAP_PERIOD",
    "MACHINED_UNHEALTHY",
    "ServiceFaults",
]

FLAP_PERIOD = 30.0  # Quirk.CONTAINERD_KILLED_PERIODICALLY
# Quirk.CRI_HEALTH_FLAPS: cri's health check fails for HEALTH_FLAP_DOWN s every
# HEALTH_FLAP_PERIOD s (the error is what a dial of its socket says when it does not answer)
HEALTH_FLAP_PERIOD = 20.0
HEALTH_FLAP_DOWN = 5.0
CRI_UNHEALTHY = "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
# emulated seconds after boot the defect shows (the quirks that act a little after boot)
FAULT_AFTER_BOOT = 2.0
# Quirk.MACHINED_HEALTH_FAILS_AFTER_BOOT: what the dial of the machine socket says when
# machined's listen backlog is full (INFERRED cause; the check is services/machined.go HealthFunc)
MACHINED_UNHEALTHY = (
    "dial unix /system/run/machined/machine.sock: connect: resource temporarily unavailable"
)


class ServiceFaults:
    """The service faults of one node: armed at boot, cancelled when the node goes down."""

    def __init__(
        self,
        services: ServiceManager,
        *,
        clock: Clock,
        quirk: Callable[[Quirk], bool],
        powered: Callable[[], bool],
    ) -> None:
        self._services = services
        self._clock = clock
        self._quirk = quirk
        self._powered = powered
        self._flap_timer: Cancellable | None = None
        self._health_flap_timer: Cancellable | None = None  # Quirk.CRI_HEALTH_FLAPS

    def arm_after_boot(self) -> None:
        """Schedule what the active faults do to the freshly booted services."""
        services = self._services
        if self._quirk(Quirk.MACHINED_HEALTH_FAILS_AFTER_BOOT):
            # a little after boot, machined's health check (a dial
            # of its socket, services/machined.go HealthFunc) starts failing; it keeps running
            services.health_fault_later("machined", FAULT_AFTER_BOOT, MACHINED_UNHEALTHY)
        if self._quirk(Quirk.CONTAINERD_KILLED_PERIODICALLY):
            self._schedule_flap()
        if self._quirk(Quirk.TRUSTD_STICKS_IN_PRE_START) and "trustd" in services.services:
            # trustd is restarted a little after boot and its
            # pre-start step never returns
            services.stick_later("trustd", FAULT_AFTER_BOOT)
        if self._quirk(Quirk.CRI_HEALTH_FLAPS) and "cri" in services.services:
            self._schedule_health_flap(FAULT_AFTER_BOOT, failing=True)
        if self._quirk(Quirk.TRUSTD_STOPS_AFTER_BOOT) and "trustd" in services.services:
            # trustd stops a little after boot and nothing starts it again
            services.stop_later("trustd", FAULT_AFTER_BOOT)

    def _schedule_flap(self) -> None:
        # containerd is killed every FLAP_PERIOD s; the restart runner
        # brings it back 5 s later (runner/restart/restart.go)
        def flap() -> None:
            service = self._services.services["containerd"]
            if self._powered() and service.running:
                self._services.fail(service, "signal: killed")
            self._schedule_flap()

        self._flap_timer = self._clock.call_later(FLAP_PERIOD, flap)

    def _schedule_health_flap(self, delay: float, *, failing: bool) -> None:
        # cri keeps running; its health check fails, then passes
        # again (system/health/check.go reports each change, service_runner.go healthUpdate
        # records it as a Running event)
        def flip() -> None:
            if self._powered():
                self._services.set_health_fault("cri", CRI_UNHEALTHY if failing else None)
            wait = HEALTH_FLAP_DOWN if failing else HEALTH_FLAP_PERIOD - HEALTH_FLAP_DOWN
            self._schedule_health_flap(wait, failing=not failing)

        self._health_flap_timer = self._clock.call_later(delay, flip)

    def cancel(self, *, reset_health: bool = True) -> None:
        """The node goes down: the flaps stop and (``reset_health``) cri's health is its own
        again; the cluster stopping only stops the timers."""
        if self._flap_timer is not None:
            self._flap_timer.cancel()
        if self._health_flap_timer is not None:
            self._health_flap_timer.cancel()
            if reset_health:
                self._services.set_health_fault("cri", None)
