"""CanApplyImmediate as v1alpha1_runtime.go runs it: the allowed features are copied only when
both configs have a ``machine.features`` section, and reflect.DeepEqual tells nil from empty."""

from __future__ import annotations

import pytest

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.patches import apply_patches

NO_FEATURES = "machine:\n  features:\n    $patch: delete\n"
HOST_DNS = "machine:\n  features:\n    hostDNS:\n      enabled: true\n"


@pytest.fixture(scope="module")
def worker() -> bytes:
    return mc.generate_config(
        cluster_name="talos-default",
        hostname="talos-default-worker-1",
        role="worker",
        address="10.5.0.3",
        endpoint="https://10.5.0.2:6443",
    )


@pytest.fixture(scope="module")
def featureless(worker: bytes) -> bytes:
    config = apply_patches(worker, [NO_FEATURES])
    assert b"features:" not in config
    return config


def test_adding_a_features_section_needs_a_reboot(featureless: bytes) -> None:
    # Only allowed fields inside, but the current config has no features: nothing is copied
    # and nil differs from a FeaturesConfig.
    new = apply_patches(featureless, [HOST_DNS])
    assert mc.immediate_apply_blockers(featureless, new) == ["machine.features"]
    message = mc.immediate_apply_error(featureless, new)
    assert message.startswith("this config change can't be applied in immediate mode\ndiff:\n")
    assert "+  features:\n" in message
    assert "hostDNS" in message  # not taken from the old config: it has none


def test_removing_the_features_section_needs_a_reboot(worker: bytes, featureless: bytes) -> None:
    assert mc.immediate_apply_blockers(worker, featureless) == ["machine.features"]


def test_an_empty_features_section_is_not_an_absent_one(featureless: bytes) -> None:
    new = apply_patches(featureless, ["machine:\n  features: {}\n"])
    assert mc.immediate_apply_blockers(featureless, new) == ["machine.features"]


def test_allowed_features_still_apply_when_both_have_the_section(worker: bytes) -> None:
    assert mc.immediate_apply_blockers(worker, apply_patches(worker, [HOST_DNS])) == []


def test_an_empty_map_is_not_an_absent_one(worker: bytes) -> None:
    # env: {} decodes to an empty, non-nil map: DeepEqual tells it from the nil of no env.
    new = apply_patches(worker, ["machine:\n  env: {}\n"])
    assert mc.immediate_apply_blockers(worker, new) == ["machine.env"]


def test_a_string_field_reads_empty_as_absent(worker: bytes) -> None:
    # machine.token is a plain string: "" is its zero value, as absent is.
    text = worker.decode()
    line = next(x for x in text.splitlines() if x.startswith("    token: "))
    empty = text.replace(line, '    token: ""', 1).encode()
    absent = text.replace(line + "\n", "", 1).encode()
    assert mc.immediate_apply_blockers(empty, absent) == []
    assert mc.immediate_apply_blockers(worker, absent) == ["machine.token"]
