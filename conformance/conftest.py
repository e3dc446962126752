"""pytest glue of the conformance suite: its options, the ``talos_check`` marker, suite
profiles, waivers, the severity gate and the reports.

The generic parts (targets, ``talos_node``/``talos_cluster``, safety markers, the config
guard) come from the pytest-talos plugin; this file adds only what the suite itself needs.
Check logic lives in the area folders; helpers in ``conformance/_support``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance._support.catalogue import AREAS, SUITES, CheckSpec, check_spec_from_marker
from conformance._support.context import ReaderAccess, Timing
from conformance._support.observe import READY_STABLE_FOR, Observation, WatchWindow
from conformance._support.results import (
    PROP_CHECK,
    PROP_CLAIM,
    PROP_EVIDENCE,
    PROP_MESSAGE,
    PROP_NODE,
    PROP_SEVERITY,
    PROP_TARGETS,
    PROP_WAIVER,
    ResultCollector,
    targets_property,
)
from conformance._support.settings import SuiteSettings, add_options, read_settings
from pytest_talos.client import TalosClient
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.errors import ConfigError, ConformanceFailure, PermissionDenied, TalosError
from pytest_talos.plugin import UNREACHABLE_PROPERTY
from pytest_talos.plugin.session import SESSION_KEY, session_of
from pytest_talos.reporting import (
    CheckRecord,
    RunInfo,
    TargetInfo,
    apply_gate,
    build_results,
    check_waivers_known,
    decide_verdict,
    find_waiver,
    redact,
    tested_facts,
    write_reports,
)

SUITE_ROOT = Path(__file__).parent
_SETTINGS = pytest.StashKey[SuiteSettings]()
_COLLECTOR = pytest.StashKey[ResultCollector]()
_STARTED = pytest.StashKey[dt.datetime]()
_TARGETS_SENT = pytest.StashKey[bool]()
_SPEC = pytest.StashKey[CheckSpec]()
_GATE = pytest.StashKey[str]()
_REPORTS = pytest.StashKey[str]()
_EVIDENCE = pytest.StashKey[dict[str, Any]]()
_WATCHED = pytest.StashKey[frozenset[str]]()
_VERDICT = pytest.StashKey[str]()
_UNREACHABLE_PARAMS = ("<unreachable>",)
ADMIN = "os:admin"

_MARKERS = (
    "talos_check(id, severity, claim): a conformance check: its id (area.claim), severity "
    "(critical, high, medium, low) and the claim it proves",
    *(f"{area}: conformance checks of the {area} area" for area in AREAS),
    *(f"{p.marker}: checks of the {p.name} suite profile ({p.description})"
      for p in SUITES.values() if p.name != "full"),
)


# --------------------------------------------------------------------------- configuration


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    parser.getgroup("talos-conformance").addoption(
        "--talos-leave-out", action="append", default=[], choices=sorted(PARTS),
        metavar="PART", help="leave out a part of the suite that needs an input this run "
        "does not give (repeatable): " + "; ".join(
            f"{name} (needs {part.needs})" for name, part in sorted(PARTS.items()))
        + "; ini/env: comma-separated [ini talos_leave_out; env $TALOS_LEAVE_OUT]")
    parser.addini("talos_leave_out", "comma-separated parts of the suite left out "
                  "(--talos-leave-out)", default=None)


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    config.stash[_SETTINGS] = read_settings(config, parts=PARTS)
    collector = ResultCollector()
    config.stash[_COLLECTOR] = collector
    # Registered as a plugin so that it sees every report, also those xdist workers send.
    config.pluginmanager.register(collector, "talos-conformance-results")
    config.pluginmanager.register(_JunitTested(config), "talos-conformance-junit")
    config.stash[_STARTED] = dt.datetime.now(dt.UTC)
    config.stash[_UNREACHABLE] = unreachable = _Unreachable()
    config.pluginmanager.register(unreachable, "talos-conformance-unreachable")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return config.stash[_SETTINGS].describe()


def suite_settings(config: pytest.Config) -> SuiteSettings:
    return config.stash[_SETTINGS]


# --------------------------------------------------------------------------- start checks


@dataclass(frozen=True)
class Part:
    """Checks that need an input: left out with --talos-leave-out, else the input is needed
    by the profiles that stand on them."""

    checks: frozenset[str]  # check ids, or "area.*" for a whole area
    needs: str  # the option that gives the input
    given: Callable[[SuiteSettings], bool]

    def holds(self, check_id: str) -> bool:
        return check_id in self.checks or f"{check_id.split('.', 1)[0]}.*" in self.checks


PARTS: dict[str, Part] = {
    "vendor": Part(frozenset({"vendor.*"}), "--talos-profile FILE",
                   lambda s: s.vendor_profile is not None),
    "upgrade-version": Part(frozenset({"upgrade.talos-version"}),
                            "--talos-expect-version VERSION", lambda s: bool(s.expect_version)),
    "upgrade-kubernetes-version": Part(
        frozenset({"upgrade.kubernetes-version"}), "--talos-expect-kubernetes-version VERSION",
        lambda s: bool(s.expect_kubernetes_version)),
    "upgrade-snapshot": Part(
        frozenset({"upgrade.config-unchanged", "upgrade.extensions-unchanged",
                   "upgrade.node-labels-unchanged"}), "--talos-snapshot compare PATH",
        lambda s: s.snapshot_mode == "compare"),
}
# The parts a suite profile is for: it cannot claim anything without their inputs.
PROFILE_PARTS = {
    "vendor-image": ("vendor",),
    "post-upgrade": ("upgrade-version", "upgrade-kubernetes-version", "upgrade-snapshot"),
}
# Areas whose checks need inputs: their skips do not make a run incomplete unless the
# profile is for them (see pytest_talos.reporting.decide_verdict).
INPUT_AREAS = frozenset({"vendor", "upgrade"})
_UNREACHABLE = pytest.StashKey["_Unreachable"]()


def _left_out(config: pytest.Config) -> list[str]:
    return list(config.stash[_SETTINGS].leave_out)


def _check_parts(config: pytest.Config, settings: SuiteSettings) -> None:
    name = settings.suite.name if settings.suite else "full"
    left = _left_out(config)
    missing = [part for part in PROFILE_PARTS.get(name, ())
               if part not in left and not PARTS[part].given(settings)]
    if missing:
        needs = ", ".join(PARTS[part].needs for part in missing)
        leave = " ".join(f"--talos-leave-out {part}" for part in missing)
        suite = settings.sources.get("talos_suite", "--talos-suite")
        raise pytest.UsageError(
            f"{suite} {name} needs {needs}: without it the checks it is for cannot run. "
            f"Give it, or say that this run leaves that part out: {leave}")


def _check_inputs(settings: SuiteSettings) -> None:
    path = settings.snapshot_path
    if settings.snapshot_mode == "compare" and path is not None and not path.is_file():
        raise pytest.UsageError(
            f"--talos-snapshot compare {path}: no such file. Take the snapshot before the "
            "upgrade with --talos-snapshot save PATH")
    report = settings.report_dir
    if report is None:
        return
    try:
        report.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=report, prefix=".talos-write-check-"):
            pass
    except OSError as exc:
        raise pytest.UsageError(
            f"--talos-report {report}: cannot write there ({exc.strerror or exc}); choose a "
            "directory this user can write") from None


def pytest_sessionstart(session: pytest.Session) -> None:
    """What would only fail at the end fails now: missing inputs, an unwritable report
    directory, no target (one paragraph, exit 4)."""
    config = session.config
    settings = config.stash[_SETTINGS]
    if config.option.collectonly or getattr(settings, "list_checks", False):
        return  # a run that only lists checks needs no inputs and no target
    _check_parts(config, settings)
    _check_inputs(settings)
    session_of(config).check_target()


class _Unreachable:
    """Remembers the tests that could not reach or authenticate to their target (also those
    xdist workers report)."""

    def __init__(self) -> None:
        self.tests: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if (UNREACHABLE_PROPERTY, True) in report.user_properties:
            self.tests.add(report.nodeid)


# --------------------------------------------------------------------------- collection


def _changes(item: pytest.Item) -> str | None:
    if item.get_closest_marker("talos_disruptive"):
        return "disruptive"
    return "mutating" if item.get_closest_marker("talos_mutating") else None


def _node_param(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("talos_node") if callspec is not None else None
    return None if value is None or value in _UNREACHABLE_PARAMS else str(value)


def _spec_of(item: pytest.Item) -> CheckSpec:
    marks = list(item.iter_markers("talos_check"))
    if len(marks) != 1:
        raise pytest.UsageError(
            f"{item.nodeid}: every conformance test needs exactly one @pytest.mark.talos_check("
            f"id, severity=..., claim=...) marker (found {len(marks)})")
    try:
        spec = check_spec_from_marker(marks[0].args, marks[0].kwargs)
    except ConfigError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
    folder = item.path.relative_to(SUITE_ROOT).parts[0]
    if folder != spec.area:
        raise pytest.UsageError(f"{item.nodeid}: check {spec.id} belongs in conformance/"
                                f"{spec.area}/, not conformance/{folder}/")
    return spec


def _register(item: pytest.Item, spec: CheckSpec) -> None:
    item.stash[_SPEC] = spec
    item.add_marker(spec.area)
    for profile in SUITES.values():
        if profile.name != "full" and profile.selects(spec.area, _changes(item)):
            item.add_marker(profile.marker)
    item.user_properties.extend([
        (PROP_CHECK, spec.id), (PROP_SEVERITY, spec.severity), (PROP_CLAIM, spec.claim),
        (PROP_NODE, _node_param(item)),
    ])


def _check_unique(owners: dict[str, str], spec: CheckSpec, item: pytest.Item) -> None:
    function = item.nodeid.split("[", 1)[0]
    owner = owners.setdefault(spec.id, function)
    if owner != function:
        raise pytest.UsageError(f"check id {spec.id} is used by both {owner} and {function}")


def _selected(item: pytest.Item, settings: SuiteSettings) -> bool:
    spec = item.stash[_SPEC]
    if any(PARTS[part].holds(spec.id) for part in _left_out(item.config)):
        return False
    if settings.checks:
        return spec.id in settings.checks  # asked for by id: whatever the profile
    if settings.suite is None or settings.suite.selects(spec.area, _changes(item)):
        return True
    # Saving a snapshot is asked for explicitly: run it whatever the profile.
    return spec.id == "upgrade.snapshot-recorded" and settings.snapshot_mode == "save"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    settings = config.stash[_SETTINGS]
    owners: dict[str, str] = {}
    ours = [item for item in items if SUITE_ROOT in item.path.parents]
    for item in ours:
        spec = _spec_of(item)
        _check_unique(owners, spec, item)
        _register(item, spec)
    if ours and settings.waivers:
        try:
            check_waivers_known(settings.waivers, owners)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
    if ours and settings.checks:
        _check_ids_known(settings.checks, owners,
                         settings.sources.get("talos_check", "--talos-check"))
    if settings.list_checks:
        _list_checks(config, ours)
    keep = [i for i in items if _SPEC not in i.stash or _selected(i, settings)]
    dropped = [i for i in items if _SPEC in i.stash and not _selected(i, settings)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _check_ids_known(wanted: tuple[str, ...], known: dict[str, str], source: str) -> None:
    """--talos-check with an id that no check has is a usage error with the nearest ids."""
    for check_id in wanted:
        if check_id in known:
            continue
        close = difflib.get_close_matches(check_id, list(known), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise pytest.UsageError(
            f"{source} {check_id}: there is no such check{hint} (list them with "
            "--talos-list-checks)")


def _list_checks(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Print the catalogue (one line per check, by area) and end the run."""
    seen: dict[str, tuple[CheckSpec, str | None]] = {}
    for item in items:
        seen.setdefault(item.stash[_SPEC].id, (item.stash[_SPEC], _changes(item)))
    order = {area: i for i, area in enumerate(AREAS)}
    rows = sorted(seen.values(), key=lambda row: (order.get(row[0].area, 99), row[0].id))
    width = max((len(spec.id) for spec, _ in rows), default=10)
    lines = [f"{'check':<{width}}  {'severity':<8}  {'changes':<10}  claim"]
    lines += [f"{spec.id:<{width}}  {spec.severity:<8}  {changes or 'read-only':<10}  "
              f"{spec.claim}" for spec, changes in rows]
    lines.append(f"{len(rows)} checks; run some with --talos-check ID (repeatable) or a "
                 "profile with --talos-suite")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)
    pytest.exit("listed the checks (--talos-list-checks)", returncode=0)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def talos_evidence(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A dict a check fills with what it observed; it goes to results.json and report.md."""
    evidence: dict[str, Any] = request.node.stash.setdefault(_EVIDENCE, {})
    return evidence


@pytest.fixture(scope="session")
def talos_suite(request: pytest.FixtureRequest) -> SuiteSettings:
    """The conformance options of this run."""
    return request.config.stash[_SETTINGS]


@pytest.fixture(scope="session")
def talos_timing(talos_emulator: Any, talos_cluster: TalosCluster) -> Timing:
    """How fast the nodes' clock runs: the emulator's time scale (--talos-emulator), the rate
    the talosconfig advertises (an emulator reached through --talosconfig), else 1x."""
    if talos_emulator is not None:
        return Timing(talos_emulator.clock.time_scale, "--talos-emulator-time-scale")
    config = talos_cluster.talosconfig
    if config is not None and config.context.time_scale != 1:
        return Timing(config.context.time_scale, f"advertised by the talosconfig {config.path}")
    return Timing()


# Fixtures that read the run's watch window, and what each needs watched.
_WATCHERS = ("talos_observations", "talos_machine_watch")


def _watched(session: pytest.Session) -> frozenset[str]:
    """Which parts of the watch window the selected checks read (computed once)."""
    if _WATCHED not in session.config.stash:
        names = {n for item in session.items for n in getattr(item, "fixturenames", ())}
        session.config.stash[_WATCHED] = frozenset(names.intersection(_WATCHERS))
    return session.config.stash[_WATCHED]


def _progress(config: pytest.Config, line: str) -> None:
    """One line on the terminal while checks run (not captured; nothing under xdist)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or _is_worker(config):
        return
    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.write_line(line)


@pytest.fixture(scope="session")
def talos_watch(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster, talos_suite: SuiteSettings,
    talos_timing: Timing
) -> WatchWindow:
    """The run's one watch window: every target node watched at once, each check over time
    (service restarts, machine hold) reading its node's part of it."""
    wanted = _watched(request.session)
    window = WatchWindow(
        talos_cluster.reachable, talos_timing, history=talos_suite.restart_window,
        observe=talos_suite.observe if "talos_observations" in wanted else None,
        hold=READY_STABLE_FOR if "talos_machine_watch" in wanted else None)
    if window.start():
        _progress(request.config, window.describe())
    return window


@pytest.fixture(autouse=True)
def _conformance_watch(request: pytest.FixtureRequest) -> None:
    """Opens the watch window with the first check, so it runs beside the other checks; a
    check that changes nodes first lets it end (what it changes is not the nodes' doing)."""
    item = request.node
    if (_SPEC not in item.stash or "talos_cluster" not in request.fixturenames
            or not _watched(request.session)):
        return
    window: WatchWindow = request.getfixturevalue("talos_watch")
    if _changes(item) is not None:
        window.wait()


@pytest.fixture(scope="session")
def talos_observations(talos_watch: WatchWindow) -> dict[str, Observation]:
    """Service state events of every node: recent history plus the run's watch window."""
    return talos_watch.observations()


@pytest.fixture(scope="session")
def talos_machine_watch(talos_watch: WatchWindow) -> WatchWindow:
    """The run's watch window, with every node's machine hold (``.machine(name)``)."""
    return talos_watch


@pytest.fixture(scope="session")
def talos_kubernetes(talos_cluster: TalosCluster) -> KubernetesAccess:
    """The cluster's Kubernetes API (kubeconfig through the Talos API); an error if missing."""
    roles = talos_cluster.client.roles
    if ADMIN not in roles:
        pytest.skip(f"needs {ADMIN} to fetch the kubeconfig; this talosconfig has "
                    f"{', '.join(roles) or 'no role'}")
    try:
        return talos_cluster.kubernetes
    except TalosError as exc:
        pytest.fail(f"cannot reach Kubernetes: no usable kubeconfig from the Talos API ({exc})",
                    pytrace=False)


@pytest.fixture(scope="session")
def talos_reader(talos_cluster: TalosCluster) -> Iterator[ReaderAccess]:
    """A reader-role client from GenerateClientConfiguration (skips when unavailable)."""
    try:
        issuer = talos_cluster.controlplane()
        creds = issuer.client.generate_client_configuration(["os:reader"], 3600)
    except TalosError as exc:
        yield ReaderAccess(None, "no os:reader certificate: GenerateClientConfiguration on a "
                           f"control plane failed ({exc}); needs an os:admin talosconfig")
        return
    client = TalosClient(talos_cluster.client.endpoint, creds.ca_pem, creds.crt_pem,
                         creds.key_pem, timeout=talos_cluster.client.timeout)
    try:
        yield ReaderAccess(client)
    finally:
        client.close()


def _target_info(cluster: TalosCluster) -> list[TargetInfo]:
    targets = []
    for node in cluster.reachable:
        try:
            version = node.version
            tag, platform = version.tag, version.platform
        except TalosError:
            tag, platform = "unknown", ""
        targets.append(TargetInfo(node.name, node.role, tag, platform, node.address))
    return targets


@pytest.fixture(scope="session")
def _conformance_targets(
    talos_cluster: TalosCluster, record_testsuite_property: Any
) -> list[TargetInfo]:
    targets = _target_info(talos_cluster)
    for target in targets:
        record_testsuite_property(f"talos_node_{target.name}",
                                  f"{target.role} {target.talos_version} {target.platform}")
    return targets


@pytest.fixture(autouse=True)
def _conformance_item(request: pytest.FixtureRequest) -> None:
    """Send the run's targets along with the first check of this process (for reports)."""
    config = request.config
    if _SPEC not in request.node.stash or config.stash.get(_TARGETS_SENT, False):
        return
    targets: list[TargetInfo] = request.getfixturevalue("_conformance_targets")
    config.stash[_TARGETS_SENT] = True
    request.node.user_properties.append((PROP_TARGETS, targets_property(targets)))


# --------------------------------------------------------------------------- outcomes

def _client_roles(item: pytest.Item) -> tuple[str, ...] | None:
    funcargs = getattr(item, "funcargs", {})
    for name in ("talos_node", "talos_cluster"):
        target = funcargs.get(name)
        client = getattr(target, "client", None)
        if client is not None:
            return tuple(client.roles)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A check refused for lack of rights skips when the talosconfig is not os:admin (a
    reader talosconfig is a fine way to run the read-only profiles); with os:admin, a
    refusal is the node's fault and the check fails as usual."""
    try:
        return (yield)
    except PermissionDenied as exc:
        roles = _client_roles(item)
        if _SPEC in item.stash and roles is not None and ADMIN not in roles:
            pytest.skip(f"needs {ADMIN}; this talosconfig has {', '.join(roles) or 'no role'} "
                        f"({exc.details})")
        raise



def _evidence(item: pytest.Item, exc: BaseException | None) -> dict[str, Any]:
    recorded: dict[str, Any] | None = item.stash.get(_EVIDENCE, None)
    evidence: dict[str, Any] = dict(recorded or {})
    if isinstance(exc, ConformanceFailure):
        if exc.expected is not None:
            evidence.setdefault("expected", exc.expected)
        if exc.observed is not None:
            evidence.setdefault("observed", exc.observed)
        evidence.update(exc.evidence)
    redacted: dict[str, Any] = redact(evidence)
    return redacted


def _apply_waiver(item: pytest.Item, report: pytest.TestReport, spec: CheckSpec) -> None:
    settings = item.config.stash[_SETTINGS]
    match = find_waiver(settings.waivers, spec.id, _node_param(item), dt.date.today())
    if match.waives and match.active is not None:
        waiver = match.active
        report.outcome = "skipped"
        report.wasxfail = f"waived until {waiver.expires.isoformat()}: {waiver.reason}"
        report.user_properties.append((PROP_WAIVER, {
            "check": waiver.check, "reason": waiver.reason,
            "expires": waiver.expires.isoformat(), "node": waiver.node}))
    elif match.expired is not None:
        report.sections.append(("talos waiver", match.expired_note()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    spec = item.stash.get(_SPEC, None)
    if spec is None or report.when != "call":
        return report
    exc = call.excinfo.value if call.excinfo is not None else None
    report.user_properties.append((PROP_EVIDENCE, _evidence(item, exc)))
    if report.failed:
        message = report.longreprtext
        if isinstance(exc, ConformanceFailure):
            message = str(exc).splitlines()[0]  # the rest is in the evidence
            if item.config.option.tbstyle in ("auto", "short"):
                report.longrepr = failure_text(spec, _node_param(item) or exc.node, exc)
        elif exc is not None:
            message = str(exc)
        report.user_properties.append((PROP_MESSAGE, redact(message)))
        _apply_waiver(item, report, spec)
    return report


_EVIDENCE_LINES = 40  # per evidence value on the terminal; the reports keep it whole


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
        text = str(value).rstrip()
        if "\n" not in text:
            lines.append(f"  {key}: {text}")
            continue
        shown = text.splitlines()
        if len(shown) > _EVIDENCE_LINES:
            shown = [*shown[:_EVIDENCE_LINES], f"... ({len(shown) - _EVIDENCE_LINES} more "
                     "lines in the report)"]
        lines.append(f"  {key}:")
        lines += ["    " + line for line in shown]
    lines += [f"  claim: {spec.claim}", "  (--tb=long shows the test's traceback)"]
    return "\n".join(lines)


def _verdict_inputs(config: pytest.Config, run: RunInfo, records: list[CheckRecord]) -> None:
    """What the verdict needs beyond the records: the parts the profile is for, the areas
    that need inputs, the tests that never reached their node."""
    settings = config.stash[_SETTINGS]
    name = settings.suite.name if settings.suite else "full"
    defining = {check.split(".", 1)[0] for part in PROFILE_PARTS.get(name, ())
                for check in PARTS[part].checks}
    exempt = set() if settings.snapshot_mode == "save" else {"upgrade.snapshot-recorded"}
    # Checks --talos-allow keeps from running are the run's choice (the report says so).
    exempt |= {r.check_id for r in records if r.outcome == "skipped"
               and r.message.startswith(("talos_mutating:", "talos_disruptive:"))}
    held = {r.check_id for r in records if r.check_id in exempt and r.outcome == "skipped"}
    held.discard("upgrade.snapshot-recorded")
    if held:
        allow = config.getoption("talos_allow", None) or "none"
        run.notes.append(f"{len(held)} check(s) that change nodes not run (--talos-allow {allow})")
    run.defining_areas = frozenset(defining)
    run.optional_areas = INPUT_AREAS - run.defining_areas
    run.exempt_checks = frozenset(exempt)
    unreachable = config.stash.get(_UNREACHABLE, None)
    run.unreachable = frozenset(unreachable.tests if unreachable is not None else ())
    left = _left_out(config)
    if left:
        run.notes.append("left out: " + ", ".join(
            f"{part} (needs {PARTS[part].needs})" for part in left))


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _tested(config: pytest.Config) -> dict[str, Any]:
    """What the run was pointed at, for the reports: real nodes or the emulator (with its
    faults, variants and clock), the endpoints and the talosconfig context (no credentials)."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return {}
    s = session.settings
    tested: dict[str, Any] = {"kind": "real"}
    if s.emulator.value is not None:
        cp, workers = s.emulator.value
        tested = {"kind": "emulated", "size": f"{cp} control plane(s), {workers} worker(s)",
                  "faults": list(s.faults.value), "variants": list(s.variants.value),
                  "time_scale": s.time_scale.value}
    tested["endpoints"] = list(s.endpoints.value)
    cluster = session.cached_cluster
    talosconfig = cluster.talosconfig if cluster is not None else None
    if cluster is not None:
        tested["endpoints"] = [cluster.client.endpoint]
    elif s.emulator.value is not None:
        tested["endpoints"] = ["each test process's own emulated cluster (pytest-xdist)"]
    if talosconfig is not None:
        tested["context"] = talosconfig.context_name
        if s.emulator.value is None:
            tested["talosconfig"] = str(talosconfig.path)
        if s.emulator.value is None and talosconfig.context.time_scale != 1:
            # Only the pytest-talos emulator advertises a clock rate in its talosconfig.
            tested.update(kind="emulated", time_scale=talosconfig.context.time_scale,
                          faults=["(not known: the emulator was reached through a talosconfig)"])
    elif s.context.value:
        tested["context"] = s.context.value
    return tested


def _run_info(config: pytest.Config, collector: ResultCollector) -> RunInfo:
    settings = config.stash[_SETTINGS]
    notes = []
    if settings.vendor_profile:
        notes.append(f"vendor profile: {settings.vendor_profile.name}")
    if settings.snapshot_mode:
        notes.append(f"snapshot {settings.snapshot_mode}: {settings.snapshot_path}")
    return RunInfo(
        tested=_tested(config),
        started=config.stash[_STARTED],
        finished=dt.datetime.now(dt.UTC),
        suite=settings.suite.name if settings.suite else "",
        targets=collector.target_list(),
        settings={
            "talos_allow": config.getoption("talos_allow", None) or "none",
            "fail_under": settings.fail_under,
            "waivers": str(settings.waivers_path or ""),
        },
        threshold=settings.fail_under,
        notes=notes,
    )


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label.lower()).strip("_")


class _JunitTested:
    """Puts what was tested into the JUnit XML as testsuite properties (talos_target, ...),
    before pytest writes the file."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from _pytest.junitxml import xml_key  # the one way to add properties from here

        config = self.config
        xml = config.stash.get(xml_key, None)
        collector = config.stash.get(_COLLECTOR, None)
        if xml is None or collector is None or _is_worker(config):
            return
        run = build_results([], _run_info(config, collector))["run"]
        for label, value in tested_facts(run):
            xml.add_global_property(f"talos_{_slug(label)}", value)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    collector = config.stash.get(_COLLECTOR, None)
    if collector is None or _is_worker(config):
        return
    records = collector.records()
    settings = config.stash[_SETTINGS]
    gate = apply_gate(records, settings.fail_under)
    config.stash[_GATE] = gate.summary()
    run = _run_info(config, collector)
    _verdict_inputs(config, run, records)
    verdict = decide_verdict(
        records, gate, defining_areas=run.defining_areas, optional_areas=run.optional_areas,
        exempt=run.exempt_checks, unreachable=run.unreachable)
    if records and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        config.stash[_VERDICT] = verdict.summary()
        code = verdict.exit_code
        if code == 0 and collector.other_failures:
            code = pytest.ExitCode.TESTS_FAILED  # a test that is not a check failed
        session.exitstatus = code
    if settings.report_dir and records:
        try:
            written = write_reports(settings.report_dir, records, run)
        except ConfigError as exc:
            config.stash[_REPORTS] = f"conformance: cannot write the report: {exc}"
        else:
            config.stash[_REPORTS] = "conformance: report written: " + ", ".join(
                str(path) for path in written.values())



def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _is_worker(config) or _GATE not in config.stash:
        return
    settings = config.stash[_SETTINGS]
    collector = config.stash.get(_COLLECTOR, None)
    if collector is not None:
        quiet = config.get_verbosity() < 0
        for line in summary_table(collector.records(), quiet=quiet):
            terminalreporter.write_line(line)
    if settings.fail_under != "low" or "blocking" in config.stash[_GATE]:
        terminalreporter.write_line(f"conformance: {config.stash[_GATE]}")
    if _REPORTS in config.stash:
        terminalreporter.write_line(config.stash[_REPORTS])
    if _VERDICT in config.stash:
        terminalreporter.write_line(f"conformance: {config.stash[_VERDICT]}")


def summary_table(records: list[Any], *, quiet: bool = False) -> list[str]:
    """The closing table: one line per check id (most severe failures first) with how many
    nodes passed, failed, were waived or skipped, and the failing nodes."""
    if not records:
        return []
    rows: dict[str, dict[str, Any]] = {}
    for r in records:
        row = rows.setdefault(r.check_id, {"severity": r.severity, "passed": 0, "failed": 0,
                                           "waived": 0, "skipped": 0, "nodes": []})
        outcome = "failed" if r.outcome == "error" else r.outcome
        row[outcome] += 1
        if outcome == "failed":
            row["nodes"].append(r.node or "cluster")
    ranks = {"critical": 0, "high": 1, "medium": 2, "low": 3}
    order = sorted(rows, key=lambda c: (not rows[c]["failed"], ranks.get(rows[c]["severity"], 9),
                                        c))
    shown = order
    if quiet:  # -q: only what did not pass cleanly
        shown = [c for c in order if rows[c]["failed"] or rows[c]["waived"]]
    width = max(len(c) for c in rows)
    lines = ["", f"{'conformance check':<{width}}  severity  pass  fail  waived  skip",
             "-" * (width + 38)]
    for check_id in shown:
        row = rows[check_id]
        failing = f"  {', '.join(row['nodes'][:4])}" if row["nodes"] else ""
        if len(row["nodes"]) > 4:
            failing += f" (+{len(row['nodes']) - 4})"
        lines.append(f"{check_id:<{width}}  {row['severity']:<8}  {row['passed']:>4}  "
                     f"{row['failed']:>4}  {row['waived']:>6}  {row['skipped']:>4}{failing}")
    if len(shown) < len(order):
        lines.append(f"... and {len(order) - len(shown)} checks that passed or skipped "
                     "(without -q: every check; the report lists them all)")
    return lines
