"""Fixtures shared by every test of the kit itself."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

pytest_plugins = ["pytester"]

# A test that hangs (a socket nobody answers, an emulator that never stops) fails after this
# long: several times the slowest test's time (44 s) on a loaded 2-core machine. A test or
# module with its own timeout mark (the fault matrix) keeps it.
TEST_TIMEOUT = 300.0


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Under xdist, the tests of one file share a worker (--dist loadfile), so a module
    # fixture such as the fault matrix's dozens of suite runs runs once, not once per worker.
    # (loadgroup would do it per group, but pytest-xdist 3.8 sets Item._nodeid, which
    # pytest 9 no longer reads: the groups are lost.) An explicit --dist is kept.
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadfile"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a CPU. Most tests wait (on suite runs in subprocesses, on the
    emulator's timers, on the fault matrix's runs): one worker a CPU leaves the CPUs half idle
    (measured: 445 CPU seconds in 433 s on 2 CPUs). At most 32: each worker collects and
    imports everything again."""
    return min(32, 2 * (os.cpu_count() or 1))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT, method="signal"))


# The kit keeps node locks, journals and its change log in a state directory (default under
# $XDG_STATE_HOME): the kit's own tests, and the suite runs they start, get a private one, so
# they neither read a developer's nor leave anything in the home directory.
_STATE_HOME = tempfile.mkdtemp(prefix="pytest-talos-tests-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME
atexit.register(shutil.rmtree, _STATE_HOME, True)


# The tests start about 150 Python processes (suite runs, the fault matrix, CLI runs), each
# importing some 300 modules of the kit. Where bytecode caching is off
# (PYTHONDONTWRITEBYTECODE), each would compile them all again: seconds of CPU a process,
# minutes a run. They cache it in a private directory of the user's cache instead (never in
# the tree, which is why one turns the cache off); Python checks each entry against its source.
def _private_bytecode_cache() -> None:
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    if not hasattr(os, "getuid"):
        return  # no owner to check (Windows): leave the setting as it is
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    prefix = os.path.join(cache_home, "pytest-talos", "bytecode")
    try:
        os.makedirs(prefix, mode=0o700, exist_ok=True)
        info = os.stat(prefix)
    except OSError:
        return  # no cache then: slower, not wrong
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return  # someone else's or writable by others: bytecode from there is not trusted
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.dont_write_bytecode = False
    sys.pycache_prefix = prefix


_private_bytecode_cache()


@pytest.fixture(autouse=True)
def _no_talos_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's own talosconfig or TALOS_* settings must never leak into the kit's tests.
    # (Imported here, not at the top: the bytecode cache above is set up before this process
    # imports the kit.)
    from pytest_talos.plugin.environment import TALOS_ENVIRONMENT

    for name in TALOS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    # Each test its own state directory: a journal one test leaves on purpose (a node left
    # changed) must not turn up in the next test's run.
    monkeypatch.setenv("XDG_STATE_HOME", tempfile.mkdtemp(prefix="state-", dir=_STATE_HOME))


@pytest.fixture
def suite_markers(request: pytest.FixtureRequest) -> None:
    """For a test that imports a module of the conformance suite to call a check directly:
    the suite's markers, which only its own plugin registers, known to this run, so that
    ``--strict-markers`` lets the module's decorators through."""
    from pytest_talos.plugin.conformance import SUITE_MARKERS

    for line in SUITE_MARKERS:
        request.config.addinivalue_line("markers", line)
