"""The installed user's path: the wheel, built from this checkout and installed in a fresh
venv, runs the commands README.md and docs/ give, from an empty directory.

No network: the wheel is built with the hatchling of this environment
(``--no-build-isolation``; hatchling is in the ``test`` extra) and installed without its
dependencies; the venv finds those (grpclib, pytest, pytest-xdist, ...) in this environment's
site-packages through a ``.pth`` file that lists the directories as plain paths, so that no
``.pth`` file in them runs (an editable install of the project there stays out). The venv's
own site-packages comes first: every check below asserts that ``pytest_talos`` and the suite
are imported from the venv's wheel, not from a checkout.
"""

from __future__ import annotations

import json
import os
import signal
import site
import subprocess
import sys
import sysconfig
import time
import venv
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAST = ("--talos-emulator-time-scale", "20")  # the emulated clock only; the checks are the same

pytestmark = pytest.mark.slow


class Installed:
    """A venv with the wheel installed and an empty working directory."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self.bin = root / "venv" / "bin"
        self.python = self.bin / "python"
        self.cwd = root / "empty"
        self.cwd.mkdir()

    def env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("TALOS", "PYTEST", "PYTHON", "VIRTUAL_ENV"))
        }
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(self, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """``argv`` with the venv's own scripts; ``pytest`` is the venv's ``python -m pytest``
        (pytest came from this environment without its script)."""
        command = [str(self.python), "-m", "pytest"] if argv[0] == "pytest" else [argv[0]]
        if (self.bin / argv[0]).exists():
            command = [str(self.bin / argv[0])]
        return subprocess.run(
            [*command, *argv[1:]],
            cwd=self.cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _this_environments_site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    found = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
    return [p for p in dict.fromkeys(found) if Path(p).is_dir()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("installed")
    out = root / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-q", "-w", str(out), str(REPO)], check=True, timeout=300)
    wheel = next(out.glob("pytest_talos-*.whl"))
    venv.EnvBuilder(with_pip=False).create(root / "venv")
    target = Installed(root, wheel)
    purelib = subprocess.run(
        [str(target.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    # The wheel first, into the empty venv: once the .pth below shows this environment's
    # packages, pip would take a pytest-talos installed here (tox installs one) as "already
    # satisfied" and install nothing.
    install = [sys.executable, "-m", "pip", "--python", str(target.python), "install"]
    wheel_only = ["--no-deps", "--no-index", "--ignore-installed", "-q", str(wheel)]
    subprocess.run([*install, *wheel_only], check=True, timeout=300)
    Path(purelib, "_this_environments_dependencies.pth").write_text(
        "\n".join(_this_environments_site_dirs()) + "\n"
    )
    return target


def _ok(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for text in expected:
        assert text in output, output
    assert "Traceback (most recent call last)" not in output, output
    return output


def test_the_venv_imports_the_wheel_not_a_checkout(installed: Installed) -> None:
    done = installed.run(
        "python",
        "-c",
        "import pytest_talos, pytest_talos_conformance, pytest_talos.plugin; "
        "print(pytest_talos.__file__); print(pytest_talos_conformance.__file__)",
    )
    for line in _ok(done).split():
        assert line.startswith(str(installed.root / "venv")), line


def test_the_wheel_depends_on_pytest_xdist_so_that_n_auto_works(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        metadata = next(
            archive.read(name).decode()
            for name in archive.namelist()
            if name.endswith(".dist-info/METADATA")
        )
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert any(
        line.startswith("Requires-Dist: pytest-xdist") and "extra ==" not in line
        for line in requires
    ), requires


def test_talos_conformance_runs_the_installed_suite(installed: Installed) -> None:
    """The fleet form: pytest-xdist workers (``-n``) and a shard's report, merged."""
    shard = ("--talos-shard", "1/1", "--talos-report", "shard-1")
    done = installed.run("talos-conformance", "--talos-emulator", *FAST, *shard, "-q", "-n", "2")
    _ok(done, "conformance: verdict PASSED (exit 0)", "bringing up nodes")
    assert not (installed.cwd / "conformance").exists()
    merged = installed.run("talos-report", "merge", "shard-1", "--out", "merged")
    _ok(merged, "merged report written")
    results = json.loads((installed.cwd / "merged" / "results.json").read_text())
    assert results["verdict"] == "PASSED"


def test_pytest_pyargs_takes_the_suite_options(installed: Installed) -> None:
    report = installed.cwd / "report"
    done = installed.run(
        "pytest",
        "--pyargs",
        "pytest_talos_conformance",
        "--talos-emulator",
        "--talos-suite",
        "quick",
        "--talos-report",
        str(report),
        *FAST,
        "-q",
        "-p",
        "no:cacheprovider",
    )
    _ok(done, "conformance: verdict PASSED (exit 0)")
    results = json.loads((report / "results.json").read_text())
    assert results["verdict"] == "PASSED"


@pytest.mark.parametrize(
    "command",
    [
        ("talos-conformance", "--talos-list-checks"),
        ("pytest", "--pyargs", "pytest_talos_conformance", "--talos-list-checks"),
        (
            "pytest",
            "--pyargs",
            "pytest_talos_conformance",
            "--talos-check",
            "immutability.pid1-is-machined",
            "--co",
        ),
    ],
    ids=["talos-conformance", "pytest-pyargs", "pyargs-talos-check"],
)
def test_the_suite_options_are_known_from_the_wheel(
    installed: Installed, command: Sequence[str]
) -> None:
    done = installed.run(*command, "-p", "no:cacheprovider")
    output = _ok(done)
    assert "immutability.pid1-is-machined" in output or "pid1" in output, output
    assert "unrecognized arguments" not in output


def test_talos_emulator_serves_and_the_installed_suite_reaches_it(installed: Installed) -> None:
    talosconfig = installed.cwd / "talosconfig"
    emulator = subprocess.Popen(
        [str(installed.bin / "talos-emulator"), "--talosconfig", str(talosconfig)],
        cwd=installed.cwd,
        env=installed.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert emulator.stdout is not None
        lines = [emulator.stdout.readline() for _ in range(2)]
        assert all(":50000" in line for line in lines), lines
        done = installed.run(
            "talos-conformance",
            "--talosconfig",
            str(talosconfig),
            "--talos-check",
            "immutability.pid1-is-machined",
        )
        _ok(done, "conformance: verdict PASSED (exit 0)")
    finally:
        emulator.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while emulator.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if emulator.poll() is None:
            emulator.kill()
        emulator.wait(10)
        if emulator.stdout is not None:
            emulator.stdout.close()
    assert emulator.returncode == 0


def test_a_run_that_names_no_suite_gets_no_suite_options(installed: Installed) -> None:
    """Anyone's own tests (``talos_node`` fixtures) keep the plugin's options only."""
    for command in (("pytest", "--help"), ("pytest", "--pyargs", "json", "--help")):
        output = _ok(installed.run(*command, "-p", "no:cacheprovider"))
        assert "--talosconfig" in output
        assert "--talos-suite" not in output
