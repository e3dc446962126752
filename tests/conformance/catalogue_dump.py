"""A pytest plugin for collect-only runs of the suite: writes every collected check to the
JSON file named by ``$CONFORMANCE_CATALOGUE_OUT`` (id, severity, claim, markers, test id)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    target = os.environ.get("CONFORMANCE_CATALOGUE_OUT")
    if not target:
        return
    entries = []
    for item in session.items:
        mark = item.get_closest_marker("talos_check")
        if mark is None:
            continue
        entries.append(
            {
                "id": mark.args[0] if mark.args else mark.kwargs.get("id"),
                "severity": mark.kwargs.get("severity"),
                "claim": mark.kwargs.get("claim"),
                "markers": sorted({m.name for m in item.iter_markers()}),
                "test": item.nodeid,
            }
        )
    Path(target).write_text(json.dumps(entries, indent=1))
