"""The outcome "not judged: no direct reach": a check that needs its own connection to a
node this machine does not reach (only the endpoint forwards to it) skips with a reason
that starts with :data:`NO_DIRECT_REACH`, and the verdict names what was not judged
(:func:`unjudged_reason`). Such a skip is neither a pass nor an error."""

from __future__ import annotations

import re
from collections.abc import Iterable

from pytest_talos.reporting.records import CheckRecord, shown_list

__all__ = ["NO_DIRECT_REACH", "is_unreached", "no_reach_reason", "unjudged_reason"]

NO_DIRECT_REACH = "not judged: no direct reach to "
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
