"""Turn pytest reports into :class:`~pytest_talos.reporting.CheckRecord` s.

Runs where the reports arrive: in the single process, or in the pytest-xdist controller
(reports are serialised there, so everything this needs travels in ``user_properties``,
set at collection and when a report is made).

A waived check is one pytest reports as an expected failure (``xfail`` with
``strict=False``, added at collection for the checks and nodes a waiver covers) and that
carries the waiver; a waived check that passes (XPASS) is a pass.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_talos.plugin import UNREACHABLE_PROPERTY
from pytest_talos.reporting import (
    CheckRecord,
    Outcome,
    Severity,
    TargetInfo,
    Waiver,
    natural_key,
)

__all__ = [
    "PROP_CHECK",
    "PROP_CLAIM",
    "PROP_EVIDENCE",
    "PROP_HELD",
    "PROP_MESSAGE",
    "PROP_NODE",
    "PROP_SEVERITY",
    "PROP_SKIP_KIND",
    "PROP_TARGETS",
    "PROP_WAIVER",
    "ResultCollector",
    "targets_property",
]

PROP_CHECK = "talos_check"
PROP_SEVERITY = "talos_severity"
PROP_CLAIM = "talos_claim"
PROP_NODE = "talos_node"
PROP_EVIDENCE = "talos_evidence"
PROP_MESSAGE = "talos_message"
PROP_WAIVER = "talos_waiver"
PROP_TARGETS = "talos_targets"
PROP_HELD = "talos_held_back"  # the change level --talos-allow does not permit
PROP_SKIP_KIND = "talos_skip_kind"  # not applicable, or needs os:admin (reporting.records)


@dataclass
class _Partial:
    check_id: str
    severity: Severity
    claim: str
    node: str | None
    outcome: Outcome = "passed"
    duration: float = 0.0
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    waiver: Waiver | None = None
    skip_kind: str = ""


def _props(report: pytest.TestReport) -> dict[str, Any]:
    return dict(report.user_properties)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


def _waiver_from(data: Any) -> Waiver | None:
    if not isinstance(data, Mapping):
        return None
    return Waiver(
        check=str(data["check"]),
        reason=str(data["reason"]),
        expires=dt.date.fromisoformat(str(data["expires"])),
        node=data.get("node"),
    )


class ResultCollector:
    """One record per test item, built from its setup/call/teardown reports."""

    def __init__(self) -> None:
        self._partials: dict[str, _Partial] = {}
        self.targets: dict[str, TargetInfo] = {}
        self.other_failures = 0  # failed reports of tests that are not checks
        self.held: set[str] = set()  # ids of checks --talos-allow kept from running
        self.unreachable: set[str] = set()  # tests that could not reach their target
        self._notes: dict[str, list[str]] = {}  # warnings a check raised, by node id
        self.ran: set[str] = set()  # ids of the tests that reported anything

    def pytest_warning_recorded(
        self, warning_message: warnings.WarningMessage, nodeid: str
    ) -> None:
        """A warning a check raises (e.g. unverified images) is a note in the reports."""
        if not nodeid:
            return
        note = f"{warning_message.category.__name__}: {warning_message.message}"
        notes = self._notes.setdefault(nodeid, [])
        if note not in notes:
            notes.append(note)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.add(report)

    def add(self, report: pytest.TestReport) -> None:
        props = _props(report)
        if props.get(UNREACHABLE_PROPERTY):
            self.unreachable.add(report.nodeid)
        if PROP_TARGETS in props:
            for target in props[PROP_TARGETS]:
                self.targets.setdefault(str(target["name"]), TargetInfo(**target))
        self.ran.add(report.nodeid)
        if PROP_CHECK not in props:
            if report.failed:
                self.other_failures += 1
            return
        partial = self._partials.setdefault(
            report.nodeid,
            _Partial(
                check_id=str(props[PROP_CHECK]),
                severity=props[PROP_SEVERITY],
                claim=str(props[PROP_CLAIM]),
                node=props.get(PROP_NODE),
            ),
        )
        if props.get(PROP_HELD):
            self.held.add(partial.check_id)
        self._merge(partial, report, props)

    def _merge(self, partial: _Partial, report: pytest.TestReport, props: dict[str, Any]) -> None:
        partial.duration += report.duration
        if isinstance(props.get(PROP_EVIDENCE), Mapping):
            partial.evidence.update(props[PROP_EVIDENCE])
        waiver = _waiver_from(props.get(PROP_WAIVER))
        if waiver is not None and report.skipped and hasattr(report, "wasxfail"):
            partial.outcome, partial.waiver = "waived", waiver
            partial.message = str(props.get(PROP_MESSAGE) or report.longreprtext)
        elif report.when == "call":
            self._merge_call(partial, report, props)
        elif report.failed:
            partial.outcome = "error"
            partial.message = partial.message or report.longreprtext
        elif report.skipped and report.when == "setup":
            partial.outcome = "skipped"
            partial.message = _skip_reason(report)
        if report.skipped and partial.outcome == "skipped":
            partial.skip_kind = str(props.get(PROP_SKIP_KIND) or "")

    @staticmethod
    def _merge_call(partial: _Partial, report: pytest.TestReport, props: dict[str, Any]) -> None:
        if report.failed:
            partial.outcome = "failed"
            partial.message = str(props.get(PROP_MESSAGE) or report.longreprtext)
        elif report.skipped:
            partial.outcome = "skipped"
            partial.message = _skip_reason(report)
        else:
            partial.outcome = "passed"

    def records(self) -> list[CheckRecord]:
        return [
            CheckRecord(
                check_id=p.check_id,
                severity=p.severity,
                claim=p.claim,
                outcome=p.outcome,
                node=p.node,
                duration=p.duration,
                message=p.message,
                evidence=p.evidence,
                waiver=p.waiver,
                test_id=nodeid,
                notes=list(self._notes.get(nodeid, ())),
                skip_kind=p.skip_kind if p.outcome == "skipped" else "",
            )
            for nodeid, p in self._partials.items()
        ]

    def target_list(self) -> list[TargetInfo]:
        return sorted(self.targets.values(), key=lambda t: natural_key(t.name))


def targets_property(targets: Iterable[TargetInfo]) -> list[dict[str, str]]:
    return [vars(t).copy() for t in targets]
