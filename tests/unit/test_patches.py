"""Machine-config patching: strategic merge, $patch: delete, JSON6902, YAML in and out."""

from __future__ import annotations

import copy
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_talos.errors import TalosError
from pytest_talos.patches import (
    PatchError,
    apply_json6902,
    apply_patches,
    apply_strategic_merge,
    config_diff,
    detect_patch_kind,
    document_id,
    dump_documents,
    load_documents,
)

BASE = b"""\
version: v1alpha1  # the legacy document
machine:
  type: worker
  token: abc.def
  certSANs:
    - 10.5.0.2
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.36.0
  network:
    hostname: worker-1
    interfaces:
      - interface: eth0
        dhcp: true
        addresses:
          - 10.5.0.3/24
        vlans:
          - vlanId: 10
            mtu: 1400
  install:
    wipe: true
cluster:
  network:
    podSubnets:
      - 10.244.0.0/16
    serviceSubnets:
      - 10.96.0.0/12
  apiServer:
    admissionControl:
      - name: PodSecurity
        configuration:
          defaults:
            enforce: baseline
    auditPolicy:
      apiVersion: audit.k8s.io/v1
      kind: Policy
      rules:
        - level: Metadata
"""

EXTENSION = b"""\
apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: foo
configFiles:
  - content: hello
    mountPath: /etc/foo
environment:
  - FOO=BAR
"""

SIDEROLINK = b"""\
apiVersion: v1alpha1
kind: SideroLinkConfig
apiUrl: https://siderolink.example/join
"""

MULTI = BASE + b"---\n" + EXTENSION + b"---\n" + SIDEROLINK


DELETE = {"$patch": "delete"}


def nested(path: str, value: Any) -> dict[str, Any]:
    """``nested("a.b", v)`` is ``{"a": {"b": v}}``: a patch reaching down a key path."""
    for key in reversed(path.split(".")):
        value = {key: value}
    return dict(value)


def v1alpha1(config: bytes) -> dict[str, Any]:
    """The v1alpha1 document of a dumped config."""
    docs = [doc for doc in load_documents(config) if "kind" not in doc]
    assert len(docs) == 1
    return docs[0]


def normalized(config: bytes) -> bytes:
    """The config as apply_patches would dump it (no comments, our formatting)."""
    return dump_documents(load_documents(config))


# --------------------------------------------------------------------------- YAML in and out


def test_load_documents_reads_every_document_in_order() -> None:
    docs = load_documents(MULTI)

    assert [document_id(doc) for doc in docs] == [
        ("", "v1alpha1", None),
        ("v1alpha1", "ExtensionServiceConfig", "foo"),
        ("v1alpha1", "SideroLinkConfig", None),
    ]
    assert docs[0]["machine"]["network"]["interfaces"][0]["vlans"][0]["vlanId"] == 10


def test_load_documents_accepts_str_and_skips_empty_documents() -> None:
    docs = load_documents("---\n---\n" + SIDEROLINK.decode() + "---\n")

    assert docs == [
        {
            "apiVersion": "v1alpha1",
            "kind": "SideroLinkConfig",
            "apiUrl": "https://siderolink.example/join",
        }
    ]


def test_dump_documents_is_block_style_in_insertion_order_with_separators() -> None:
    docs: list[dict[str, Any]] = [
        {"version": "v1alpha1", "machine": {"type": "worker", "certSANs": ["b", "a"]}},
        {"apiVersion": "v1alpha1", "kind": "Example", "name": "n", "items": [{"k": 1, "j": True}]},
    ]

    assert dump_documents(docs) == (
        b"version: v1alpha1\n"
        b"machine:\n"
        b"  type: worker\n"
        b"  certSANs:\n"
        b"    - b\n"
        b"    - a\n"
        b"---\n"
        b"apiVersion: v1alpha1\n"
        b"kind: Example\n"
        b"name: n\n"
        b"items:\n"
        b"  - k: 1\n"
        b"    j: true\n"
    )


def test_dump_documents_writes_multi_line_text_as_a_literal_block() -> None:
    dumped = dump_documents([{"apiVersion": "v1", "kind": "X", "content": "line 1\nline 2\n"}])

    assert b"content: |\n  line 1\n  line 2\n" in dumped
    assert load_documents(dumped)[0]["content"] == "line 1\nline 2\n"


def test_dump_documents_of_nothing_is_empty() -> None:
    assert dump_documents([]) == b""


@pytest.mark.parametrize(
    "scalar", ["0777", "1.30", "yes", "on", "True", "10:20", "2026-04-27", "0x1F", "1e5", "1_000"]
)
def test_scalars_are_kept_exactly_as_written(scalar: str) -> None:
    # Go reads these by the field's type; converting or quoting them would change that
    config = f"machine:\n  nodeLabels:\n    label: {scalar}\n".encode()

    dumped = apply_patches(config, [{"machine": {"nodeLabels": {"other": "x"}}}])

    assert f"    label: {scalar}\n".encode() in dumped
    assert str(v1alpha1(dumped)["machine"]["nodeLabels"]["label"]) == scalar


def test_yaml_core_schema_scalars_have_their_types() -> None:
    doc = load_documents(b"machine:\n  a: true\n  b: 12\n  c: 1.5\n  d: null\n  e: '12'\n")[0]

    assert doc["machine"] == {"a": True, "b": 12, "c": 1.5, "d": None, "e": "12"}


def test_malformed_config_yaml_names_the_line() -> None:
    with pytest.raises(
        PatchError,
        match=r"machine config is not valid YAML: line 4, column 1: while parsing a flow sequence "
        r"\(started at line 3, column 8\): .*expected ',' or '\]'",
    ):
        load_documents(b"machine:\n  type: worker\n  bad: [unclosed\n")


def test_duplicate_keys_are_rejected() -> None:
    with pytest.raises(PatchError, match=r"line 3.*mapping key 'type' already defined"):
        load_documents(b"machine:\n  type: worker\n  type: controlplane\n")


def test_non_utf8_input_is_rejected() -> None:
    with pytest.raises(PatchError, match="machine config is not UTF-8 text"):
        load_documents(b"machine:\n  type: \xff\n")


def test_a_document_must_be_a_mapping() -> None:
    with pytest.raises(PatchError, match="expected a YAML mapping document at line 3"):
        load_documents(b"machine: {}\n---\n- a list\n")


def test_a_document_without_kind_must_be_the_v1alpha1_one() -> None:
    with pytest.raises(PatchError, match="document at line 1 is missing kind"):
        load_documents(b"foo: bar\n")


def test_a_document_with_kind_needs_api_version() -> None:
    with pytest.raises(PatchError, match=r"kind 'SideroLinkConfig'\) is missing apiVersion"):
        load_documents(b"kind: SideroLinkConfig\napiUrl: x\n")


def test_duplicate_documents_are_rejected() -> None:
    with pytest.raises(PatchError, match="duplicate document v1alpha1/SideroLinkConfig at line 5"):
        load_documents(SIDEROLINK + b"---\n" + SIDEROLINK)


def test_patch_error_is_a_talos_error() -> None:
    assert issubclass(PatchError, TalosError)


# --------------------------------------------------------------------------- strategic merge


def test_adding_a_node_label_key() -> None:
    patched = apply_patches(BASE, ["machine:\n  nodeLabels:\n    example.com/role: edge\n"])

    assert v1alpha1(patched)["machine"]["nodeLabels"] == {"example.com/role": "edge"}
    assert v1alpha1(patched)["machine"]["type"] == "worker"


def test_extra_arg_added_then_deleted_restores_the_original_document() -> None:
    # field report B4/B5: an unknown kubelet flag, then `$patch: delete` of just that key
    added = apply_patches(BASE, ["machine:\n  kubelet:\n    extraArgs:\n      foo-bar: x\n"])
    assert v1alpha1(added)["machine"]["kubelet"]["extraArgs"] == {"foo-bar": "x"}

    removed = apply_patches(
        added, ["machine:\n  kubelet:\n    extraArgs:\n      foo-bar:\n        $patch: delete\n"]
    )

    assert removed == normalized(BASE)


def test_deleting_one_extra_arg_keeps_the_others() -> None:
    added = apply_patches(BASE, [{"machine": {"kubelet": {"extraArgs": {"a": "1", "b": "2"}}}}])

    removed = apply_patches(added, [nested("machine.kubelet.extraArgs.a", DELETE)])

    assert v1alpha1(removed)["machine"]["kubelet"]["extraArgs"] == {"b": "2"}


def test_extra_args_are_copied_key_by_key() -> None:
    config = apply_patches(BASE, [nested("cluster.apiServer.extraArgs", {"a": ["x"], "b": "1"})])

    patched = apply_patches(config, [nested("cluster.apiServer.extraArgs", {"a": ["y"], "c": "3"})])

    extra = v1alpha1(patched)["cluster"]["apiServer"]["extraArgs"]
    assert extra == {"a": ["y"], "b": "1", "c": "3"}  # Talos Args: values replaced, not appended


def test_pod_and_service_subnets_are_replaced_not_appended() -> None:
    patch = (
        "cluster:\n  network:\n"
        "    podSubnets: [10.200.0.0/16]\n    serviceSubnets: [10.201.0.0/16]\n"
    )

    network = v1alpha1(apply_patches(BASE, [patch]))["cluster"]["network"]

    assert network["podSubnets"] == ["10.200.0.0/16"]
    assert network["serviceSubnets"] == ["10.201.0.0/16"]


def test_an_empty_replace_field_in_a_patch_leaves_the_config_alone() -> None:
    network = v1alpha1(apply_patches(BASE, [{"cluster": {"network": {"podSubnets": []}}}]))

    assert network["cluster"]["network"]["podSubnets"] == ["10.244.0.0/16"]


def test_audit_policy_is_replaced_as_a_whole() -> None:
    policy = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"]}

    patched = apply_patches(BASE, [{"cluster": {"apiServer": {"auditPolicy": policy}}}])

    assert v1alpha1(patched)["cluster"]["apiServer"]["auditPolicy"] == policy


def test_cert_sans_are_appended() -> None:
    patched = apply_patches(BASE, ["machine:\n  certSANs:\n    - 127.0.0.1\n"])

    assert v1alpha1(patched)["machine"]["certSANs"] == ["10.5.0.2", "127.0.0.1"]


def test_scalars_are_overwritten() -> None:
    patched = apply_patches(BASE, [{"machine": {"network": {"hostname": "worker-2"}}}])

    assert v1alpha1(patched)["machine"]["network"]["hostname"] == "worker-2"


@pytest.mark.parametrize("zero", ["", 0, 0.0, None])
def test_zero_values_do_not_overwrite(zero: object) -> None:
    patched = apply_patches(BASE, [{"machine": {"network": {"hostname": zero}, "token": zero}}])

    assert v1alpha1(patched)["machine"]["network"]["hostname"] == "worker-1"
    assert v1alpha1(patched)["machine"]["token"] == "abc.def"


def test_false_always_merges() -> None:
    patched = apply_patches(BASE, ["machine:\n  install:\n    wipe: false\n"])

    assert v1alpha1(patched)["machine"]["install"]["wipe"] is False


def test_maps_are_merged_per_key() -> None:
    patched = apply_patches(BASE, [nested("machine.kubelet.disableManifestsDirectory", True)])

    assert v1alpha1(patched)["machine"]["kubelet"] == {
        "image": "ghcr.io/siderolabs/kubelet:v1.36.0",
        "disableManifestsDirectory": True,
    }


def test_interfaces_are_merged_by_name() -> None:
    patch = """\
machine:
  network:
    interfaces:
      - interface: eth0
        mtu: 9000
        addresses: [10.5.0.4/24]
      - interface: eth1
        dhcp: true
"""
    interfaces = v1alpha1(apply_patches(BASE, [patch]))["machine"]["network"]["interfaces"]

    assert interfaces == [
        {
            "interface": "eth0",
            "dhcp": True,
            "addresses": ["10.5.0.3/24", "10.5.0.4/24"],
            "vlans": [{"vlanId": 10, "mtu": 1400}],
            "mtu": 9000,
        },
        {"interface": "eth1", "dhcp": True},
    ]


def test_interfaces_are_matched_by_equal_device_selector() -> None:
    config = "machine:\n  network:\n    interfaces:\n      - deviceSelector: {hardwareAddr: aa:*}\n"
    patch = {
        "machine": {
            "network": {
                "interfaces": [
                    {"deviceSelector": {"hardwareAddr": "aa:*"}, "mtu": 1500},
                    {"deviceSelector": {"hardwareAddr": "bb:*"}, "dhcp": True},
                ]
            }
        }
    }

    interfaces = v1alpha1(apply_patches(config, [patch]))["machine"]["network"]["interfaces"]

    assert interfaces == [
        {"deviceSelector": {"hardwareAddr": "aa:*"}, "mtu": 1500},
        {"deviceSelector": {"hardwareAddr": "bb:*"}, "dhcp": True},
    ]


def test_vlans_are_merged_by_vlan_id() -> None:
    patch = {
        "machine": {
            "network": {
                "interfaces": [
                    {
                        "interface": "eth0",
                        "vlans": [{"vlanId": 10, "mtu": 9000}, {"vlanId": 20, "dhcp": True}],
                    }
                ]
            }
        }
    }

    eth0 = v1alpha1(apply_patches(BASE, [patch]))["machine"]["network"]["interfaces"][0]

    assert eth0["vlans"] == [{"vlanId": 10, "mtu": 9000}, {"vlanId": 20, "dhcp": True}]


def test_admission_control_is_merged_by_name() -> None:
    patch = """\
cluster:
  apiServer:
    admissionControl:
      - name: PodSecurity
        configuration:
          defaults:
            audit: restricted
      - name: EventRateLimit
"""
    plugins = v1alpha1(apply_patches(BASE, [patch]))["cluster"]["apiServer"]["admissionControl"]

    assert plugins == [
        {
            "name": "PodSecurity",
            "configuration": {"defaults": {"enforce": "baseline", "audit": "restricted"}},
        },
        {"name": "EventRateLimit"},
    ]


def test_other_lists_are_appended() -> None:
    eth0 = {"interface": "eth0", "routes": [{"network": "0.0.0.0/0"}]}
    patch = nested("machine.network.interfaces", [eth0])

    once = apply_patches(BASE, [patch])
    twice = apply_patches(once, [patch])

    routes = v1alpha1(twice)["machine"]["network"]["interfaces"][0]["routes"]
    assert routes == [{"network": "0.0.0.0/0"}, {"network": "0.0.0.0/0"}]


def test_a_patch_needs_no_version_key() -> None:
    patched = apply_patches(BASE, ["cluster:\n  allowSchedulingOnControlPlanes: true\n"])

    assert v1alpha1(patched)["cluster"]["allowSchedulingOnControlPlanes"] is True


def test_a_patch_of_only_identity_keys_changes_nothing() -> None:
    assert apply_patches(BASE, ["version: v1alpha1\n", {}]) == normalized(BASE)


def test_shape_mismatch_names_the_path() -> None:
    expected = r"cannot merge a string into a list at 'machine.certSANs'"
    with pytest.raises(PatchError, match=expected):
        apply_patches(BASE, [{"machine": {"certSANs": "oops"}}])


def test_other_documents_are_matched_by_api_version_kind_and_name() -> None:
    patch = """\
apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: foo
environment:
  - BAZ=QUX
configFiles:
  - content: changed
    mountPath: /etc/foo
"""
    docs = load_documents(apply_patches(MULTI, [patch]))

    assert len(docs) == 3
    assert docs[1]["environment"] == ["FOO=BAR", "BAZ=QUX"]
    assert docs[1]["configFiles"] == [{"content": "changed", "mountPath": "/etc/foo"}]


def test_unmatched_documents_are_appended() -> None:
    other = b"apiVersion: v1alpha1\nkind: Other\nkey: v\n"
    patch = EXTENSION.replace(b"name: foo", b"name: bar") + b"---\n" + other

    docs = load_documents(apply_patches(MULTI, [patch]))

    assert [document_id(doc) for doc in docs][3:] == [
        ("v1alpha1", "ExtensionServiceConfig", "bar"),
        ("v1alpha1", "Other", None),
    ]
    assert docs[1]["configFiles"][0]["content"] == "hello"  # foo untouched


def test_the_v1alpha1_patch_document_merges_into_a_multi_document_config() -> None:
    patched = apply_patches(MULTI, ["version: v1alpha1\nmachine:\n  nodeLabels:\n    a: b\n"])

    assert v1alpha1(patched)["machine"]["nodeLabels"] == {"a": "b"}
    assert len(load_documents(patched)) == 3


# --------------------------------------------------------------------------- $patch: delete


def test_delete_a_document_by_kind() -> None:
    patched = apply_patches(MULTI, [SIDEROLINK + b"$patch: delete\n"])

    kinds = [document_id(doc)[1] for doc in load_documents(patched)]
    assert kinds == ["v1alpha1", "ExtensionServiceConfig"]


def test_delete_a_document_by_kind_and_name() -> None:
    config = MULTI + b"---\n" + EXTENSION.replace(b"name: foo", b"name: bar")
    patch = "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: foo\n$patch: delete\n"

    names = [doc.get("name") for doc in load_documents(apply_patches(config, [patch]))]

    assert names == [None, None, "bar"]


def test_add_then_delete_a_document_restores_the_config() -> None:
    other = "apiVersion: v1alpha1\nkind: Other\nname: x\nkey: v\n"

    added = apply_patches(MULTI, [other])
    removed = apply_patches(added, ["apiVersion: v1alpha1\nkind: Other\nname: x\n$patch: delete\n"])

    assert len(load_documents(added)) == 4
    assert removed == normalized(MULTI)


def test_a_document_can_be_deleted_and_recreated_in_one_patch() -> None:
    patch = SIDEROLINK + b"$patch: delete\n---\n" + SIDEROLINK.replace(b"example", b"other")

    docs = load_documents(apply_patches(MULTI, [patch]))

    assert docs[-1]["apiUrl"] == "https://siderolink.other/join"
    assert len(docs) == 3


def test_one_patch_can_delete_and_merge_across_documents() -> None:
    patch = b"""\
apiVersion: v1alpha1
kind: SideroLinkConfig
$patch: delete
---
apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: foo
configFiles:
  - mountPath: /etc/foo
    $patch: delete
  - content: new
    mountPath: /etc/bar
---
machine:
  network:
    hostname:
      $patch: delete
    interfaces:
      - interface: eth0
        $patch: delete
      - interface: eth1
        dhcp: true
"""
    docs = load_documents(apply_patches(MULTI, [patch]))

    assert [document_id(doc)[1] for doc in docs] == ["v1alpha1", "ExtensionServiceConfig"]
    assert docs[0]["machine"]["network"] == {"interfaces": [{"interface": "eth1", "dhcp": True}]}
    assert docs[1]["configFiles"] == [{"content": "new", "mountPath": "/etc/bar"}]
    assert docs[1]["environment"] == ["FOO=BAR"]


def test_deleting_a_missing_document_fails() -> None:
    expected = r"delete of document v1alpha1/Nothing failed: lookup failed"
    with pytest.raises(PatchError, match=expected):
        apply_patches(MULTI, ["apiVersion: v1alpha1\nkind: Nothing\n$patch: delete\n"])


def test_the_v1alpha1_document_cannot_be_deleted() -> None:
    with pytest.raises(PatchError, match="cannot remove the v1alpha1 document"):
        apply_patches(MULTI, ["version: v1alpha1\n$patch: delete\n"])


def test_delete_a_map_key() -> None:
    patched = apply_patches(BASE, [{"machine": {"network": {"hostname": {"$patch": "delete"}}}}])

    assert "hostname" not in v1alpha1(patched)["machine"]["network"]


def test_delete_a_key_inside_another_document() -> None:
    patch = EXTENSION.split(b"configFiles")[0] + b"environment:\n  $patch: delete\n"

    docs = load_documents(apply_patches(MULTI, [patch]))

    assert "environment" not in docs[1]
    assert docs[1]["configFiles"] == [{"content": "hello", "mountPath": "/etc/foo"}]


def test_deleting_a_missing_key_fails_and_names_the_path() -> None:
    patch = "machine:\n  kubelet:\n    extraArgs:\n      foo-bar:\n        $patch: delete\n"

    with pytest.raises(PatchError) as caught:
        apply_patches(BASE, [patch])

    message = str(caught.value)
    assert "'machine.kubelet.extraArgs.foo-bar' in document v1alpha1" in message
    assert "lookup failed ('machine.kubelet.extraArgs' is not in the config)" in message


def test_delete_a_list_item_then_merge_the_rest_of_the_patch() -> None:
    # as in Talos's own test data: the deletes run first, then eth0 comes back new
    patch = """\
machine:
  network:
    interfaces:
      - interface: eth0
        $patch: delete
      - interface: eth0
        dummy: true
"""
    interfaces = v1alpha1(apply_patches(BASE, [patch]))["machine"]["network"]["interfaces"]

    assert interfaces == [{"interface": "eth0", "dummy": True}]


def test_deleting_the_last_list_item_drops_the_emptied_containers() -> None:
    patch = nested("machine.network.interfaces", [{"interface": "eth0", "$patch": "delete"}])

    network = v1alpha1(apply_patches(BASE, [patch]))["machine"]["network"]

    assert network == {"hostname": "worker-1"}


def test_delete_an_admission_plugin_by_name() -> None:
    patch = nested("cluster.apiServer.admissionControl", [{"name": "PodSecurity", **DELETE}])

    api_server = v1alpha1(apply_patches(BASE, [patch]))["cluster"]["apiServer"]

    assert "admissionControl" not in api_server
    assert "auditPolicy" in api_server


def test_delete_a_list_item_in_another_document() -> None:
    identity = EXTENSION.split(b"configFiles")[0]
    patch = identity + b"configFiles:\n  - mountPath: /etc/foo\n    $patch: delete\n"

    docs = load_documents(apply_patches(MULTI, [patch]))

    assert "configFiles" not in docs[1]


def test_deleting_a_missing_list_item_fails() -> None:
    patch = nested("machine.network.interfaces", [{"interface": "eth9", **DELETE}])

    expected = r"interfaces\[interface=eth9\].*no item has interface: eth9"
    with pytest.raises(PatchError, match=expected):
        apply_patches(BASE, [patch])


def test_a_deleted_list_item_needs_a_selecting_key() -> None:
    patch = "machine:\n  certSANs:\n    - $patch: delete\n"

    with pytest.raises(PatchError, match="needs a key: value saying which item to delete"):
        apply_patches(BASE, [patch])


def test_deleting_inside_a_list_item_is_refused() -> None:
    patch = """\
machine:
  network:
    interfaces:
      - interface: eth0
        vlans:
          - vlanId: 10
            $patch: delete
"""
    with pytest.raises(PatchError, match="cannot delete inside a list item"):
        apply_patches(BASE, [patch])


def test_only_patch_delete_is_supported() -> None:
    with pytest.raises(PatchError, match=r"unsupported '\$patch: replace' at 'machine.network'"):
        apply_patches(BASE, [{"machine": {"network": {"$patch": "replace"}}}])


# --------------------------------------------------------------------------- JSON6902

SINGLE = b"""\
version: v1alpha1
machine:
  type: worker
  certSANs: [a, b]
  nodeLabels:
    x/y: '1'
"""


@pytest.mark.parametrize(
    ("op", "expected_machine"),
    [
        pytest.param(
            {"op": "add", "path": "/machine/token", "value": "t"},
            {"type": "worker", "certSANs": ["a", "b"], "nodeLabels": {"x/y": "1"}, "token": "t"},
            id="add-key",
        ),
        pytest.param(
            {"op": "add", "path": "/machine/certSANs/1", "value": "z"},
            {"type": "worker", "certSANs": ["a", "z", "b"], "nodeLabels": {"x/y": "1"}},
            id="add-insert",
        ),
        pytest.param(
            {"op": "add", "path": "/machine/certSANs/-", "value": "z"},
            {"type": "worker", "certSANs": ["a", "b", "z"], "nodeLabels": {"x/y": "1"}},
            id="add-append",
        ),
        pytest.param(
            {"op": "remove", "path": "/machine/nodeLabels/x~1y"},
            {"type": "worker", "certSANs": ["a", "b"], "nodeLabels": {}},
            id="remove-escaped",
        ),
        pytest.param(
            {"op": "remove", "path": "/machine/certSANs/0"},
            {"type": "worker", "certSANs": ["b"], "nodeLabels": {"x/y": "1"}},
            id="remove-item",
        ),
        pytest.param(
            {"op": "replace", "path": "/machine/type", "value": "controlplane"},
            {"type": "controlplane", "certSANs": ["a", "b"], "nodeLabels": {"x/y": "1"}},
            id="replace",
        ),
        pytest.param(
            {"op": "move", "from": "/machine/type", "path": "/machine/role"},
            {"certSANs": ["a", "b"], "nodeLabels": {"x/y": "1"}, "role": "worker"},
            id="move",
        ),
        pytest.param(
            {"op": "copy", "from": "/machine/certSANs/1", "path": "/machine/nodeLabels/b"},
            {"type": "worker", "certSANs": ["a", "b"], "nodeLabels": {"x/y": "1", "b": "b"}},
            id="copy",
        ),
        pytest.param(
            {"op": "test", "path": "/machine/certSANs", "value": ["a", "b"]},
            {"type": "worker", "certSANs": ["a", "b"], "nodeLabels": {"x/y": "1"}},
            id="test",
        ),
    ],
)
def test_json6902_operations(op: dict[str, Any], expected_machine: dict[str, Any]) -> None:
    patched = apply_patches(SINGLE, [[op]])

    assert v1alpha1(patched)["machine"] == expected_machine


def test_json6902_tilde_escape() -> None:
    doc = apply_json6902({"a~b": {"c/d": 1}}, [{"op": "replace", "path": "/a~0b/c~1d", "value": 2}])

    assert doc == {"a~b": {"c/d": 2}}


def test_json6902_replace_of_the_root() -> None:
    assert apply_json6902({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}


def test_json6902_operations_run_in_order() -> None:
    ops = [
        {"op": "add", "path": "/machine/nodeLabels/new", "value": "v"},
        {"op": "test", "path": "/machine/nodeLabels/new", "value": "v"},
        {"op": "remove", "path": "/machine/nodeLabels/new"},
    ]
    assert apply_patches(SINGLE, [ops]) == normalized(SINGLE)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('[{"op": "add", "path": "/machine/token", "value": "t"}]', "json6902"),
        ("- op: add\n  path: /machine/token\n  value: t\n", "json6902"),
        ("[{op: add, path: /machine/token, value: t}]", "json6902"),  # YAML flow, not JSON
        ('{"machine": {"token": "t"}}', "strategic"),
        ("machine:\n  token: t\n", "strategic"),
    ],
)
def test_json_and_yaml_patches_are_told_apart(text: str, kind: str) -> None:
    assert detect_patch_kind(text) == kind
    assert detect_patch_kind(text.encode()) == kind
    assert v1alpha1(apply_patches(SINGLE, [text]))["machine"]["token"] == "t"


def test_detect_patch_kind_of_python_objects() -> None:
    assert detect_patch_kind({"machine": {}}) == "strategic"
    assert detect_patch_kind(types.MappingProxyType({"machine": {}})) == "strategic"
    assert detect_patch_kind([{"op": "remove", "path": "/machine"}]) == "json6902"


def test_json6902_test_compares_numbers_as_json_does() -> None:
    assert apply_json6902({"n": 1}, [{"op": "test", "path": "/n", "value": 1.0}]) == {"n": 1}
    with pytest.raises(PatchError, match="test failed"):
        apply_json6902({"n": 1}, [{"op": "test", "path": "/n", "value": True}])


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (
            {"op": "frob", "path": "/a"},
            r"JSON6902 op 'frob' is not one of add, remove, replace, move, copy, test",
        ),
        ({"path": "/a"}, r"JSON6902 op None is not one of"),
        ({"op": "add", "value": 1}, r"'path' must be a JSON pointer"),
        ({"op": "copy", "path": "/machine/a"}, r"'from' must be a JSON pointer"),
        ({"op": "remove", "path": "/machine/nothing"}, r"/machine/nothing does not exist"),
        ({"op": "replace", "path": "/machine/certSANs/2", "value": 1}, r"'2' is not an index"),
        ({"op": "remove", "path": "/machine/certSANs/-3"}, r"'-3' is not an index of a list of 2"),
        ({"op": "add", "path": "/machine/certSANs/-4", "value": 1}, r"'-4' is not an index"),
        ({"op": "copy", "from": "/machine/certSANs/5", "path": "/x"}, r"'5' is not an index"),
        ({"op": "move", "from": "/machine/nothing", "path": "/x"}, r"/machine/nothing does not"),
        ({"op": "add", "path": "", "value": {}}, r"whole document cannot be the path"),
        ({"op": "copy", "from": "", "path": "/x"}, r"whole document cannot be the from"),
        ({"op": "replace", "path": "", "value": "x"}, r"only be replaced by a list or a map"),
        ({"op": "test", "path": "/machine/type"}, r"test failed"),
        ({"op": "add", "path": "/nothing/a", "value": 1}, r"/nothing does not exist"),
        ({"op": "add", "path": "/machine/certSANs/7", "value": 1}, r"'7' is not an index of a"),
        ({"op": "remove", "path": "/machine/certSANs/-"}, r"'-' is not an index of a list"),
        ({"op": "add", "path": "/machine/type/x", "value": 1}, r"/machine/type is a string, not"),
        (
            {"op": "test", "path": "/machine/type", "value": "controlplane"},
            r"test failed: /machine/type is not the expected value$",
        ),
        ({"op": "move", "from": "/machine", "path": "/machine/x"}, r"into one of its own children"),
        ({"op": "remove", "path": "machine"}, r"must start with '/'"),
        ({"op": "remove", "path": "/machine/~2"}, r"/machine/~02 does not exist"),
        ({"op": "remove", "path": ""}, r"the whole document cannot be the path"),
        ("remove /machine", r"operation #1 is a string; write each one as \{op: ..., path: ...\}"),
    ],
)
def test_json6902_errors(op: Any, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        apply_patches(SINGLE, [[op]])


def test_json6902_move_looks_the_destination_up_after_taking_the_value() -> None:
    # evanphx/json-patch removes the value first, then finds the destination in what is
    # left: a list item that moved up into the old place takes the value.
    doc = {"a": [[1], None, []]}
    moved = apply_json6902(doc, [{"op": "move", "from": "/a/1", "path": "/a/1/-"}])
    assert moved == {"a": [[1], [None]]}


@pytest.mark.parametrize(
    ("op", "expected_sans"),
    [
        pytest.param({"op": "remove", "path": "/machine/certSANs/-1"}, ["a"], id="remove-last"),
        pytest.param({"op": "remove", "path": "/machine/certSANs/-2"}, ["b"], id="remove-first"),
        pytest.param(
            {"op": "replace", "path": "/machine/certSANs/-1", "value": "z"},
            ["a", "z"],
            id="replace-last",
        ),
        pytest.param(
            {"op": "add", "path": "/machine/certSANs/-1", "value": "z"},
            ["a", "b", "z"],
            id="add-minus-one-appends",
        ),
        pytest.param(
            {"op": "add", "path": "/machine/certSANs/-3", "value": "z"},
            ["z", "a", "b"],
            id="add-front",
        ),
        pytest.param(
            {"op": "copy", "from": "/machine/certSANs/-1", "path": "/machine/certSANs/0"},
            ["b", "a", "b"],
            id="copy-from-last",
        ),
        pytest.param(
            {"op": "move", "from": "/machine/certSANs/-2", "path": "/machine/certSANs/-"},
            ["b", "a"],
            id="move-first-to-end",
        ),
        pytest.param(
            {"op": "replace", "path": "/machine/certSANs/01", "value": "z"},
            ["a", "z"],
            id="atoi-leading-zero",
        ),
        pytest.param(
            {"op": "replace", "path": "/machine/certSANs/+0", "value": "z"},
            ["z", "b"],
            id="atoi-plus-sign",
        ),
    ],
)
def test_json6902_negative_indices_as_evanphx_json_patch(
    op: dict[str, Any], expected_sans: list[str]
) -> None:
    # evanphx/json-patch (root package, v5.9.11) has SupportNegativeIndices on by default and
    # reads indices with strconv.Atoi.
    assert v1alpha1(apply_patches(SINGLE, [[op]]))["machine"]["certSANs"] == expected_sans


def test_json6902_test_of_a_negative_index() -> None:
    ops = [{"op": "test", "path": "/machine/certSANs/-1", "value": "b"}]
    assert apply_patches(SINGLE, [ops]) == normalized(SINGLE)


def test_json6902_library_extensions_beyond_rfc_6902() -> None:
    doc = {"m": {"a": 1}}
    # replace of a missing mapping key adds it
    assert apply_json6902(doc, [{"op": "replace", "path": "/m/b", "value": 2}]) == {
        "m": {"a": 1, "b": 2}
    }
    # add without a value writes null; copy from a missing key copies null
    assert apply_json6902(doc, [{"op": "add", "path": "/m/b"}]) == {"m": {"a": 1, "b": None}}
    assert apply_json6902(doc, [{"op": "copy", "from": "/m/x", "path": "/m/b"}]) == {
        "m": {"a": 1, "b": None}
    }
    # test of a missing key passes for null (or no value)
    assert apply_json6902(doc, [{"op": "test", "path": "/m/x", "value": None}]) == doc
    assert apply_json6902(doc, [{"op": "test", "path": "/m/x"}]) == doc
    # the first piece of a pointer is dropped, so a missing leading slash still resolves
    assert apply_json6902(doc, [{"op": "add", "path": "m/b", "value": 3}]) == {
        "m": {"a": 1},
        "b": 3,
    }
    # a `~` that escapes nothing is kept
    assert apply_json6902(doc, [{"op": "add", "path": "/m/~2", "value": 4}]) == {
        "m": {"a": 1, "~2": 4}
    }


def test_errors_never_echo_config_values() -> None:
    secret = "LS0tLS1CRUdJTiBFRDI1NTE5IFBSSVZBVEUgS0VZLS0tLS0K"
    config = f"machine:\n  ca:\n    key: {secret}\n".encode()
    failing: list[Any] = [
        [{"op": "test", "path": "/machine/ca/key", "value": "guess"}],
        [{"op": "add", "path": "/machine/ca/key/x", "value": 1}],
        {"machine": {"ca": {"key": {"nested": True}}}},
    ]
    for patch in failing:
        with pytest.raises(PatchError) as caught:
            apply_patches(config, [patch])
        assert secret not in str(caught.value)


def test_json6902_error_names_the_operation() -> None:
    ops = [
        {"op": "test", "path": "/machine/type", "value": "worker"},
        {"op": "remove", "path": "/x"},
    ]
    expected = r"patch #1: JSON6902 operation #2 \(remove /x\): /x does not exist"

    with pytest.raises(PatchError, match=expected):
        apply_patches(SINGLE, [ops])


def test_bad_op_in_a_text_patch_fails() -> None:
    with pytest.raises(PatchError, match="JSON6902 op 'frob' is not one of"):
        apply_patches(SINGLE, ['[{"op": "frob", "path": "/machine/type"}]'])


def test_json6902_is_refused_for_multi_document_configs() -> None:
    with pytest.raises(PatchError) as caught:
        apply_patches(MULTI, [[{"op": "add", "path": "/machine/token", "value": "t"}]])

    assert caught.value.message.startswith(
        "JSON6902 patches are not supported for multi-document machine configuration"
    )


def test_json6902_result_must_stay_a_machine_config() -> None:
    with pytest.raises(PatchError, match="patch #1 result: expected a YAML mapping document"):
        apply_patches(SINGLE, [[{"op": "replace", "path": "", "value": ["x"]}]])


# --------------------------------------------------------------------------- apply_patches


def test_patches_apply_in_order_and_kinds_mix() -> None:
    patched = apply_patches(
        SINGLE,
        [
            {"machine": {"token": "first"}},
            [{"op": "replace", "path": "/machine/token", "value": "second"}],
            "machine:\n  token: third\n",
        ],
    )

    assert v1alpha1(patched)["machine"]["token"] == "third"


def test_at_file_patches_are_read_from_disk(tmp_path: Path) -> None:
    patch_file = tmp_path / "labels.yaml"
    patch_file.write_text("machine:\n  nodeLabels:\n    from: file\n")

    patched = apply_patches(SINGLE, [f"@{patch_file}", f"@{patch_file}".encode()])

    assert v1alpha1(patched)["machine"]["nodeLabels"] == {"x/y": "1", "from": "file"}


def test_a_missing_patch_file_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(PatchError, match=r"cannot read patch file '.*nope.yaml': No such file"):
        apply_patches(SINGLE, [f"@{missing}"])


def test_malformed_patch_yaml_names_the_patch_and_line() -> None:
    expected = r"patch #2 is not valid YAML: line 3, column 9: mapping values are not allowed"
    with pytest.raises(PatchError, match=expected):
        apply_patches(SINGLE, [{}, "machine:\n  nodeLabels: x\n  bad: y: z\n"])


def test_malformed_patch_file_is_named(tmp_path: Path) -> None:
    patch_file = tmp_path / "bad.yaml"
    patch_file.write_text("machine: [\n")

    with pytest.raises(PatchError, match=r"patch file '.*bad.yaml' is not valid YAML: line 2"):
        apply_patches(SINGLE, [f"@{patch_file}"])


def test_a_bare_word_patch_hints_at_the_file_prefix() -> None:
    expected = r"found a string 'patch.yaml' \(to load a file, prefix its path with @\)"
    with pytest.raises(PatchError, match=expected):
        apply_patches(SINGLE, ["patch.yaml"])


def test_a_list_beside_other_documents_is_refused() -> None:
    with pytest.raises(PatchError, match="a JSON6902 patch must be a single list of operations"):
        apply_patches(SINGLE, ["machine: {}\n---\n- op: remove\n  path: /machine\n"])


def test_a_bare_json6902_operation_is_refused_with_a_hint() -> None:
    expected = r"looks like one JSON6902 operation.*pass \[\[op, ...\]\]"
    with pytest.raises(PatchError, match=expected):
        apply_patches(SINGLE, [{"op": "remove", "path": "/machine/type"}])


def test_a_patch_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(PatchError, match="patch #1 is a int; a patch is YAML/JSON text"):
        apply_patches(SINGLE, [42])  # type: ignore[list-item]


def test_a_single_patch_must_be_wrapped_in_a_list() -> None:
    with pytest.raises(PatchError, match="wrap a single patch in a list"):
        apply_patches(SINGLE, "machine: {}\n")


def test_a_malformed_patch_document_is_refused() -> None:
    with pytest.raises(PatchError, match="patch #1: document at line 1 is missing kind"):
        apply_patches(SINGLE, ["foo: bar\n"])


def test_duplicate_documents_in_a_patch_are_refused() -> None:
    with pytest.raises(PatchError, match="patch #1: duplicate document v1alpha1"):
        apply_patches(SINGLE, ["machine: {}\n---\ncluster: {}\n"])


def test_inputs_are_not_mutated() -> None:
    mapping_patch = {
        "machine": {
            "nodeLabels": {"x/y": {"$patch": "delete"}},
            "certSANs": ["c"],
            "network": {"interfaces": [{"interface": "eth0", "mtu": 1}]},
        }
    }
    ops = [{"op": "add", "path": "/machine/extra", "value": {"nested": [1]}}]
    before_patch, before_ops = copy.deepcopy(mapping_patch), copy.deepcopy(ops)

    first = apply_patches(SINGLE, [mapping_patch, ops])
    second = apply_patches(SINGLE, [mapping_patch, ops])

    assert first == second
    assert mapping_patch == before_patch
    assert ops == before_ops


def test_helpers_do_not_mutate_their_documents() -> None:
    docs = load_documents(MULTI)
    patch = [{"machine": {"certSANs": ["x"], "network": {"hostname": {"$patch": "delete"}}}}]
    before_docs, before_patch = copy.deepcopy(docs), copy.deepcopy(patch)

    merged = apply_strategic_merge(docs, patch)
    patched = apply_json6902(docs[0], [{"op": "remove", "path": "/machine/certSANs/0"}])

    assert docs == before_docs
    assert patch == before_patch
    assert merged[0]["machine"]["certSANs"] == ["10.5.0.2", "x"]
    assert patched["machine"]["certSANs"] == []


def test_read_only_mappings_are_accepted() -> None:
    patch = types.MappingProxyType({"machine": types.MappingProxyType({"token": "ro"})})

    assert v1alpha1(apply_patches(SINGLE, [patch]))["machine"]["token"] == "ro"


def test_patching_drops_comments_and_keeps_key_order() -> None:
    patched = apply_patches(BASE, [])

    assert b"#" not in patched
    assert patched.startswith(b"version: v1alpha1\nmachine:\n  type: worker\n  token: abc.def\n")


# --------------------------------------------------------------------------- config_diff


def test_config_diff_is_empty_for_equal_configs() -> None:
    assert config_diff(BASE, normalized(BASE)) == ""
    flow_style = b"machine: {type: worker}  # comment\n"
    assert config_diff(flow_style, b"machine:\n  type: worker\n") == ""


def test_config_diff_is_a_unified_diff_of_a_and_b() -> None:
    old = b"version: v1alpha1\nmachine:\n  type: worker  # comment\n"
    new = b"version: v1alpha1\nmachine:\n  type: controlplane\n"

    assert config_diff(old, new) == (
        "--- a\n+++ b\n@@ -1,3 +1,3 @@\n"
        " version: v1alpha1\n machine:\n-  type: worker\n+  type: controlplane\n"
    )


def test_config_diff_shows_documents_by_name() -> None:
    diff = config_diff(BASE, apply_patches(BASE, [EXTENSION]))

    assert "+name: foo\n" in diff
    assert "+kind: ExtensionServiceConfig\n" in diff


# --------------------------------------------------------------------------- properties

_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ-_./0123", min_size=1, max_size=8).filter(
    lambda k: k not in {"$patch", "kind", "apiVersion", "name", "version"}
)
_text = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")) | st.just("\n"),
    max_size=20,
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | _text
    | st.sampled_from(["yes", "on", "0777", "1e5", "1.30", "null", "~", "true", "10:20", "-", "'"])
)
_trees = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12,
)
_sections = st.dictionaries(_keys, _trees, max_size=4)


@st.composite
def _configs(draw: st.DrawFn) -> bytes:
    # real configs never have an empty machine section; a delete that empties it drops it
    sections = st.dictionaries(_keys, _trees, min_size=1, max_size=4)
    machine = draw(sections.filter(lambda m: "nodeLabels" not in m and "kubelet" not in m))
    labels = draw(st.dictionaries(_keys, _text, max_size=3))
    if labels:
        machine["nodeLabels"] = labels
    doc = {"version": "v1alpha1", "machine": machine, "cluster": draw(_sections)}
    return dump_documents([doc])


@settings(deadline=None, max_examples=30, database=None)
@given(_configs())
def test_dump_and_load_round_trip(config: bytes) -> None:
    assert dump_documents(load_documents(config)) == config


@settings(deadline=None, max_examples=30, database=None)
@given(_configs(), st.sampled_from([{}, {"machine": {}}, "version: v1alpha1\n", []]))
def test_an_empty_patch_is_the_identity(config: bytes, patch: Any) -> None:
    assert apply_patches(config, [patch]) == config


@settings(deadline=None, max_examples=30, database=None)
@given(_configs(), _keys, _text)
def test_delete_after_add_restores_a_label(config: bytes, key: str, value: str) -> None:
    labels = v1alpha1(config)["machine"].get("nodeLabels", {})
    key = key + "-new" if key in labels else key

    added = apply_patches(config, [{"machine": {"nodeLabels": {key: value}}}])
    removed = apply_patches(added, [{"machine": {"nodeLabels": {key: {"$patch": "delete"}}}}])

    assert v1alpha1(added)["machine"]["nodeLabels"][key] == value
    assert removed == config


@settings(deadline=None, max_examples=30, database=None)
@given(_configs(), _keys, _text)
def test_delete_after_add_restores_an_extra_arg(config: bytes, key: str, value: str) -> None:
    added = apply_patches(config, [{"machine": {"kubelet": {"extraArgs": {key: value}}}}])
    removed = apply_patches(added, [nested("machine.kubelet.extraArgs", {key: DELETE})])

    assert removed == config


@settings(deadline=None, max_examples=30, database=None)
@given(_configs(), _keys, _trees)
def test_json6902_add_then_remove_restores(config: bytes, key: str, value: Any) -> None:
    key = key if key not in v1alpha1(config)["machine"] else key + "-new"
    pointer = "/machine/" + key.replace("~", "~0").replace("/", "~1")

    added = apply_patches(config, [[{"op": "add", "path": pointer, "value": value}]])
    removed = apply_patches(added, [[{"op": "remove", "path": pointer}]])

    assert removed == config


# --------------------------------------------------------------------------- JSON6902 vs RFC 6902
# A differential test against the `jsonpatch` package (RFC 6902 as written): on the operations
# both accept, results must agree, and anything RFC 6902 refuses must be refused here too,
# except for the documented extensions of evanphx/json-patch (pytest_talos.patches.json6902).
# Values stay JSON-plain (no booleans or floats: Python's `True == 1` would blur `test`), and
# list indices stay canonical and non-negative, which is the subset both implement.

_JP_KEYS = st.sampled_from(["a", "b", "c", "x~y", "s/t"])
_JP_VALUES = st.recursive(
    st.none() | st.integers(-3, 3) | st.sampled_from(["", "v", "w"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_JP_KEYS, inner, max_size=3),
    max_leaves=8,
)
_JP_DOCS = st.dictionaries(_JP_KEYS, _JP_VALUES, max_size=4)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _existing_pointers(value: Any, prefix: str = "") -> list[str]:
    pointers = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            pointers += _existing_pointers(item, f"{prefix}/{_escape(key)}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            pointers += _existing_pointers(item, f"{prefix}/{index}")
    return pointers


@st.composite
def _jp_pointer(draw: st.DrawFn, doc: Any) -> str:
    """A pointer that mostly resolves: an existing one, or one more step below one."""
    base = draw(st.sampled_from(["", *_existing_pointers(doc)]))
    step = draw(st.sampled_from(["", "key", "index", "end"]))
    if step == "key" or (step and base == ""):
        return f"{base}/{_escape(draw(_JP_KEYS))}"
    if step == "index":
        return f"{base}/{draw(st.integers(0, 3))}"
    if step == "end":
        return f"{base}/-"
    return base or f"/{_escape(draw(_JP_KEYS))}"


@st.composite
def _jp_op(draw: st.DrawFn, doc: Any) -> dict[str, Any]:
    name = draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
    op: dict[str, Any] = {"op": name, "path": draw(_jp_pointer(doc))}
    if name in ("move", "copy"):
        op["from"] = draw(_jp_pointer(doc))
    if name in ("add", "replace", "test"):
        op["value"] = draw(_JP_VALUES)
    return op


def _resolve(doc: Any, pointer: str) -> tuple[bool, Any, Any]:
    """(found, parent, value) by RFC 6901, for classifying an operation."""
    import jsonpointer

    tokens = jsonpointer.JsonPointer(pointer).parts
    parent = jsonpointer.resolve_pointer(
        doc, jsonpointer.JsonPointer.from_parts(tokens[:-1]).path, default=_MISSING
    )
    value = jsonpointer.resolve_pointer(doc, pointer, default=_MISSING)
    return value is not _MISSING, parent, value


_MISSING = object()


def _walks_into_a_string(doc: Any, op: dict[str, Any]) -> bool:
    """Whether a pointer of ``op`` goes on past a string: RFC 6901 has no tokens inside a
    string (nor has evanphx/json-patch), but python-jsonpointer indexes it as a sequence
    (``/a/0/0`` of ``{"a": ["v"]}`` reads ``"v"``), so the reference is wrong there."""
    import jsonpointer

    for key in ("path", "from"):
        if key not in op:
            continue
        node = doc
        for token in jsonpointer.JsonPointer(op[key]).parts[:-1]:
            if isinstance(node, str):
                return True
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                break
        else:
            if isinstance(node, str):
                return True
    return False


def _is_library_extension(doc: Any, op: dict[str, Any]) -> bool:
    """Whether RFC 6902 refuses ``op`` only because evanphx/json-patch is more lenient."""
    name = op["op"]
    found, parent, _ = _resolve(doc, op["path"])
    if name == "replace":  # a missing mapping key is added
        return not found and isinstance(parent, dict)
    if name == "test":  # a missing key reads as null
        return not found and isinstance(parent, dict) and op["value"] is None
    if name == "copy":  # a missing mapping key copies as null
        source_found, source_parent, _ = _resolve(doc, op["from"])
        return not source_found and isinstance(source_parent, dict)
    if name == "move":  # into its own child: the list item that moved up takes its place
        return _moves_into_a_shifted_item(doc, op["from"], op["path"])
    return False


def _moves_into_a_shifted_item(doc: Any, source: str, path: str) -> bool:
    """A move of a list item to below itself, which RFC 6902 refuses: evanphx/json-patch
    takes the item out first, so the path then names the item that moved up into its
    place (``/a/0`` to ``/a/0/a`` of ``{"a": [null, {}]}`` gives ``{"a": [{"a": null}]}``)."""
    import jsonpointer

    source_tokens = jsonpointer.JsonPointer(source).parts
    path_tokens = jsonpointer.JsonPointer(path).parts
    if not (source_tokens and len(path_tokens) > len(source_tokens)):
        return False
    if path_tokens[: len(source_tokens)] != source_tokens:
        return False
    _, parent, _ = _resolve(doc, source)
    return isinstance(parent, list)


def test_the_oracle_knows_a_move_into_the_item_that_moved_up() -> None:
    # Found by the property below: RFC 6902 refuses it, the library Talos uses does not.
    doc: dict[str, Any] = {"a": [None, {}]}
    op = {"op": "move", "path": "/a/0/a", "from": "/a/0"}
    assert apply_json6902(doc, [op]) == {"a": [{"a": None}]}
    assert _is_library_extension(doc, op)
    assert not _is_library_extension({"a": {"b": {}}}, {**op, "path": "/a/b/c", "from": "/a/b"})


@settings(deadline=None, max_examples=400, database=None)
@given(st.data())
def test_json6902_agrees_with_rfc_6902_reference(data: st.DataObject) -> None:
    import jsonpatch
    import jsonpointer

    rfc_errors = (
        jsonpatch.JsonPatchException,
        jsonpointer.JsonPointerException,
        KeyError,
        IndexError,
        TypeError,
    )
    doc: Any = data.draw(_JP_DOCS)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(_jp_op(doc))
        try:
            expected: Any = jsonpatch.apply_patch(doc, [op])
        except rfc_errors:
            expected = _MISSING
        if _walks_into_a_string(doc, op):  # RFC 6901 refuses it; the reference does not
            expected = _MISSING
        try:
            ours: Any = apply_json6902(doc, [op])
        except PatchError:
            ours = _MISSING
        if expected is _MISSING:
            if ours is not _MISSING:
                assert _is_library_extension(doc, op), op
            return
        assert ours == expected, op
        doc = ours
