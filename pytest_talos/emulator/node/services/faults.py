"""The engine of the timed faults: every profile's stages, on a node's services, after boot.

A timed fault is data (:mod:`pytest_talos.emulator.faults.stages`): :class:`ServiceFaults`
starts each active profile's first stage at each boot, carries out each stage through the
runner (:class:`~.runner.ServiceManager`) as it would a real failure
(``runner/restart/restart.go``, ``system/health/check.go``), moves on to the next stage, and
stops when the node goes down. It never names a fault.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.faults import FaultProfile
from pytest_talos.emulator.faults.stages import Act, Stage
from pytest_talos.emulator.node.services.runner import ServiceManager

__all__ = ["ServiceFaults"]


class ServiceFaults:
    """The timed faults of one node: armed at boot, cancelled when the node goes down."""

    def __init__(
        self,
        services: ServiceManager,
        *,
        clock: Clock,
        profiles: Callable[[], Sequence[FaultProfile]],
        powered: Callable[[], bool],
        seed: str = "",
    ) -> None:
        self._services = services
        self._clock = clock
        self._profiles = profiles
        self._powered = powered
        self._timers: list[Cancellable] = []
        self._flapping_health: set[str] = set()  # services a node-bound health stage changed
        self._jitter = random.Random(seed)  # one sequence per node: runs repeat exactly

    def arm_after_boot(self) -> None:
        """Start the first stage of every active profile whose service this node runs."""
        self._timers = []
        for profile in self._profiles():
            if profile.stages and profile.stages[0].service in self._services.services:
                self._arm(profile.stages, 0)

    def _arm(self, stages: tuple[Stage, ...], index: int) -> None:
        stage = stages[index]
        delay = stage.delay + (self._jitter.uniform(0, stage.jitter) if stage.jitter else 0.0)

        def fire() -> None:
            if stage.with_run or self._powered():
                self._carry_out(stage)
            if stage.then is not None:
                self._arm(stages, stage.then)

        if stage.with_run:  # the runner's timer: a restart of the service forgets it
            self._services.later(stage.service, delay, fire)
        else:
            self._timers.append(self._clock.call_later(delay, fire))
            if stage.act in (Act.HEALTH_FAIL, Act.HEALTH_PASS):
                self._flapping_health.add(stage.service)

    def _carry_out(self, stage: Stage) -> None:
        services = self._services
        service = services.services[stage.service]
        if stage.act is Act.KILL:
            services.fail(service, stage.message)
        elif stage.act is Act.HEALTH_FAIL:
            services.set_health_fault(stage.service, stage.message)
        elif stage.act is Act.HEALTH_PASS:
            services.set_health_fault(stage.service, None)
        elif stage.act is Act.STOP:
            services.stop(service)
        else:
            services.stick(service)

    def cancel(self, *, reset_health: bool = True) -> None:
        """The node goes down: the node's stages stop and (``reset_health``) the health of a
        service they flapped is its own again; the cluster stopping only stops the timers."""
        for timer in self._timers:
            timer.cancel()
        self._timers = []
        if reset_health:
            for service_id in sorted(self._flapping_health):
                self._services.set_health_fault(service_id, None)
