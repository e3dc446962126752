"""Image verification on an emulated node: the ImageVerificationConfig document's rules become
ImageVerificationRules.security.talos.dev resources an os:reader can list (v1.13 and later),
as controllers/security/image_verification_config.go makes them; v1.12 has no such type."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_talos._proto.resource.definitions.security import security_pb2
from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster, EmulatedNode
from pytest_talos.emulator.node.apply import ApplyRequest
from pytest_talos.errors import NotFound

RULES = """\
---
apiVersion: v1alpha1
kind: ImageVerificationConfig
rules:
  - image: registry.example.com/*
    keyless:
      issuer: https://accounts.example.com
      subject: builder@example.com
  - image: docker.io/library/*
    skip: true
  - image: "*"
    deny: true
"""
IVR = "ImageVerificationRules.security.talos.dev"


def _apply(node: EmulatedNode, config: bytes) -> None:
    result = node.run(lambda state: state.apply_configuration(ApplyRequest(config, "NO_REBOOT")))
    assert node.run(lambda state: state.active_config) == config, result


def _reader(cluster: EmulatedCluster, tmp_path: Path) -> TalosClient:
    identity = cluster.issue_client(["os:reader"], path=tmp_path / "reader")
    assert identity.path is not None
    return TalosClient.from_talosconfig(identity.path, env={})


@pytest.fixture
def v113(tmp_path: Path) -> Iterator[tuple[EmulatedCluster, TalosClient]]:
    with EmulatedCluster(controlplanes=1, workers=0, time_scale=50) as cluster:
        reader = _reader(cluster, tmp_path)
        with reader:
            yield cluster, reader


def test_each_rule_is_a_resource_in_order_and_readers_may_list_them(
    v113: tuple[EmulatedCluster, TalosClient],
) -> None:
    cluster, reader = v113
    node = cluster.emulated_nodes[0]
    assert reader.list_resources(IVR, namespace="security") == []
    config = node.run(lambda state: state.active_config)
    _apply(node, config + RULES.encode())
    rules = reader.list_resources(IVR, namespace="security")
    assert [rule.id for rule in rules] == ["0000", "0001", "0002"]
    assert rules[0].spec == {
        "imagePattern": "registry.example.com/*",
        "skip": False,
        "deny": False,
        "keylessVerifier": {
            "issuer": "https://accounts.example.com",
            "subject": "builder@example.com",
        },
    }
    assert (rules[1].spec["skip"], rules[2].spec["deny"]) == (True, True)
    # the protobuf spec (api/resource/definitions/security/security.proto) says the same
    wire = security_pb2.ImageVerificationRuleSpec.FromString(rules[0].spec_bytes)
    assert (wire.image_pattern, wire.keyless_verifier.subject) == (
        "registry.example.com/*",
        "builder@example.com",
    )
    assert not wire.HasField("public_key_verifier")
    # the document removed: the controller cleans its outputs up
    _apply(node, config)
    assert reader.list_resources(IVR, namespace="security") == []


def test_v1_12_has_no_image_verification_type(tmp_path: Path) -> None:
    with EmulatedCluster(controlplanes=1, workers=0, time_scale=50, talos_version="v1.12") as c:
        reader = _reader(c, tmp_path)
        with reader, pytest.raises(NotFound, match="not registered"):
            reader.list_resources(IVR, namespace="security")
