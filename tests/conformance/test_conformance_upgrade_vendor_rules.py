"""Audit fixes for the upgrade and vendor checks: extension labels are judged by
upgrade.extensions-unchanged, not upgrade.node-labels-unchanged; a full version matches
only itself; image verification counts only rules that verify."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conformance._support.snapshot import (
    EXTENSION_LABEL_PREFIX,
    lost_extension_labels,
    without_extension_labels,
)
from pytest_talos.client import TalosClient
from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.patches import apply_patches
from pytest_talos.plugin.conformance.vendor_profile import (
    VerificationPolicy,
    rule_action,
    version_matches,
)
from pytest_talos.wait import wait_until
from tests.conformance.suite_runner import SUITE, SuiteRun, run_suite, target_args

UPGRADE = str(SUITE / "upgrade")
VENDOR = str(SUITE / "vendor")
NEW_VERSION = "v1.13.10"
EXTENSIONS = ("iscsi-tools", "qemu-guest-agent")
ORIGINALS: dict[str, bytes] = {}
KEYLESS = {"issuer": "https://accounts.google.com", "subject": "krel@example.com"}


# ----------------------------------------------------------------- finding 1: extension labels


def test_extension_labels_are_left_out_of_the_label_comparison() -> None:
    labels = {f"{EXTENSION_LABEL_PREFIX}iscsi-tools": "v0.2.0", "zone": "a"}
    assert without_extension_labels(labels) == {"zone": "a"}


def test_an_extension_label_gone_while_its_extension_is_installed_is_lost() -> None:
    key = f"{EXTENSION_LABEL_PREFIX}iscsi-tools"
    before = {key: "v0.1.0", f"{EXTENSION_LABEL_PREFIX}gone": "v1", "zone": "a"}
    # installed, valid label value: Talos would label the Node, so its absence is a defect
    assert lost_extension_labels(before, {"zone": "a"}, {"iscsi-tools": "v0.2.0"}) == {
        key: "v0.2.0"
    }
    # still there with another value, the extension removed, or a version Talos cannot use
    # as a label value: nothing lost here (upgrade.extensions-unchanged judges the rest)
    assert lost_extension_labels(before, {key: "v0.2.0"}, {"iscsi-tools": "v0.2.0"}) == {}
    assert lost_extension_labels(before, {}, {}) == {}
    assert lost_extension_labels(before, {}, {"iscsi-tools": "v0.2.0 (bad)"}) == {}


@pytest.fixture
def cluster_with_extensions() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 1, platform="metal", time_scale=20, extensions=EXTENSIONS) as c:
        yield c


def _suite(cluster: EmulatedCluster, tmp_path: Path, name: str, *args: str) -> SuiteRun:
    return run_suite([*target_args(cluster), *args], tmp_path / name, paths=[UPGRADE])


def _upgrade(cluster: EmulatedCluster) -> None:
    with TalosClient.from_talosconfig(cluster.talosconfig_path, env={}) as client:
        for node in reversed(cluster.nodes):  # the endpoint last: it reboots at once
            client.with_node(node.address).upgrade(f"ghcr.io/siderolabs/installer:{NEW_VERSION}")
        for node in cluster.nodes:
            target = client.with_node(node.address)
            wait_until(
                functools.partial(lambda t: t.version().tag, target),
                lambda tag: tag == NEW_VERSION,
                timeout=30,
                description=f"{node.hostname} to run {NEW_VERSION}",
            )


@pytest.mark.slow
def test_an_upgrade_that_updates_extension_versions_keeps_the_labels_check_green(
    cluster_with_extensions: EmulatedCluster, tmp_path: Path
) -> None:
    snapshot = tmp_path / "pre-upgrade.json"
    saved = _suite(
        cluster_with_extensions, tmp_path, "save", "--talos-snapshot", "save", str(snapshot)
    )
    assert saved.outcomes()["upgrade.snapshot-recorded"] == {"passed"}, saved.describe()
    _upgrade(cluster_with_extensions)
    result = _suite(
        cluster_with_extensions, tmp_path, "compare", "--talos-snapshot", "compare", str(snapshot)
    )
    outcomes = result.outcomes()
    assert outcomes["upgrade.node-labels-unchanged"] == {"passed"}, result.describe()
    assert outcomes["upgrade.extensions-unchanged"] == {"passed"}, result.describe()


# ----------------------------------------------------------------- finding 4: versions


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        ("v1.14.0", "v1.14.0-rc.1", False),
        ("v1.13.9", "v1.13.9-dirty", False),
        ("v1.13.9", "v1.13.9+build.1", False),
        ("v1.14", "v1.14.0-rc.1", False),
        ("v1.14.x", "v1.14.0-beta.0", False),
        ("v1.14.0-rc.1", "v1.14.0-rc.1", True),
        ("v1.13", "v1.13.9", True),
        ("v1.13.x", "v1.13.10", True),
        ("v1.36.0", "v1.36.0", True),
    ],
)
def test_a_full_version_matches_only_itself_and_prefixes_only_releases(
    expected: str, actual: str, matches: bool
) -> None:
    assert version_matches(expected, actual) is matches


@pytest.mark.parametrize(
    ("expected", "release", "matches"),
    [
        ("6.18", "6.18.24-talos", True),
        ("6.18.24", "6.18.24-talos", True),
        ("6.18.24-talos", "6.18.24-talos", True),
        ("6.18.2", "6.18.24-talos", False),
        ("6.12", "6.18.24-talos", False),
    ],
)
def test_a_kernel_release_keeps_its_local_version_suffix(
    expected: str, release: str, matches: bool
) -> None:
    assert version_matches(expected, release, local_version=True) is matches
    if "-" not in expected:  # not a kernel: the suffix is a pre-release or build
        assert version_matches(expected, release) is False


# ----------------------------------------------------------------- finding 5: image verification


@pytest.mark.parametrize(
    ("rule", "action"),
    [
        ({"image": "*", "skip": True}, "skip"),
        ({"image": "*", "deny": True}, "deny"),
        ({"image": "r/*", "keyless": KEYLESS}, "keyless"),
        ({"image": "r/*", "publicKey": {"certificate": "PEM"}}, "publicKey"),
        ({"image": "r/*"}, "none"),
    ],
)
def test_a_rule_verifies_only_with_a_verifier(rule: dict[str, Any], action: str) -> None:
    assert rule_action(rule) == action


def test_a_catch_all_skip_first_turns_verification_off() -> None:
    policy = VerificationPolicy.of(
        [{"image": "*", "skip": True}, {"image": "r/*", "keyless": KEYLESS}]
    )
    assert policy.verifying == []
    assert policy.unreachable == ("r/*",)
    assert policy.unverified_note() == (
        "the first ImageVerificationConfig rule matching every image (*) skips "
        "verification: verification is off, no image is verified"
    )


def test_a_catch_all_skip_after_verifying_rules_names_what_goes_unverified() -> None:
    policy = VerificationPolicy.of(
        [{"image": "r/*", "keyless": KEYLESS}, {"image": "*", "skip": True}]
    )
    assert policy.verifying == ["r/*"]
    assert policy.unverified_note() == (
        "the rule for every image (*) skips verification: an image outside r/* is pulled unverified"
    )
    closed = VerificationPolicy.of(
        [{"image": "r/*", "keyless": KEYLESS}, {"image": "*", "deny": True}]
    )
    assert closed.unverified_note() == ""


def _verification_patch(rules: list[dict[str, Any]]) -> str:
    return yaml.safe_dump(
        {"apiVersion": "v1alpha1", "kind": "ImageVerificationConfig", "rules": rules}
    )


@pytest.fixture(scope="module")
def vendor_cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        yield cluster


def _with_rules(cluster: EmulatedCluster, rules: list[dict[str, Any]]) -> None:
    """Give every node its generated config plus an ImageVerificationConfig of ``rules``."""
    with TalosClient.from_talosconfig(cluster.talosconfig_path, env={}) as client:
        for node in cluster.nodes:
            target = client.with_node(node.address)
            original = ORIGINALS.setdefault(node.address, target.machine_config().raw)
            config = apply_patches(original, [_verification_patch(rules)])
            target.apply_configuration(config, "no-reboot")


def _vendor(cluster: EmulatedCluster, tmp_path: Path, name: str) -> SuiteRun:
    profile = tmp_path / f"{name}.yaml"
    profile.write_text(yaml.safe_dump({"image_verification": {"required": True}}))
    return run_suite(
        [*target_args(cluster), "--talos-profile", str(profile), "-k", "image_verification"],
        tmp_path / name,
        paths=[VENDOR],
    )


@pytest.mark.slow
def test_required_verification_fails_on_a_skip_everything_policy(
    vendor_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    _with_rules(vendor_cluster, [{"image": "*", "skip": True}])
    result = _vendor(vendor_cluster, tmp_path, "skip-all")
    assert result.broken() == {"vendor.image-verification": "failed"}, result.describe()
    assert "skips verification: verification is off, no image is verified" in result.output
    _with_rules(vendor_cluster, [{"image": "*", "deny": True}])
    denied = _vendor(vendor_cluster, tmp_path, "deny-all")
    assert denied.broken() == {"vendor.image-verification": "failed"}, denied.describe()
    assert "no image verification rule verifies signatures" in denied.output
    _with_rules(vendor_cluster, [{"image": "*", "keyless": KEYLESS}])
    verified = _vendor(vendor_cluster, tmp_path, "verify-all")
    assert verified.outcomes()["vendor.image-verification"] == {"passed"}, verified.describe()
    assert "UnverifiedImagesWarning" not in verified.output
