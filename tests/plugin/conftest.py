"""Fixtures for the plugin tests: pytester, a clean environment, and emulated clusters.

Inner pytest runs load the plugin the way an installed copy does (the ``pytest11`` entry
point); from an uninstalled checkout they get ``-p pytest_talos.plugin`` instead, and the
checkout on PYTHONPATH so that pytest-xdist workers find it too.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster

REPO = Path(__file__).resolve().parents[2]


def _installed() -> bool:
    return any(ep.name == "talos" for ep in importlib.metadata.entry_points(group="pytest11"))


PLUGIN_ARGS: tuple[str, ...] = () if _installed() else ("-p", "pytest_talos.plugin")
# Plugins the inner runs do not need; hypothesis alone costs seconds per session.
QUIET_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")


@pytest.fixture(autouse=True)
def _clean_talos_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer talosconfig may leak into an inner run (tests/conftest.py clears every
    TALOS_* setting)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # so ~/.talos/config is absent
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), path])))


@pytest.fixture
def run(pytester: pytest.Pytester) -> Callable[..., pytest.RunResult]:
    """``run(*args)``: an in-process inner pytest run with the plugin loaded."""

    def inner(*args: str) -> pytest.RunResult:
        # no_reraise_ctrlc: an inner KeyboardInterrupt (a test of it) must not stop this run.
        return pytester.runpytest_inprocess(
            *PLUGIN_ARGS, *QUIET_PLUGINS, *args, no_reraise_ctrlc=True
        )

    return inner


@pytest.fixture(scope="module")
def emulated() -> Iterator[EmulatedCluster]:
    """One control plane and one worker, shared by a module, as an outside cluster."""
    with EmulatedCluster(controlplanes=1, workers=1, time_scale=20.0) as cluster:
        yield cluster


def target_args(cluster: EmulatedCluster) -> tuple[str, ...]:
    """Options that point an inner run at ``cluster`` as if it were a real cluster.

    ``--talosconfig=PATH`` in one word: pytest picks its rootdir and ini file before plugins
    load, and would take a separate existing PATH for a test path there.
    """
    return (f"--talosconfig={cluster.talosconfig_path}", f"--talos-endpoint={cluster.endpoint}")


def active_config(cluster: EmulatedCluster, hostname: str) -> bytes:
    """The node's active machine config, read back over the API."""
    node = cluster.node(hostname)
    with TalosClient.from_talosconfig(cluster.talosconfig_path, node=node.address) as client:
        return client.machine_config().raw
