"""A node whose clock ran ahead until its first time sync stepped it back: the Events stream's
times go back, the boot's first part carries later times than its end, and the node's own
tail_seconds search (runtime/v1alpha1/v1alpha1_events.go, sort.Search) may send it all. The
restart checks place the boot's events by their order in the stream, and the emulated event
buffer searches as the node does."""

from __future__ import annotations

from pytest_talos import models
from pytest_talos.emulator.node.events import EventBuffer, RuntimeEvent, SequencePayload, new_xid
from pytest_talos.restarts import (
    BOOT,
    STAMPED_AHEAD,
    STEPPED_BOOT,
    Episode,
    boot_places,
    clock_step,
    excuse_clock_steps,
    history_gaps,
    judge,
    restart_episodes,
    timed_service_events,
)

T0 = 1_800_000_000.0
AHEAD = 7200.0
FAILED_HEALTH = "Health check failed: dial tcp 127.0.0.1:50000: connect: connection refused"


def _at(at: float, payload: models.EventPayload) -> models.Event:
    return models.Event(new_xid(T0 + at), "", payload)


def _service(at: float, service: str, action: str, message: str) -> models.Event:
    return _at(at, models.ServiceStateEvent(service, action, message))


def _stage(at: float, stage: str) -> models.Event:
    return _at(at, models.MachineStatusEvent(stage, stage == "RUNNING"))


def _stepped_boot() -> list[models.Event]:
    """A boot on a clock 2 h ahead: apid turns unhealthy once before the sync; kubelet
    starts after it, and the boot ends on the right time."""
    return [
        _stage(0, "BOOTING"),
        _at(AHEAD, models.SequenceEvent("initialize", "START")),
        _service(AHEAD + 1, "apid", "RUNNING", "Service started as goroutine"),
        _service(AHEAD + 2, "apid", "RUNNING", FAILED_HEALTH),
        _service(AHEAD + 3, "apid", "RUNNING", "Health check successful"),
        _service(5, "kubelet", "RUNNING", "Started task kubelet (PID 9) for container kubelet"),
        _stage(6, "RUNNING"),
    ]


def test_a_monotonic_stream_has_no_step_and_its_boot_is_placed_by_time() -> None:
    events = [_stage(0, "BOOTING"), _service(1, "apid", "RUNNING", FAILED_HEALTH)]
    events.append(_stage(2, "RUNNING"))
    assert clock_step(events) is None
    places = boot_places(events)
    assert places.running_at == T0 + 2
    assert not places.boot


def test_the_step_back_is_found_where_the_times_go_back() -> None:
    step = clock_step(_stepped_boot())
    assert step is not None
    assert (step.index, step.before, step.after) == (5, T0 + AHEAD + 3, T0 + 5)
    assert step.describe().startswith("the node's clock stepped back from ")


def test_boot_episodes_stamped_ahead_are_excused_by_their_place() -> None:
    events = _stepped_boot()
    timed, running_at = timed_service_events(events)
    places = boot_places(events)
    verdict = judge(restart_episodes(timed), running_at=places.running_at, booted=True)
    assert [e.service for e in verdict.counted] == ["apid"]  # by time alone: after the boot
    excuse_clock_steps(verdict.counted, places, upper=T0 + 60, booted=verdict.booted)
    assert not verdict.counted
    assert [e.excuse for e in verdict.excused] == [STEPPED_BOOT]
    assert STEPPED_BOOT.startswith(BOOT)
    assert running_at == places.running_at == T0 + 6


def test_an_episode_after_the_boot_still_counts_on_a_stepped_clock() -> None:
    events = [
        *_stepped_boot(),
        _service(
            30,
            "kubelet",
            "WAITING",
            "Error running Containerd(kubelet), going to "
            'restart forever: task "kubelet" failed: exit code 1 (last log "x")',
        ),
    ]
    timed, _ = timed_service_events(events)
    places = boot_places(events)
    verdict = judge(restart_episodes(timed), running_at=places.running_at, booted=True)
    excuse_clock_steps(verdict.counted, places, upper=T0 + 60, booted=verdict.booted)
    assert [(e.service, e.kind) for e in verdict.counted] == [("kubelet", "crash")]


def test_a_step_after_the_boot_leaves_no_time_to_excuse_by() -> None:
    """The sync timed out (machine.time.bootTimeout) and came later: the boot's end is
    stamped ahead, and comparing later times with it would excuse hours of restarts."""
    events = [
        _stage(AHEAD, "BOOTING"),
        _service(AHEAD + 1, "apid", "RUNNING", FAILED_HEALTH),
        _stage(AHEAD + 2, "RUNNING"),
        _service(30, "etcd", "RUNNING", FAILED_HEALTH),
    ]
    places = boot_places(events)
    assert places.running_at is None
    timed, _ = timed_service_events(events)
    verdict = judge(restart_episodes(timed), running_at=places.running_at, booted=True)
    excuse_clock_steps(verdict.counted, places, upper=T0 + 60, booted=verdict.booted)
    assert [e.service for e in verdict.counted] == ["etcd"]
    assert [e.excuse for e in verdict.excused] == [STEPPED_BOOT]


def test_episodes_stamped_later_than_the_clock_can_be_are_not_counted() -> None:
    """ServiceList keeps no order with the stream: a time past the node's clock now was
    stamped before the clock stepped back."""
    episode = Episode("apid", "unhealthy", T0 + AHEAD, FAILED_HEALTH)
    verdict = judge([episode], running_at=None, booted=True)
    excuse_clock_steps(verdict.counted, boot_places([]), upper=T0 + 60, booted=verdict.booted)
    assert verdict.excused[0].excuse == STAMPED_AHEAD
    booting = judge(
        [Episode("apid", "unhealthy", T0 + AHEAD, FAILED_HEALTH)], running_at=None, booted=False
    )
    excuse_clock_steps(booting.counted, boot_places([]), upper=T0 + 60, booted=booting.booted)
    assert booting.counted  # a machine that never booted gets no excuse


def test_history_covers_the_window_when_the_stream_begins_with_the_boot() -> None:
    notes, cover = history_gaps(_stepped_boot()[1:], [], window_start=T0 - 100)
    assert (notes, cover) == ([], True)


def _buffer(times: list[float]) -> EventBuffer:
    buffer = EventBuffer()
    for at in times:
        buffer.append(RuntimeEvent(new_xid(at), at, SequencePayload("boot", "START")))
    return buffer


def test_emulated_tail_seconds_searches_as_the_node_does() -> None:
    monotonic = _buffer([T0 + i for i in range(10)])
    found = monotonic.backlog(tail_events=0, tail_id="", tail_seconds=3, now=T0 + 9.5)
    assert [e.time for e in found] == [T0 + 7, T0 + 8, T0 + 9]  # id second after now - 3
    stepped = _buffer([T0 - 100] + [T0 + AHEAD + i for i in range(6)] + [T0 + i for i in range(4)])
    whole = stepped.backlog(tail_events=0, tail_id="", tail_seconds=3, now=T0 + 3.5)
    assert len(whole) == 10  # sort.Search lands in the future-stamped part: all after it


def test_emulated_tail_id_searches_too() -> None:
    buffer = _buffer([T0 + i for i in range(5)])
    ids = [e.id for e in buffer.snapshot()]
    found = buffer.backlog(tail_events=0, tail_id=ids[2], tail_seconds=0, now=T0 + 5)
    assert [e.id for e in found] == ids[3:]
