"""Installable like the tools people use: the wheel carries the conformance suite and the
console scripts; ``talos-conformance`` runs the installed suite from any directory."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_talos.plugin.cli import suite_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*build, "-q", "-w", str(out), str(REPO)],
        check=True,
        timeout=300,
    )
    return next(out.glob("pytest_talos-*.whl"))


def _env(path: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TALOS", "PYTEST_ADDOPTS", "PYTEST_XDIST"))
    }
    env["PYTHONPATH"] = path
    return env


def test_the_wheel_ships_the_suite_and_the_scripts(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    assert "pytest_talos_conformance/conftest.py" in names
    assert "pytest_talos_conformance/_support/fixtures.py" in names
    assert "pytest_talos_conformance/immutability/test_immutability.py" in names
    assert "pytest_talos_conformance/profiles/example-vendor.yaml" in names
    assert not any("__pycache__" in n for n in names)
    for script in (
        "talos-conformance = pytest_talos.plugin.cli:conformance_main",
        "talos-emulator = pytest_talos.emulator.__main__:main",
        "talos-portscan = pytest_talos.ports:main",
        "talos-report = pytest_talos.reporting.cli:main",
    ):
        assert script in entry_points


def test_the_installed_suite_runs_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pytest_talos.plugin.cli import "
            "conformance_main; sys.exit(conformance_main())",
            "--talos-emulator",
            "--talos-emulator-time-scale",
            "20",
            "-q",
            "-k",
            "pid1",
        ],
        cwd=elsewhere,
        env=_env(str(site)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert "conformance: verdict PASSED (exit 0)" in done.stdout
    assert "PytestAssertRewriteWarning" not in done.stdout
    assert (elsewhere / ".pytest_cache").is_dir()
    pyargs = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "pytest_talos_conformance",
            "--talos-emulator",
            "--talos-emulator-time-scale",
            "20",
            "-q",
            "-k",
            "pid1",
            "-p",
            "no:cacheprovider",
        ],
        cwd=elsewhere,
        env=_env(str(site)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert pyargs.returncode == 0, pyargs.stdout + pyargs.stderr
    assert "2 passed" in pyargs.stdout


def test_a_checkout_finds_its_own_suite() -> None:
    found = suite_path()
    assert found is not None
    assert (found / "conftest.py").is_file()


def test_the_emulator_help_shows_talosconfig_as_required() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_talos.emulator", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith("usage: python -m pytest_talos.emulator --talosconfig PATH")
    assert "required: where to write the admin talosconfig" in done.stdout
