"""Drift: the fields Talos decodes as strings (Args, map[string]string) compare by their text,
so a config Talos re-encoded from the same base and patches is no drift; every other field
still compares by type."""

from __future__ import annotations

import pytest

from pytest_talos.drift import compare_configs
from pytest_talos.drift.compare import STRING_FIELDS, scalar_text
from pytest_talos.emulator import machineconfig as mc
from pytest_talos.patches import apply_patches

# As an operator writes them (talosctl gen config --config-patch @patch.yaml) ...
PATCH = """\
machine:
  kubelet:
    extraArgs:
      rotate-server-certificates: true
      max-pods: 250
      feature-gates: [A=true, 7]
  sysctls:
    vm.nr_hugepages: 1024
  nodeLabels:
    rack: 13
    spot: yes
  env:
    DEBUG: 1
cluster:
  apiServer:
    extraArgs:
      v: 2
  etcd:
    extraArgs:
      quota-backend-bytes: 8589934592
"""
# ... and as the node holds them after Talos decoded and re-encoded the config: every value
# of a string-typed field quoted (ArgValue.MarshalYAML writes !!str; map[string]string).
ENCODED = """\
machine:
  kubelet:
    extraArgs:
      rotate-server-certificates: "true"
      max-pods: "250"
      feature-gates: ["A=true", "7"]
  sysctls:
    vm.nr_hugepages: "1024"
  nodeLabels:
    rack: "13"
    spot: "yes"
  env:
    DEBUG: "1"
cluster:
  apiServer:
    extraArgs:
      v: "2"
  etcd:
    extraArgs:
      quota-backend-bytes: "8589934592"
"""


@pytest.fixture(scope="module")
def base() -> bytes:
    return mc.generate_config(
        cluster_name="talos-default",
        hostname="talos-default-worker-1",
        role="worker",
        address="10.5.0.3",
        endpoint="https://10.5.0.2:6443",
    )


def test_a_talos_encoded_config_from_the_same_patches_is_no_drift(base: bytes) -> None:
    desired = apply_patches(base, [PATCH])
    actual = apply_patches(base, [ENCODED])
    assert compare_configs(desired, actual).lines() == []
    assert compare_configs(actual, desired).lines() == []


def test_real_drift_in_a_string_field_is_still_found(base: bytes) -> None:
    desired = apply_patches(base, [PATCH])
    actual = apply_patches(
        base,
        [
            ENCODED.replace('"250"', '"251"')
            .replace('rotate-server-certificates: "true"', 'rotate-server-certificates: "True"')
            .replace('DEBUG: "1"', 'DEBUG: "1"\n    EXTRA: "false"')
        ],
    )
    assert compare_configs(desired, actual).lines() == [
        "v1alpha1 machine.kubelet.extraArgs.rotate-server-certificates: desired true, "
        'actual "True"',
        'v1alpha1 machine.kubelet.extraArgs.max-pods: desired 250, actual "251"',
        'v1alpha1 machine.env.EXTRA: desired <absent>, actual "false"',
    ]


def test_a_typed_field_still_tells_a_bool_from_the_string_true(base: bytes) -> None:
    # machine.features.rbac is a *bool: Go's decoder refuses "true" there (cannot unmarshal
    # !!str into bool), so the two are not the same config.
    desired = apply_patches(base, ["machine:\n  features:\n    rbac: true\n"])
    actual = apply_patches(base, ['machine:\n  features:\n    rbac: "true"\n'])
    assert compare_configs(desired, actual).lines() == [
        'v1alpha1 machine.features.rbac: desired true, actual "true"'
    ]


def test_a_string_field_under_a_list_index_is_known() -> None:
    left = "machine:\n  logging:\n    destinations:\n      - endpoint: udp://a:1\n"
    right = left + "        extraTags: {n: 1}\n"
    assert compare_configs(left + "        extraTags: {n: '1'}\n", right).equal
    assert ("machine", "logging", "destinations", -1, "extraTags") in STRING_FIELDS


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (False, "false"), (1024, "1024"), (1.5, "1.5"), (float("inf"), ".inf")],
)
def test_scalar_text_is_the_text_yaml_wrote(value: object, text: str) -> None:
    assert scalar_text(value) == text
