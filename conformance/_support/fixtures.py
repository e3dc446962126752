"""The fixtures the checks of this suite use: the nodes' clock, the run's watch window,
Kubernetes access and a reader-role client. (The plugin's own fixtures, ``talos_evidence``
and ``talos_suite``, come from :mod:`pytest_talos.plugin.conformance`.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import pytest

from conformance._support.context import ReaderAccess, Timing
from conformance._support.fanout import (
    READ_MAX_AGE,
    CheckedRead,
    FanOut,
    Gated,
    ReadCheck,
    checked_fanout,
    gated_fanout,
)
from conformance._support.node_runs import NodeCheck, NodeRuns
from conformance._support.observe import READY_STABLE_FOR, Observation, WatchWindow
from conformance._support.reach import DIRECT_REACH_CHECKS, DirectReach
from pytest_talos.client import TalosClient
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.errors import TalosError
from pytest_talos.guard import SignalShield
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance import ADMIN, SuiteSettings, check_spec, is_worker, progress
from pytest_talos.plugin.conformance.catalogue import marked_check
from pytest_talos.plugin.items import changes_level, node_param
from pytest_talos.wait import CANCEL_CHECK

T = TypeVar("T")

_WATCHED = pytest.StashKey[frozenset[str]]()
# Fixtures that read the run's watch window, and what each needs watched.
_WATCHERS = ("talos_observations", "talos_machine_watch")


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


def _watched(session: pytest.Session) -> frozenset[str]:
    """Which parts of the watch window the selected checks read (computed once)."""
    if _WATCHED not in session.config.stash:
        names = {n for item in session.items for n in getattr(item, "fixturenames", ())}
        session.config.stash[_WATCHED] = frozenset(names.intersection(_WATCHERS))
    return session.config.stash[_WATCHED]


@pytest.fixture(scope="session")
def talos_watch(
    request: pytest.FixtureRequest,
    talos_cluster: TalosCluster,
    talos_suite: SuiteSettings,
    talos_timing: Timing,
) -> WatchWindow:
    """The run's one watch window: every target node (of this shard, with --talos-shard)
    watched at once, each check over time (service restarts, machine hold) reading its
    node's part of it."""
    wanted = _watched(request.session)
    nodes = talos_cluster.reachable
    if talos_suite.shard is not None:  # every check that reads the window is per node
        mine = set(talos_suite.shard.nodes(node.name for node in talos_cluster.nodes))
        nodes = [node for node in nodes if node.name in mine]
    window = WatchWindow(
        nodes,
        talos_timing,
        history=talos_suite.restart_window,
        observe=talos_suite.observe if "talos_observations" in wanted else None,
        hold=READY_STABLE_FOR if "talos_machine_watch" in wanted else None,
    )
    if window.start():
        progress(request.config, window.describe())
    return window


@pytest.fixture(autouse=True)
def _conformance_watch(request: pytest.FixtureRequest) -> None:
    """Opens the watch window with the first check, so it runs beside the other checks; a
    check that changes nodes first lets it end (what it changes is not the nodes' doing)."""
    item = request.node
    if (
        check_spec(item) is None
        or "talos_cluster" not in request.fixturenames
        or not _watched(request.session)
    ):
        return
    window: WatchWindow = request.getfixturevalue("talos_watch")
    if changes_level(item) is not None:
        _say_wait(request.config, window, "a check that changes nodes")
        window.wait()


def _say_wait(
    config: pytest.Config, window: WatchWindow, who: str, part: str | None = None
) -> None:
    """A progress line when a check is about to block on the window, and on how much of it."""
    count = window.still_watched(part)
    if count:
        watch = {"restarts": "restart watch", "machine": "machine hold"}.get(part or "", "watch")
        nodes = f"{count} node{'' if count == 1 else 's'}"
        progress(config, f"conformance: {who} waits for the {watch} of {nodes} to end")


@pytest.fixture(scope="session")
def talos_observations(
    request: pytest.FixtureRequest, talos_watch: WatchWindow
) -> dict[str, Observation]:
    """Service state events of every node: recent history plus the run's watch window."""
    _say_wait(request.config, talos_watch, "the service restart check", "restarts")
    return talos_watch.observations()


@pytest.fixture(scope="session")
def talos_machine_watch(request: pytest.FixtureRequest, talos_watch: WatchWindow) -> WatchWindow:
    """The run's watch window, with every node's machine hold (``.machine(name)``)."""
    _say_wait(request.config, talos_watch, "the machine hold check", "machine")
    return talos_watch


@pytest.fixture(scope="session")
def talos_direct_reach() -> DirectReach:
    """Whether this machine reaches each node's own address (learnt once per node)."""
    return DirectReach()


@pytest.fixture(autouse=True)
def _direct_reach(request: pytest.FixtureRequest) -> None:
    """A check that needs its own connection to its node (DIRECT_REACH_CHECKS) skips in one
    line on a node this machine reaches only through the endpoint."""
    spec = check_spec(request.node)
    needs = DIRECT_REACH_CHECKS.get(spec.id) if spec is not None else None
    if needs is None or "talos_node" not in request.fixturenames:
        return
    node: TalosNode = request.getfixturevalue("talos_node")
    reach: DirectReach = request.getfixturevalue("talos_direct_reach")
    reach.require(node, needs)


@pytest.fixture(scope="session")
def talos_kubernetes(talos_cluster: TalosCluster) -> KubernetesAccess:
    """The cluster's Kubernetes API (kubeconfig through the Talos API); an error if missing."""
    roles = talos_cluster.client.roles
    if ADMIN not in roles:
        pytest.skip(
            f"needs {ADMIN} to fetch the kubeconfig; this talosconfig has "
            f"{', '.join(roles) or 'no role'}"
        )
    try:
        return talos_cluster.kubernetes
    except TalosError as exc:
        pytest.fail(
            f"cannot reach Kubernetes: no usable kubeconfig from the Talos API ({exc})",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def talos_reader(talos_cluster: TalosCluster) -> Iterator[ReaderAccess]:
    """A reader-role client from GenerateClientConfiguration (skips when unavailable)."""
    try:
        issuer = talos_cluster.controlplane_client()
        creds = issuer.generate_client_configuration(["os:reader"], 3600)
    except TalosError as exc:
        yield ReaderAccess(
            None,
            "no os:reader certificate: GenerateClientConfiguration on a "
            f"control plane failed ({exc}); needs an os:admin talosconfig",
        )
        return
    client = TalosClient(
        talos_cluster.client.endpoint,
        creds.ca_pem,
        creds.crt_pem,
        creds.key_pem,
        timeout=talos_cluster.client.timeout,
    )
    try:
        yield ReaderAccess(client)
    finally:
        client.close()


def nodes_checked_by(
    request: pytest.FixtureRequest, test: Callable[..., Any], cluster: TalosCluster
) -> list[TalosNode]:
    """The reachable nodes this run runs ``test`` (a per-node check of the requesting
    module) on: not deselected, not skipped at collection (held back by --talos-allow, no
    node of its role), of this shard."""
    names = {
        node_param(item)
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is request.module
        and item.originalname == test.__name__
        and item.get_closest_marker("skip") is None
    }
    return [node for node in cluster.reachable if node.name in names]


def nodes_at_once(request: pytest.FixtureRequest, test: Callable[..., Any]) -> list[TalosNode]:
    """The nodes a module fixture reads (or runs ``test``'s check on) all at once: those
    :func:`nodes_checked_by` names; none under pytest-xdist, where each test reads its own
    node (which nodes a worker gets is not known beforehand: each would read them all)."""
    if is_worker(request.config):
        return []
    return nodes_checked_by(request, test, request.getfixturevalue("talos_cluster"))


def values_at_once(
    request: pytest.FixtureRequest,
    test: Callable[..., Any],
    read: Callable[[TalosNode], T],
    *,
    max_age: float = READ_MAX_AGE,
) -> FanOut[Gated[T]]:
    """For a module fixture: ``read`` of every node ``test`` checks, all at once, by the
    first of its tests, which then judges its node's read itself (say, so that the warnings
    its verdict raises are its own). A read begun before a change of the run's is not used:
    the test reads its node again."""
    cluster: TalosCluster = request.getfixturevalue("talos_cluster")
    nodes = nodes_at_once(request, test)
    return gated_fanout(nodes, read, cluster.client.change_gate, max_age=max_age)


def checked_at_once(
    request: pytest.FixtureRequest,
    test: Callable[..., Any],
    check: ReadCheck,
    *,
    max_age: float = READ_MAX_AGE,
) -> FanOut[CheckedRead]:
    """For a module fixture: the read-only ``check`` run on every node ``test`` checks, all
    at once, by the first of its tests (see :mod:`conformance._support.fanout`); each test
    delivers its node's run. A run begun before a change of the run's is not used (the
    test runs the check itself). Under pytest-xdist each test runs its own node's check
    (which nodes a worker gets is not known beforehand: each would read them all)."""
    cluster: TalosCluster = request.getfixturevalue("talos_cluster")
    return checked_fanout(
        nodes_at_once(request, test),
        check,
        marked_check(test).id,
        cluster.client.change_gate,
        max_age=max_age,
    )


def read_at_once(
    test_name: str, check: Callable[..., None], doc: str, uses: tuple[str, ...] = ()
) -> Any:
    """A module fixture (assign it to the name the test asks for) of :func:`checked_at_once`
    for the module's test ``test_name``. ``check`` is a :data:`ReadCheck` once given, by
    keyword, the fixtures named in ``uses`` (session or module scoped ones: the fan-out
    outlives a test)."""

    def reads(request: pytest.FixtureRequest) -> FanOut[CheckedRead]:
        bound = {name: request.getfixturevalue(name) for name in uses}
        body: ReadCheck = partial(check, **bound) if bound else check
        return checked_at_once(request, getattr(request.module, test_name), body)

    reads.__doc__ = doc
    return pytest.fixture(scope="module")(reads)


def node_runs(
    request: pytest.FixtureRequest,
    test: Callable[..., Any],
    check: NodeCheck[T],
    label: str,
    cases: tuple[str, ...] = ("",),
) -> Iterator[NodeRuns[T]]:
    """For a module fixture: ``check`` run on every node ``test`` checks, all at once (see
    :mod:`conformance._support.node_runs`), each node's ``cases`` in turn; stopped, and the
    nodes restored, at its end. Under pytest-xdist each test runs its own node's check
    (which nodes a worker gets is not known beforehand)."""
    cluster: TalosCluster = request.getfixturevalue("talos_cluster")
    runs = NodeRuns(
        nodes_at_once(request, test),
        check,
        request.getfixturevalue("talos_guarded"),
        label=label,
        check_id=marked_check(test).id,
        cases=cases,
        announce=partial(progress, request.config),
    )
    try:
        yield runs
    finally:
        # A Ctrl-C now waits (and is then re-raised): the threads are restoring their nodes.
        with SignalShield(runs.running):
            left = runs.close(cluster.client.timeout + 2 * CANCEL_CHECK)
        if left:
            progress(
                request.config,
                f"conformance: {label} still runs on {', '.join(left)}; the run restores "
                "those nodes at its end",
            )
