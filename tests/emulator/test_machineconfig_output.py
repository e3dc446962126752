"""generate_config's output, pinned byte for byte, and the YAML scalar writer it relies on.

The files under ``data/`` pin the writer's bytes (first written by an implementation that ran
``yaml.safe_dump`` for every scalar, rewritten when the generated layout followed Talos 1.13's
golden files); the fast scalar writer must keep reproducing them exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.machineconfig.render import dumped_scalar, yaml_scalar

DATA = Path(__file__).parent / "data"

# Scalars that each take a different branch of PyYAML's style choice.
TRICKY = [
    "",
    "*.example.com",
    "yes",
    "off",
    "123",
    "1:20",
    "2001:db8::1",
    "a b",
    "#x",
    "trailing:",
    "- dash",
    "-",
    "\u00e9t\u00e9",
    "null",
    "~",
    "0x1F",
    "1e3",
    "=",
    "<<",
    "@at",
    "line\nbreak",
    "tab\tx",
    "quote'",
    'dq"',
    "2024-01-01",
    ".inf",
    "...",
    "---",
    "key: value",
    "a #b",
    "%pct",
    "!bang",
    "&amp",
    "?q",
    "|",
    ">",
    "`tick",
    "{x}",
    "[y]",
    "a,b",
    "'",
    "1_000",
    "+1",
    "0o17",
    "+.5",
    " lead",
    "trail ",
    "cr\rx",
    "nel\x85x",
    "10.5.0.2",
    "node-1.example.com",
]

CASES: dict[str, dict[str, Any]] = {
    "controlplane": {
        "cluster_name": "talos-default",
        "hostname": "talos-default-controlplane-1",
        "role": "controlplane",
        "address": "10.5.0.2",
        "endpoint": "https://10.5.0.2:6443",
        "ca_crt_pem": b"-----BEGIN CERTIFICATE-----\nTUlJQ0ZBS0U=\n-----END CERTIFICATE-----\n",
        "kubernetes_ca_crt_pem": (
            b"-----BEGIN CERTIFICATE-----\nS1VCRQ==\n-----END CERTIFICATE-----\n"
        ),
    },
    "worker": {
        "cluster_name": "edge",
        "hostname": "edge-worker-7",
        "role": "worker",
        "address": "10.9.0.7",
        "endpoint": "https://edge.example.com:6443",
        "pod_subnets": ("10.200.0.0/16", "fd00:10:244::/56"),
        "service_subnets": ("10.100.0.0/16",),
        "kubernetes_version": "v1.35.2",
        "install_image": "registry.local:5000/siderolabs/installer:v1.13.0",
        "extra_documents": False,
        "cert_sans": ("10.9.0.7", "edge.example.com"),
    },
    "tricky": {
        "cluster_name": "yes",
        "hostname": "off",
        "role": "controlplane",
        "address": "::1",
        "endpoint": "https://[::1]:6443",
        "pod_subnets": TRICKY[:5],
        "service_subnets": ("",),
        "kubernetes_version": "1.0",
        "install_image": "0x10",
        "cert_sans": TRICKY,
    },
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_config_matches_the_pinned_bytes(name: str) -> None:
    expected = (DATA / f"generate_config_{name}.yaml").read_bytes()
    assert mc.generate_config(**CASES[name]) == expected


def test_generating_twice_gives_the_same_bytes() -> None:
    assert mc.generate_config(**CASES["tricky"]) == mc.generate_config(**CASES["tricky"])


@pytest.mark.parametrize("value", [*TRICKY, None, True, False, 0, -7, 7445, 1.5])
def test_scalar_shortcut_agrees_with_pyyaml(value: Any) -> None:
    assert yaml_scalar(value) == dumped_scalar(value)


# Mostly characters the plain-scalar shortcut accepts, plus the ones that end it.
_NEAR_PLAIN = st.text(
    alphabet=st.sampled_from("aZ09_./+=:@-eExXoO~#,'\" \t\n*&!?|>%`[]{}<yYnN"), max_size=12
)


@settings(max_examples=300, deadline=None)
@given(_NEAR_PLAIN)
def test_scalar_shortcut_agrees_with_pyyaml_on_generated_text(text: str) -> None:
    assert yaml_scalar(text) == dumped_scalar(text)


@settings(max_examples=100, deadline=None)
@given(st.integers() | st.booleans() | st.none())
def test_scalar_shortcut_agrees_with_pyyaml_on_other_scalars(value: Any) -> None:
    assert yaml_scalar(value) == dumped_scalar(value)
