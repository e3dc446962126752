"""The emulator's plain-Python parts, without sockets: clock, ids, durations, resources,
faults and the service rules."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import itertools
import re
from typing import Any

import pytest
import yaml

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.clock import Clock, ManualClock
from pytest_talos.emulator.cosi.registry import DEFINITIONS, T
from pytest_talos.emulator.cosi.store import ResourceStore, yaml_of
from pytest_talos.emulator.faults import FAULTS, Fault, FaultSet
from pytest_talos.emulator.faults.stages import Act, Stage
from pytest_talos.emulator.node.apply import ApplyRequest, go_duration
from pytest_talos.emulator.node.events import EventBuffer, RuntimeEvent, SequencePayload, new_xid
from pytest_talos.emulator.node.identity import NodeIdentity
from pytest_talos.emulator.node.services.runner import (
    Service,
    ServiceEventRecord,
    ServiceManager,
    ServiceRefused,
    definition_of,
    go_quote,
    services_for,
)
from pytest_talos.emulator.node.state import NodeState
from pytest_talos.patches import apply_patches


def test_clock_scales_delays_and_time() -> None:
    clock = Clock(time_scale=20)
    assert clock.real_seconds(60) == 3
    assert clock.real_seconds(-1) == 0
    with pytest.raises(ValueError, match="positive"):
        Clock(time_scale=0)


def test_clock_call_later_fires_after_the_scaled_delay() -> None:
    clock = Clock(time_scale=100)
    fired: list[float] = []

    async def main() -> None:
        clock.bind(asyncio.get_running_loop())
        done = asyncio.Event()

        def fire() -> None:
            fired.append(clock.monotonic())
            done.set()

        clock.call_later(5, fire)
        await asyncio.wait_for(done.wait(), 5)

    asyncio.run(main())
    assert fired[0] >= 5  # emulated seconds: never early


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (60, "1m0s"),
        (30, "30s"),
        (1, "1s"),
        (1.5, "1.5s"),
        (90, "1m30s"),
        (3600, "1h0m0s"),
        (0, "0s"),
    ],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_xid_shape_and_order() -> None:
    ids = [new_xid(1_800_000_000 + i // 3) for i in range(10)]
    assert all(re.fullmatch(r"[0-9a-v]{20}", xid) for xid in ids)
    assert ids == sorted(ids)


def test_event_buffer_tail_options() -> None:
    buffer = EventBuffer(capacity=5)
    events = [
        RuntimeEvent(new_xid(100 + i), 100.0 + i, SequencePayload("boot", "START"))
        for i in range(8)
    ]
    for event in events:
        buffer.append(event)
    assert buffer.snapshot() == events[-5:]  # bounded
    assert buffer.backlog(tail_events=2, tail_id="", tail_seconds=0, now=0) == events[-2:]
    assert buffer.backlog(tail_events=0, tail_id="", tail_seconds=0, now=0) == []
    assert buffer.backlog(tail_events=-1, tail_id="", tail_seconds=0, now=0) == events[-5:]
    assert buffer.backlog(tail_events=0, tail_id=events[5].id, tail_seconds=0, now=0) == events[6:]
    # v1alpha1_events.go Watch: the id's second must be after now - tail (105 is not)
    assert buffer.backlog(tail_events=0, tail_id="", tail_seconds=2, now=107.0) == events[6:]


def test_automatic_aliases() -> None:
    machine_config = DEFINITIONS[T.MACHINE_CONFIGS]
    assert set(machine_config.all_aliases) >= {
        "machineconfig",
        "machineconfigs",
        "machineconfigs.config",
        "machineconfigs.config.talos",
        "mc",
        "mcs",
    }
    member = DEFINITIONS[T.MEMBERS]
    assert "m" not in member.all_aliases  # one capital: no initials alias
    # cosi's Fill: allAliases starts with the plural; the explicit alias leads `aliases`
    assert DEFINITIONS[T.SERVICES].all_aliases[0] == "services"
    assert DEFINITIONS[T.SERVICES].filled_aliases[0] == "svc"


def test_store_versions_follow_cosi_rules() -> None:
    store = ResourceStore(lambda: dt.datetime.now(dt.UTC))
    events: list[str] = []
    store.subscribe(lambda event: events.append(event.kind))
    first = store.put("runtime", T.VERSIONS, "version", {"version": "v1"})
    same = store.put("runtime", T.VERSIONS, "version", {"version": "v1"})
    assert first is same  # a controller write with the same spec changes nothing
    bumped = store.put("runtime", T.VERSIONS, "version", {"version": "v1"}, always_bump=True)
    assert bumped.version == 2
    store.destroy("runtime", T.VERSIONS, "version")
    assert events == ["created", "updated", "destroyed"]


def test_machine_config_yaml_spec_is_a_string_scalar() -> None:
    text = yaml_of(b"version: v1alpha1\nmachine:\n  type: worker\n")
    assert text.startswith("|")
    assert yaml.safe_load(text) == "version: v1alpha1\nmachine:\n  type: worker\n"


def test_fault_scopes() -> None:
    faults = FaultSet((FAULTS["wrong-version"], FAULTS["ssh-open"]), last_node="w2")
    assert faults.on(Fault.SSH_OPEN, "cp1")
    assert faults.on(Fault.WRONG_VERSION, "w2")
    assert not faults.on(Fault.WRONG_VERSION, "cp1")
    assert not faults.on(Fault.NO_MTLS, "cp1")


def test_services_per_role_and_mode() -> None:
    # v1alpha1_sequencer.go: container mode starts apid, machined, containerd; boot adds cri,
    # kubelet, and trustd + etcd on control planes; metal adds udevd, auditd, syslogd, dashboard
    worker = ["apid", "containerd", "cri", "kubelet", "machined"]
    assert services_for(controlplane=False, platform="container") == worker
    assert services_for(controlplane=True, platform="container") == sorted(
        [*worker, "etcd", "trustd"]
    )
    assert services_for(controlplane=False, platform="metal") == sorted(
        [*worker, "udevd", "auditd", "syslogd", "dashboard"]
    )
    assert services_for(controlplane=False, platform="metal", extension_services=["x"])[-1] == (
        "udevd"
    )
    assert "ext-x" in services_for(controlplane=False, platform="metal", extension_services=["x"])


def test_health_checks_and_runners_follow_the_services() -> None:
    checked = {
        sid
        for sid in (
            "apid",
            "containerd",
            "cri",
            "etcd",
            "kubelet",
            "trustd",
            "machined",
            "udevd",
            "auditd",
            "syslogd",
            "registryd",
            "dashboard",
            "ext-x",
        )
        if definition_of(sid, container=False).health is not None
    }
    assert checked == {
        "apid",
        "containerd",
        "cri",
        "etcd",
        "kubelet",
        "trustd",
        "machined",
        "udevd",
        "auditd",
        "syslogd",
        "registryd",
    }
    assert definition_of("kubelet").runner_name() == "Containerd(kubelet)"
    assert definition_of("udevd").runner_name() == (
        'Process(["/sbin/systemd-udevd" "--resolve-names=never"])'
    )
    assert definition_of("machined").runner_name() == 'Goroutine("machined")'
    assert not definition_of("machined").restarts  # no restart wrapper: a failure is final
    assert "/opt" in definition_of("cri", container=False).waits[0]
    assert "/opt" not in definition_of("cri").waits[0]


def test_go_quote_is_strconv_quote() -> None:
    assert go_quote('a "b"\n') == r'"a \"b\"\n"'
    assert go_quote("line\nnext\t\x01é") == r'"line\nnext\t\x01é"'


def test_service_api_rules_without_a_loop() -> None:
    manager = ServiceManager(
        ["apid", "kubelet"],
        clock=Clock(),
        on_change=lambda s, m: None,
        on_log=lambda s, m: None,
        failure_reason=lambda sid: None,
    )
    with pytest.raises(ServiceRefused, match='service "x" not defined'):
        manager.api_start("x")
    # system.go: a stopped service's stop and a running one's start are no-ops for anyone
    assert manager.api_stop("apid") == 'Service "apid" stopped'
    assert manager.api_stop("kubelet") == 'Service "kubelet" stopped'
    with pytest.raises(ServiceRefused, match='service "apid" doesn\'t support start operation'):
        manager.api_start("apid")
    manager.boot()
    assert manager.api_start("apid") == 'Service "apid" started'
    # kubelet.go allows start and restart via the API, never stop
    with pytest.raises(ServiceRefused, match='service "kubelet" doesn\'t support stop operation'):
        manager.api_stop("kubelet")
    with pytest.raises(ServiceRefused, match='service "apid" doesn\'t support restart'):
        manager.api_restart("apid")


# ---- the kubelet crash loop on a manual clock (B4/B5 timing without real time) -----------


def _manual_node(
    platform: str = "container", faults: FaultSet | None = None
) -> tuple[NodeState, ManualClock]:
    clock = ManualClock()
    identity = NodeIdentity(
        hostname="cp-1", role="controlplane", address="127.0.0.2", platform=platform
    )
    config = mc.generate_config(
        cluster_name="c",
        hostname="cp-1",
        role="controlplane",
        address="127.0.0.2",
        endpoint="https://127.0.0.2:6443",
    )
    state = NodeState(
        identity,
        clock=clock,
        faults=faults or FaultSet(),
        config=config,
        talos_version="v1.13.9",
        peers=lambda: [identity],
    )
    state.boot()
    return state, clock


def _apply(state: NodeState, patch: str) -> None:
    state.apply_configuration(
        ApplyRequest(apply_patches(state.active_config, [patch]), "NO_REBOOT")
    )


def _crashes(service: Service) -> list[ServiceEventRecord]:
    return [e for e in service.events if e.state == "Waiting" and "going to restart" in e.msg]


def test_crash_loop_period_and_heal_time_on_a_manual_clock() -> None:
    state, clock = _manual_node()
    kubelet = state.services.services["kubelet"]
    _apply(state, "machine:\n  kubelet:\n    extraArgs:\n      bogus-flag: 'x'\n")
    clock.advance(20)
    crashes = [e.time for e in _crashes(kubelet)]
    assert len(crashes) >= 3
    assert all(5 <= later - earlier <= 7 for earlier, later in itertools.pairwise(crashes))
    # restart.go: the restart runner shows Waiting, never Failed, and runs the task again
    # without the pre-start events (no Starting, Waiting for, Preparing in between)
    assert not [e for e in kubelet.events if e.state == "Failed"]
    since_first = list(kubelet.events)[[e.time for e in kubelet.events].index(crashes[0]) :]
    assert {e.state for e in since_first} == {"Waiting", "Running"}
    assert _crashes(kubelet)[-1].msg.startswith(
        'Error running Containerd(kubelet), going to restart forever: task "kubelet" failed: '
        'exit code 1 (last log "'
    )
    assert "unknown flag: --bogus-flag" in _crashes(kubelet)[-1].msg
    # service_runner.go: each crash marks it unhealthy ("service not running"); the health
    # loop's checks in between fail too (nothing listens on the healthz port)
    assert not kubelet.health.healthy
    assert not kubelet.health.unknown
    assert kubelet.health.last_message in (
        "service not running",
        'Get "http://127.0.0.1:10248/healthz": dial tcp 127.0.0.1:10248: connect: connection '
        "refused",
    )
    assert state.stage == "running"  # the boot had ended: a later crash loop does not undo it
    assert "unknown flag: --bogus-flag" in "\n".join(kubelet.log)
    assert state.store.get("runtime", T.SERVICES, "kubelet") is None or kubelet.running

    fixed_at = clock.time()
    _apply(
        state, "machine:\n  kubelet:\n    extraArgs:\n      bogus-flag:\n        $patch: delete\n"
    )
    clock.advance(3)  # B5: healthy again within about 3 s
    assert kubelet.running
    assert kubelet.health.healthy
    assert kubelet.health.last_change is not None
    assert kubelet.health.last_change - fixed_at < 3
    assert state.store.get("runtime", T.SERVICES, "kubelet") is not None


def test_try_mode_reverts_exactly_at_the_timeout_on_a_manual_clock() -> None:
    state, clock = _manual_node()
    original = state.active_config
    tried = apply_patches(original, ["machine:\n  nodeLabels:\n    tried: 'yes'\n"])
    result = state.apply_configuration(ApplyRequest(tried, "TRY", try_timeout=30))
    assert result.mode_details.endswith("reverted back in 30s")
    clock.advance(29.9)
    assert state.active_config == tried
    clock.advance(0.2)
    assert state.active_config == original
    machine_config = state.store.get("config", T.MACHINE_CONFIGS, "v1alpha1")
    assert machine_config is not None
    assert machine_config.version == 3


def test_second_try_rearms_and_other_modes_cancel_on_a_manual_clock() -> None:
    state, clock = _manual_node()
    original = state.active_config
    first = apply_patches(original, ["machine:\n  nodeLabels:\n    first: 'yes'\n"])
    second = apply_patches(first, ["machine:\n  nodeLabels:\n    second: 'yes'\n"])
    state.apply_configuration(ApplyRequest(first, "TRY", try_timeout=60))
    clock.advance(50)
    state.apply_configuration(ApplyRequest(second, "TRY", try_timeout=60))
    clock.advance(59)  # the first window has passed: the timer was re-armed
    assert state.active_config == second
    clock.advance(2)
    # RollbackToConfigAfter captured the config active at the second TRY: the first one
    assert state.active_config == first

    state.apply_configuration(ApplyRequest(first, "TRY", try_timeout=60))
    state.apply_configuration(ApplyRequest(second, "NO_REBOOT"))
    clock.advance(120)
    assert state.active_config == second  # the NO_REBOOT apply cancelled the revert


# ---- lifecycle order and the Kubernetes node controller on a manual clock -------------------


def test_upgrade_reports_the_new_version_only_from_the_booted_system() -> None:
    state, clock = _manual_node("metal")

    def versions() -> tuple[str, str]:
        resource = state.store.get("runtime", T.VERSIONS, "version")
        return state.api_version_tag(), resource.spec["version"] if resource else ""

    state.upgrade("ghcr.io/siderolabs/installer:v1.13.10")
    clock.advance(0.15)  # the sequence started: stage upgrading, services stopping
    assert (state.stage, state.powered) == ("upgrading", True)
    assert versions() == ("v1.13.9", "v1.13.9")
    clock.advance(1)  # apid stopped: the node is down
    assert not state.powered
    assert state.talos_version == "v1.13.9"
    clock.advance(5)  # booted again
    assert (state.stage, state.powered) == ("running", True)
    assert versions() == ("v1.13.10", "v1.13.10")
    state.rollback()
    clock.advance(1.2)
    assert (state.powered, state.talos_version) == (False, "v1.13.10")
    clock.advance(5)
    assert versions() == ("v1.13.9", "v1.13.9")


def test_node_turns_unknown_after_the_grace_period_on_a_manual_clock() -> None:
    state, clock = _manual_node()
    assert state.kube_node().ready
    _apply(state, "machine:\n  kubelet:\n    extraArgs:\n      bogus-flag: 'x'\n")
    clock.advance(39.5)  # kubelet stopped posting when the apply restarted it
    info = state.kube_node()
    assert (info.ready, info.status_unknown) == (True, False)
    clock.advance(1)
    info = state.kube_node()
    assert (info.ready, info.status_unknown) == (False, True)
    assert info.last_heartbeat is not None
    assert info.unknown_since is not None
    assert 40 <= info.unknown_since - info.last_heartbeat < 41
    _apply(
        state, "machine:\n  kubelet:\n    extraArgs:\n      bogus-flag:\n        $patch: delete\n"
    )
    clock.advance(3)
    info = state.kube_node()
    assert (info.ready, info.status_unknown) == (True, False)


# ---- timed faults as stages (faults/stages.py, node/services/faults.py) ------------------


def _with_stages(*stages: Stage) -> FaultSet:
    profile = dataclasses.replace(FAULTS[Fault.FLAPPING_SERVICE], stages=stages)
    return FaultSet((profile,), last_node="cp-1", last_controlplane="cp-1")


def _health_changes(service: Service) -> list[tuple[float, str]]:
    return [(e.time, e.msg) for e in service.events if "Health check" in e.msg]


def test_a_stage_chain_runs_in_order_and_loops_back() -> None:
    """kwok-style: fail after 2 s, pass 5 s later, fail again 15 s later, and so on."""
    faults = _with_stages(
        Stage("cri", Act.HEALTH_FAIL, 2.0, "down", then=1),
        Stage("cri", Act.HEALTH_PASS, 5.0, then=2),
        Stage("cri", Act.HEALTH_FAIL, 15.0, "down", then=1),
    )
    state, clock = _manual_node(faults=faults)
    cri = state.services.services["cri"]
    clock.advance(3)
    assert cri.health_fault == "down"
    clock.advance(5)  # 8 s: passed again at 7 s
    assert cri.health_fault is None
    clock.advance(15)  # 23 s: failing again since 22 s
    assert cri.health_fault == "down"
    clock.advance(5)  # 28 s: the loop goes back to stage 2 (pass at 27 s)
    assert cri.health_fault is None


def test_a_node_stage_stops_when_the_node_goes_down_and_health_is_its_own_again() -> None:
    state, clock = _manual_node(faults=_with_stages(Stage("cri", Act.HEALTH_FAIL, 2.0, "x")))
    clock.advance(3)
    assert state.services.services["cri"].health_fault == "x"
    state.service_faults.cancel()
    assert state.services.services["cri"].health_fault is None


def test_a_stage_of_the_run_is_forgotten_when_the_service_restarts_first() -> None:
    stop_later = Stage("trustd", Act.STOP, 10.0, with_run=True)
    state, clock = _manual_node(faults=_with_stages(stop_later))
    clock.advance(1)
    trustd = state.services.services["trustd"]
    state.services.fail(trustd, "signal: killed")  # a new run before the stage is due
    clock.advance(30)
    assert trustd.running  # the restarted run never met the stage of the old one


def test_jitter_delays_within_its_bound_and_repeats_per_node() -> None:
    def first_kill_after_boot() -> float:
        stages = (Stage("containerd", Act.KILL, 10.0, "signal: killed", jitter=4.0),)
        state, clock = _manual_node(faults=_with_stages(*stages))
        clock.advance(20)
        containerd = state.services.services["containerd"]
        killed = next(e.time for e in containerd.events if "going to restart" in e.msg)
        return killed - state.booted_at

    first, again = first_kill_after_boot(), first_kill_after_boot()
    assert first == again  # seeded by the node's hostname: a run repeats exactly
    assert 10.0 <= first <= 14.0 + 0.05  # the manual clock moves in 0.05 s steps


@pytest.mark.parametrize(
    "bad",
    [
        {"delay": -1.0},
        {"jitter": -0.5},
        {"act": Act.KILL, "message": ""},
        {"act": Act.HEALTH_FAIL, "message": ""},
    ],
)
def test_a_stage_refuses_what_cannot_happen(bad: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"service": "cri", "act": Act.STOP, "delay": 1.0} | bad
    with pytest.raises(ValueError):
        Stage(**fields)


def test_timed_faults_are_stages_and_every_chain_stays_in_range() -> None:
    timed = [profile for profile in FAULTS.values() if profile.stages]
    assert {profile.name for profile in timed} >= {
        "flapping-service",
        "health-flap-running",
        "machined-unhealthy",
        "service-down",
        "service-stuck-preparing",
    }
    for profile in timed:
        for stage in profile.stages:
            assert stage.then is None or 0 <= stage.then < len(profile.stages), profile.name
