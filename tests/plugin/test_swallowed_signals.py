"""A SIGTERM or a Ctrl-C whose exception Python swallowed still stops the run.

A signal handler's exception is raised in whatever Python code the main thread runs at that
moment. In a weakref callback or a ``__del__`` Python prints "Exception ignored in ..." and
goes on: the run went on to its end and could report PASSED. The plugin remembers the
signal and stops the run once the test it came in has ended (safety.RunSafety)."""

from __future__ import annotations

import pytest

from tests.plugin.conftest import PLUGIN_ARGS

SWALLOWING = """
import os, signal, time

def test_the_signal_is_swallowed():
    try:
        os.kill(os.getpid(), signal.{name})
        time.sleep(2)
    except BaseException:  # as a weakref callback or a __del__ would
        pass

def test_never_run():
    pass
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_swallowed_signal_still_interrupts_the_run(pytester: pytest.Pytester, name: str) -> None:
    pytester.makepyfile(test_swallowing=SWALLOWING.format(name=name))
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", timeout=60)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.no_fnmatch_line("*test_never_run PASSED*")
    result.assert_outcomes(passed=1)  # the swallowing test itself; the next never ran


def test_a_run_with_no_signal_is_not_stopped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-p", "no:cacheprovider", timeout=60)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=2)
