"""pytest_talos.restarts: crashes, stops and failures from service events, and which of them
the boot or the kit's own config changes explain."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pytest_talos import models
from pytest_talos.emulator.node.events import new_xid
from pytest_talos.restarts import (
    BOOT,
    KIT_SETTLE,
    ChangeLog,
    KitChange,
    TimedServiceEvent,
    events_before,
    history_gaps,
    is_health_failure,
    is_restart_message,
    judge,
    merge_histories,
    note_guarded_change,
    record_kit_change,
    restart_episodes,
    stream_misses,
    timed_service_events,
    xid_time,
)

T0 = 1_800_000_000.0
CRASH = (
    'Error running Containerd(kubelet), going to restart forever: task "kubelet" failed: '
    'exit code 1 (last log "E0000 bad flag")'
)


def _event(at: float, service: str, action: str, message: str = "") -> TimedServiceEvent:
    return TimedServiceEvent(T0 + at, service, action, message)


def _change(at: float, session: str = "s1", **extra: object) -> KitChange:
    fields: dict[str, object] = {"version": 2, "mode": "no-reboot", **extra}
    return KitChange("10.5.0.2", "cp-1", T0 + at, session=session, **fields)  # type: ignore[arg-type]


def test_xid_time_is_the_node_clock_second() -> None:
    assert xid_time(new_xid(T0 + 12.7)) == T0 + 12
    assert xid_time("not-an-xid") is None
    assert xid_time("!" * 20) is None


def test_restart_runner_messages() -> None:
    assert is_restart_message(CRASH)
    assert is_restart_message("Runner Containerd(x), exited without error, going to restart it")
    assert not is_restart_message('Waiting for service "cri" to be "up"')


def test_episodes_crash_stop_failure_and_no_double_count() -> None:
    events = [
        _event(0, "kubelet", "STARTING", "Starting service"),
        _event(0, "kubelet", "WAITING", 'Waiting for service "cri" to be "up"'),  # not a crash
        _event(1, "kubelet", "RUNNING", "Started task kubelet (PID 1) for container kubelet"),
        _event(2, "kubelet", "WAITING", CRASH),
        _event(7, "kubelet", "RUNNING", "Started task kubelet (PID 2) for container kubelet"),
        _event(8, "kubelet", "WAITING", CRASH),
        _event(9, "kubelet", "STOPPING", "Aborting restart sequence"),  # the loop's own end
        _event(9, "kubelet", "FINISHED", "Service finished successfully"),
        _event(10, "kubelet", "RUNNING", "Started task kubelet (PID 3) for container kubelet"),
        _event(20, "kubelet", "STOPPING", "Sending SIGTERM to task kubelet"),
        _event(20, "kubelet", "FINISHED", "Service finished successfully"),  # same stop
        _event(30, "machined", "FAILED", "Failed running service: boom"),
    ]
    episodes = restart_episodes(events)
    assert [(e.service, e.kind, e.at) for e in episodes] == [
        ("kubelet", "crash", T0 + 2),
        ("kubelet", "crash", T0 + 8),
        ("kubelet", "stop", T0 + 20),
        ("machined", "failure", T0 + 30),
    ]


def test_boot_restarts_are_excused_only_once_the_machine_booted() -> None:
    events = [
        _event(1, "kubelet", "RUNNING"),
        _event(2, "kubelet", "WAITING", CRASH),
        _event(8, "kubelet", "RUNNING"),
        _event(40, "kubelet", "WAITING", CRASH),
    ]
    verdict = judge(restart_episodes(events), running_at=T0 + 10, booted=True)
    assert [e.excuse for e in verdict.episodes] == [BOOT, ""]
    assert [e.at for e in verdict.counted] == [T0 + 40]
    # a machine that never finished booting: its crashes are why, nothing is excused
    stuck = judge(restart_episodes(events), running_at=None, booted=False)
    assert len(stuck.counted) == 2
    assert not stuck.booted


def test_kit_changes_excuse_their_window_only() -> None:
    events = [_event(1, "kubelet", "RUNNING")]
    events += [
        e
        for n in range(4)
        for e in (
            _event(101 + 6 * n, "kubelet", "WAITING", CRASH),
            _event(106 + 6 * n, "kubelet", "RUNNING"),
        )
    ]
    events += [
        _event(200 + KIT_SETTLE - 1, "kubelet", "STOPPING", "Sending SIGTERM"),
        _event(201 + KIT_SETTLE, "kubelet", "RUNNING"),
        _event(210 + KIT_SETTLE, "kubelet", "WAITING", CRASH),
    ]  # after the settle
    changes = [_change(100), _change(200, restore=True, version=3)]
    verdict = judge(restart_episodes(events), running_at=T0, booted=True, kit_changes=changes)
    assert len(verdict.excused) == 5
    assert "the kit's no-reboot change (MachineConfig version 2)" in verdict.excused[0].excuse
    assert "until the kit's restore of the original config (MachineConfig version 3)" in (
        verdict.excused[0].excuse
    )
    assert [e.at for e in verdict.counted] == [T0 + 210 + KIT_SETTLE]
    # another guarded change later on does not stretch the first one's window
    apart = judge(
        restart_episodes(events),
        running_at=T0,
        booted=True,
        kit_changes=[_change(100), _change(205 + KIT_SETTLE, session="s2")],
    )
    assert [e.kind for e in apart.counted] == ["stop"]


def test_a_try_change_lasts_until_it_reverts() -> None:
    events = [
        _event(1, "kubelet", "RUNNING"),
        _event(150, "kubelet", "STOPPING", "x"),
        _event(151, "kubelet", "RUNNING"),
    ]
    tried = [_change(100, mode="try", try_timeout=60.0)]
    assert not judge(
        restart_episodes(events), running_at=T0, booted=True, kit_changes=tried
    ).counted


def _stream_event(at: float, payload: models.EventPayload) -> models.Event:
    return models.Event(new_xid(T0 + at), "", payload)


def test_timed_events_from_a_stream() -> None:
    stream = [
        _stream_event(1, models.MachineStatusEvent("BOOTING", False)),
        _stream_event(2, models.ServiceStateEvent("apid", "RUNNING", "Started")),
        _stream_event(3, models.MachineStatusEvent("RUNNING", True)),
        _stream_event(4, models.MachineStatusEvent("RUNNING", False)),
    ]
    timed, running_at = timed_service_events(stream)
    assert timed == [TimedServiceEvent(T0 + 2, "apid", "RUNNING", "Started")]
    assert running_at == T0 + 3


def test_a_readiness_change_is_not_the_end_of_a_boot() -> None:
    # the boot ended before these events: every MachineStatusEvent says running
    stream = [
        _stream_event(5, models.MachineStatusEvent("RUNNING", False)),
        _stream_event(6, models.ServiceStateEvent("kubelet", "WAITING", CRASH)),
        _stream_event(9, models.MachineStatusEvent("RUNNING", True)),
    ]
    assert timed_service_events(stream)[1] is None


class _Client:
    def __init__(self, updated: dt.datetime | None, fail: bool = False) -> None:
        self.updated, self.fail = updated, fail
        self.version = 6

    def get(self, kind: str, ident: str, namespace: str | None = None) -> models.Resource:
        if self.fail:
            raise RuntimeError("no resource for you")
        self.version += 1
        metadata = models.ResourceMetadata(
            namespace or "", kind, ident, self.version, updated=self.updated
        )
        return models.Resource(metadata, spec={})


def test_record_kit_change_times_it_by_the_node_and_shares_it(tmp_path: Path) -> None:
    log = ChangeLog()
    moment = dt.datetime.fromtimestamp(T0, dt.UTC)
    change = record_kit_change(
        _Client(moment),
        node="10.5.0.2",
        hostname="cp-1",
        mode="no-reboot",
        session="s",
        state_dir=tmp_path,
        log=log,
    )
    assert change is not None
    assert (change.at, change.version) == (T0, 7)
    assert log.for_node("10.5.0.2") == [change]
    assert ChangeLog().for_node("10.5.0.2", tmp_path) == [change]  # another process: the file
    assert ChangeLog().for_node("10.5.0.9", tmp_path) == []
    assert (tmp_path / "changes.jsonl").stat().st_mode & 0o777 == 0o600
    # an observer: never raises, records nothing it cannot time
    assert (
        record_kit_change(
            _Client(moment, fail=True), node="n", hostname="h", mode="m", session="s", log=log
        )
        is None
    )
    assert (
        record_kit_change(_Client(None), node="n", hostname="h", mode="m", session="s", log=log)
        is None
    )


def test_note_guarded_change_keeps_one_session_per_snapshot() -> None:
    class Node:
        address, name = "10.5.0.3", "w-1"

    class Snapshot:
        node, claim = Node(), None

    first, second = Snapshot(), Snapshot()
    client = _Client(dt.datetime.fromtimestamp(T0, dt.UTC))
    from pytest_talos.restarts import KIT_CHANGES

    KIT_CHANGES.clear()
    try:
        note_guarded_change(client, first, mode="no-reboot")
        note_guarded_change(client, first, mode="no-reboot", restore=True)
        note_guarded_change(client, second, mode="try", try_timeout=30.0)
        found = KIT_CHANGES.for_node("10.5.0.3")
    finally:
        KIT_CHANGES.clear()
    assert len({c.session for c in found[:2]}) == 1
    assert found[0].session != found[2].session
    assert found[1].restore
    assert found[2].try_timeout == pytest.approx(30.0)


# --------------------------------------------------------------------------- issue 9: stability


def _info(service: str, *events: tuple[float, str, str]) -> models.ServiceInfo:
    return models.ServiceInfo(
        id=service,
        state="Running",
        healthy=True,
        health_unknown=False,
        last_message="",
        events=tuple(
            models.ServiceEvent(msg, state, dt.datetime.fromtimestamp(T0 + at, dt.UTC))
            for at, state, msg in events
        ),
    )


def _record(at: float, payload: models.EventPayload) -> models.Event:
    return models.Event(new_xid(T0 + at), "", payload)


def _service_record(at: float, service: str, action: str, message: str) -> models.Event:
    return _record(at, models.ServiceStateEvent(service, action, message))


FLAP = "Health check failed: rpc error: code = DeadlineExceeded desc = context deadline exceeded"


def test_a_health_check_failing_while_running_is_an_unhealthy_episode() -> None:
    events = [
        _event(0, "cri", "RUNNING", "Process Process([...]) started with PID 9"),
        _event(1, "cri", "RUNNING", "Health check successful"),
        _event(20, "cri", "RUNNING", FLAP),
        _event(25, "cri", "RUNNING", "Health check successful"),
    ]
    episodes = restart_episodes(events)
    assert [(e.service, e.kind, e.at) for e in episodes] == [("cri", "unhealthy", T0 + 20)]
    assert is_health_failure(FLAP)
    assert not is_health_failure("Health check successful")
    assert "turned unhealthy while Running" in episodes[0].describe()


def test_service_list_adds_what_the_stream_no_longer_holds() -> None:
    stream = [_event(50, "cri", "RUNNING", "Health check successful")]
    info = _info(
        "cri",
        (10, "Waiting", CRASH),
        (15, "Running", "started"),
        (50.4, "Running", "Health check successful"),
    )
    merged = merge_histories(stream, [info], since=T0)
    assert [(e.at, e.action) for e in merged] == [
        (T0 + 10, "WAITING"),
        (T0 + 15, "RUNNING"),
        (T0 + 50, "RUNNING"),
    ]
    # before the window: not added
    assert len(merge_histories(stream, [info], since=T0 + 20)) == 1


def test_history_gaps_say_when_neither_source_covers_the_window() -> None:
    boot = [
        _record(5, models.SequenceEvent("initialize", "START")),
        _service_record(6, "cri", "RUNNING", "started"),
    ]
    notes, cover = history_gaps(boot, [], window_start=T0)
    assert cover
    assert not notes  # the boot's first event: nothing older can be missed
    late = [_service_record(500, "cri", "RUNNING", "Health check successful")]
    notes, cover = history_gaps(late, [], window_start=T0)
    assert not cover
    assert "after the window start" in notes[0]
    notes, cover = history_gaps([], [], window_start=T0)
    assert not cover
    assert "no event" in notes[0]
    full = _info("cri", *[(100 + i, "Running", "Health check successful") for i in range(64)])
    notes, _ = history_gaps(boot, [full], window_start=T0)
    assert notes == [notes[0]]
    assert "cri: its ServiceList history (64 events" in notes[0]


def test_stream_misses_and_events_before_the_window() -> None:
    info = _info("cri", (10, "Running", "started"), (40, "Running", FLAP))
    complete = [
        _service_record(10, "cri", "RUNNING", "started"),
        _service_record(40, "cri", "RUNNING", FLAP),
    ]
    assert stream_misses(complete, [info], T0, T0 + 100) == []
    missing = stream_misses([], [info], T0, T0 + 100)  # tail_seconds ignored: no history
    assert [e.at for e in missing] == [T0 + 10, T0 + 40]
    assert stream_misses([], [info], T0 + 20, T0 + 100)[0].at == T0 + 40  # window only
    assert events_before(complete, T0 + 30) == [complete[0]]
    assert events_before(complete, T0) == []
