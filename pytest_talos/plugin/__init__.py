"""The pytest plugin: ``--talos-*`` options, fixtures, markers, safety and the report header.

Everything pytest-specific lives here (and the hook specs in :mod:`pytest_talos.hookspecs`);
the library underneath works from plain scripts.

* Settings: one ``talos`` option group; each option also has an ini key and an environment
  variable. Precedence: command line > ini > environment > default.
* Targets: ``--talos-emulator`` starts the built-in emulated cluster for the session (imported
  only then); otherwise the talosconfig, endpoints and nodes given (talosctl's lookup).
* Safety: tests marked ``talos_mutating`` / ``talos_disruptive`` are skipped unless
  ``--talos-allow`` permits them; a ``talos_node`` in any other test refuses changes; every
  change goes through ``talos_config_guard``, which restores the exact original config.
  Against the emulator, the call log shows what each test sent: an unmarked test that sent a
  changing call fails.

Layout: :mod:`.settings` (options and precedence), :mod:`.session` (targets, header); the
hooks and fixtures are here, where pytest finds them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_talos import hookspecs
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import (
    FailedPrecondition,
    NotInRelease,
    NotSupportedInMode,
    TalosError,
)
from pytest_talos.guard import ConfigGuard, ConfigRestoreError
from pytest_talos.node import ReadOnlyGuard, TalosNode
from pytest_talos.plugin.items import UNREACHABLE, NoNode, changes_level, held_back
from pytest_talos.plugin.safety import RunSafety, recover_command
from pytest_talos.plugin.session import SESSION_KEY, TalosSession, header_lines, session_of
from pytest_talos.plugin.suite_args import load_suite_plugin_for_pyargs
from pytest_talos.talos_api import CHANGING_METHODS

if TYPE_CHECKING:
    from pytest_talos.emulator import EmulatedCluster  # imported lazily, only when asked for

from pytest_talos.plugin.settings import (
    ALLOW_LEVELS,
    DEFAULT_TIMEOUT,
    Setting,
    TalosSettings,
    add_options,
    resolve_settings,
)

__all__ = [
    "ALLOW_LEVELS",
    "DEFAULT_TIMEOUT",
    "Setting",
    "TalosSession",
    "TalosSettings",
    "resolve_settings",
]

ROLES = ("controlplane", "worker")
_MARKERS = (
    "talos_role(*roles): run only against nodes of these roles (controlplane, worker)",
    "talos_mutating: changes node configuration (restored afterwards); skipped unless "
    "--talos-allow mutating",
    "talos_disruptive: may reboot, reset or upgrade nodes; skipped unless --talos-allow "
    "disruptive; runs last",
    "talos_min_version(version): skip nodes running an older Talos (e.g. '1.13')",
    "talos_platform(*platforms): skip nodes on other platforms (metal, container, aws, ...)",
    "xdist_group(name): pytest-xdist --dist loadgroup runs a group on one worker",
)

_NODE_KEY = pytest.StashKey[TalosNode]()
_SAFETY_KEY = pytest.StashKey[RunSafety]()
_CALLS_KEY = pytest.StashKey[int]()
_UNREACHABLE_KEY = pytest.StashKey[bool]()
# A report's user property: the test could not reach or authenticate to its target.
UNREACHABLE_PROPERTY = "talos_unreachable"


# --------------------------------------------------------------------------- pytest hooks


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    # `pytest --pyargs pytest_talos_conformance`: the suite's options before pytest parses them
    load_suite_plugin_for_pyargs(early_config, args)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("talos_recover", False):
        return recover_command(config)
    return None


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    # The kubernetes client is imported on the thread that first uses it (a background Ready
    # watch, cluster.KubernetesAccess), so urllib3's "SOCKS needs PySocks" warning would land
    # on whichever test runs meanwhile; no SOCKS proxy is used.
    config.addinivalue_line("filterwarnings", "ignore:SOCKS support in urllib3 requires")
    session = config.stash[SESSION_KEY] = TalosSession(config, resolve_settings(config))
    safety = config.stash[_SAFETY_KEY] = RunSafety(config, session)
    safety.install()  # SIGTERM acts like Ctrl-C; restores are shielded
    config.pluginmanager.register(safety, f"talos-safety-{id(config)}")


def pytest_sessionstart(session: pytest.Session) -> None:
    # beside a local Kubernetes: one paragraph now, not an error in every test
    session_of(session.config).check_emulator_ports()


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()
    safety = config.stash.get(_SAFETY_KEY, None)
    if safety is not None:
        safety.uninstall()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return header_lines(session_of(config))


# --------------------------------------------------------------------------- collection


def _marker_args(item: pytest.Item | pytest.Function, name: str) -> list[Any]:
    return [arg for mark in item.iter_markers(name) for arg in mark.args]


def _roles_of(definition: pytest.Function) -> set[str]:
    roles = {str(role) for role in _marker_args(definition, "talos_role")}
    unknown = roles - set(ROLES)
    if unknown:
        pytest.fail(
            f"talos_role: unknown role {', '.join(sorted(unknown))}; use {' or '.join(ROLES)}",
            pytrace=False,
        )
    return roles


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "talos_node" not in metafunc.fixturenames:
        return
    session = session_of(metafunc.config)
    roles = _roles_of(metafunc.definition)
    try:
        nodes = session.targets()
    except TalosError:
        metafunc.parametrize("talos_node", [UNREACHABLE], ids=["unreachable"], indirect=True)
        return
    group = changes_level(metafunc.definition) is not None
    params = [
        pytest.param(
            node.name,
            id=node.name,
            marks=[pytest.mark.xdist_group(f"talos-{node.name}")] if group else [],
        )
        for node in nodes
        if not roles or node.role in roles
    ]
    if not params:
        have = ", ".join(f"{n.name}={n.role}" for n in nodes) or "no nodes"
        reason = f"talos_role({', '.join(sorted(roles))}): no target node has that role ({have})"
        params = [
            pytest.param(
                NoNode("no node with the role"), id="no-node", marks=pytest.mark.skip(reason=reason)
            )
        ]
    metafunc.parametrize("talos_node", params, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings = session_of(config).settings
    if not config.option.collectonly and any(_uses_talos(item) for item in items):
        session_of(config).check_target()  # no target: one paragraph, exit 4
    for item in items:
        level = held_back(item, settings)
        if level == "disruptive":
            item.add_marker(
                pytest.mark.skip(
                    reason=(
                        "talos_disruptive: may reboot, reset or upgrade nodes; run with "
                        "--talos-allow disruptive to enable it"
                    )
                )
            )
        elif level == "mutating":
            item.add_marker(
                pytest.mark.skip(
                    reason=(
                        "talos_mutating: changes node configuration (restored afterwards); "
                        "run with --talos-allow mutating to enable it"
                    )
                )
            )
    items.sort(key=lambda item: changes_level(item) == "disruptive")  # stable: keeps order


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def talos_cluster(request: pytest.FixtureRequest) -> TalosCluster:
    """The target nodes (sorted by hostname), their roles, and a Kubernetes client."""
    session = session_of(request.config)
    try:
        return session.cluster()
    except TalosError as exc:
        message = session.unreachable_message(exc)
    pytest.fail(message, pytrace=False)  # outside except: no "during handling" chain


@pytest.fixture(scope="session")
def talos_emulator(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster
) -> EmulatedCluster | None:
    """The emulated cluster of this run (``--talos-emulator``), or None against real nodes.

    Tests use it to reach what only an emulator has: its clock (``.clock.time_scale``), its
    call log, or extra client identities (``.issue_client(["os:reader"])``).
    """
    return session_of(request.config).emulator  # started with talos_cluster


@pytest.fixture
def talos_config_guard(request: pytest.FixtureRequest) -> Iterator[ConfigGuard]:
    """Snapshots every node a test changes; restores the exact original config afterwards."""
    session = session_of(request.config)
    guard = session.new_guard(label=request.node.nodeid)
    session.guards.append(guard)
    yield guard
    safety = request.config.stash.get(_SAFETY_KEY, None)
    interrupted = safety is not None and safety.interrupted
    try:  # a Ctrl-C deferred during the restore stops the run afterwards, unless it is stopping
        restored = guard.restore(reraise_deferred=not interrupted)
    except ConfigRestoreError as exc:
        failure = str(exc)  # the guard stays registered: the session fallback retries it
    else:
        session.guards.remove(guard)
        if interrupted and restored and safety is not None:
            safety.announce(f"talos: {', '.join(restored)}: original config restored")
        return
    pytest.fail(f"talos_config_guard: {failure}", pytrace=False)


@pytest.fixture(scope="session")
def talos_guarded(
    request: pytest.FixtureRequest,
) -> Callable[[str], contextlib.AbstractContextManager[ConfigGuard]]:
    """``with talos_guarded(label) as guard:`` a guard of the run's own, restored when the
    block ends, for changes made outside one test's scope (a check that tries a change on
    every node at once, from threads). If the run stops first (Ctrl-C, SIGTERM, ``-x``),
    the run's fallback restores it."""
    return session_of(request.config).registered_guard


@pytest.fixture(scope="session")
def talos_unchanged(
    request: pytest.FixtureRequest,
) -> Callable[[TalosNode], contextlib.AbstractContextManager[None]]:
    """``with talos_unchanged(node):`` a read no other pytest-xdist worker or run changes
    the node during: it waits for the node's lock, as a change does, and holds it (nothing
    is journaled). For a read-only check that compares two things a change in flight moves
    apart, such as the persistent and the active config during another worker's try
    window."""
    return session_of(request.config).unchanged_while


@pytest.fixture
def talos_node(request: pytest.FixtureRequest, talos_cluster: TalosCluster) -> TalosNode:
    """One target node (the test runs once per node; ids are hostnames)."""
    name = getattr(request, "param", None)
    if name is None:
        pytest.fail(
            "talos_node must be a test argument (pytest-talos parametrizes it)", pytrace=False
        )
    node = talos_cluster.node(str(name))
    if node.unreachable is not None:
        request.node.stash[_UNREACHABLE_KEY] = True
        pytest.fail(f"node {node.address} did not answer: {node.unreachable}", pytrace=False)
    _skip_unless_capable(request.node, node)
    session = session_of(request.config)
    if changes_level(request.node) is not None:
        guarded = node.with_guard(request.getfixturevalue("talos_config_guard"))
    else:
        guarded = node.with_guard(
            ReadOnlyGuard(
                "this test is not marked talos_mutating, so its talos_node refuses changes; "
                "mark it @pytest.mark.talos_mutating (run with --talos-allow mutating)"
            )
        )
    guarded.expected_ports = session.expected_ports(node)
    request.node.stash[_NODE_KEY] = guarded
    return guarded


@pytest.fixture(autouse=True)
def _talos_capability_gate(request: pytest.FixtureRequest) -> None:
    """Applies talos_min_version / talos_platform to tests that use only talos_cluster."""
    item = request.node
    if "talos_node" in request.fixturenames:
        return  # talos_node checks its own node
    if not (
        item.get_closest_marker("talos_min_version") or item.get_closest_marker("talos_platform")
    ):
        return
    cluster: TalosCluster = request.getfixturevalue("talos_cluster")
    for node in cluster.reachable:
        _skip_unless_capable(item, node)


def _version_tuple(text: str) -> tuple[int, ...]:
    match = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    if match is None:
        raise ValueError(text)
    return tuple(int(part) for part in match[1].split("."))


def _skip_unless_capable(item: pytest.Item, node: TalosNode) -> None:
    wanted = _marker_args(item, "talos_min_version")
    platforms = {str(p) for p in _marker_args(item, "talos_platform")}
    if not wanted and not platforms:
        return
    version = node.version
    for minimum in wanted:
        try:
            needed = _version_tuple(str(minimum))
        except ValueError:
            pytest.fail(
                f"talos_min_version: {minimum!r} is not a version like '1.13'", pytrace=False
            )
        have = _version_tuple(version.tag)
        if have[: len(needed)] < needed:
            pytest.skip(f"talos_min_version({minimum}): {node.name} runs Talos {version.tag}")
    if platforms and not {version.platform, version.platform_mode} & platforms:
        pytest.skip(
            f"talos_platform({', '.join(sorted(platforms))}): {node.name} runs on "
            f"platform {version.platform}"
        )


# --------------------------------------------------------------------------- run-time checks


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    talos = session_of(item.config)
    # The clients refuse what the test's marker does not declare (its setup and call); a
    # marker above --talos-allow has skipped the test already.
    talos.gate.allowed = changes_level(item) or "none"
    if changes_level(item) is not None:
        talos.gate.note_change()  # what it changes, readers kept from before must not trust
    talos.in_test = True
    emulator = talos.emulator
    if emulator is not None:
        item.stash[_CALLS_KEY] = emulator.call_log_store.total


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        result = yield
    except NotSupportedInMode as exc:
        _check_call_log(item)  # a refused call was still sent: the marker must cover it
        if _uses_talos(item):
            pytest.skip(f"the node lacks this capability in {exc.mode} mode ({exc.details})")
        raise
    except NotInRelease as exc:
        _check_call_log(item)
        if _uses_talos(item) and exc.releases:
            lines = ", ".join(exc.releases)
            pytest.skip(f"not supported on Talos {lines} ({exc.method}: {exc.details})")
        raise
    except FailedPrecondition:
        _check_call_log(item)
        raise
    _check_call_log(item)
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    # Teardown (the config guard's restore) runs under the run's level, which covers the
    # test's: the kit puts back what the test was allowed to change.
    talos = session_of(item.config)
    talos.gate.allowed = talos.settings.allow.value
    talos.in_test = False


def _uses_talos(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "talos_node" in names or "talos_cluster" in names


def _check_call_log(item: pytest.Item) -> None:
    emulator = session_of(item.config).emulator
    start = item.stash.get(_CALLS_KEY, None)
    if emulator is None or start is None:
        return
    level = changes_level(item)
    if level == "disruptive":
        return
    calls = emulator.call_log_store.since(start)
    hostnames = {node.address: node.hostname for node in emulator.nodes}
    sent = {
        (
            call.method.rsplit("/", 1)[-1],
            hostnames.get(call.targets[0] if call.targets else call.address, call.node),
        )
        for call in calls
        if call.mutating and (level is None or CHANGING_METHODS.get(call.method) == "disruptive")
    }
    if not sent:
        return
    listed = ", ".join(f"{method} to {target}" for method, target in sorted(sent))
    marker = "talos_disruptive" if level == "mutating" else "talos_mutating"
    pytest.fail(
        f"this test sent changing calls to the emulated cluster ({listed}) but is not marked "
        f"{marker}; mark it @pytest.mark.{marker} so that it runs only when --talos-allow "
        "permits such changes",
        pytrace=False,
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (
        report.failed
        and report.when == "setup"
        and _uses_talos(item)
        and (
            item.stash.get(_UNREACHABLE_KEY, False)
            or session_of(item.config).connect_error is not None
        )
    ):
        report.user_properties.append((UNREACHABLE_PROPERTY, True))
    node = item.stash.get(_NODE_KEY, None)
    if node is not None and report.when == "call":
        try:
            item.config.hook.pytest_talos_node_report(node=node, report=report)
        except TalosError as exc:
            report.sections.append(("talos node report", f"evidence unavailable: {exc}"))
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The fallback: restore configs no test-level guard restored (e.g. after Ctrl-C)."""
    talos = session.config.stash.get(SESSION_KEY, None)
    if talos is None or not talos.guards:
        return
    failures = talos.restore_leftovers()
    safety = session.config.stash.get(_SAFETY_KEY, None)
    if safety is not None:
        safety.end_shield()  # every node is back (or its failure reported below)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for failure in failures:
        if reporter is not None:
            reporter.write_line(f"talos: RESTORE FAILED: {failure}", red=True, bold=True)
    if failures and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
