"""The outcome "not judged: no direct reach": a check that needs its own connection to a
node this machine does not reach (only the endpoint forwards to it) skips with a reason
that starts with :data:`NO_DIRECT_REACH`, and the verdict names what was not judged
(:func:`unjudged_reason`). Such a skip is neither a pass nor an error.

So is "not judged: read too late" (:data:`READ_TOO_LATE`): a check whose node sets its own
timer (a try-mode revert) and that this machine could not read inside it, even widened (a
busy machine, a slow link: ``errors.NotObserved``); the verdict names those too
(:func:`too_late_reason`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pytest_talos.reporting.records import CheckRecord, shown_list

__all__ = [
    "NO_DIRECT_REACH",
    "READ_TOO_LATE",
    "is_unreached",
    "no_reach_reason",
    "too_late_reason",
    "unjudged_reason",
]

NO_DIRECT_REACH = "not judged: no direct reach to "
READ_TOO_LATE = "not judged: read too late: "
# "not judged: no direct reach to NODE (ADDRESS tried: WHY)..."
_PARSED = re.compile(re.escape(NO_DIRECT_REACH) + r"(?P<node>\S+) \((?P<tried>\S+) tried")


def no_reach_reason(node: str, tried: str, why: str, needs: str) -> str:
    """The one-line skip reason: which node, which address was tried and what happened,
    and what the check needed that the endpoint cannot give."""
    where = f"{NO_DIRECT_REACH}{node} ({tried} tried: {why})"
    return f"{where}; it answers through the endpoint, but {needs}"


def is_unreached(record: CheckRecord) -> bool:
    return record.outcome == "skipped" and record.message.startswith(NO_DIRECT_REACH)


def unjudged_reason(records: Iterable[CheckRecord]) -> str | None:
    """``not judged (no direct reach to NODE (ADDRESS tried), ...): N check(s): ids``, or
    None when no check skipped for want of direct reach."""
    nodes: dict[str, None] = {}
    checks: dict[str, None] = {}
    for record in records:
        if not is_unreached(record):
            continue
        checks[record.check_id] = None
        found = _PARSED.match(record.message)
        where = f"{found['node']} ({found['tried']} tried)" if found else record.node or "?"
        nodes[where] = None
    if not checks:
        return None
    ids = sorted(checks)
    where = ", ".join(sorted(nodes))
    return f"not judged (no direct reach to {where}): {len(ids)} check(s): {shown_list(ids)}"


def too_late_reason(records: Iterable[CheckRecord]) -> str | None:
    """``not judged (read too late for the node's own timers ...): N check(s): ids``, or
    None when every check could read its node in time."""
    ids = sorted(
        {
            r.check_id
            for r in records
            if r.outcome == "skipped" and r.message.startswith(READ_TOO_LATE)
        }
    )
    if not ids:
        return None
    return (
        "not judged (this machine read the node too late for the node's own timers; run "
        f"on a less busy machine or nearer the nodes): {len(ids)} check(s): {shown_list(ids)}"
    )
