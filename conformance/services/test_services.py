"""System services: the ones a node of its role and platform mode needs are Running and
healthy, nothing crash-loops, every log is readable, and the Services resources agree with
ServiceList.

Which services run (siderolabs/talos v1.13.9, internal/app/machined/pkg/runtime/v1alpha1/
v1alpha1_sequencer.go and v1alpha1_sequencer_tasks.go): apid, containerd, cri, kubelet and
machined everywhere, etcd and trustd on control planes; outside container mode also udevd
and syslogd, and auditd and the dashboard unless a kernel argument turns them off.

A crash-looping service is never ``Failed``: the restart runner records ``Waiting`` "Error
running ..., going to restart forever" and runs it again 5 s later (internal/app/machined/
pkg/system/runner/restart/restart.go). A kubelet that crash-loops shows its cause only in
its last event and its log (observed on v1.13.10 nodes); the failures below carry both.
Restarts during the boot, or caused by a config change this kit made, are not counted
against the node: the evidence says what they were (:mod:`pytest_talos.restarts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance._support.context import Timing
from conformance._support.observe import Observation
from conformance._support.settings import SuiteSettings
from pytest_talos import models
from pytest_talos.errors import (
    APIError,
    ConformanceFailure,
    DeadlineExceeded,
    TalosError,
    WaitTimeout,
)
from pytest_talos.node import TalosNode
from pytest_talos.restarts import (
    Episode,
    KitChange,
    Verdict,
    is_restart_message,
    judge,
    restart_episodes,
    timed_service_events,
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
        "syslogd",
        "trustd",
        "udevd",
    }
)
SETTLE = 30.0  # node seconds a service may take to come back after a restart
RECENT = 60.0  # node seconds: a crash this recent means the service crash-loops now
MACHINE_STATUS = ("MachineStatuses.runtime.talos.dev", "machine", "runtime")
_EVENTS = 6
_LOG_LINES = 20

KitChanges = Callable[[TalosNode], list[KitChange]]


def expected_services(role: str, mode: str = "container") -> frozenset[str]:
    """The services a node of ``role`` must list in platform ``mode`` (Version platform)."""
    wanted = EVERY_NODE | CONTROL_PLANE if role in ("controlplane", "init") else EVERY_NODE
    return wanted if mode == "container" else wanted | OUTSIDE_CONTAINERS


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
        return f"{name}: {service.state}" if service.state == "Failed" else None
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
        history = "\n".join(f"[{e.state}] {e.msg}" for e in events) or "(none)"
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


def _verdict(events: list[models.Event], node: TalosNode, kit: KitChanges) -> Verdict:
    timed, running_at = timed_service_events(events)
    booted = running_at is not None or _machine_running(node)
    return judge(
        restart_episodes(timed), running_at=running_at, booted=booted, kit_changes=kit(node)
    )


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


@pytest.mark.talos_check(
    "services.expected-running-healthy",
    severity="critical",
    claim="Every service the node's role and platform need is Running, healthy where it has "
    "a check, and not crash-looping",
)
def test_expected_services_are_running_and_healthy(
    talos_node: TalosNode,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
    talos_kit_changes: KitChanges,
) -> None:
    role, mode = talos_node.role, talos_node.version.platform_mode
    wanted = expected_services(role, mode)
    talos_evidence["services required"] = sorted(wanted)
    talos_evidence["platform mode"] = mode
    if mode != "container":
        talos_evidence["required where listed"] = sorted(OUTSIDE_CONTAINERS_OPTIONAL)
    try:
        wait_until(
            lambda: talos_node.services,
            lambda s: not _problems(s, wanted),
            timeout=talos_timing.real(SETTLE),
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
            "services.expected-running-healthy",
            f"services not running and healthy after {exc.elapsed:.1f}s: "
            + ", ".join(sorted(problems)),
            node=talos_node.name,
            expected=f"{role} services running and healthy ({mode})",
            observed="; ".join(problems.values()),
            evidence=evidence,
        ) from None
    # Running now, but a crash moments ago is a crash loop caught between two restarts.
    verdict = _verdict(_recent_events(talos_node, talos_timing), talos_node, talos_kit_changes)
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
        "services.expected-running-healthy",
        f"services crash-looping: Running, but crashed in the last {RECENT:g}s (node time): "
        + ", ".join(sorted(crashes)),
        node=talos_node.name,
        expected=f"no crash within the last {RECENT:g}s",
        observed="; ".join(
            f"{name}: {len(found)} crash(es), last: {found[-1].message}"
            for name, found in sorted(crashes.items())
        ),
        evidence=evidence,
    )


def _describe(episodes: list[Episode]) -> str:
    kinds = [e.kind for e in episodes]
    parts = [
        f"{kinds.count(k)} {word}"
        for k, word in (("crash", "crash(es)"), ("stop", "stop(s)"), ("failure", "failure(s)"))
        if k in kinds
    ]
    return ", ".join(parts)


@pytest.mark.talos_check(
    "services.no-recent-restarts",
    severity="high",
    claim="No service failed, crashed or was restarted recently or while watched, other than "
    "during the boot or because of this kit's own config changes",
)
def test_no_service_restarted_recently(
    talos_node: TalosNode,
    talos_observations: dict[str, Observation],
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_kit_changes: KitChanges,
) -> None:
    observation = talos_observations.get(talos_node.name)
    if observation is None or observation.error:
        why = observation.error if observation else "the node was not observed"
        raise TalosError(f"cannot watch the node's events: {why}", node=talos_node.name)
    window = (
        f"the last {talos_suite.restart_window:g}s and a {talos_suite.observe:g}s watch (node time)"
    )
    talos_evidence.update(window=window, service_events=len(observation.events))
    verdict = _verdict(observation.records, talos_node, talos_kit_changes)
    if verdict.excused:
        talos_evidence["restarts not counted"] = _excused_evidence(verdict)
    if not verdict.booted:
        talos_evidence["boot"] = "the machine has not reached the running stage: nothing excused"
    troubles = verdict.by_service()
    if not troubles:
        return
    evidence: dict[str, str] = {}
    for name, episodes in sorted(troubles.items()):
        evidence[f"{name} restarts"] = "\n".join(e.describe() for e in episodes[-12:])
        evidence.update(_service_evidence(talos_node, name))
    raise ConformanceFailure(
        "services.no-recent-restarts",
        "services failed or restarted: " + ", ".join(sorted(troubles)),
        node=talos_node.name,
        expected=f"no failure or restart within {window}",
        observed="; ".join(
            f"{name}: {_describe(episodes)}" for name, episodes in sorted(troubles.items())
        ),
        evidence=evidence,
    )


@pytest.mark.talos_check(
    "services.logs-readable",
    severity="medium",
    claim="The log of every service can be read through the API",
)
def test_every_service_log_is_readable(
    talos_node: TalosNode, talos_evidence: dict[str, Any]
) -> None:
    sizes: dict[str, int] = {}
    failures: dict[str, str] = {}
    for service in talos_node.services:
        try:
            sizes[service.id] = len(talos_node.logs(service.id, tail=_LOG_LINES))
        except APIError as exc:
            failures[service.id] = f"{exc.code}: {exc.details}"
    talos_evidence["log bytes (tail)"] = sizes
    if failures:
        raise ConformanceFailure(
            "services.logs-readable",
            "some service logs cannot be read",
            node=talos_node.name,
            expected="every ServiceList service has a readable log",
            observed="; ".join(f"{k}: {v}" for k, v in sorted(failures.items())),
        )


def _disagreements(node: TalosNode) -> dict[str, str]:
    listed = {s.id: s for s in node.services}
    resources = {
        r.id: r.typed_spec for r in node.resources("Services.v1alpha1.talos.dev", "runtime")
    }
    found = {}
    for name in sorted(set(listed) | set(resources)):
        service, spec = listed.get(name), resources.get(name)
        running = service is not None and service.running
        if running != (spec is not None):
            state = service.state if service else "not listed"
            found[name] = f"ServiceList {state}, resource {'present' if spec else 'absent'}"
        elif (
            service is not None
            and isinstance(spec, models.ServiceSpec)
            and service.healthy != spec.healthy
        ):
            found[name] = f"ServiceList healthy={service.healthy}, resource healthy={spec.healthy}"
    return found


@pytest.mark.talos_check(
    "services.resources-match-service-list",
    severity="medium",
    claim="The Services resources agree with ServiceList: one per running service, same health",
)
def test_services_resources_agree_with_service_list(
    talos_node: TalosNode, talos_timing: Timing, talos_evidence: dict[str, Any]
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
            "services.resources-match-service-list",
            "the Services resources and ServiceList disagree",
            node=talos_node.name,
            expected="a Services resource exactly for each running service",
            observed="; ".join(f"{k}: {v}" for k, v in seen.items())
            if isinstance(seen, dict)
            else str(seen),
        ) from None
    talos_evidence["agree"] = True
