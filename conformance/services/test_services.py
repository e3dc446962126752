"""System services: the ones a node of its role needs are Running and healthy, nothing
crash-loops, every log is readable, and the Services resources agree with ServiceList.

B4 (facts §13): a crash-looping kubelet shows its cause only in the service's last event
and its log; the failures below carry both.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance._support.context import Timing
from conformance._support.observe import Observation
from conformance._support.settings import SuiteSettings
from pytest_talos import models
from pytest_talos.errors import APIError, ConformanceFailure, TalosError, WaitTimeout
from pytest_talos.node import TalosNode
from pytest_talos.wait import wait_until

EVERY_NODE = frozenset({"apid", "containerd", "cri", "kubelet", "machined", "udevd"})
CONTROL_PLANE = frozenset({"etcd", "trustd"})
# Services with a health check (the others always report health unknown).
HEALTH_CHECKED = frozenset({"apid", "containerd", "cri", "etcd", "kubelet", "trustd"})
SETTLE = 30.0  # node seconds a service may take to come back after a restart
_EVENTS = 6
_LOG_LINES = 20


def expected_services(role: str) -> frozenset[str]:
    return EVERY_NODE | CONTROL_PLANE if role == "controlplane" else EVERY_NODE


def _problem(service: models.ServiceInfo | None, name: str, expected: bool) -> str | None:
    if service is None:
        return f"{name}: missing" if expected else None
    if not expected:  # extension or optional services: only a failure is a problem
        return f"{name}: {service.state}" if service.state == "Failed" else None
    if not service.running:
        return f"{name}: {service.state}"
    if name in HEALTH_CHECKED and not service.healthy:
        health = "health unknown" if service.health_unknown else "unhealthy"
        return f"{name}: Running, {health} {service.last_message}".rstrip()
    return None


def _problems(services: list[models.ServiceInfo], role: str) -> dict[str, str]:
    by_id = {s.id: s for s in services}
    wanted = expected_services(role)
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
    return "\n".join(f"{line}  (x{counts[line]})" if counts[line] > 1 else line
                     for line in kept)


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


@pytest.mark.talos_check(
    "services.expected-running-healthy", severity="critical",
    claim="Every service the node's role needs is Running, and healthy where it has a check")
def test_expected_services_are_running_and_healthy(
    talos_node: TalosNode, talos_timing: Timing, talos_evidence: dict[str, Any]
) -> None:
    role = talos_node.role
    talos_evidence["services required"] = sorted(expected_services(role))
    try:
        wait_until(lambda: talos_node.services, lambda s: not _problems(s, role),
                   timeout=talos_timing.real(SETTLE), node=talos_node.name,
                   description="the expected services to be running and healthy")
    except WaitTimeout as exc:
        seen = exc.last_observation
        problems = _problems(seen, role) if isinstance(seen, list) else {"?": str(seen)}
        evidence: dict[str, str] = {}
        for name in problems:
            evidence.update(_service_evidence(talos_node, name))
        raise ConformanceFailure(
            "services.expected-running-healthy",
            f"services not running and healthy after {exc.elapsed:.1f}s: "
            + ", ".join(sorted(problems)),
            node=talos_node.name, expected=f"{role} services running and healthy",
            observed="; ".join(problems.values()), evidence=evidence) from None


@pytest.mark.talos_check(
    "services.no-recent-restarts", severity="high",
    claim="No service failed or restarted recently or while watched (no crash loop)")
def test_no_service_restarted_recently(
    talos_node: TalosNode, talos_observations: dict[str, Observation],
    talos_suite: SuiteSettings, talos_evidence: dict[str, Any]
) -> None:
    observation = talos_observations.get(talos_node.name)
    if observation is None or observation.error:
        why = observation.error if observation else "the node was not observed"
        raise TalosError(f"cannot watch the node's events: {why}", node=talos_node.name)
    window = (f"the last {talos_suite.restart_window:g}s and a {talos_suite.observe:g}s watch "
              "(node time)")
    talos_evidence.update(window=window, service_events=len(observation.events))
    troubles = observation.troubles()
    if not troubles:
        return
    evidence: dict[str, str] = {}
    for name, trouble in sorted(troubles.items()):
        evidence[f"{name} events"] = "\n".join(trouble.timeline[-12:])
        evidence.update(_service_evidence(talos_node, name))
    raise ConformanceFailure(
        "services.no-recent-restarts", "services failed or restarted: " + ", ".join(sorted(
            troubles)),
        node=talos_node.name, expected=f"no failure or restart within {window}",
        observed="; ".join(f"{t.service}: {t.failures} failure(s), {t.restarts} restart(s)"
                           for t in troubles.values()),
        evidence=evidence)


@pytest.mark.talos_check(
    "services.logs-readable", severity="medium",
    claim="The log of every service can be read through the API")
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
            "services.logs-readable", "some service logs cannot be read",
            node=talos_node.name, expected="every ServiceList service has a readable log",
            observed="; ".join(f"{k}: {v}" for k, v in sorted(failures.items())))


def _disagreements(node: TalosNode) -> dict[str, str]:
    listed = {s.id: s for s in node.services}
    resources = {r.id: r.typed_spec for r in node.resources("Services.v1alpha1.talos.dev",
                                                              "runtime")}
    found = {}
    for name in sorted(set(listed) | set(resources)):
        service, spec = listed.get(name), resources.get(name)
        running = service is not None and service.running
        if running != (spec is not None):
            state = service.state if service else "not listed"
            found[name] = f"ServiceList {state}, resource {'present' if spec else 'absent'}"
        elif (service is not None and isinstance(spec, models.ServiceSpec)
              and service.healthy != spec.healthy):
            found[name] = f"ServiceList healthy={service.healthy}, resource healthy={spec.healthy}"
    return found


@pytest.mark.talos_check(
    "services.resources-match-service-list", severity="medium",
    claim="The Services resources agree with ServiceList: one per running service, same health")
def test_services_resources_agree_with_service_list(
    talos_node: TalosNode, talos_timing: Timing, talos_evidence: dict[str, Any]
) -> None:
    try:
        wait_until(lambda: _disagreements(talos_node), lambda found: not found,
                   timeout=talos_timing.real(5.0), node=talos_node.name,
                   description="Services resources to agree with ServiceList")
    except WaitTimeout as exc:
        seen = exc.last_observation
        raise ConformanceFailure(
            "services.resources-match-service-list",
            "the Services resources and ServiceList disagree", node=talos_node.name,
            expected="a Services resource exactly for each running service",
            observed="; ".join(f"{k}: {v}" for k, v in seen.items())
            if isinstance(seen, dict) else str(seen)) from None
    talos_evidence["agree"] = True
