"""What a check's outcome carries: its evidence and message (redacted), a refusal for lack of
rights as a skip, an expired waiver's note, and the failure text the terminal shows."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_talos.errors import ConformanceFailure, NotObserved, PermissionDenied
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.collector import PROP_EVIDENCE, PROP_MESSAGE, PROP_SKIP_KIND
from pytest_talos.plugin.conformance.state import EVIDENCE, EXPIRED_WAIVER, check_spec
from pytest_talos.plugin.items import node_param
from pytest_talos.plugin.session import SESSION_KEY
from pytest_talos.reporting import NEEDS_ADMIN, NOT_APPLICABLE, redact
from pytest_talos.reporting.reach import READ_TOO_LATE

__all__ = [
    "ADMIN",
    "NOT_APPLICABLE_PREFIX",
    "collapse_repeats",
    "failure_text",
    "make_report",
    "not_applicable",
    "skip_unjudged",
    "skip_unless_admin",
]

# A skip whose reason starts so is one the platform forces (see not_applicable).
NOT_APPLICABLE_PREFIX = "not applicable: "


def not_applicable(reason: str) -> None:
    """Skip a check the target's platform makes meaningless (a container node runs the
    host's kernel): the reports show it as "not applicable", and it does not make a run
    INCOMPLETE, unlike a check that could not run."""
    pytest.skip(NOT_APPLICABLE_PREFIX + reason)


ADMIN = "os:admin"
_EVIDENCE_LINES = 40  # per evidence value on the terminal; the reports keep it whole


def _client_roles(item: pytest.Item) -> tuple[str, ...] | None:
    funcargs = getattr(item, "funcargs", {})
    for name in ("talos_node", "talos_cluster"):
        target = funcargs.get(name)
        client = getattr(target, "client", None)
        if client is not None:
            return tuple(client.roles)
    return None


def skip_unless_admin(item: pytest.Item) -> Generator[None, None, None]:
    """A check refused for lack of rights skips when the talosconfig is not os:admin (a
    reader talosconfig is a fine way to run the read-only profiles); with os:admin, a
    refusal is the node's fault and the check fails as usual."""
    try:
        return (yield)
    except PermissionDenied as exc:
        roles = _client_roles(item)
        if check_spec(item) is not None and roles is not None and ADMIN not in roles:
            pytest.skip(
                f"needs {ADMIN}; this talosconfig has {', '.join(roles) or 'no role'} "
                f"({exc.details})"
            )
        raise


def skip_unjudged(item: pytest.Item) -> Generator[None, None, None]:
    """A check that could not observe what it judges (NotObserved: this machine read the
    node too late for the node's own timer) skips as "not judged": that is no verdict on
    the node, neither a pass nor a failure. Refusals for lack of rights as in
    :func:`skip_unless_admin`."""
    try:
        return (yield from skip_unless_admin(item))
    except NotObserved as exc:
        if check_spec(item) is None:
            raise
        pytest.skip(f"{READ_TOO_LATE}{exc}")


def _evidence(item: pytest.Item, exc: BaseException | None) -> dict[str, Any]:
    recorded: dict[str, Any] | None = item.stash.get(EVIDENCE, None)
    evidence: dict[str, Any] = dict(recorded or {})
    if isinstance(exc, ConformanceFailure):
        if exc.expected is not None:
            evidence.setdefault("expected", exc.expected)
        if exc.observed is not None:
            evidence.setdefault("observed", exc.observed)
        evidence.update(exc.evidence)
    redacted: dict[str, Any] = redact(evidence)
    return redacted


def _is_waived(report: pytest.TestReport) -> bool:
    return report.skipped and hasattr(report, "wasxfail")


def _run_roles(item: pytest.Item) -> tuple[str, ...] | None:
    """The roles of the run's talosconfig, once the run has reached its cluster."""
    roles = _client_roles(item)
    if roles is not None:
        return roles
    session = item.config.stash.get(SESSION_KEY, None)
    cluster = session.cached_cluster if session is not None else None
    return tuple(cluster.client.roles) if cluster is not None else None


def skip_kind(item: pytest.Item, reason: str) -> str:
    """Why a check skipped, when it is not a plain skip: the platform makes it meaningless,
    or it needs os:admin and the run's talosconfig lacks it (every such skip names os:admin)."""
    if reason.startswith(NOT_APPLICABLE_PREFIX):
        return NOT_APPLICABLE
    roles = _run_roles(item)
    if roles is not None and ADMIN not in roles and ADMIN in reason:
        return NEEDS_ADMIN
    return ""


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


def make_report(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """Add the check's evidence and message to its call report (and to a waived setup), and
    the kind of a skip."""
    spec = check_spec(item)
    if spec is not None and report.skipped and not _is_waived(report):
        kind = skip_kind(item, _skip_reason(report))
        if kind:
            report.user_properties.append((PROP_SKIP_KIND, kind))
    if spec is None or not (report.when == "call" or _is_waived(report)):
        return
    exc = call.excinfo.value if call.excinfo is not None else None
    report.user_properties.append((PROP_EVIDENCE, _evidence(item, exc)))
    if not (report.failed or _is_waived(report)):
        return
    message = report.longreprtext
    if isinstance(exc, ConformanceFailure):
        message = str(exc).splitlines()[0]  # the rest is in the evidence
        if report.failed and item.config.option.tbstyle in ("auto", "short"):
            report.longrepr = failure_text(spec, node_param(item) or exc.node, exc)
    elif exc is not None:
        message = str(exc)
    report.user_properties.append((PROP_MESSAGE, redact(message)))
    expired = item.stash.get(EXPIRED_WAIVER, None)
    if expired and report.failed:
        report.sections.append(("talos waiver", expired))


def failure_text(spec: CheckSpec, node: str | None, exc: ConformanceFailure) -> str:
    """What the terminal shows for a failing check: id, node, severity, one line of cause,
    then expected/observed and the evidence (redacted); no test source, no fixture reprs."""
    cause = str(exc.args[0]).splitlines()[0] if exc.args else ""
    cause = cause.removeprefix(f"{exc.check} on {exc.node}: " if exc.node else f"{exc.check}: ")
    lines = [f"{spec.id} on {node or 'the cluster'} [{spec.severity}]: {cause}"]
    fields: dict[str, Any] = {}
    if exc.expected is not None:
        fields["expected"] = exc.expected
    if exc.observed is not None:
        fields["observed"] = exc.observed
    fields.update(exc.evidence)
    for key, value in redact(fields).items():
        lines += _field_lines(key, str(value).rstrip())
    lines += [f"  claim: {spec.claim}", "  (--tb=long shows the test's traceback)"]
    return "\n".join(lines)


def collapse_repeats(lines: list[str]) -> list[str]:
    """Consecutive identical lines once, with how many times they came (a crash loop
    repeats one long event line dozens of times)."""
    out: list[str] = []
    counts: list[int] = []
    for line in lines:
        if out and line == out[-1]:
            counts[-1] += 1
        else:
            out.append(line)
            counts.append(1)
    return [line if n == 1 else f"{line}  (x{n})" for line, n in zip(out, counts, strict=True)]


def _field_lines(key: str, text: str) -> list[str]:
    if "\n" not in text:
        return [f"  {key}: {text}"]
    shown = collapse_repeats(text.splitlines())
    if len(shown) > _EVIDENCE_LINES:
        shown = [
            *shown[:_EVIDENCE_LINES],
            f"... ({len(shown) - _EVIDENCE_LINES} more lines in the report)",
        ]
    return [f"  {key}:", *("    " + line for line in shown)]
