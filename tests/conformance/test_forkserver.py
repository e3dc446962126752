"""The suite-run fork server: a forked run behaves as a new ``python -m pytest`` process."""

from __future__ import annotations

import ast
import json
import os
import sys
import time
from pathlib import Path

import pytest

import pytest_talos
from tests.conformance import forkserver
from tests.conformance.suite_runner import plugin_args, subprocess_env

pytestmark = pytest.mark.skipif(
    not forkserver.usable(subprocess_env(None)), reason="the fork server is not used here"
)

PROBE = """
import atexit, json, os, sys

def test_probe():
    facts = {
        "cwd": os.getcwd(),
        "argv0": sys.argv[0],
        "path0": sys.path[0],
        "marker": os.environ.get("FORK_PROBE"),
        "pid": os.getpid(),
    }
    with open(os.environ["FORK_PROBE_OUT"], "w") as fh:
        json.dump(facts, fh)
    print("to stdout")
    sys.stderr.write("to stderr\\n")
    atexit.register(lambda: open(os.environ["FORK_PROBE_OUT"] + ".atexit", "w").close())
"""


def _probe_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = subprocess_env({"FORK_PROBE_OUT": str(tmp_path / "facts.json"), **extra})
    assert forkserver.usable(env)
    return env


def test_a_forked_run_has_the_runs_directory_environment_and_argv(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = _probe_env(tmp_path, FORK_PROBE="here")
    run = forkserver.run_forked(
        ["-p", "no:cacheprovider", "-s", "-q", "test_probe.py"], cwd=tmp_path, env=env, timeout=60
    )
    assert (run.returncode, run.timed_out) == (0, False), run.stdout + run.stderr
    facts = json.loads((tmp_path / "facts.json").read_text())
    assert facts["cwd"] == facts["path0"] == str(tmp_path)
    assert facts["argv0"].endswith(os.path.join("pytest", "__main__.py"))
    assert facts["marker"] == "here"
    assert facts["pid"] != os.getpid()
    assert "to stdout" in run.stdout
    assert "1 passed" in run.stdout
    assert "to stderr" in run.stderr
    assert "to stderr" not in run.stdout
    # The run counted as ended only once the process had: its atexit handlers had run.
    assert (tmp_path / "facts.json.atexit").exists()


def test_a_forked_run_reports_the_exit_status(tmp_path: Path) -> None:
    (tmp_path / "test_fails.py").write_text("def test_fails():\n    assert 1 == 2\n")
    env = _probe_env(tmp_path)
    run = forkserver.run_forked(
        ["-p", "no:cacheprovider", "-q", "test_fails.py"], cwd=tmp_path, env=env, timeout=60
    )
    assert (run.returncode, run.timed_out) == (1, False)
    assert "assert 1 == 2" in run.stdout  # pytest's own assertion rewriting, as in a process


def test_a_forked_run_past_its_deadline_is_killed(tmp_path: Path) -> None:
    (tmp_path / "test_sleeps.py").write_text(
        "import os, time\n\ndef test_sleeps():\n"
        "    open(os.environ['FORK_PROBE_OUT'], 'w').write(str(os.getpid()))\n"
        "    time.sleep(600)\n"
    )
    env = _probe_env(tmp_path)
    run = forkserver.run_forked(
        ["-p", "no:cacheprovider", "-q", "test_sleeps.py"], cwd=tmp_path, env=env, timeout=5
    )
    assert run.timed_out
    assert run.returncode < 0
    pid = int((tmp_path / "facts.json").read_text())
    assert _ends_within(pid, 10.0)  # the server's children are reaped by the kernel


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether the process is gone within ``seconds`` (its connection closes a moment
    before the kernel reaps it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_kits_asserts_are_invariants_only() -> None:
    """The server preloads the kit, so pytest cannot rewrite its asserts (forkserver's
    docstring): that changes no report only while each of them is an invariant, ``x is not
    None`` or ``isinstance(...)``, never a check's verdict."""

    others = []
    for path in Path(pytest_talos.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assert) and not _is_invariant(node.test):
                others.append(f"{path}:{node.lineno}")
    assert others == []


def _is_invariant(test: ast.expr) -> bool:
    if isinstance(test, ast.Compare):
        return [type(op) for op in test.ops] == [ast.IsNot] and (
            isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
        )
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "isinstance"
    )


def test_a_forked_run_gives_no_rewrite_warning_for_the_preloaded_kit(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    run = forkserver.run_forked(
        [*plugin_args(), "-p", "no:cacheprovider", "test_plain.py"],
        cwd=tmp_path,
        env=_probe_env(tmp_path),
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "cannot be rewritten" not in run.stdout + run.stderr
    assert "warning" not in run.stdout.lower()


def test_interpreter_settings_or_the_off_switch_mean_a_plain_subprocess() -> None:
    env = subprocess_env(None)
    assert forkserver.usable(env)
    assert not forkserver.usable({**env, "PYTHONHASHSEED": "12345"})
    assert not forkserver.usable({**env, "PYTHONPATH": sys.prefix})
    assert not forkserver.usable({**env, forkserver.OFF_SWITCH: "0"})
