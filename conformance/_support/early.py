"""Waits that start with the run, not with the check that needs them.

Two checks wait for something that does not depend on what ran before them: the Kubernetes
Ready watch (``kubernetes.node-ready`` watches every node's Ready condition over the
observation window) and the expired certificate of ``api.expired-cert-refused`` (minted with
a one-second TTL, then waited out). Started by the run's first check, they overlap with the
other checks instead of adding their waits to the run:

* the expired certificate is minted and waited for on a thread of its own, whenever the
  check is selected (minting changes nothing on a node);
* the Ready watches start for every node the Ready check runs on, each once its Node is
  Ready (as the check itself waits first), but only in a run whose selected checks change
  nothing: a check that reboots a node would make Ready move inside a watch that began
  before it. Otherwise the check starts them itself, as before.

Each check still judges exactly what it judged: the same calls, the same window length.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from conformance._support import probes
from conformance._support.context import Timing
from conformance.kubernetes.ready_watch import READY_SETTLE, ReadyWatches
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.errors import TalosError
from pytest_talos.plugin.conformance import check_spec
from pytest_talos.plugin.conformance.settings import SuiteSettings
from pytest_talos.plugin.items import changes_level

__all__ = ["READY_TEST", "Expired", "ready_targets"]

READY_TEST = "test_node_is_ready_in_kubernetes"
EXPIRED_FIXTURE = "expired_credentials"
Expired = tuple[bytes, bytes, str] | str  # (certificate, key, what it is), or why there is none

_STARTED = pytest.StashKey[bool]()


def _selected(session: pytest.Session) -> list[pytest.Item]:
    return [item for item in session.items if item.get_closest_marker("skip") is None]


def ready_targets(session: pytest.Session, cluster: TalosCluster) -> list[str]:
    """The Kubernetes names of every node the Ready check runs on in this session (the
    nodenames; nodes that register no Node are left out)."""
    names = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "originalname", "") == READY_TEST and callspec:
            with contextlib.suppress(KeyError, TalosError):
                found = cluster.node(str(callspec.params["talos_node"])).kubernetes_registration
                if found.registered:
                    names.append(found.name)
    return names


def _expired(cluster: TalosCluster) -> Expired:
    try:
        return probes.expired_credentials(cluster.controlplane_client())
    except TalosError as exc:
        return f"no expired certificate: GenerateClientConfiguration failed ({exc})"


@pytest.fixture(scope="session")
def talos_expired_credentials(talos_cluster: TalosCluster) -> Future[Expired]:
    """The expired os:reader certificate, minted and waited out on a thread of its own."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="talos-expired-cert")
    try:
        return pool.submit(_expired, talos_cluster)
    finally:
        pool.shutdown(wait=False)


@pytest.fixture(scope="session")
def talos_ready_watches(
    talos_kubernetes: KubernetesAccess, talos_timing: Timing, talos_suite: SuiteSettings
) -> Iterator[ReadyWatches]:
    """The run's Ready watches, one per node, each begun once its Node is Ready."""
    watches = ReadyWatches(talos_kubernetes, talos_timing, talos_suite.observe, READY_SETTLE)
    yield watches
    watches.close()


@pytest.fixture(autouse=True)
def _early_waits(request: pytest.FixtureRequest) -> None:
    """With the run's first check: start the waits the selected checks will need."""
    stash = request.config.stash
    if _STARTED in stash or check_spec(request.node) is None:
        return
    if "talos_cluster" not in request.fixturenames:
        return  # a check without a cluster: the next one starts them
    stash[_STARTED] = True
    selected = _selected(request.session)
    if any(EXPIRED_FIXTURE in getattr(item, "fixturenames", ()) for item in selected):
        request.getfixturevalue("talos_expired_credentials")
    ready = [item for item in selected if getattr(item, "originalname", "") == READY_TEST]
    if ready and all(changes_level(item) is None for item in selected):
        _start_ready_watches(request)


def _start_ready_watches(request: pytest.FixtureRequest) -> None:
    cluster: TalosCluster = request.getfixturevalue("talos_cluster")
    try:
        watches: ReadyWatches = request.getfixturevalue("talos_ready_watches")
    except (pytest.skip.Exception, pytest.fail.Exception, TalosError):
        # no Kubernetes access: the Ready check says why, in its own test (not the run's
        # first check, whose setup this is)
        return
    watches.start(ready_targets(request.session, cluster))
