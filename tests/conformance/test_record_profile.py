"""``--talos-record-profile PATH``: a vendor profile recorded from the emulated cluster passes
``--talos-suite=vendor-image`` on the cluster it was recorded from (container and metal) and
fails on one that differs; every entry says where it was read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pytest_talos.client import TalosClient
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.emulator.node.host.system import FileEntry
from pytest_talos.emulator.node.state import NodeState
from pytest_talos.errors import ConfigError
from pytest_talos.patches import apply_patches
from pytest_talos.plugin.conformance.security_settings import key_fingerprint
from pytest_talos.plugin.conformance.vendor_profile import load_vendor_profile
from tests.conformance.suite_runner import SuiteRun, run_suite, target_args

REPO = Path(__file__).resolve().parents[2]
FAST = ("--talos-emulator",)  # run_suite adds the fast clock (time scale 20)
# What the recorder records on the emulator, and the vendor check that judges each.
JUDGED = {
    "vendor.talos-version": ("talos", "version"),
    "vendor.kubernetes-version": ("kubernetes", "version"),
    "vendor.platform": ("platform",),
    "vendor.expected-ports": ("ports", "expected"),
    "vendor.image-verification": ("image_verification", "required"),
    "vendor.image-verification-rules": ("image_verification", "rules"),
    "vendor.security-settings": ("security_settings",),
}

pytestmark = pytest.mark.slow


def _suite(cwd: Path, report: Path, *args: str) -> SuiteRun:
    """The suite against its own emulated cluster, forked from the tests' fork server as
    every suite run of these tests is (tests/conformance/suite_runner.py)."""
    return run_suite([*FAST, *args], report, cwd=cwd, timeout=300)


def _record(tmp_path: Path, name: str, *variant: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    done = _suite(
        tmp_path, tmp_path / f"report-{name}", "--talos-record-profile", str(path), *variant
    )
    assert done.returncode == 0, done.describe()
    assert f"recorded the vendor profile {path}" in done.output
    load_vendor_profile(path)  # the format --talos-profile reads
    return path


def _accept(tmp_path: Path, profile: Path, *variant: str) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = _accept_run(tmp_path, profile, *variant)["checks"]
    return checks


def _accept_run(tmp_path: Path, profile: Path, *variant: str) -> dict[str, Any]:
    """The vendor-image run's results.json."""
    report = tmp_path / f"report-{profile.stem}-{len(list(tmp_path.iterdir()))}"
    done = _suite(
        tmp_path, report, "--talos-suite=vendor-image", "--talos-profile", str(profile), *variant
    )
    assert done.results is not None, done.describe()
    return done.results


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


def _shape(*variants: str, version: str | None = None) -> tuple[str, ...]:
    args = [arg for variant in variants for arg in ("--talos-emulator-variant", variant)]
    return (*args, *(("--talos-emulator-version", version) if version else ()))


# Healthy shapes a golden node can have (the fault matrix's variants and releases): what is
# recorded on each must pass on it, or accepting an image from such a node would be refused.
GOLDEN_SHAPES = {
    "container": _shape(),
    "metal": _shape("metal"),
    "metal+domain+discovery-disabled": _shape("metal", "domain", "discovery-disabled"),
    "extensions": _shape("extensions"),
    "metrics-exposed": _shape("metrics-exposed"),
    "cilium+metal": _shape("cilium", "metal"),
    "siderolink+wireguard+metal": _shape("siderolink", "wireguard", "metal"),
    "v1.12": _shape(version="v1.12.x"),
    "v1.14+metal": _shape("metal", version="v1.14.x"),
}


@pytest.mark.parametrize("variant", list(GOLDEN_SHAPES.values()), ids=list(GOLDEN_SHAPES))
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


# ------------------------------------------------- image-verification rules, security settings


def _public_key_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()


KEYLESS = {"issuer": "https://token.actions.githubusercontent.com", "subject": "ci@example.com"}


def _apply(cluster: EmulatedCluster, originals: dict[str, bytes], *patches: Any) -> None:
    """Every node: its generated config plus ``patches``, applied without a reboot (a real
    ApplyConfiguration; sysctls and extra documents apply immediately)."""
    with TalosClient.from_talosconfig(cluster.talosconfig_path, env={}) as client:
        for node in cluster.nodes:
            target = client.with_node(node.address)
            original = originals.setdefault(node.address, target.machine_config().raw)
            target.apply_configuration(apply_patches(original, list(patches)), "no-reboot")


def _rules(*rules: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {"apiVersion": "v1alpha1", "kind": "ImageVerificationConfig", "rules": list(rules)}
    )


def _sysctl(value: str) -> dict[str, Any]:
    return {"machine": {"sysctls": {"kernel.kptr_restrict": value}}}


@pytest.mark.parametrize("platform", ["container", "metal"])
def test_recorded_rules_and_settings_pass_where_recorded_and_fail_when_they_differ(
    tmp_path: Path, platform: Literal["container", "metal"]
) -> None:
    """The node's own image-verification rules and security settings are recorded (each with
    where it was read), pass on that node, and fail once the node is changed (a real apply
    after recording, not an edited profile): a weakened sysctl fails vendor.security-settings
    only, a dropped rule vendor.image-verification-rules only."""
    pem = _public_key_pem()
    keyless = {"image": "registry.k8s.io/*", "keyless": KEYLESS}
    keyed = {"image": "my-registry.example.com/*", "publicKey": {"certificate": pem}}
    skip_rest = {"image": "*", "skip": True}
    originals: dict[str, bytes] = {}
    with EmulatedCluster(1, 1, platform=platform, time_scale=20) as cluster:
        _apply(cluster, originals, _rules(keyless, keyed, skip_rest), _sysctl("2"))
        profile = tmp_path / "golden.yaml"
        done = run_suite(
            [*target_args(cluster), "--talos-record-profile", str(profile)], tmp_path / "unused"
        )
        assert done.returncode == 0, done.describe()
        text = profile.read_text()
        recorded = yaml.safe_load(text)
        assert recorded["image_verification"] == {
            "required": True,
            "rules": [
                {"image": "registry.k8s.io/*", "keyless": KEYLESS},
                {
                    "image": "my-registry.example.com/*",
                    "publicKey": {"sha256": key_fingerprint(pem)},
                },
                {"image": "*", "skip": True},
            ],
        }
        assert "BEGIN PUBLIC KEY" not in text  # a key by its fingerprint, never the PEM
        assert "0001: my-registry.example.com/*: publicKey sha256=" in text
        for role in ("controlplane", "worker"):
            settings = recorded["security_settings"][role]
            assert settings["machine.sysctls.kernel.kptr_restrict"] == "2"
            assert settings["machine.sysctls.kernel.dmesg_restrict"] is None  # not set
            assert settings["machine.install.extraKernelArgs"] == []  # expected none
        assert "cluster.apiServer.admissionControl" in recorded["security_settings"]["controlplane"]
        assert "cluster.apiServer.admissionControl" not in recorded["security_settings"]["worker"]
        line = next(t for t in text.splitlines() if "kernel.kptr_restrict" in t)
        assert line.endswith(
            '# MachineConfig config/v1alpha1 (os:admin): machine.sysctls."kernel.kptr_restrict"'
        )
        vendor = [
            *target_args(cluster),
            "--talos-suite=vendor-image",
            "--talos-profile",
            str(profile),
        ]
        accepted = run_suite(vendor, tmp_path / "accepted")
        assert not accepted.broken(), accepted.describe()
        for check_id in ("vendor.image-verification-rules", "vendor.security-settings"):
            assert accepted.outcomes()[check_id] == {"passed"}, check_id

        _apply(cluster, originals, _rules(keyless, keyed, skip_rest), _sysctl("0"))
        weakened = run_suite(vendor, tmp_path / "weakened")
        assert weakened.broken() == {"vendor.security-settings": "failed"}, weakened.describe()
        failure = next(c for c in weakened.checks if c["outcome"] == "failed")
        assert (
            "1 security setting(s) differ from the profile: machine.sysctls.kernel.kptr_restrict"
            in failure["message"]
        )
        assert failure["evidence"]["differ"] == {
            "machine.sysctls.kernel.kptr_restrict": {"expected": "2", "observed": "0"}
        }

        _apply(cluster, originals, _rules(keyed, skip_rest), _sysctl("2"))
        dropped = run_suite(vendor, tmp_path / "dropped")
        assert dropped.broken() == {"vendor.image-verification-rules": "failed"}, dropped.describe()
        assert "the image-verification rules differ from the profile's" in dropped.output


def test_a_reader_records_what_it_can_and_is_told_what_needs_admin(tmp_path: Path) -> None:
    """os:reader cannot read the MachineConfig resource (sensitive): the recorder leaves the
    settings out saying which identity records them, and their check skips naming os:admin
    (not run: needs os:admin, not a failure); the image-verification rules are resources a
    reader may list, so they are recorded and judged."""
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        admin_profile = tmp_path / "admin.yaml"
        done = run_suite(
            [*target_args(cluster), "--talos-record-profile", str(admin_profile)],
            tmp_path / "unused",
        )
        assert done.returncode == 0, done.describe()
        reader = cluster.issue_client(["os:reader"], path=tmp_path / "reader-talosconfig")
        args = target_args(cluster)
        args[1] = str(reader.path)
        reader_profile = tmp_path / "reader.yaml"
        done = run_suite([*args, "--talos-record-profile", str(reader_profile)], tmp_path / "r")
        assert done.returncode == 0, done.describe()
        text = reader_profile.read_text()
        recorded = yaml.safe_load(text)
        assert "security_settings" not in recorded
        assert "# security_settings not recorded: they are read from the MachineConfig" in text
        assert "record with an os:admin talosconfig" in text
        # the rules are ImageVerificationRules resources (not sensitive): a reader records
        # them (none here: the generated config has no ImageVerificationConfig)
        assert recorded["image_verification"]["rules"] == []
        load_vendor_profile(reader_profile)
        vendor = [*args, "--talos-suite=vendor-image", "--talos-profile", str(admin_profile)]
        judged = run_suite(vendor, tmp_path / "judged")
        assert not judged.broken(), judged.describe()
        rules = [c for c in judged.checks if c["id"] == "vendor.image-verification-rules"]
        assert rules, judged.describe()
        assert {c["outcome"] for c in rules} == {"passed"}, judged.describe()
        for check_id in ("vendor.security-settings",):
            found = [c for c in judged.checks if c["id"] == check_id]
            assert {c["skip_kind"] for c in found} == {"needs-admin"}, check_id
            assert all("read from the MachineConfig resource" in c["message"] for c in found)
