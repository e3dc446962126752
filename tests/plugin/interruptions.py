"""Real interruptions of real runs: an emulator from its CLI, a pytest run in a subprocess,
signals sent at chosen points, then the node's config bytes compared over the API.

Nothing here calls a signal handler: the inner run is a separate ``pytest`` process that gets
SIGINT, SIGTERM or SIGKILL from outside, the way a person, ``timeout`` or a CI runner sends
them. The only help the inner run gets is a conftest that drops marker files when a change
was applied and when a restore starts (and can slow the restore down, so that a second
signal lands inside it).

``python -m tests.plugin.interruptions --rounds N`` runs every scenario N times and prints
how many runs ended with the node's config bytes equal to those before.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pytest_talos.client import TalosClient

REPO = Path(__file__).resolve().parents[2]
WORKER = "talos-default-worker-1"
QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")

CONFTEST = """
import os, pathlib, time
import pytest
import pytest_talos.guard as guard
import pytest_talos.guard.snapshot as snapshot

MARKS = pathlib.Path(os.environ["TALOS_TEST_MARKS"])
DELAY = float(os.environ.get("TALOS_TEST_RESTORE_DELAY", "0"))


def mark(name):
    (MARKS / name).write_text(str(os.getpid()))


_apply = guard.RecordingClient.apply_configuration
_restore_apply = snapshot.apply_original


def applied(self, *args, **kwargs):
    reply = _apply(self, *args, **kwargs)
    mark("applied")
    return reply


def restoring(client, raw, mode):
    mark("restoring")
    time.sleep(DELAY)
    return _restore_apply(client, raw, mode)


guard.RecordingClient.apply_configuration = applied
snapshot.apply_original = restoring
"""

TESTS = """
import os, time
import pytest
from pytest_talos.checks import assert_service_healthy_after_patch

POINT = os.environ.get("TALOS_TEST_POINT", "after-change")
PATCH = {"machine": {"nodeLabels": {"interrupted": "yes"}}}


@pytest.mark.talos_mutating
@pytest.mark.talos_role("worker")
def test_change(talos_node):
    if POINT == "before-change":
        (__import__("pathlib").Path(os.environ["TALOS_TEST_MARKS"]) / "ready").write_text("")
        time.sleep(120)
    if POINT == "try-window":
        talos_node.apply_patch(PATCH, mode="try", try_timeout=3600)  # 3 min at 20x
    elif POINT == "check-wait":
        assert_service_healthy_after_patch(talos_node, PATCH, stable_for=120, timeout=300)
    else:
        talos_node.apply_patch(PATCH)
    assert b"interrupted" in talos_node.machine_config.raw
    if POINT != "pass":
        time.sleep(120)
"""

XDIST_TESTS = """
import time
import pytest
from pytest_talos.checks import (
    assert_config_unchanged_after_rejection,
    assert_service_healthy_after_patch,
    assert_try_reverts,
)

LABEL = "xdist-owner"


@pytest.mark.talos_mutating
@pytest.mark.talos_role("worker")
@pytest.mark.parametrize("n", range({count}))
def test_exclusive_change(talos_node, n):
    talos_node.apply_patch({{"machine": {{"nodeLabels": {{LABEL: f"t{{n}}"}}}}}})
    for _ in range(3):
        raw = talos_node.machine_config.raw.decode()
        owners = [line.strip() for line in raw.splitlines() if LABEL in line]
        assert owners == [f"{{LABEL}}: t{{n}}"], owners  # nobody else's change is live
        time.sleep(0.05)


# The mutating checks, mixed in: each changes the worker through the same guard and lock.
@pytest.mark.talos_mutating
@pytest.mark.talos_role("worker")
def test_check_rejection(talos_node):
    assert_config_unchanged_after_rejection(
        talos_node, {{"machine": {{"nodeLabels": {{"bad label": "x"}}}}}})


@pytest.mark.talos_mutating
@pytest.mark.talos_role("worker")
def test_check_try_reverts(talos_node):
    assert_try_reverts(talos_node, {{"machine": {{"nodeLabels": {{LABEL: "try"}}}}}},
                       try_timeout=20)


@pytest.mark.talos_mutating
@pytest.mark.talos_role("worker")
def test_check_kubelet_healthy(talos_node):
    assert_service_healthy_after_patch(
        talos_node, {{"machine": {{"nodeLabels": {{LABEL: "svc"}}}}}}, stable_for=1)
"""
XDIST_CHECKS = 3  # tests besides the ``count`` exclusive changes


# --------------------------------------------------------------------------- the emulator


@dataclass
class Emulator:
    """``python -m pytest_talos.emulator`` in the background; nodes from its output."""

    directory: Path
    process: subprocess.Popen[str] = field(repr=False)
    talosconfig: Path
    nodes: dict[str, str]  # hostname -> address
    stderr_path: Path

    @property
    def endpoint(self) -> str:
        return next(a for h, a in self.nodes.items() if "controlplane" in h) + ":50000"

    def config(self, hostname: str = WORKER) -> bytes:
        with TalosClient.from_talosconfig(
            self.talosconfig, endpoint=self.endpoint, node=self.nodes[hostname]
        ) as client:
            return client.machine_config().raw

    def apply(self, raw: bytes, hostname: str = WORKER) -> None:
        with TalosClient.from_talosconfig(
            self.talosconfig, endpoint=self.endpoint, node=self.nodes[hostname]
        ) as client:
            client.apply_configuration(raw, "no-reboot")

    def stderr(self) -> str:
        return self.stderr_path.read_text()


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TALOS", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


@contextmanager
def emulator(directory: Path, time_scale: float = 20.0) -> Iterator[Emulator]:
    talosconfig = directory / "talosconfig"
    stderr_path = directory / "emulator.stderr"
    with stderr_path.open("w") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest_talos.emulator",
                "--talosconfig",
                str(talosconfig),
                "--time-scale",
                str(time_scale),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=child_env(HOME=str(directory)),
        )
    nodes: dict[str, str] = {}
    try:
        assert process.stdout is not None
        while len(nodes) < 2:
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"the emulator exited: {stderr_path.read_text()}")
            hostname, _, address = line.split()
            nodes[hostname] = address.rsplit(":", 1)[0]
        yield Emulator(directory, process, talosconfig, nodes, stderr_path)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --------------------------------------------------------------------------- inner runs


@dataclass
class Outcome:
    scenario: str
    returncode: int
    output: str
    before: bytes = field(repr=False)
    after: bytes = field(repr=False)
    journals: list[Path] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.before == self.after


class Run:
    """One inner pytest run against the emulator, with its own marks and state dirs."""

    def __init__(
        self,
        emu: Emulator,
        work: Path,
        *,
        point: str = "after-change",
        restore_delay: float = 0.0,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.emu = emu
        self.work = work
        self.marks = work / "marks"
        self.state = work / "state"
        self.marks.mkdir(parents=True, exist_ok=True)
        (work / "conftest.py").write_text(CONFTEST)
        (work / "test_change.py").write_text(TESTS)
        self.env = child_env(
            HOME=str(work),
            TALOS_TEST_MARKS=str(self.marks),
            TALOS_TEST_POINT=point,
            TALOS_TEST_RESTORE_DELAY=str(restore_delay),
        )
        self.args = [
            sys.executable,
            "-m",
            "pytest",
            str(work),
            *QUIET,
            "-q",
            "-s",
            f"--talosconfig={emu.talosconfig}",
            f"--talos-endpoint={emu.endpoint}",
            "--talos-allow",
            "mutating",
            f"--talos-state-dir={self.state}",
            *extra,
        ]
        self.process: subprocess.Popen[str] | None = None
        self.result: tuple[int, str] | None = None
        self.after_output = ""

    def start(self, *, group: bool = False) -> Run:
        """Start the run (``group``: in a process group of its own, signalled as a whole)."""
        self.process = subprocess.Popen(
            self.args,
            cwd=self.work,
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=group,
        )
        return self

    def signal_group(self, signum: int) -> None:
        """As a terminal's Ctrl-C or a CI runner does: every process of the run gets it."""
        assert self.process is not None
        os.killpg(self.process.pid, signum)

    def wait_mark(self, name: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        assert self.process is not None
        while not (self.marks / name).exists():
            if self.process.poll() is not None:
                raise AssertionError(f"the run ended before {name!r}: {self.finish()[1]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {name!r} mark within {timeout}s")
            time.sleep(0.02)

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def finish(self, timeout: float = 120.0) -> tuple[int, str]:
        assert self.process is not None
        if self.result is None:
            output, _ = self.process.communicate(timeout=timeout)
            self.result = (self.process.returncode, output)
        return self.result

    def journals(self) -> list[Path]:
        return sorted((self.state / "journal").glob("*.json"))


def _run(emu: Emulator, name: str, act: Callable[[Run], None], **options: object) -> Outcome:
    before = emu.config()
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as work:
        run = Run(emu, Path(work), **options).start()  # type: ignore[arg-type]
        act(run)
        code, output = run.finish()
        journals = run.journals()
        after = emu.config()
        return Outcome(name, code, output + run.after_output, before, after, journals)


# --------------------------------------------------------------------------- scenarios


def sigint_once(emu: Emulator, point: str) -> Outcome:
    def act(run: Run) -> None:
        run.wait_mark("ready" if point == "before-change" else "applied")
        time.sleep(0.5 if point == "check-wait" else 0.1)
        run.signal(signal.SIGINT)

    return _run(emu, f"sigint-{point}", act, point=point)


def sigint_twice(emu: Emulator, point: str) -> Outcome:
    """One Ctrl-C stops the test; two more land while the (slowed) restore runs.

    The two are a second apart, well inside the 3 s restore: the kernel keeps one pending
    SIGINT, not a count, so two sent while a loaded machine has not scheduled the run since
    are handled as one (seen with 0.3 s between them on 2 busy CPUs).
    """

    def act(run: Run) -> None:
        if point != "pass":
            run.wait_mark("applied")
            run.signal(signal.SIGINT)
        run.wait_mark("restoring")
        for _ in range(2):
            run.signal(signal.SIGINT)
            time.sleep(1.0)

    return _run(emu, f"sigint-twice-{point}", act, point=point, restore_delay=3.0)


def sigterm(emu: Emulator, point: str) -> Outcome:
    def act(run: Run) -> None:
        run.wait_mark("applied")
        time.sleep(0.1)
        run.signal(signal.SIGTERM)
        if point == "then-sigint":
            run.wait_mark("restoring")
            run.signal(signal.SIGTERM)
            run.signal(signal.SIGINT)

    test_point = "after-change" if point == "then-sigint" else point
    delay = 1.5 if point == "then-sigint" else 0.0
    return _run(emu, f"sigterm-{point}", act, point=test_point, restore_delay=delay)


def sigkill_then_recover(emu: Emulator, point: str, how: str) -> Outcome:
    """SIGKILL mid-change, then recovery: talos-recover, pytest --talos-recover or a next run."""

    def act(run: Run) -> None:
        run.wait_mark("applied")
        if point == "mid-restore":
            run.signal(signal.SIGINT)
            run.wait_mark("restoring")
        time.sleep(0.1)
        run.signal(signal.SIGKILL)
        run.finish()
        assert run.journals(), "SIGKILL left no journal"
        if how == "command":
            cmd = [sys.executable, "-m", "pytest_talos.recover", f"--state-dir={run.state}"]
        elif how == "pytest":
            cmd = [
                sys.executable,
                "-m",
                "pytest",
                *QUIET,
                "--talos-recover",
                f"--talos-state-dir={run.state}",
            ]
        else:  # the next run, allowed to change nodes
            (run.work / "test_change.py").write_text("def test_nothing():\n    pass\n")
            cmd = [*run.args]
        done = subprocess.run(
            cmd, cwd=run.work, env=run.env, text=True, capture_output=True, timeout=120, check=False
        )
        run.after_output = done.stdout + done.stderr
        assert done.returncode == 0, run.after_output

    test_point = "after-change" if point == "mid-restore" else point
    delay = 3.0 if point == "mid-restore" else 0.0
    return _run(emu, f"sigkill-{point}-{how}", act, point=test_point, restore_delay=delay)


def xdist(emu: Emulator, workers: int, tests: int = 8) -> Outcome:
    before = emu.config()
    with tempfile.TemporaryDirectory(prefix=f"xdist{workers}-") as work:
        run = Run(emu, Path(work), extra=("-n", str(workers), "-p", "xdist"))
        (run.work / "test_change.py").write_text(XDIST_TESTS.format(count=tests))
        done = subprocess.run(
            run.args,
            cwd=run.work,
            env=run.env,
            text=True,
            capture_output=True,
            timeout=300,
            check=False,
        )
        return Outcome(
            f"xdist-n{workers}",
            done.returncode,
            done.stdout + done.stderr,
            before,
            emu.config(),
            run.journals(),
        )


def xdist_signal(emu: Emulator, signum: int, workers: int = 2) -> Outcome:
    """-n 2, a worker mid-change, and the signal to the whole process group."""
    before = emu.config()
    with tempfile.TemporaryDirectory(prefix=f"xdist{workers}-signal-") as work:
        run = Run(emu, Path(work), extra=("-n", str(workers), "-p", "xdist"))
        run.start(group=True)
        run.wait_mark("applied")
        time.sleep(0.2)
        run.signal_group(signum)
        code, output = run.finish()
        name = f"xdist-n{workers}-{signal.Signals(signum).name}"
        return Outcome(name, code, output, before, emu.config(), run.journals())


SCENARIOS: dict[str, Callable[[Emulator], Outcome]] = {
    "SIGINT once": lambda e: sigint_once(e, "after-change"),
    "SIGINT once (before any change)": lambda e: sigint_once(e, "before-change"),
    "SIGINT once (try-mode window)": lambda e: sigint_once(e, "try-window"),
    "SIGINT once (inside a check's wait)": lambda e: sigint_once(e, "check-wait"),
    "SIGINT twice": lambda e: sigint_twice(e, "after-change"),
    "SIGINT twice (try-mode window)": lambda e: sigint_twice(e, "try-window"),
    "SIGINT during a normal restore": lambda e: sigint_twice(e, "pass"),
    "SIGTERM": lambda e: sigterm(e, "after-change"),
    "SIGTERM (try-mode window)": lambda e: sigterm(e, "try-window"),
    "SIGTERM, then SIGTERM+SIGINT in the restore": lambda e: sigterm(e, "then-sigint"),
    "SIGKILL + talos-recover": lambda e: sigkill_then_recover(e, "after-change", "command"),
    "SIGKILL + pytest --talos-recover": lambda e: sigkill_then_recover(e, "after-change", "pytest"),
    "SIGKILL + next run": lambda e: sigkill_then_recover(e, "after-change", "next-run"),
    "SIGKILL in try window + talos-recover": lambda e: sigkill_then_recover(
        e, "try-window", "command"
    ),
    "SIGKILL mid-restore + talos-recover": lambda e: sigkill_then_recover(
        e, "mid-restore", "command"
    ),
    "-n 2": lambda e: xdist(e, 2),
    "-n 4": lambda e: xdist(e, 4),
    "-n 2 + Ctrl-C to the process group": lambda e: xdist_signal(e, signal.SIGINT),
    "-n 2 + SIGTERM to the process group": lambda e: xdist_signal(e, signal.SIGTERM),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    tally: dict[str, list[bool]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="emulator-") as directory,
        emulator(Path(directory)) as emu,
    ):
        for _ in range(args.rounds):
            for name, scenario in SCENARIOS.items():
                if args.only and not any(o in name for o in args.only):
                    continue
                try:
                    outcome = scenario(emu)
                    ok = outcome.same and not outcome.journals and outcome.returncode in (0, 2, -9)
                except Exception as exc:  # report and go on
                    print(f"{name}: ERROR {exc}", flush=True)
                    ok = False
                else:
                    if not ok:
                        print(
                            f"{name}: exit {outcome.returncode}, same bytes {outcome.same}, "
                            f"journals {outcome.journals}\n{outcome.output[-4000:]}"
                        )
                tally.setdefault(name, []).append(ok)
                print(f"{name}: {'same bytes' if ok else 'DIFFERENT'}", flush=True)
        spam = [line for line in emu.stderr().splitlines() if line.strip()]
    print("\nscenario: runs, config bytes after == before (and no journal left)")
    for name, results in tally.items():
        print(f"  {name}: {len(results)} runs, {sum(results)} same")
    print(f"emulator stderr lines: {len(spam)}")
    return 0 if all(all(r) for r in tally.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
