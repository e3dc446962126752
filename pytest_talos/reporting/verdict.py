"""The severity gate and the verdict a run may claim, with its exit status."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_talos.reporting.reach import too_late_reason, unjudged_reason
from pytest_talos.reporting.records import NEEDS_ADMIN, NOT_APPLICABLE, CheckRecord, shown_list
from pytest_talos.reporting.severity import Severity, severity_rank

__all__ = [
    "EXIT_CODES",
    "GateResult",
    "Verdict",
    "apply_gate",
    "decide_verdict",
    "stopped_verdict",
]


@dataclass(frozen=True)
class GateResult:
    """Failures at or above the threshold block the run; the ones below are only reported."""

    threshold: Severity
    blocking: tuple[CheckRecord, ...]
    below: tuple[CheckRecord, ...]

    @property
    def passed(self) -> bool:
        return not self.blocking

    def summary(self, unreachable: Collection[str] = ()) -> str:
        """One line; failures of tests that never reached their node are not counted as
        blocking failures (the verdict says the target was unreachable, once)."""
        blocking = [r for r in self.blocking if r.test_id not in unreachable]
        if len(blocking) < len(self.blocking):
            if not blocking:
                return (
                    f"severity gate '{self.threshold}': no check reached its target "
                    f"({len(self.blocking)} test(s) could not connect; see the verdict)"
                )
            return (
                f"severity gate '{self.threshold}': {len(blocking)} blocking failure(s); "
                f"{len(self.blocking) - len(blocking)} test(s) could not reach their target"
            )
        if self.passed and not self.below:
            return f"severity gate '{self.threshold}': no failing checks"
        parts = [f"severity gate '{self.threshold}': {len(self.blocking)} blocking failure(s)"]
        if self.below:
            parts.append(f"{len(self.below)} failure(s) below the gate (reported, not blocking)")
        return ", ".join(parts)


# The conformance run's exit status for each verdict (0-5 are pytest's own: 2 interrupted,
# 3 internal error, 4 usage error, 5 no checks collected).
EXIT_CODES: Mapping[str, int] = {
    "PASSED": 0,
    "FAILED": 1,
    "USAGE": 4,
    "INCOMPLETE": 6,
    "UNREACHABLE": 7,
}


@dataclass(frozen=True)
class Verdict:
    """What a run may claim: PASSED, FAILED, INCOMPLETE or UNREACHABLE, and why."""

    name: str
    reasons: tuple[str, ...] = ()
    status: int | None = None  # a STOPPED run's exit code: the one the process returned

    @property
    def exit_code(self) -> int:
        return self.status if self.status is not None else EXIT_CODES[self.name]

    def summary(self) -> str:
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        return f"verdict {self.name} (exit {self.exit_code}){why}"


def decide_verdict(
    records: Sequence[CheckRecord],
    gate: GateResult,
    *,
    defining_areas: Collection[str] = (),
    optional_areas: Collection[str] = (),
    exempt: Collection[str] = (),
    unreachable: Collection[str] = (),
) -> Verdict:
    """The honest verdict of a run.

    FAILED: a failure at or above the gate on a node the run reached. UNREACHABLE: tests
    (``unreachable``: their pytest ids) that could not reach or authenticate to their target,
    and nothing else blocking.
    INCOMPLETE: nothing passed (or was waived), or a check that must run did not run on any
    node: every critical check outside ``optional_areas`` (areas that need inputs the run
    did not ask for), and every check of ``defining_areas`` (what the suite profile is for),
    ``exempt`` ids aside. PASSED otherwise.

    Whatever the verdict, checks skipped because this machine has no direct reach to a node,
    or read a node too late for its own timer (:mod:`.reach`), are named in one more reason
    each: they were not judged there.
    """
    verdict = _decide(records, gate, defining_areas, optional_areas, exempt, unreachable)
    unjudged = [why for why in (unjudged_reason(records), too_late_reason(records)) if why]
    if not unjudged:
        return verdict
    return Verdict(verdict.name, (*verdict.reasons, *unjudged))


def _decide(
    records: Sequence[CheckRecord],
    gate: GateResult,
    defining_areas: Collection[str],
    optional_areas: Collection[str],
    exempt: Collection[str],
    unreachable: Collection[str],
) -> Verdict:
    reached = [r for r in gate.blocking if r.test_id not in unreachable]
    if reached:
        return Verdict("FAILED", (f"{len(reached)} blocking failure(s)",))
    if unreachable:
        return Verdict(
            "UNREACHABLE",
            (f"{len(unreachable)} test(s) could not reach or authenticate to their target",),
        )
    ran: dict[str, bool] = {}
    for record in records:
        area = record.area or record.check_id.split(".", 1)[0]
        must = record.check_id not in exempt and (
            area in defining_areas or (record.severity == "critical" and area not in optional_areas)
        )
        if must:
            # A check the platform makes meaningless (not applicable) is done.
            done = record.outcome != "skipped" or record.skip_kind == NOT_APPLICABLE
            ran[record.check_id] = ran.get(record.check_id, False) or done
    admin = _needs_admin(records)
    missing = sorted(check for check, done in ran.items() if not done and check not in admin)
    reasons = []
    if not any(r.outcome in ("passed", "waived") for r in records):
        reasons.append("no check passed")
    if missing:
        reasons.append(f"not run on any node: {shown_list(missing)}")
    if reasons:
        return Verdict("INCOMPLETE", tuple(reasons + _admin_reason(admin)))
    return Verdict("PASSED", tuple(_admin_reason(admin) + _not_applicable_reason(records)))


def _not_applicable_reason(records: Sequence[CheckRecord]) -> list[str]:
    found = sorted({r.check_id for r in records if r.skip_kind == NOT_APPLICABLE})
    if not found:
        return []
    return [f"not applicable on this platform: {shown_list(found)}"]


def _needs_admin(records: Sequence[CheckRecord]) -> list[str]:
    """Checks the run's identity could not run anywhere (they need os:admin)."""
    ran = {r.check_id for r in records if r.outcome != "skipped"}
    return sorted(
        {r.check_id for r in records if r.skip_kind == NEEDS_ADMIN and r.check_id not in ran}
    )


def _admin_reason(admin: Sequence[str]) -> list[str]:
    if not admin:
        return []
    return [
        f"{len(admin)} check(s) not run: they need os:admin, which this talosconfig lacks "
        f"(an os:admin talosconfig runs them): {', '.join(admin)}"
    ]


def stopped_verdict(stopped: Mapping[str, Any]) -> Verdict:
    """The verdict of a run that did not finish: never PASSED, whatever ran before.

    ``stopped`` is RunInfo.stopped: "in progress" (the report written at start, still there
    when the process was killed) or "stopped" (interrupted, -x/--maxfail, a crash)."""
    not_run = list(stopped.get("not_run") or ())
    planned = stopped.get("planned")
    if stopped.get("status") == "in progress":
        return Verdict(
            "NOT FINISHED",
            (
                f"the run started at {stopped.get('at', '?')} and never completed this report "
                "(the process was killed, e.g. SIGKILL or out of memory, or is still running)",
                f"no result is known of the {planned if planned is not None else 'planned'} "
                "test(s) it planned",
            ),
            status=-1,
        )
    reasons = [f"the run stopped at {stopped.get('at', '?')}: {stopped.get('why', 'unknown')}"]
    if planned is not None:
        # a check's cases on one node (parametrized) are named once: check id and node
        names = list(
            dict.fromkeys(
                f"{t['id']}{' on ' + t['node'] if t.get('node') else ''}" for t in not_run
            )
        )
        reasons.append(
            f"{len(not_run)} of {planned} planned test(s) not run"
            + (f": {shown_list(names, 3)}" if names else "")
        )
    else:
        reasons.append(
            "the tests it did not run are not known (pytest-xdist, or it stopped while collecting)"
        )
    return Verdict("STOPPED", tuple(reasons), status=int(stopped.get("exit_code") or 2))


def apply_gate(records: Iterable[CheckRecord], threshold: Severity) -> GateResult:
    """Split failed/errored checks into blocking (severity >= threshold) and below."""
    limit = severity_rank(threshold)
    failures = [r for r in records if r.is_failure]
    blocking = tuple(r for r in failures if severity_rank(r.severity) <= limit)
    below = tuple(r for r in failures if severity_rank(r.severity) > limit)
    return GateResult(threshold=threshold, blocking=blocking, below=below)
