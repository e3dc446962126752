"""Vendor image acceptance: the profile parser, the example profile passing against the
emulator, and every vendor check failing when the node differs from the profile."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml

from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from pytest_talos.emulator.node.host.system import FileEntry
from pytest_talos.emulator.node.state import NodeState
from pytest_talos.errors import ConfigError, NotFound, PermissionDenied
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.security_settings import (
    key_fingerprint,
    read_rules,
    read_settings,
)
from pytest_talos.plugin.conformance.vendor_profile import (
    load_vendor_profile,
    parse_vendor_profile,
    version_matches,
)
from tests.conformance.suite_runner import REPO, SUITE, SuiteRun, run_suite, target_args

VENDOR = str(SUITE / "vendor")
EXAMPLE = REPO / "conformance" / "profiles" / "example-vendor.yaml"
KERNEL = "Linux version 6.18.24-talos (root@buildkitsandbox) (gcc 14.2.0) #1 SMP\n"
CMDLINE = "talos.platform=metal console=ttyS0 init_on_alloc=1 slab_nomerge pti=on\n"


# ----------------------------------------------------------------- the profile format


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        ("v1.13.9", "v1.13.9", True),
        ("v1.13.9", "v1.13.10", False),
        ("v1.13", "v1.13.10", True),
        ("v1.13.x", "v1.13.0", True),
        ("1.13.*", "v1.13.4", True),
        ("v1.13", "v1.14.0", False),
        ("v1.1", "v1.13.0", False),
    ],
)
def test_version_matching_accepts_prefixes_on_component_boundaries(
    expected: str, actual: str, matches: bool
) -> None:
    assert version_matches(expected, actual) is matches


def test_example_profile_documents_every_section() -> None:
    profile = load_vendor_profile(EXAMPLE)
    assert profile.name == "example-edge-appliance"
    assert profile.talos_version == "v1.13.x"
    assert profile.kernel_version == "6.18"
    assert "init_on_alloc=0" in profile.kernel_args_absent
    assert profile.ports.expected_for("worker") == {50000, 10250}
    assert profile.ports.forbidden is not None
    assert 22 in profile.ports.forbidden
    assert profile.image_verification_required is False


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"talos": {"verison": "v1"}}, r"talos: unknown keys \['verison'\]; allowed: version"),
        ({"ports": {"forbidden": [22, 70000]}}, r"ports.forbidden: must be a list of TCP port"),
        ({"ports": {"expected": {"master": [1]}}}, r"ports.expected: unknown keys \['master'\]"),
        ({"extensions": {"required": "iscsi"}, "platform": 3}, r"platform: must be a list"),
        ({"image_verification": {"required": "yes"}}, r"must be true or false"),
        ({"version": 2}, r"only profile format version 1"),
        (["not", "a", "mapping"], r"must be a YAML mapping"),
    ],
)
def test_invalid_profiles_are_refused_naming_the_key(data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_vendor_profile(data, "vendor.yaml")


def test_one_port_list_applies_to_every_role_and_numbers_read_as_text() -> None:
    profile = parse_vendor_profile(
        {"ports": {"expected": [50000]}, "kernel": {"version": 6.18}}, "p.yaml"
    )
    assert profile.ports.expected_for("controlplane") == {50000}
    assert profile.kernel_version == "6.18"


# ----------------------------------------------------------------- against emulated nodes


def write_profile(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "vendor.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("platform", ["container", "metal"])
def test_example_profile_passes_the_vendor_image_suite(tmp_path: Path, platform: str) -> None:
    # As the docs say, by the name of the profile the kit ships (found in the installed
    # suite, no checkout needed), with the suite profile it is for.
    variant = ["--talos-emulator-variant", "metal"] if platform == "metal" else []
    result = run_suite(
        [
            "--talos-emulator",
            "--talos-suite",
            "vendor-image",
            "--talos-profile",
            "example-vendor",
            *variant,
        ],
        tmp_path / "report",
    )
    assert result.returncode == 0, result.describe()
    assert result.results is not None
    assert result.results["verdict"] == "PASSED"
    checks = {(c["id"], c["node"]): c for c in result.checks}
    kernel = [c for (check, _), c in checks.items() if check == "vendor.kernel-version"]
    if platform == "container":
        assert {c["skip_kind"] for c in kernel} == {"not-applicable"}
        assert (
            "not applicable on this platform: vendor.kernel-args, vendor.kernel-version"
            in (result.results["verdict_reasons"])
        )
        assert "| N/A |" in (tmp_path / "report" / "report.md").read_text()
    else:
        assert {c["outcome"] for c in kernel} == {"passed"}
        args = [c for (check, _), c in checks.items() if check == "vendor.kernel-args"]
        assert {c["outcome"] for c in args} == {"passed"}
        assert "talos.platform=metal" in args[0]["evidence"]["cmdline"]
    required = [c for (check, _), c in checks.items() if check == "vendor.required-extensions"]
    assert {c["outcome"] for c in required} == {"passed"}  # required: [] is met
    assert "matches no ImageVerificationConfig rule" in result.output


def test_an_empty_required_list_is_an_expectation_and_unset_is_not() -> None:
    assert (
        parse_vendor_profile({"extensions": {"required": []}}, "v.yaml").extensions_required == ()
    )
    assert parse_vendor_profile({}, "v.yaml").extensions_required is None


@pytest.mark.slow
def test_every_vendor_check_fails_against_a_mismatching_profile(tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path,
        {
            "talos": {"version": "v1.12"},
            "kubernetes": {"version": "v1.30"},
            "platform": "metal",
            "extensions": {"required": ["iscsi-tools"]},
            "ports": {"expected": {"worker": [9999]}, "forbidden": [50000]},
            "image_verification": {"required": True},
        },
    )
    result = run_suite(
        ["--talos-emulator", "--talos-profile", profile], tmp_path / "report", paths=[VENDOR]
    )
    assert result.broken() == dict.fromkeys(
        [
            "vendor.talos-version",
            "vendor.kubernetes-version",
            "vendor.platform",
            "vendor.required-extensions",
            "vendor.expected-ports",
            "vendor.forbidden-ports",
            "vendor.image-verification",
        ],
        "failed",
    ), result.describe()
    assert "not open: 9999" in result.output
    assert "open: 50000" in result.output


def _with_kernel_facts(state: NodeState) -> None:
    state.rootfs["/proc/version"] = FileEntry("/proc/version", "file", 0o444, KERNEL.encode())
    state.rootfs["/proc/cmdline"] = FileEntry("/proc/cmdline", "file", 0o444, CMDLINE.encode())


@pytest.fixture
def metal_cluster() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(
        1, 1, platform="metal", time_scale=20, extensions=["debug-tools", "iscsi-tools"]
    ) as cluster:
        for node in cluster.nodes:
            cluster.node(node.hostname).run(_with_kernel_facts)
        yield cluster


def vendor_run(
    cluster: EmulatedCluster, tmp_path: Path, name: str, data: dict[str, Any]
) -> SuiteRun:
    (tmp_path / name).mkdir()
    profile = write_profile(tmp_path / name, data)
    return run_suite(
        [*target_args(cluster), "--talos-profile", profile],
        tmp_path / name / "report",
        paths=[VENDOR],
    )


def test_kernel_and_extension_checks_pass_on_a_matching_metal_node(
    metal_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    result = vendor_run(
        metal_cluster,
        tmp_path,
        "match",
        {
            "platform": ["metal"],
            "kernel": {
                "version": "6.18",
                "args": {
                    "present": ["init_on_alloc=1", "console"],
                    "absent": ["selinux", "init_on_alloc=0"],
                },
            },
            "extensions": {"required": ["iscsi-tools"]},
        },
    )
    assert result.returncode == 0, result.describe()
    for check in (
        "vendor.kernel-version",
        "vendor.kernel-args",
        "vendor.platform",
        "vendor.required-extensions",
    ):
        assert result.outcomes()[check] == {"passed"}, check


def test_kernel_and_extension_checks_fail_on_a_mismatching_metal_node(
    metal_cluster: EmulatedCluster, tmp_path: Path
) -> None:
    result = vendor_run(
        metal_cluster,
        tmp_path,
        "mismatch",
        {
            "kernel": {
                "version": "6.12",
                "args": {"present": ["lockdown=confidentiality"], "absent": ["pti"]},
            },
            "extensions": {"forbidden": ["debug-tools"]},
        },
    )
    assert result.broken() == dict.fromkeys(
        ["vendor.kernel-version", "vendor.kernel-args", "vendor.forbidden-extensions"], "failed"
    ), result.describe()
    assert "missing: lockdown=confidentiality; forbidden present: pti" in result.output


# ------------------------------------------- image-verification rules and security settings


PEM = (
    "-----BEGIN PUBLIC KEY-----\n"
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEqYVzcP5bK4fYXzWj0l7JiFf0iF3m\n"
    "2S6Tc5C0lFJr1m0r9m7yqvD0C3bJ1l2B6gqYy2c1e1h3qk8l4n0fJ9yX4A==\n"
    "-----END PUBLIC KEY-----\n"
)


def test_a_public_key_is_pinned_by_the_sha256_of_its_der_bytes() -> None:
    der = base64.b64decode("".join(PEM.splitlines()[1:-1]))
    assert key_fingerprint(PEM) == hashlib.sha256(der).hexdigest()
    rewrapped = PEM.replace("\n", "\n\n").replace("m\n", "m\r\n")  # another wrapping, same key
    assert key_fingerprint(rewrapped) == key_fingerprint(PEM)
    profile = parse_vendor_profile(
        {"image_verification": {"rules": [{"image": "r/*", "publicKey": {"certificate": PEM}}]}},
        "v.yaml",
    )
    assert profile.image_verification_rules == (
        {"image": "r/*", "publicKey": {"sha256": key_fingerprint(PEM)}},
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"image_verification": {"rules": {"image": "*"}}}, r"rules: must be a list of rules"),
        ({"image_verification": {"rules": [{"skip": True}]}}, r"rules\[0\]\.image: must be"),
        (
            {"image_verification": {"rules": [{"image": "*", "verify": True}]}},
            r"rules\[0\]: unknown keys \['verify'\]",
        ),
        ({"security_settings": {"master": {}}}, r"security_settings: unknown keys \['master'\]"),
        (
            {"security_settings": {"worker": {"machine.sysctl.kernel.kptr_restrict": "2"}}},
            r"security_settings.worker: unknown keys \['machine.sysctl.kernel.kptr_restrict'\]",
        ),
    ],
)
def test_invalid_rules_and_settings_are_refused_naming_the_key(data: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_vendor_profile(data, "vendor.yaml")


def test_unset_rules_and_settings_are_not_expectations_and_empty_ones_are() -> None:
    unset = parse_vendor_profile({}, "v.yaml")
    assert unset.image_verification_rules is None
    assert unset.security_settings is None
    empty = parse_vendor_profile(
        {"image_verification": {"rules": []}, "security_settings": {"worker": {}}}, "v.yaml"
    )
    assert empty.image_verification_rules == ()
    assert empty.security_settings == {"worker": {}}


class _Node:
    """The two reads read_rules makes, answered as a node would."""

    def __init__(self, items: list[Any] | Exception, documents: list[dict[str, Any]]):
        self.items, self.documents, self.config_reads = items, documents, 0

    def resources(self, kind: str, namespace: str | None = None) -> list[Any]:
        assert (kind, namespace) == ("ImageVerificationRules.security.talos.dev", "security")
        if isinstance(self.items, Exception):
            raise self.items
        return self.items

    @property
    def machine_config(self) -> Any:
        self.config_reads += 1
        return SimpleNamespace(documents=self.documents)


CONFIG_RULES = [
    {
        "apiVersion": "v1alpha1",
        "kind": "ImageVerificationConfig",
        "rules": [{"image": "*", "deny": True}],
    }
]


def test_rules_are_read_from_the_resource_an_os_reader_can_read_in_id_order() -> None:
    spec = {
        "imagePattern": "registry.k8s.io/*",
        "skip": False,
        "deny": False,
        "keylessVerifier": {"issuer": "https://i", "subject": "s", "subjectRegex": ""},
    }
    items = [
        SimpleNamespace(id="0001", spec={"imagePattern": "*", "skip": True, "deny": False}),
        SimpleNamespace(id="0000", spec=spec),
    ]
    node = _Node(items, CONFIG_RULES)
    rules, where = read_rules(cast(TalosNode, node))
    assert rules == [
        {"image": "registry.k8s.io/*", "keyless": {"issuer": "https://i", "subject": "s"}},
        {"image": "*", "skip": True},
    ]
    assert where == "ImageVerificationRules.security.talos.dev security/* (os:reader)"
    assert node.config_reads == 0  # the sensitive MachineConfig was not needed


@pytest.mark.parametrize(
    "absent",
    [
        NotFound('resource "ImageVerificationRules.security.talos.dev" is not registered'),
        PermissionDenied(
            'resource type "ImageVerificationRules.security.talos.dev" is not supported'
        ),
    ],
    ids=["client-resolution", "access-filter"],
)
def test_a_node_without_the_rule_type_is_read_from_its_machine_config(absent: Exception) -> None:
    node = _Node(absent, CONFIG_RULES)
    rules, where = read_rules(cast(TalosNode, node))
    assert rules == [{"image": "*", "deny": True}]
    assert where.startswith("MachineConfig config/v1alpha1 (os:admin): ImageVerificationConfig")
    assert node.config_reads == 1


def test_another_refusal_of_the_rules_is_not_taken_for_a_missing_type() -> None:
    with pytest.raises(PermissionDenied):
        read_rules(cast(TalosNode, _Node(PermissionDenied("not authorized"), CONFIG_RULES)))


def test_encryption_is_read_as_talos_picks_it_and_never_with_its_keys() -> None:
    v1alpha1 = {
        "version": "v1alpha1",
        "machine": {
            "type": "worker",
            "systemDiskEncryption": {
                "ephemeral": {"provider": "luks2", "keys": [{"slot": 0, "nodeID": {}}]}
            },
        },
    }
    volume = {
        "apiVersion": "v1alpha1",
        "kind": "VolumeConfig",
        "name": "STATE",
        "encryption": {
            "provider": "luks2",
            "keys": [{"slot": 0, "tpm": {}}, {"slot": 1, "static": {"passphrase": "secret"}}],
        },
    }
    found = read_settings([v1alpha1, volume], "worker")
    assert found["encryption.STATE"] == (
        {"provider": "luks2", "keys": ["tpm", "static"]},
        "VolumeConfig STATE encryption (provider, key kinds)",
    )
    assert found["encryption.EPHEMERAL"][0] == {"provider": "luks2", "keys": ["nodeID"]}
    assert "secret" not in repr(found)
    assert "cluster.apiServer.extraArgs" not in found  # a control-plane setting
