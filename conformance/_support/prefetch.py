"""Read-only fan-outs begun with the run, not with their module's first test.

A per-node read-only check read at once (:mod:`conformance._support.fanout`) still begins
when its module does: the api checks' reads, then the immutability ones', then the
services', each a fleet's worth of round trips after the other. Against a remote fleet
those round trips, not the CPU, are the run's wall. So a check registers how its fan-out
is built (:func:`at_run_start`), and the run's first check begins every registered fan-out
of the selected checks (:func:`begin`), each on its own bounded pool of readers; the
module's fixture then takes the fan-out begun for it (:func:`begun`) instead of building
one.

Each check still judges what it judged: the same body reads the same node, only earlier,
and its fan-out's rules hold as they were: a read older than the fan-out's ``max_age``
when its test asks, or refused as not usable, is read again. Only in a run whose selected
checks change nothing (a read begun before a change of the run's could be served after
it), not under pytest-xdist (a worker does not know which nodes it gets). A fan-out whose
tests never ask (the run stopped early) has its reads not yet begun dropped at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance._support.fanout import FanOut
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance import is_worker, progress
from pytest_talos.plugin.items import changes_level, node_param

__all__ = ["Starter", "at_run_start", "begin", "begun", "end", "session_value"]

# How a check's fan-out is built at the run's start: the first check's request (for the
# session's fixtures), the check's test function and the nodes it runs on.
Starter = Callable[[pytest.FixtureRequest, Callable[..., Any], list[TalosNode]], FanOut[Any]]

_STARTERS: dict[str, Starter] = {}  # by test function name (unique in the suite)
_BEGUN = pytest.StashKey[dict[str, FanOut[Any]]]()
_VALUES = pytest.StashKey[dict[str, Any]]()


def at_run_start(test_name: str, starter: Starter) -> None:
    """Register how the fan-out of the per-node check ``test_name`` is built (at import of
    its module; one starter a test)."""
    known = _STARTERS.get(test_name)
    if known is not None and known is not starter:
        raise ValueError(f"two fan-outs registered for {test_name}")
    _STARTERS[test_name] = starter


def _selected(session: pytest.Session) -> list[pytest.Function]:
    return [
        item
        for item in session.items
        if isinstance(item, pytest.Function) and item.get_closest_marker("skip") is None
    ]


def _targets(selected: list[pytest.Function]) -> dict[str, tuple[Callable[..., Any], set[str]]]:
    """The registered checks among ``selected``, in run order: test function, node names."""
    found: dict[str, tuple[Callable[..., Any], set[str]]] = {}
    for item in selected:
        node = node_param(item)
        if item.originalname in _STARTERS and node is not None:
            found.setdefault(item.originalname, (item.function, set()))[1].add(node)
    return found


def begin(request: pytest.FixtureRequest) -> None:
    """With the run's first check: begin the registered fan-outs of the selected checks,
    in a run that changes nothing."""
    stash = request.config.stash
    if _BEGUN in stash:
        return
    stash[_BEGUN] = {}
    selected = _selected(request.session)
    if is_worker(request.config) or any(changes_level(item) is not None for item in selected):
        return
    targets = _targets(selected)
    if not targets:
        return
    cluster: TalosCluster = request.getfixturevalue("talos_cluster")
    for name, (test, names) in targets.items():
        nodes = [node for node in cluster.reachable if node.name in names]
        try:
            fanout = _STARTERS[name](request, test, nodes)
        except (pytest.skip.Exception, pytest.fail.Exception, TalosError):
            continue  # its module's fixture meets the same, in its own test
        fanout.begin()
        stash[_BEGUN][name] = fanout
    count = len(stash[_BEGUN])
    if count:
        progress(
            request.config,
            f"conformance: the reads of {count} read-only check{'' if count == 1 else 's'} "
            "begun on every node at once",
        )


def begun(request: pytest.FixtureRequest, test: Callable[..., Any]) -> FanOut[Any] | None:
    """The fan-out begun at the run's start for ``test``, taken (once), else None."""
    return request.config.stash.get(_BEGUN, {}).pop(test.__name__, None)


def end(config: pytest.Config) -> None:
    """At the run's end: drop the reads of fan-outs no test took."""
    for fanout in config.stash.get(_BEGUN, {}).values():
        fanout.abandon()


def session_value(request: pytest.FixtureRequest, key: str, make: Callable[[], Any]) -> Any:
    """``make()``'s value, made once a run: shared by a module's fixture and the starter
    of a fan-out begun before that module."""
    values = request.config.stash.setdefault(_VALUES, {})
    if key not in values:
        values[key] = make()
    return values[key]
