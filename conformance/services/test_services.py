"""System services: the ones a node of its role and platform mode needs are Running and
healthy, nothing crash-loops or flaps, every log is readable and holds something, the
Services resources agree with ServiceList, and the Events stream's history covers the window
asked for.

Which services run (siderolabs/talos v1.13.9, internal/app/machined/pkg/runtime/v1alpha1/
v1alpha1_sequencer.go and v1alpha1_sequencer_tasks.go): apid, containerd, cri, kubelet and
machined everywhere, etcd and trustd on control planes; outside container mode also udevd
and syslogd, and auditd and the dashboard unless a kernel argument turns them off. On v1.14, outside
container mode, sandboxd too when a SecurityProfileConfig document enables workloadIsolation
(v1.14.0-rc.1 internal/app/machined/pkg/sandboxd/enabled.go; the release table,
:mod:`pytest_talos.releases`, says which releases have it).

A crash-looping service is never ``Failed``: the restart runner records ``Waiting`` "Error
running ..., going to restart forever" and runs it again 5 s later (internal/app/machined/
pkg/system/runner/restart/restart.go). A service whose health flaps never leaves ``Running``:
each change of health is a ``Running`` event "Health check failed: ..." / "Health check
successful" (internal/app/machined/pkg/system/service_runner.go healthUpdate). A kubelet
that crash-loops shows its cause only in its last event and its log (observed on v1.13.10
nodes); the failures below carry both.
Restarts during the boot, or caused by a config change this kit made, are not counted
against the node: the evidence says what they were (:mod:`pytest_talos.restarts`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from conformance._support.context import Timing
from conformance._support.fanout import CheckedRead, FanOut
from conformance._support.fixtures import read_at_once
from conformance._support.observe import Observation
from conformance.services.logs import QUIET_SERVICES, log_problem
from pytest_talos import models
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import (
    APIError,
    ConformanceFailure,
    DeadlineExceeded,
    PermissionDenied,
    TalosError,
    WaitTimeout,
)
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.outcomes import collapse_repeats
from pytest_talos.plugin.conformance.settings import SuiteSettings
from pytest_talos.releases import Release, release_of
from pytest_talos.restarts import (
    SERVICE_EVENTS_KEPT,
    XID_SLACK,
    Episode,
    KitChange,
    TimedServiceEvent,
    Verdict,
    boot_places,
    clock_step,
    events_before,
    excuse_clock_steps,
    history_gaps,
    is_restart_message,
    judge,
    merge_histories,
    restart_episodes,
    stream_misses,
    timed_service_events,
    xid_time,
)
from pytest_talos.wait import wait_until

EVERY_NODE = frozenset({"apid", "containerd", "cri", "kubelet", "machined"})
CONTROL_PLANE = frozenset({"etcd", "trustd"})
# v1alpha1_sequencer.go Initialize: started outside container mode; auditd and the dashboard
# can be turned off by kernel arguments (talos.auditd.disabled, talos.dashboard.disabled),
# so they are required only where the node lists them.
OUTSIDE_CONTAINERS = frozenset({"udevd", "syslogd"})
OUTSIDE_CONTAINERS_OPTIONAL = frozenset({"auditd", "dashboard"})
# Services that implement a health check (system/services/<id>.go HealthFunc); dashboard and
# extension services have none and always report health unknown.
HEALTH_CHECKED = frozenset(
    {
        "apid",
        "auditd",
        "containerd",
        "cri",
        "etcd",
        "kubelet",
        "machined",
        "registryd",
        "sandboxd",
        "syslogd",
        "trustd",
        "udevd",
    }
)
SETTLE = 30.0  # node seconds a service may take to come back after a restart
RECENT = 60.0  # node seconds: a crash this recent means the service crash-loops now
MACHINE_STATUS = ("MachineStatuses.runtime.talos.dev", "machine", "runtime")
SERVICES_RESOURCE = ("Services.v1alpha1.talos.dev", "runtime")
# Node seconds a real node's clock may differ from this machine's: Talos syncs its clock
# before it starts etcd and kubelet (services/etcd.go, kubelet.go wait for "time sync").
NODE_CLOCK_SKEW = 30.0
# Real seconds an event may take from the node's publish to this process's stream (the
# network, then a busy runner's event loop): a ServiceList event stamped this close to the
# stream's close may still have been on its way, so it is not required of the stream. At a
# fast emulated clock a fixed node-time slack is a blink: 2 node seconds are 0.1 s at 20x.
EVENT_DELIVERY = 1.0
_SLACK = 2.0  # node seconds: an event id (rs/xid) carries whole seconds
_EVENTS = 6
_LOG_LINES = 20

KitChanges = Callable[[TalosNode], list[KitChange]]


SANDBOXD = "sandboxd"
SECURITY_PROFILE_KIND = "SecurityProfileConfig"  # pkg/machinery/config/types/runtime/


def expected_services(
    role: str, mode: str = "container", release: Release | None = None, isolated: bool = False
) -> frozenset[str]:
    """The services a node of ``role`` must list in platform ``mode`` (Version platform) on
    ``release``; ``isolated``: its config enables workload isolation (:func:`isolated`)."""
    wanted = EVERY_NODE | CONTROL_PLANE if role in ("controlplane", "init") else EVERY_NODE
    if mode == "container":
        return wanted
    sandbox = {SANDBOXD} if release is not None and release.has_sandboxd and isolated else set()
    return wanted | OUTSIDE_CONTAINERS | sandbox


def isolated(node: TalosNode) -> bool:
    """Whether the node's machine config enables workload isolation (a SecurityProfileConfig
    with ``workloadIsolation: true``; security_profile_config.go WorkloadIsolation). Without
    os:admin the config cannot be read: then sandboxd is judged only where the node lists it."""
    try:
        documents = node.machine_config.documents
    except PermissionDenied:
        return False
    return any(
        isinstance(d, dict)
        and d.get("kind") == SECURITY_PROFILE_KIND
        and d.get("workloadIsolation") is True
        for d in documents
    )


def wanted_services(node: TalosNode, version: models.Version | None = None) -> frozenset[str]:
    """:func:`expected_services` of ``node``'s role, mode, release and config; ``version``:
    the node's Version when the caller has just read it."""
    if version is None:
        version = node.version  # one Version call: the mode and the release both come from it
    mode, release = version.platform_mode, release_of(version.tag).release
    needs_config = mode != "container" and release.has_sandboxd
    return expected_services(node.role, mode, release, isolated(node) if needs_config else False)


def _crash_looping(service: models.ServiceInfo) -> bool:
    last = service.last_event
    return service.state == "Waiting" and last is not None and is_restart_message(last.msg)


def _problem(service: models.ServiceInfo | None, name: str, required: bool) -> str | None:
    if service is None:
        return f"{name}: missing" if required else None
    if _crash_looping(service):
        last = service.last_event
        return f"{name}: crash-looping (Waiting: {last.msg if last else ''})"
    if name.startswith("ext-"):  # extension services may finish (restart: never)
        # ... but one that never gets past its conditions or its pre-start step is stuck
        stuck = service.state in ("Failed", "Initialized", "Starting", "Waiting", "Preparing")
        return f"{name}: {service.state} ({service.last_message})" if stuck else None
    if not service.running:
        return f"{name}: {service.state}"
    if name in HEALTH_CHECKED and not service.healthy:
        health = "health unknown" if service.health_unknown else "unhealthy"
        return f"{name}: Running, {health} {service.last_message}".rstrip()
    return None


def _problems(services: list[models.ServiceInfo], wanted: frozenset[str]) -> dict[str, str]:
    by_id = {s.id: s for s in services}
    found = {}
    for name in sorted(wanted | set(by_id)):
        problem = _problem(by_id.get(name), name, name in wanted)
        if problem:
            found[name] = problem
    return found


def _compact(log: str) -> str:
    """The log tail with repeated lines shown once, where they last appeared, with a count
    (a crash loop repeats the same few lines)."""
    lines = [line for line in log.splitlines() if line.strip()]
    counts = {line: lines.count(line) for line in lines}
    last_seen = {line: index for index, line in enumerate(lines)}
    kept = sorted(last_seen, key=last_seen.__getitem__)[-_LOG_LINES:]
    return "\n".join(f"{line}  (x{counts[line]})" if counts[line] > 1 else line for line in kept)


def _service_evidence(node: TalosNode, service_id: str) -> dict[str, str]:
    try:
        events = node.service(service_id).events[-_EVENTS:]
        lines = collapse_repeats([f"[{e.state}] {e.msg}" for e in events])
        history = "\n".join(lines) or "(none)"
    except TalosError as exc:
        history = f"(could not read: {exc})"
    try:
        log = _compact(node.logs(service_id, tail=_LOG_LINES * 3)) or "(empty)"
    except TalosError as exc:
        log = f"(could not read: {exc})"
    return {f"{service_id} last events": history, f"{service_id} log tail": log}


def _machine_running(node: TalosNode) -> bool:
    """Whether the machine reports the running stage now (its boot sequence ended)."""
    spec = node.resource(*MACHINE_STATUS).typed_spec
    return isinstance(spec, models.MachineStatusSpec) and spec.stage == "running"


def _verdict(
    events: list[models.Event],
    node: TalosNode,
    kit: KitChanges,
    services: Sequence[models.ServiceInfo] = (),
    since: float | None = None,
    upper: float | None = None,
) -> Verdict:
    timed, running_at = timed_service_events(events)
    if since is not None:
        timed = merge_histories(timed, services, since)
    booted = running_at is not None or _machine_running(node)
    places = boot_places(events)
    verdict = judge(
        restart_episodes(timed), running_at=places.running_at, booted=booted, kit_changes=kit(node)
    )
    excuse_clock_steps(verdict.counted, places, upper=upper, booted=verdict.booted)
    return verdict


def _excused_evidence(verdict: Verdict) -> list[str]:
    return [episode.describe() for episode in verdict.excused]


def _recent_events(node: TalosNode, timing: Timing) -> list[models.Event]:
    """The node's events of the last RECENT node seconds (the node filters by its clock)."""
    found: list[models.Event] = []
    try:
        with node.events(tail_seconds=int(RECENT), timeout=max(0.5, timing.real(1.0))) as s:
            found.extend(s)
    except DeadlineExceeded:
        pass  # the backlog has arrived: that is how an event stream ends
    return found


# Node seconds a fan-out read of the recent events stays usable: a crash loop (about every
# 5 s) or a flapping health check (every 30 s) shows in any RECENT-long window, and the
# events seen are cut to the test's own window (_in_window); ServiceList fills the gap.
FANOUT_MAX_AGE = RECENT / 4

RecentRead = tuple[bool, list[models.Event]]  # (services settled when read, events)


def _settled_then_recent(node: TalosNode, timing: Timing) -> RecentRead:
    """Whether the node's expected services were running and healthy, then its recent
    events: what the check reads once a node has settled."""
    wanted = wanted_services(node)
    settled = not _problems(node.services, wanted)
    return settled, _recent_events(node, timing) if settled else []


@pytest.fixture(scope="module")
def recent_events(talos_cluster: TalosCluster, talos_timing: Timing) -> FanOut[RecentRead]:
    """Every node's recent events read at once (the stream is read to its deadline, a fixed
    time per node), used by a node's test while fresh and taken once the node had settled."""
    return FanOut(
        talos_cluster.reachable,
        lambda node: _settled_then_recent(node, talos_timing),
        max_age=talos_timing.real(FANOUT_MAX_AGE),
        usable=lambda read: read[0],
    )


def _in_window(events: list[models.Event], since: float | None) -> list[models.Event]:
    """The events of a read made a little earlier, cut to the window ``since`` opens (the
    node's own tail filter at this moment); an id's time is whole seconds, so only events
    surely older go, and with them every event the stream sent before one of them (the
    stream is in publishing order: what a clock that stepped back stamped later is older)."""
    if since is None:
        return events
    times = [xid_time(e.id) for e in events]
    older = [i for i, at in enumerate(times) if at is not None and at + 1 <= since]
    return events[older[-1] + 1 :] if older else events


def _recent_or_fanned_out(
    node: TalosNode, timing: Timing, fanned: FanOut[RecentRead], lower: float | None
) -> list[models.Event]:
    """The node's recent events: from the fan-out when it read this node settled, else
    read now, as the node is. When the node's clock is known here, a read is cut to this
    moment's window, from the earliest the node's clock can be now (a real node's: up to
    NODE_CLOCK_SKEW older than RECENT). An emulated clock reached from outside is not
    known: the fan-out's read is used uncut, a window at most FANOUT_MAX_AGE and the read's
    own deadline older than the test's (25 node seconds at 20x, less than that skew)."""
    try:
        settled, events = fanned.get(node)
    except TalosError:  # the earlier read failed: read now, and let that one speak
        settled, events = False, []
    if not settled:
        events = _recent_events(node, timing)
    return events if lower is None else _in_window(events, lower - RECENT)


def _node_now(emulator: Any, timing: Timing) -> tuple[float | None, float | None]:
    """Bounds of the node's clock now (Unix seconds): exact for an emulator started by this
    run; a real node's within NODE_CLOCK_SKEW of this machine's; unknown for a faster
    emulated clock reached from outside (only its rate is advertised)."""
    clock = getattr(emulator, "clock", None)
    if clock is not None:
        now = float(clock.time())
        return now, now
    if timing.scale == 1:
        now = time.time()
        return now - NODE_CLOCK_SKEW, now + NODE_CLOCK_SKEW
    return None, None


def _node_time_at(bound: float | None, timing: Timing, real: float) -> float | None:
    """The node time at real Unix time ``real``, from a bound of the node's clock now."""
    return None if bound is None else bound - timing.scale * (time.time() - real)


@pytest.mark.talos_check(
    "services.expected-running-healthy",
    severity="critical",
    claim="Every service the node's role and platform need is Running, healthy where it has "
    "a check, not crash-looping and not flapping between healthy and unhealthy",
)
def test_expected_services_are_running_and_healthy(
    talos_node: TalosNode,
    talos_timing: Timing,
    talos_emulator: Any,
    talos_evidence: dict[str, Any],
    talos_kit_changes: KitChanges,
    recent_events: FanOut[RecentRead],
    talos_check_spec: CheckSpec,
) -> None:
    version = talos_node.version  # once: the mode, and the services the release needs
    role, mode = talos_node.role, version.platform_mode
    wanted = wanted_services(talos_node, version)
    talos_evidence["services required"] = sorted(wanted)
    talos_evidence["platform mode"] = mode
    if mode != "container":
        talos_evidence["required where listed"] = sorted(OUTSIDE_CONTAINERS_OPTIONAL)
    try:
        wait_until(
            lambda: talos_node.services,
            lambda s: not _problems(s, wanted),
            timeout=talos_timing.allow(SETTLE),
            node=talos_node.name,
            description="the expected services to be running and healthy",
        )
    except WaitTimeout as exc:
        seen = exc.last_observation
        problems = _problems(seen, wanted) if isinstance(seen, list) else {"?": str(seen)}
        evidence: dict[str, str] = {}
        for name in problems:
            evidence.update(_service_evidence(talos_node, name))
        raise ConformanceFailure(
            talos_check_spec.id,
            f"services not running and healthy after {exc.elapsed:.1f}s: "
            + ", ".join(sorted(problems)),
            node=talos_node.name,
            expected=f"{role} services running and healthy ({mode})",
            observed="; ".join(problems.values()),
            evidence=evidence,
        ) from None
    # Running now, but a crash moments ago is a crash loop caught between two restarts, and
    # a failed health check moments ago is a health that flaps (it never leaves Running).
    # ServiceList is asked too: what the Events stream leaves out of the last RECENT s (the
    # window starts at the latest the node's clock can be, so nothing older is counted).
    lower, upper = _node_now(talos_emulator, talos_timing)
    since = upper - RECENT if upper is not None else None
    verdict = _verdict(
        _recent_or_fanned_out(talos_node, talos_timing, recent_events, lower),
        talos_node,
        talos_kit_changes,
        talos_node.services if since is not None else (),
        since,
        upper,
    )
    crashes = {
        name: [e for e in found if e.kind != "stop"] for name, found in verdict.by_service().items()
    }
    crashes = {name: found for name, found in crashes.items() if found}
    if verdict.excused:
        talos_evidence["restarts not counted"] = _excused_evidence(verdict)
    if not crashes:
        return
    evidence = {}
    for name in crashes:
        evidence.update(_service_evidence(talos_node, name))
    raise ConformanceFailure(
        talos_check_spec.id,
        f"services crash-looping or flapping: Running, but crashed or unhealthy in the last "
        f"{RECENT:g}s (node time): " + ", ".join(sorted(crashes)),
        node=talos_node.name,
        expected=f"no crash and no failed health check within the last {RECENT:g}s",
        observed="; ".join(
            f"{name}: {_describe(found)}, last: {found[-1].message}"
            for name, found in sorted(crashes.items())
        ),
        evidence=evidence,
    )


def _describe(episodes: list[Episode]) -> str:
    kinds = [e.kind for e in episodes]
    words = (
        ("crash", "crash(es)"),
        ("stop", "stop(s)"),
        ("failure", "failure(s)"),
        ("unhealthy", "failed health check(s) while Running"),
    )
    parts = [f"{kinds.count(k)} {word}" for k, word in words if k in kinds]
    return ", ".join(parts)


def _resource_restarts(
    node: TalosNode, merged: list[TimedServiceEvent], since: float, after: float | None
) -> list[Episode]:
    """Services that entered Running again within the window, after ``after`` (the boot's
    end; None: before the window), that no event still shows: the Services resource is
    destroyed whenever its service leaves Running and created anew when it runs again
    (internal/app/machined/pkg/controllers/v1alpha1/service.go), so its ``created`` time is
    when the service last started, whatever the event buffers have dropped since."""
    found = []
    for resource in node.resources(*SERVICES_RESOURCE):
        created = resource.metadata.created
        at = created.timestamp() if created is not None else None
        if at is None or at < since or (after is not None and at <= after + _SLACK):
            continue
        shown = any(
            e.service == resource.id
            and e.action == "RUNNING"
            and e.at is not None
            and abs(e.at - at) <= _SLACK
            for e in merged
        )
        if not shown:
            found.append(
                Episode(
                    resource.id,
                    "stop",
                    at,
                    f"its Services resource was created then (version {resource.version}): "
                    "it started again, and no event the node still keeps shows why",
                )
            )
    return found


@pytest.mark.talos_check(
    "services.no-recent-restarts",
    severity="high",
    claim="No service failed, crashed, was restarted or turned unhealthy recently or while "
    "watched, other than during the boot or because of this kit's own config changes",
)
def test_no_service_restarted_recently(
    talos_node: TalosNode,
    talos_observations: dict[str, Observation],
    talos_suite: SuiteSettings,
    talos_timing: Timing,
    talos_emulator: Any,
    talos_evidence: dict[str, Any],
    talos_kit_changes: KitChanges,
    talos_check_spec: CheckSpec,
) -> None:
    observation = talos_observations.get(talos_node.name)
    if observation is None or observation.error:
        why = observation.error if observation else "the node was not observed"
        raise TalosError(f"cannot watch the node's events: {why}", node=talos_node.name)
    window = (
        f"the last {talos_suite.restart_window:g}s and a {talos_suite.observe:g}s watch (node time)"
    )
    talos_evidence.update(window=window, service_events=len(observation.events))
    services = talos_node.services
    _, upper = _node_now(talos_emulator, talos_timing)
    began = _node_time_at(upper, talos_timing, observation.began)
    start = began - talos_suite.restart_window if began is not None else None
    stream, running_at = timed_service_events(observation.records)
    booted = running_at is not None or _machine_running(talos_node)
    gaps, events_cover = history_gaps(observation.records, services, start)
    merged = merge_histories(stream, services, start) if start is not None else stream
    episodes = restart_episodes(merged)
    if start is not None:
        # the boot ended before the window when the stream reaches back past its start
        # without showing the end of a boot
        after = running_at if running_at is not None else (None if events_cover else start)
        if running_at is not None or events_cover:
            episodes += _resource_restarts(talos_node, merged, start, after)
    from_stream = {(e.service, e.kind, e.at) for e in restart_episodes(stream)}
    places = boot_places(observation.records)
    verdict = judge(
        episodes,
        running_at=places.running_at,
        booted=booted,
        kit_changes=talos_kit_changes(talos_node),
    )
    excuse_clock_steps(verdict.counted, places, upper=upper, booted=verdict.booted)
    for episode in verdict.counted:
        if (episode.service, episode.kind, episode.at) in from_stream:
            continue
        if running_at is None and not events_cover:
            episode.excuse = (
                "seen only in ServiceList; the Events history does not show whether the "
                "boot had ended then (not counted)"
            )
    if gaps:
        talos_evidence["history gaps"] = gaps
    if verdict.excused:
        talos_evidence["restarts not counted"] = _excused_evidence(verdict)
    if not verdict.booted:
        talos_evidence["boot"] = "the machine has not reached the running stage: nothing excused"
    troubles = verdict.by_service()
    if troubles:
        evidence: dict[str, str] = {}
        for name, found in sorted(troubles.items()):
            evidence[f"{name} restarts"] = "\n".join(e.describe() for e in found[-12:])
            evidence.update(_service_evidence(talos_node, name))
        if gaps:
            evidence["history gaps"] = "\n".join(gaps)
        raise ConformanceFailure(
            talos_check_spec.id,
            "services failed, restarted or turned unhealthy: " + ", ".join(sorted(troubles)),
            node=talos_node.name,
            expected=f"no failure, restart or failed health check within {window}",
            observed="; ".join(
                f"{name}: {_describe(found)}" for name, found in sorted(troubles.items())
            ),
            evidence=evidence,
        )
    truncated = [
        s.id
        for s in services
        if start is not None
        and len(s.events) >= SERVICE_EVENTS_KEPT
        and min((e.ts.timestamp() for e in s.events if e.ts), default=start) > start
    ]
    if truncated and not events_cover:
        # Neither the Events stream nor these services' ServiceList reach back to the start
        # of the window: what happened before is lost, the window cannot be vouched for.
        raise TalosError(
            "the node's history does not cover the window asked for ("
            + "; ".join(gaps)
            + "): a restart may have been dropped; shorten --talos-restart-window",
            node=talos_node.name,
        )


@pytest.mark.talos_check(
    "services.logs-readable",
    severity="medium",
    claim="The log of every service can be read through the API, and a Talos service that "
    "runs has written to it",
)
def test_every_service_log_is_readable(
    talos_node: TalosNode, talos_evidence: dict[str, Any], service_log_reads: FanOut[CheckedRead]
) -> None:
    service_log_reads.get(talos_node).deliver(talos_evidence)


def _service_logs_readable(
    talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str
) -> None:
    sizes: dict[str, int] = {}
    failures: dict[str, str] = {}
    for service in talos_node.services:
        try:
            sizes[service.id] = len(talos_node.logs(service.id, tail=_LOG_LINES))
        except APIError as exc:
            failures[service.id] = f"{exc.code}: {exc.details}"
            continue
        # a running service whose daemon logs at start (or logs this very request) with
        # nothing in its log lost its output; the quiet ones may be empty (logs.py)
        problem = log_problem(service, sizes[service.id])
        if problem:
            failures[service.id] = problem
    talos_evidence["log bytes (tail)"] = sizes
    if failures:
        raise ConformanceFailure(
            check_id,
            "some service logs cannot be read",
            node=talos_node.name,
            expected="every ServiceList service has a readable log, not empty while it runs "
            "(but for " + ", ".join(sorted(QUIET_SERVICES)) + " and extension services)",
            observed="; ".join(f"{k}: {v}" for k, v in sorted(failures.items())),
        )


service_log_reads = read_at_once(
    "test_every_service_log_is_readable",
    _service_logs_readable,
    "Every service's log tail read on every checked node at once (a call a service).",
)


def _disagreements(node: TalosNode) -> dict[str, str]:
    """The services whose Services resource agrees with neither ServiceList read around it.

    ServiceList is read before and after the resources: a service that changed state in
    between (a crash loop's restart) may have had either state when its resource was read,
    so the resource is judged against both. A stale or missing resource disagrees with both.
    """
    before = {s.id: s for s in node.services}
    resources = {
        r.id: r.typed_spec for r in node.resources("Services.v1alpha1.talos.dev", "runtime")
    }
    after = {s.id: s for s in node.services}
    found = {}
    for name in sorted(set(before) | set(resources) | set(after)):
        spec = resources.get(name)
        verdicts = [_resource_verdict(listed.get(name), spec) for listed in (before, after)]
        if all(verdicts):
            found[name] = verdicts[-1]
    return found


def _resource_verdict(service: models.ServiceInfo | None, spec: object) -> str:
    """What is wrong with a service's resource against one ServiceList read ("": nothing)."""
    running = service is not None and service.running
    if running != (spec is not None):
        state = service.state if service else "not listed"
        return f"ServiceList {state}, resource {'present' if spec else 'absent'}"
    if (
        service is not None
        and isinstance(spec, models.ServiceSpec)
        and service.healthy != spec.healthy
    ):
        return f"ServiceList healthy={service.healthy}, resource healthy={spec.healthy}"
    return ""


@pytest.mark.talos_check(
    "services.resources-match-service-list",
    severity="medium",
    claim="The Services resources agree with ServiceList: one per running service, same health",
)
def test_services_resources_agree_with_service_list(
    talos_node: TalosNode,
    talos_evidence: dict[str, Any],
    service_resource_reads: FanOut[CheckedRead],
) -> None:
    service_resource_reads.get(talos_node).deliver(talos_evidence)


def _services_resources_agree(
    talos_node: TalosNode, talos_evidence: dict[str, Any], check_id: str, *, talos_timing: Timing
) -> None:
    try:
        wait_until(
            lambda: _disagreements(talos_node),
            lambda found: not found,
            timeout=talos_timing.real(5.0),
            node=talos_node.name,
            description="Services resources to agree with ServiceList",
        )
    except WaitTimeout as exc:
        seen = exc.last_observation
        raise ConformanceFailure(
            check_id,
            "the Services resources and ServiceList disagree",
            node=talos_node.name,
            expected="a Services resource exactly for each running service",
            observed="; ".join(f"{k}: {v}" for k, v in seen.items())
            if isinstance(seen, dict)
            else str(seen),
        ) from None
    talos_evidence["agree"] = True


service_resource_reads = read_at_once(
    "test_services_resources_agree_with_service_list",
    _services_resources_agree,
    "ServiceList, the Services resources and ServiceList again, read on every checked node "
    "at once (until they agree, up to 5 node seconds).",
    uses=("talos_timing",),
)


def _iso(seconds: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(seconds))


def _missing_text(missing: list[TimedServiceEvent]) -> str:
    shown = [f"{e.service} [{e.action}] {e.message}" for e in missing[:8]]
    more = f" (and {len(missing) - 8} more)" if len(missing) > 8 else ""
    return "; ".join(shown) + more


def _clock_stepped(records: list[models.Event], seen: list[float], upper: float | None) -> str:
    """How the stream shows the node's clock stepped back ("": it does not): its times go
    back, or some are later than the node's clock can be now."""
    step = clock_step(records)
    if step is not None:
        return step.describe()
    if upper is not None and seen and max(seen) > upper + XID_SLACK:
        return (
            f"the node's clock stepped back: events are stamped up to {_iso(max(seen))}, "
            f"later than its clock can be now ({_iso(upper)})"
        )
    return ""


@pytest.mark.talos_check(
    "services.events-cover-window",
    severity="medium",
    claim="The Events stream asked for the last N seconds (tail_seconds) returns the events "
    "of that window: none older, and every service event ServiceList shows in it",
)
def test_events_stream_covers_the_window(
    talos_node: TalosNode,
    talos_observations: dict[str, Observation],
    talos_suite: SuiteSettings,
    talos_timing: Timing,
    talos_emulator: Any,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    observation = talos_observations.get(talos_node.name)
    if observation is None or observation.error:
        why = observation.error if observation else "the node was not observed"
        raise TalosError(f"cannot watch the node's events: {why}", node=talos_node.name)
    services = talos_node.services
    lower, upper = _node_now(talos_emulator, talos_timing)
    history = talos_suite.restart_window
    seen = [t for t in (xid_time(e.id) for e in observation.records) if t is not None]
    stepped = _clock_stepped(observation.records, seen, upper)
    # the node's clock is at least as late as the newest event it sent, unless that event
    # was stamped by a clock that has since stepped back
    if seen and not stepped:
        newest = max(seen)
        lower = max(lower, newest) if lower is not None else newest
    began_lower = _node_time_at(lower, talos_timing, observation.began)
    # the node took the request by the first event's arrival: no ServiceList event older
    # than that minus the history may be asked of the stream
    began_upper = _node_time_at(upper, talos_timing, observation.open_by)
    # what the node published up to a moment before the stream closed must be in it
    ended_lower = _node_time_at(lower, talos_timing, observation.ended - EVENT_DELIVERY)
    talos_evidence["tail_seconds"] = int(history)
    talos_evidence["events"] = len(observation.records)
    talos_evidence["not required"] = (
        f"ServiceList events of the last {EVENT_DELIVERY:g} s (real) before the stream "
        "closed: they may still have been on their way"
    )
    problems: list[str] = []
    not_compared: list[str] = []
    if stepped:
        # runtime/v1alpha1/v1alpha1_events.go Watch finds the window's start by a binary
        # search (sort.Search) over the buffer, which holds only for times that increase:
        # after a step back the node may send its whole buffer, and is right to
        not_compared.append(
            f"{stepped}: events older than the window cannot be told (the node's "
            "tail_seconds search assumes event times that only increase)"
        )
    elif began_lower is not None:
        older = events_before(observation.records, began_lower - max(1, int(history)))
        if older:
            oldest = min(xid_time(e.id) or 0.0 for e in older)
            problems.append(
                f"{len(older)} event(s) from before the window (the oldest at "
                f"{_iso(oldest)}, node time): tail_seconds was ignored"
            )
    if began_upper is not None and ended_lower is not None:
        missing = stream_misses(
            observation.records, services, began_upper - max(1, int(history)), ended_lower
        )
        if missing:
            problems.append(
                f"{len(missing)} ServiceList event(s) of the window are not in the stream: "
                + _missing_text(missing)
            )
    else:
        not_compared.append(
            "the node's clock is not known here (an emulated clock faster than real time, "
            "reached from outside): ServiceList events were not placed in the window"
        )
    if not_compared:
        talos_evidence["not compared"] = "; ".join(not_compared)
    if problems:
        raise ConformanceFailure(
            talos_check_spec.id,
            "the Events stream does not return the window asked for",
            node=talos_node.name,
            expected=f"the node's events of the last {history:g}s (tail_seconds), no older",
            observed="; ".join(problems),
        )
