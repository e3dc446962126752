"""The results model: one :class:`CheckRecord` per check and node, the nodes
(:class:`TargetInfo`) and the run (:class:`RunInfo`), each with its JSON form."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_talos.reporting.redaction import redact
from pytest_talos.reporting.severity import Outcome, Severity
from pytest_talos.reporting.waivers import Waiver

__all__ = [
    "NEEDS_ADMIN",
    "NOT_APPLICABLE",
    "CheckRecord",
    "RunInfo",
    "TargetInfo",
    "natural_key",
    "shown_list",
]

# Why a skipped check did not run, when it is not a plain skip (``CheckRecord.skip_kind``):
# the platform makes it meaningless (a container node runs the host's kernel), or the
# run's identity lacks the role it needs (a reader talosconfig).
NOT_APPLICABLE = "not-applicable"
NEEDS_ADMIN = "needs-admin"

_EVIDENCE_TEXT_LIMIT = 4000
_MESSAGE_LIMIT = 8000


@dataclass
class CheckRecord:
    """The outcome of one check on one node (``node`` is ``None`` for cluster-wide checks)."""

    check_id: str
    severity: Severity
    claim: str
    outcome: Outcome
    node: str | None = None
    area: str = ""
    duration: float = 0.0
    message: str = ""  # failure text or skip reason, redacted
    evidence: dict[str, Any] = field(default_factory=dict)
    waiver: Waiver | None = None
    test_id: str = ""  # the pytest node id
    notes: list[str] = field(default_factory=list)  # warnings the check raised, redacted
    skip_kind: str = ""  # a skip's kind: NOT_APPLICABLE, NEEDS_ADMIN or "" (a plain skip)

    @property
    def is_failure(self) -> bool:
        return self.outcome in ("failed", "error")

    def to_json(self) -> dict[str, Any]:
        waiver = None
        if self.waiver is not None:
            waiver = {
                "reason": redact(self.waiver.reason),
                "expires": self.waiver.expires.isoformat(),
                "node": self.waiver.node,
            }
        return {
            "id": self.check_id,
            "node": self.node,
            "area": self.area or self.check_id.split(".", 1)[0],
            "outcome": self.outcome,
            "severity": self.severity,
            "claim": self.claim,
            "duration": round(self.duration, 3),
            "message": _clip(redact(self.message), _MESSAGE_LIMIT),
            "evidence": _clip_evidence(redact(self.evidence)),
            "waiver": waiver,
            "test": self.test_id,
            "notes": [_clip(redact(note), _MESSAGE_LIMIT) for note in self.notes],
            "skip_kind": self.skip_kind or None,
        }

    @classmethod
    def from_json(cls, check: Mapping[str, Any]) -> CheckRecord:
        """A record of a ``results.json`` (what :meth:`to_json` wrote, already redacted)."""
        waiver = check.get("waiver")
        return cls(
            check_id=str(check["id"]),
            severity=check["severity"],
            claim=str(check.get("claim") or ""),
            outcome=check["outcome"],
            node=check.get("node"),
            area=str(check.get("area") or ""),
            duration=float(check.get("duration") or 0.0),
            message=str(check.get("message") or ""),
            evidence=dict(check.get("evidence") or {}),
            waiver=None
            if not waiver
            else Waiver(
                check=str(check["id"]),
                reason=str(waiver["reason"]),
                expires=dt.date.fromisoformat(str(waiver["expires"])),
                node=waiver.get("node"),
            ),
            test_id=str(check.get("test") or ""),
            notes=[str(note) for note in check.get("notes") or ()],
            skip_kind=str(check.get("skip_kind") or ""),
        )


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 40].rstrip() + f"\n... ({len(text) - limit + 40} more characters)"


def _clip_evidence(value: Any) -> Any:
    if isinstance(value, str):
        return _clip(value, _EVIDENCE_TEXT_LIMIT)
    if isinstance(value, dict):
        return {k: _clip_evidence(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_evidence(v) for v in value]
    return value


@dataclass(frozen=True)
class TargetInfo:
    """One node the run talked to."""

    name: str
    role: str = ""
    talos_version: str = ""
    platform: str = ""
    address: str = ""
    sha: str = ""  # the Version reply's build sha
    built: str = ""  # the Version reply's ``built`` (empty on every real Talos build)
    install_image: str = ""  # machine.install.image of the node's config, where it has one


@dataclass
class RunInfo:
    """Facts about the run as a whole (never credentials)."""

    started: dt.datetime
    finished: dt.datetime | None = None
    suite: str = ""
    targets: list[TargetInfo] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    threshold: Severity = "low"
    notes: list[str] = field(default_factory=list)
    # What was tested: "kind" ("real" or "emulated"), "endpoints", "context", "talosconfig";
    # for an emulated target also "faults", "variants", "time_scale" (see tested_facts).
    tested: dict[str, Any] = field(default_factory=dict)
    kit_version: str = ""
    # What the verdict needs beyond the records (see decide_verdict).
    defining_areas: frozenset[str] = frozenset()
    optional_areas: frozenset[str] = frozenset()
    exempt_checks: frozenset[str] = frozenset()
    unreachable: frozenset[str] = frozenset()  # ids of tests that never reached their node
    # A sharded run (--talos-shard): {"index": I, "count": N, "nodes": [hostnames]}; a merged
    # one: {"count": N, "merged": [1, ..., N]}.
    shard: dict[str, Any] | None = None
    # Who ran it: operator or CI job, host, the client certificate's subject and roles.
    operator: dict[str, Any] = field(default_factory=dict)
    # A run that did not finish: "in progress" (written at start; it stays so when the
    # process is killed) or "stopped" (interrupted, -x, a crash), with when, why, the exit
    # code and the tests not run: {"status", "at", "why", "exit_code", "planned", "not_run"}.
    stopped: dict[str, Any] | None = None

    def verdict_inputs(self) -> dict[str, list[str]]:
        return {
            "defining_areas": sorted(self.defining_areas),
            "optional_areas": sorted(self.optional_areas),
            "exempt_checks": sorted(self.exempt_checks),
            "unreachable": sorted(self.unreachable),
        }

    def to_json(self) -> dict[str, Any]:
        finished = self.finished or self.started
        shard = {"shard": self.shard} if self.shard is not None else {}
        return {
            "started": self.started.isoformat(),
            "finished": finished.isoformat(),
            "duration": round((finished - self.started).total_seconds(), 3),
            "suite": self.suite,
            "kit": {"name": "pytest-talos", "version": self.kit_version or _kit_version()},
            "tested": redact(self.tested),
            "targets": [redact(vars(t)) for t in self.targets],
            "settings": redact(self.settings),
            "fail_under": self.threshold,
            "notes": redact(self.notes),
            **shard,
            "operator": redact(self.operator),
            "stopped": self.stopped,
            "verdict_inputs": self.verdict_inputs(),
        }

    @classmethod
    def from_json(cls, run: Mapping[str, Any]) -> RunInfo:
        """The run of a ``results.json`` (what :meth:`to_json` wrote)."""
        inputs: Mapping[str, Any] = run.get("verdict_inputs") or {}
        return cls(
            started=dt.datetime.fromisoformat(str(run["started"])),
            finished=dt.datetime.fromisoformat(str(run["finished"])),
            suite=str(run.get("suite") or ""),
            targets=[_target(target) for target in run.get("targets") or ()],
            settings=dict(run.get("settings") or {}),
            threshold=run.get("fail_under") or "low",
            notes=[str(note) for note in run.get("notes") or ()],
            tested=dict(run.get("tested") or {}),
            kit_version=str((run.get("kit") or {}).get("version") or ""),
            defining_areas=frozenset(inputs.get("defining_areas") or ()),
            optional_areas=frozenset(inputs.get("optional_areas") or ()),
            exempt_checks=frozenset(inputs.get("exempt_checks") or ()),
            unreachable=frozenset(inputs.get("unreachable") or ()),
            shard=run.get("shard"),
            operator=dict(run.get("operator") or {}),
            stopped=run.get("stopped"),
        )


def natural_key(name: str | None) -> tuple[tuple[int, int | str], ...]:
    """Sort key for node names: ``worker-2`` before ``worker-10``."""
    parts = re.split(r"(\d+)", name or "")
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def _target(data: Mapping[str, Any]) -> TargetInfo:
    known = set(TargetInfo.__dataclass_fields__)
    return TargetInfo(**{k: str(v or "") for k, v in data.items() if k in known})


def _kit_version() -> str:
    from pytest_talos import __version__  # the package imports this module lazily

    return str(__version__)


def shown_list(items: Sequence[str], limit: int = 5) -> str:
    """``a, b, c, d, e and 3 more``: a list for one line of a verdict."""
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more
