"""The severity gate and the verdict a run may claim, with its exit status."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_talos.reporting.reach import unjudged_reason
from pytest_talos.reporting.records import CheckRecord
from pytest_talos.reporting.severity import Severity, severity_rank

__all__ = ["EXIT_CODES", "GateResult", "Verdict", "apply_gate", "decide_verdict"]


@dataclass(frozen=True)
class GateResult:
    """Failures at or above the threshold block the run; the ones below are only reported."""

    threshold: Severity
    blocking: tuple[CheckRecord, ...]
    below: tuple[CheckRecord, ...]

    @property
    def passed(self) -> bool:
        return not self.blocking

    def summary(self) -> str:
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

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.name]

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

    Whatever the verdict, checks skipped because this machine has no direct reach to a node
    (:mod:`.reach`) are named in one more reason: they were not judged there.
    """
    verdict = _decide(records, gate, defining_areas, optional_areas, exempt, unreachable)
    unjudged = unjudged_reason(records)
    if unjudged is None:
        return verdict
    return Verdict(verdict.name, (*verdict.reasons, unjudged))


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
            ran[record.check_id] = ran.get(record.check_id, False) or record.outcome != "skipped"
    missing = sorted(check for check, done in ran.items() if not done)
    reasons = []
    if not any(r.outcome in ("passed", "waived") for r in records):
        reasons.append("no check passed")
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        reasons.append(f"not run on any node: {shown}")
    if reasons:
        return Verdict("INCOMPLETE", tuple(reasons))
    return Verdict("PASSED")


def apply_gate(records: Iterable[CheckRecord], threshold: Severity) -> GateResult:
    """Split failed/errored checks into blocking (severity >= threshold) and below."""
    limit = severity_rank(threshold)
    failures = [r for r in records if r.is_failure]
    blocking = tuple(r for r in failures if severity_rank(r.severity) <= limit)
    below = tuple(r for r in failures if severity_rank(r.severity) > limit)
    return GateResult(threshold=threshold, blocking=blocking, below=below)
