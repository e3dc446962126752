"""What the conformance plugin keeps per run and per item (pytest stash keys), and the
accessors other modules and the suite's own fixtures use."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.collector import ResultCollector
from pytest_talos.plugin.conformance.settings import SuiteSettings

__all__ = ["check_spec", "is_worker", "suite_settings"]

SETTINGS = pytest.StashKey[SuiteSettings]()
COLLECTOR = pytest.StashKey[ResultCollector]()
STARTED = pytest.StashKey[dt.datetime]()
TARGETS_SENT = pytest.StashKey[bool]()
GATE = pytest.StashKey[str]()
REPORTS = pytest.StashKey[str]()
VERDICT = pytest.StashKey[str]()
# The check tests collected ({"test", "id", "node"}), why the run stopped (a signal, a
# crash), and whether the "not finished" report was written at the start.
PLANNED = pytest.StashKey[list[dict[str, Any]]]()
STOP_REASON = pytest.StashKey[str]()
UNFINISHED_WRITTEN = pytest.StashKey[bool]()
# Per item: its check, what it observed, an expired waiver's note.
SPEC = pytest.StashKey[CheckSpec]()
EVIDENCE = pytest.StashKey[dict[str, Any]]()
EXPIRED_WAIVER = pytest.StashKey[str]()


def suite_settings(config: pytest.Config) -> SuiteSettings:
    """The conformance options of this run."""
    return config.stash[SETTINGS]


def check_spec(item: pytest.Item) -> CheckSpec | None:
    """The check an item is (its ``talos_check`` marker, validated at collection), if any."""
    return item.stash.get(SPEC, None)


def is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker (the controller gets the reports and writes the results)."""
    return hasattr(config, "workerinput")
