"""The conformance plugin: what turns a folder of tests into a conformance suite.

The suite's ``conftest.py`` loads it (``pytest_plugins``) and names its folder through the
``pytest_talos_conformance_root`` hook; every test under that folder is a check. The plugin
adds:

* Options in the ``talos-conformance`` group, each with an ini key and an environment
  variable, with the pytest-talos plugin's precedence (command line > ini > environment >
  default) and the source of every value in the report header (:mod:`.settings`).
* The catalogue: the ``talos_check(id, severity, claim)`` marker, areas and suite profiles
  (:mod:`.catalogue`), the parts that need inputs (:mod:`.parts`), and the selection by
  profile, id, part and shard (:mod:`.collection`, :mod:`.shard`).
* Waivers as pytest's own ``xfail(strict=False)`` markers, added at collection.
* Outcomes with evidence (:mod:`.outcomes`), gathered where reports arrive, also from
  pytest-xdist workers (:mod:`.collector`); the verdict and its exit status (0 PASSED,
  1 FAILED, 6 INCOMPLETE, 7 UNREACHABLE) and the reports (:mod:`.run`, on
  :mod:`pytest_talos.reporting`); the terminal table (:mod:`.terminal`) and JUnit
  properties (:mod:`.junit`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_talos.errors import TalosError
from pytest_talos.guard import Terminated
from pytest_talos.plugin.conformance import hookspecs
from pytest_talos.plugin.conformance.catalogue import AREAS, SUITES, CheckSpec
from pytest_talos.plugin.conformance.collection import collect_checks, shard_line
from pytest_talos.plugin.conformance.collector import ResultCollector
from pytest_talos.plugin.conformance.fixtures import (
    conformance_item,
    conformance_targets,
    talos_check_spec,
    talos_evidence,
    talos_suite,
)
from pytest_talos.plugin.conformance.junit import JunitTested
from pytest_talos.plugin.conformance.outcomes import (
    ADMIN,
    failure_text,
    make_report,
    not_applicable,
    skip_unjudged,
)
from pytest_talos.plugin.conformance.parts import (
    PARTS,
    PROFILE_PARTS,
    check_inputs,
    check_parts,
)
from pytest_talos.plugin.conformance.record_profile import (
    RecordRefused,
    record_profile,
    write_profile,
)
from pytest_talos.plugin.conformance.run import finish_run, write_unfinished
from pytest_talos.plugin.conformance.settings import SuiteSettings, add_options, read_settings
from pytest_talos.plugin.conformance.state import (
    COLLECTOR,
    PLANNED,
    SETTINGS,
    STARTED,
    STOP_REASON,
    check_spec,
    is_worker,
    suite_settings,
)
from pytest_talos.plugin.conformance.terminal import progress, summary_table, terminal_summary
from pytest_talos.plugin.items import node_param
from pytest_talos.plugin.session import session_of
from pytest_talos.reporting import redact

__all__ = [
    "ADMIN",
    "SUITE_MARKERS",
    "CheckSpec",
    "SuiteSettings",
    "check_spec",
    "failure_text",
    "is_worker",
    "not_applicable",
    "progress",
    "suite_settings",
    "summary_table",
    "talos_check_spec",
    "talos_evidence",
    "talos_suite",
]

_FIXTURES = (conformance_item, conformance_targets, talos_check_spec, talos_evidence, talos_suite)
SUITE_MARKERS = (  # what the suite's test modules are marked with
    "talos_check(id, severity, claim): a conformance check: its id (area.claim), severity "
    "(critical, high, medium, low) and the claim it proves",
    *(f"{area}: conformance checks of the {area} area" for area in AREAS),
    *(
        f"{p.marker}: checks of the {p.name} suite profile ({p.description})"
        for p in SUITES.values()
        if p.name != "full"
    ),
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for line in SUITE_MARKERS:
        config.addinivalue_line("markers", line)
    config.stash[SETTINGS] = _before_upgrade(read_settings(config, parts=PARTS))
    collector = ResultCollector()
    config.stash[COLLECTOR] = collector
    # Registered as a plugin so that it sees every report, also those xdist workers send.
    config.pluginmanager.register(collector, "talos-conformance-results")
    config.pluginmanager.register(JunitTested(config), "talos-conformance-junit")
    config.stash[STARTED] = dt.datetime.now(dt.UTC)
    _CONFIG["config"] = config


def _before_upgrade(settings: SuiteSettings) -> SuiteSettings:
    """``--talos-suite post-upgrade --talos-snapshot save PATH`` is the documented first step,
    before the upgrade: the checks that compare with the expected versions and the snapshot
    run after it, so this run leaves them out by itself (the report's notes say so)."""
    name = settings.suite.name if settings.suite else ""
    if name != "post-upgrade" or settings.snapshot_mode != "save":
        return settings
    later = [
        part
        for part in PROFILE_PARTS[name]
        if part not in settings.leave_out and not PARTS[part].given(settings)
    ]
    return dataclasses.replace(settings, leave_out=(*settings.leave_out, *later))


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash[SETTINGS]
    lines = settings.describe()
    if settings.shard is not None:
        lines.append(shard_line(config, settings.shard))
    return lines


def pytest_sessionstart(session: pytest.Session) -> None:
    """What would only fail at the end fails now: missing inputs, an unwritable report
    directory, no target (one paragraph, exit 4)."""
    config = session.config
    settings = config.stash[SETTINGS]
    record = config.getoption("talos_record_profile", None)
    if record and not is_worker(config):
        _record(config, record)
    if config.option.collectonly or settings.list_checks:
        return  # a run that only lists checks needs no inputs and no target
    check_parts(settings)
    check_inputs(settings)
    session_of(config).check_target()
    write_unfinished(config)  # completed at the end; a killed run leaves it "not finished"


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the run plans to check, so that a stopped run's report says what it did not run."""
    config = session.config
    if config.option.collectonly or config.stash[SETTINGS].list_checks or is_worker(config):
        return
    config.stash[PLANNED] = [
        {"test": item.nodeid, "id": spec.id, "node": node_param(item)}
        for item in session.items
        if (spec := check_spec(item)) is not None
    ]
    write_unfinished(config)


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    config = _CONFIG.get("config")
    if config is None:
        return
    if isinstance(excinfo.value, Terminated):
        why = "SIGTERM received (a CI cancellation, timeout or kill)"
    elif isinstance(excinfo.value, KeyboardInterrupt):
        why = "interrupted by Ctrl-C (SIGINT)"
    else:
        why = f"stopped by pytest.exit: {redact(str(excinfo.value))}"
    config.stash[STOP_REASON] = why


def pytest_internalerror(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    config = _CONFIG.get("config")
    if config is None:
        return
    text = str(excinfo.value).splitlines()[0] if str(excinfo.value) else ""
    detail = f": {redact(text)}" if text else ""
    config.stash[STOP_REASON] = f"a crash (internal error: {excinfo.type.__name__}{detail})"


_CONFIG: dict[str, pytest.Config] = {}  # the two hooks above get no config argument


def _record(config: pytest.Config, path: str) -> None:
    """--talos-record-profile: write the profile, say where, end the run (exit 0)."""
    session = session_of(config)
    try:
        cluster = session.cluster()
        name = f"recorded-from-{cluster.nodes[0].name}" if cluster.nodes else "recorded"
        written = write_profile(path, record_profile(cluster, cluster.nodes, name))
    except RecordRefused as exc:
        raise pytest.UsageError(str(exc)) from None
    except TalosError as exc:
        raise pytest.UsageError(
            f"--talos-record-profile: {session.unreachable_message(exc)}"
        ) from None
    pytest.exit(
        f"recorded the vendor profile {written}; accept an image with "
        f"--talos-suite=vendor-image --talos-profile {written}",
        returncode=0,
    )


def _roots(config: pytest.Config) -> list[Path]:
    return [Path(root) for root in config.hook.pytest_talos_conformance_root() if root]


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    collect_checks(config, items, _roots(config))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from skip_unjudged(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    make_report(item, call, report)
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    finish_run(session)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    terminal_summary(terminalreporter, config)
