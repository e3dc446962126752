"""``--talos-record-profile PATH``: a vendor profile recorded from the emulated cluster passes
``--talos-suite=vendor-image`` on the cluster it was recorded from (container and metal) and
fails on one that differs; every entry says where it was read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_talos.plugin.conformance.vendor_profile import load_vendor_profile

REPO = Path(__file__).resolve().parents[2]
FAST = ("--talos-emulator", "--talos-emulator-time-scale", "20", "-p", "no:cacheprovider")
# What the recorder records on the emulator, and the vendor check that judges each.
JUDGED = {
    "vendor.talos-version": ("talos", "version"),
    "vendor.kubernetes-version": ("kubernetes", "version"),
    "vendor.platform": ("platform",),
    "vendor.expected-ports": ("ports", "expected"),
    "vendor.image-verification": ("image_verification", "required"),
}

pytestmark = pytest.mark.slow


def _suite(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TALOS", "PYTEST"))}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "conformance"), *FAST, "-q", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _record(tmp_path: Path, name: str, *variant: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    done = _suite(tmp_path, "--talos-record-profile", str(path), *variant)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"recorded the vendor profile {path}" in done.stdout + done.stderr
    load_vendor_profile(path)  # the format --talos-profile reads
    return path


def _accept(tmp_path: Path, profile: Path, *variant: str) -> list[dict[str, Any]]:
    report = tmp_path / f"report-{profile.stem}-{len(list(tmp_path.iterdir()))}"
    _suite(
        tmp_path,
        "--talos-suite=vendor-image",
        "--talos-profile",
        str(profile),
        "--talos-report",
        str(report),
        *variant,
    )
    checks: list[dict[str, Any]] = json.loads((report / "results.json").read_text())["checks"]
    return checks


def _outcomes(checks: Sequence[dict[str, Any]], check_id: str) -> set[str]:
    return {c["outcome"] for c in checks if c["id"] == check_id}


def _failed(checks: Sequence[dict[str, Any]]) -> set[str]:
    return {c["id"] for c in checks if c["outcome"] in ("failed", "error")}


def _dig(document: Any, path: Sequence[str]) -> Any:
    for key in path:
        document = document[key]
    return document


def test_every_entry_says_where_it_was_read(tmp_path: Path) -> None:
    profile = _record(tmp_path, "container")
    text = profile.read_text()
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and not line.endswith(":"):
            assert " # " in line, line  # a value without its source
    recorded = yaml.safe_load(text)
    for path in JUDGED.values():
        assert _dig(recorded, path) is not None, path
    assert recorded["talos"]["version"] == "v1.13.9"
    assert recorded["platform"] == "container"
    assert "kernel" not in recorded  # a container node runs the host's kernel
    assert "# kernel not recorded" in text


@pytest.mark.parametrize("variant", [(), ("--talos-emulator-variant", "metal")], ids=str)
def test_the_recorded_profile_passes_where_it_was_recorded(
    tmp_path: Path, variant: tuple[str, ...]
) -> None:
    profile = _record(tmp_path, "golden", *variant)
    checks = _accept(tmp_path, profile, *variant)
    assert not _failed(checks), [c for c in checks if c["id"] in _failed(checks)]
    judged = list(JUDGED)
    if "kernel" in yaml.safe_load(profile.read_text()):  # where the node shows its kernel
        judged += ["vendor.kernel-version", "vendor.kernel-args"]
    for check_id in judged:  # each recorded fact was judged, not skipped
        assert _outcomes(checks, check_id) == {"passed"}, check_id


def test_the_recorded_profile_fails_a_node_that_differs(tmp_path: Path) -> None:
    with_extensions = _record(tmp_path, "extensions", "--talos-emulator-variant", "extensions")
    recorded = yaml.safe_load(with_extensions.read_text())
    assert sorted(recorded["extensions"]["required"]) == ["iscsi-tools", "qemu-guest-agent"]
    assert _failed(_accept(tmp_path, with_extensions)) == {"vendor.required-extensions"}
    metal = _record(tmp_path, "metal", "--talos-emulator-variant", "metal")
    assert "vendor.platform" in _failed(_accept(tmp_path, metal))
