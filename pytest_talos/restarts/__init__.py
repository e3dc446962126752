"""Service restarts and crash loops, told apart from the ones this kit caused itself.

A Talos node records every service state change as a ``ServiceStateEvent`` (Events API;
each event id is an ``rs/xid`` that carries the node's clock, internal/app/machined/pkg/
runtime/events.go) and in each service's history (ServiceList, with timestamps). From those
:func:`restart_episodes` finds each time a service stopped running after it had run:

* a **crash**: the restart runner records ``Waiting`` "Error running <runner>, going to
  restart forever: ..." and runs it again 5 s later (internal/app/machined/pkg/system/
  runner/restart/restart.go) — a crash-looping service is never ``Failed``;
* a **stop**: ``Stopping``/``Finished`` (a controller or the API stopped it, e.g. kubelet
  restarted by controllers/k8s/kubelet_service.go when its spec changes);
* a **failure**: ``Failed`` (a runner without restarts, or an error before the runner);
* an **unhealthy** spell: the service stays ``Running`` but its health check fails; the
  service runner records a ``Running`` event "Health check failed: ..." on each change of
  health (internal/app/machined/pkg/system/service_runner.go healthUpdate), so a service
  whose health flaps never leaves ``Running``.

The history is finite: ServiceList keeps a service's last 64 events (system/events/events.go
MaxEventsToKeep) and the Events stream the node's last 990 (runtime/v1alpha1/
v1alpha1_controller.go NewEvents(1000, 10): cap-gap, v1alpha1_events.go Watch).
:func:`merge_histories` joins both (the Events stream first, ServiceList for what it no
longer holds) and :func:`history_gaps` says when neither reaches back to the start of the
window asked for. A node whose clock ran ahead until its first time sync stepped it back
stamps the boot's first part later than what follows: :func:`clock_step` finds that in a
stream, and :func:`boot_places` places the boot's events by their order instead.

Some of those are not the node's fault, and :func:`judge` says which and why:

* before the machine first reached the ``running`` stage (the boot: services wait for each
  other, kubelet is restarted as its spec settles);
* while a machine config change **this kit** made was in effect, and for
  :data:`KIT_SETTLE` seconds after it was undone. The config guard records each change it
  lets through (:func:`record_kit_change`) with the node's own time of it: the
  ``updated`` timestamp of the MachineConfig resource right after the apply.

The kit's changes are kept in memory (:data:`KIT_CHANGES`) and, where the guard journals,
appended to ``changes.jsonl`` in its state directory, so that the next run (or another
pytest-xdist worker) knows them too. That file holds no config content.

The package is split by responsibility: :mod:`pytest_talos.restarts.history` (the node's
records of state changes and their node times), :mod:`pytest_talos.restarts.episodes`
(episodes and the verdict) and :mod:`pytest_talos.restarts.kit_changes` (the kit's own
config changes). Import from ``pytest_talos.restarts``.
"""

from __future__ import annotations

from pytest_talos.restarts.episodes import (
    BOOT,
    Episode,
    Verdict,
    is_health_failure,
    is_restart_message,
    judge,
    restart_episodes,
)
from pytest_talos.restarts.episodes import EpisodeKind as EpisodeKind
from pytest_talos.restarts.history import (
    NODE_EVENTS_KEPT,
    SERVICE_EVENTS_KEPT,
    STAMPED_AHEAD,
    STEPPED_BOOT,
    XID_SLACK,
    BootPlaces,
    ClockStep,
    TimedServiceEvent,
    boot_places,
    clock_step,
    events_before,
    excuse_clock_steps,
    history_gaps,
    merge_histories,
    service_history,
    stream_misses,
    timed_service_events,
    xid_time,
)
from pytest_talos.restarts.kit_changes import CHANGES_FILE as CHANGES_FILE
from pytest_talos.restarts.kit_changes import (
    KIT_CHANGES,
    KIT_SETTLE,
    ChangeLog,
    KitChange,
    note_guarded_change,
    record_kit_change,
)
from pytest_talos.restarts.kit_changes import kit_windows as kit_windows

# Also importable from here, outside __all__ as before (the ``X as X`` imports): the changes
# file name, the kinds of episode and the kit windows.
__all__ = [
    "BOOT",
    "KIT_CHANGES",
    "KIT_SETTLE",
    "NODE_EVENTS_KEPT",
    "SERVICE_EVENTS_KEPT",
    "STAMPED_AHEAD",
    "STEPPED_BOOT",
    "XID_SLACK",
    "BootPlaces",
    "ChangeLog",
    "ClockStep",
    "Episode",
    "KitChange",
    "TimedServiceEvent",
    "Verdict",
    "boot_places",
    "clock_step",
    "events_before",
    "excuse_clock_steps",
    "history_gaps",
    "is_health_failure",
    "is_restart_message",
    "judge",
    "merge_histories",
    "note_guarded_change",
    "record_kit_change",
    "restart_episodes",
    "service_history",
    "stream_misses",
    "timed_service_events",
    "xid_time",
]
