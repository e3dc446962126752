"""``--talos-record-profile PATH``: a vendor profile recorded from the emulated cluster passes
``--talos-suite=vendor-image`` on the cluster it was recorded from (container and metal) and
fails on one that differs; every entry says where it was read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.emulator.node.host.system import FileEntry
from pytest_talos.emulator.node.state import NodeState
from pytest_talos.errors import ConfigError
from pytest_talos.plugin.conformance.vendor_profile import load_vendor_profile
from tests.conformance.suite_runner import run_suite, target_args

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
    checks: list[dict[str, Any]] = _accept_run(tmp_path, profile, *variant)["checks"]
    return checks


def _accept_run(tmp_path: Path, profile: Path, *variant: str) -> dict[str, Any]:
    """The vendor-image run's results.json."""
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
    results: dict[str, Any] = json.loads((report / "results.json").read_text())
    return results


def _outcomes(checks: Sequence[dict[str, Any]], check_id: str) -> set[str]:
    return {c["outcome"] for c in checks if c["id"] == check_id}


def _failed(checks: Sequence[dict[str, Any]]) -> set[str]:
    return {c["id"] for c in checks if c["outcome"] in ("failed", "error")}


def _dig(document: Any, path: Sequence[str]) -> Any:
    for key in path:
        document = document[key]
    return document


def test_extension_versions_must_be_strings(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_text("extensions:\n  versions:\n    iscsi-tools: 1.2\n")
    with pytest.raises(ConfigError, match=r"extensions\.versions\.iscsi-tools"):
        load_vendor_profile(path)
    path.write_text("extensions:\n  versions:\n    schematic: '3765'\n")
    assert load_vendor_profile(path).extensions_versions == (("schematic", "3765"),)


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
    results = _accept_run(tmp_path, profile, *variant)
    checks = results["checks"]
    assert not _failed(checks), [c for c in checks if c["id"] in _failed(checks)]
    # the whole verdict, not just no failure: every vendor check ran or was not applicable
    assert results["verdict"] == "PASSED", results.get("verdict_reasons")
    assert results["exit_code"] == 0
    judged = list(JUDGED)
    if "kernel" in yaml.safe_load(profile.read_text()):  # where the node shows its kernel
        judged += ["vendor.kernel-version", "vendor.kernel-args"]
    for check_id in judged:  # each recorded fact was judged, not skipped
        assert _outcomes(checks, check_id) == {"passed"}, check_id


def test_the_recorded_profile_fails_a_node_that_differs(tmp_path: Path) -> None:
    with_extensions = _record(tmp_path, "extensions", "--talos-emulator-variant", "extensions")
    recorded = yaml.safe_load(with_extensions.read_text())
    assert sorted(recorded["extensions"]["required"]) == ["iscsi-tools", "qemu-guest-agent"]
    assert recorded["extensions"]["versions"].keys() == {"iscsi-tools", "qemu-guest-agent"}
    assert _failed(_accept(tmp_path, with_extensions)) == {"vendor.required-extensions"}
    variant = ("--talos-emulator-variant", "extensions")
    checks = _accept(tmp_path, with_extensions, *variant)
    assert not _failed(checks)
    assert _outcomes(checks, "vendor.required-extensions") == {"passed"}
    # a new image whose iscsi-tools is another build: the recorded version no longer matches
    other = tmp_path / "other-build.yaml"
    text = with_extensions.read_text()
    recorded_version = recorded["extensions"]["versions"]["iscsi-tools"]
    other.write_text(text.replace(f"iscsi-tools: {recorded_version}", "iscsi-tools: v0.0.1"))
    checks = _accept(tmp_path, other, *variant)
    assert _failed(checks) == {"vendor.required-extensions"}
    failure = next(c for c in checks if c["outcome"] == "failed")
    assert "another version" in failure["message"], failure
    metal = _record(tmp_path, "metal", "--talos-emulator-variant", "metal")
    assert "vendor.platform" in _failed(_accept(tmp_path, metal))


def test_a_metal_node_that_shows_its_kernel_gets_it_recorded_and_judged(tmp_path: Path) -> None:
    """Kernel facts where the node serves /proc/version and /proc/cmdline (a metal node):
    recorded, passed on that node, and failed once the node boots with another cmdline."""
    kernel = "Linux version 6.18.24-talos (root@buildkitsandbox) (gcc 14.2.0) #1 SMP\n"
    cmdline = "talos.platform=metal console=ttyS0 init_on_alloc=1 slab_nomerge pti=on\n"

    def serve(text: str, path: str) -> Callable[[NodeState], None]:
        def put(state: NodeState) -> None:
            state.rootfs[path] = FileEntry(path, "file", 0o444, text.encode())

        return put

    with EmulatedCluster(1, 1, platform="metal", time_scale=20) as cluster:
        for node in cluster.nodes:
            cluster.node(node.hostname).run(serve(kernel, "/proc/version"))
            cluster.node(node.hostname).run(serve(cmdline, "/proc/cmdline"))
        profile = tmp_path / "metal.yaml"
        done = run_suite(
            [*target_args(cluster), "--talos-record-profile", str(profile)],
            tmp_path / "unused",
        )
        assert done.returncode == 0, done.describe()
        recorded = yaml.safe_load(profile.read_text())
        assert recorded["kernel"]["version"] == "6.18.24-talos"
        assert recorded["kernel"]["args"]["present"] == sorted(cmdline.split())
        vendor = ["--talos-suite=vendor-image", "--talos-profile", str(profile)]
        accepted = run_suite([*target_args(cluster), *vendor], tmp_path / "accepted")
        assert not accepted.broken(), accepted.describe()
        for check_id in ("vendor.kernel-version", "vendor.kernel-args"):
            assert accepted.outcomes()[check_id] == {"passed"}, check_id
        for node in cluster.nodes:  # the new image drops a hardening argument
            cluster.node(node.hostname).run(serve(cmdline.replace(" pti=on", ""), "/proc/cmdline"))
        differs = run_suite([*target_args(cluster), *vendor], tmp_path / "differs")
        assert differs.broken() == {"vendor.kernel-args": "failed"}, differs.describe()
