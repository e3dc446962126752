"""pytest_talos.drift without a cluster: configs compared as data, secrets masked, the
desired-state directory and its mapping."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from pytest_talos.drift import MASK, compare_configs, load_desired, mask_value
from pytest_talos.drift.compare import format_path
from pytest_talos.errors import ConfigError

TOKEN = "abcdef.0123456789abcdef"
SECRET = base64.b64encode(b"s" * 32).decode()
CA_CRT = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

BASE = f"""\
version: v1alpha1 # the schema
debug: false
machine:
    type: worker
    token: {TOKEN}
    ca:
        crt: {CA_CRT.decode()}
        key: ""
    certSANs: []
    kubelet:
        image: ghcr.io/siderolabs/kubelet:v1.36.0
cluster:
    secret: {SECRET}
    token: {TOKEN}
    secretboxEncryptionSecret: {SECRET}
    network:
        podSubnets: [10.244.0.0/16]
---
apiVersion: v1alpha1
kind: HostnameConfig
auto: stable
"""


def _lines(left: str, right: str) -> list[str]:
    return compare_configs(left, right).lines()


# --------------------------------------------------------------------------- as data


def test_comments_key_order_and_document_order_do_not_count() -> None:
    reordered = f"""\
apiVersion: v1alpha1
kind: HostnameConfig
auto: stable   # a comment
---
cluster:
    network: {{podSubnets: [10.244.0.0/16]}}
    secretboxEncryptionSecret: {SECRET}
    token: {TOKEN}
    secret: {SECRET}
machine:
    kubelet: {{image: "ghcr.io/siderolabs/kubelet:v1.36.0"}}
    ca: {{key: "", crt: {CA_CRT.decode()}}}
    token: {TOKEN}
    type: worker
debug: false
version: v1alpha1
"""
    assert compare_configs(BASE, reordered).equal


def test_missing_key_equals_an_empty_or_zero_value() -> None:
    # Talos's encoder leaves out empty fields: certSANs: [] and debug: false vanish.
    without = BASE.replace("    certSANs: []\n", "").replace("debug: false\n", "")
    assert compare_configs(BASE, without).equal


def test_a_changed_value_names_the_document_and_path() -> None:
    changed = BASE.replace("kubelet:v1.36.0", "kubelet:v1.35.0")
    comparison = compare_configs(BASE, changed)
    assert comparison.lines() == [
        'v1alpha1 machine.kubelet.image: desired "ghcr.io/siderolabs/kubelet:v1.36.0", '
        'actual "ghcr.io/siderolabs/kubelet:v1.35.0"'
    ]
    assert comparison.documents == ["v1alpha1"]


def test_added_label_and_list_item_and_document_are_reported() -> None:
    two = "podSubnets: [10.244.0.0/16, 10.1.0.0/16]"
    actual = (
        BASE.replace("podSubnets: [10.244.0.0/16]", two).replace(
            "    certSANs: []\n", "    nodeLabels: {node.example.com/zone: a}\n"
        )
        + "---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: nut\n"
    )
    assert _lines(BASE, actual) == [
        'v1alpha1 machine.nodeLabels: desired <absent>, actual {"node.example.com/zone": "a"}',
        'v1alpha1 cluster.network.podSubnets[1]: desired <absent>, actual "10.1.0.0/16"',
        "ExtensionServiceConfig/nut (document): desired <absent>, actual present (name)",
    ]


def test_booleans_and_numbers_are_not_confused() -> None:
    left = "machine:\n  features:\n    hostDNS: {enabled: true}\n"
    assert not compare_configs(left, left.replace("true", "1")).equal


def test_paths_quote_keys_with_dots_and_slashes() -> None:
    assert (
        format_path(["machine", "nodeLabels", "a.b/c", 0, "x"])
        == 'machine.nodeLabels["a.b/c"][0].x'
    )


# --------------------------------------------------------------------------- masking


@pytest.mark.parametrize(
    "path",
    [
        "machine.token",
        "cluster.token",
        "cluster.secret",
        "cluster.secretboxEncryptionSecret",
        "machine.ca.crt",
    ],
)
def test_secret_fields_are_masked_and_never_shown(path: str) -> None:
    actual = BASE.replace(TOKEN, "zzzzzz.zzzzzzzzzzzzzzzz").replace(SECRET, "Y" * 44)
    actual = actual.replace(
        CA_CRT.decode(), base64.b64encode(b"-----BEGIN CERTIFICATE-----\nOTHER\n").decode()
    )
    comparison = compare_configs(BASE, actual)
    shown = "\n".join(comparison.lines()) + json.dumps(comparison.to_json())
    assert f"v1alpha1 {path}: desired and actual differ (secret values masked)" in shown
    for secret in (TOKEN, "zzzzzz", SECRET, "YYYY", CA_CRT.decode()[:20]):
        assert secret not in shown


def test_secrets_inside_a_shown_value_are_masked() -> None:
    actual = BASE.replace(
        "    certSANs: []\n",
        "    registries:\n      config:\n"
        "        r.example.com:\n          auth: {username: u, password: p4ss}\n"
        "          tls: {insecureSkipVerify: true}\n",
    )
    shown = "\n".join(_lines(BASE, actual))
    assert "p4ss" not in shown
    assert '"auth": "<masked>"' in shown
    assert '"insecureSkipVerify": true' in shown


def test_mask_value_covers_pem_urls_and_files() -> None:
    masked = mask_value(
        {
            "apiUrl": "https://siderolink.example.com/?jointoken=s3cr3t&grpc_tunnel=true",
            "note": "-----" + "BEGIN RSA PRIVATE KEY-----\nMIIE...",  # split: no key block literal
            "files": [{"content": "password=hunter2", "path": "/var/etc/x"}],
            "wireguard": {"privateKey": "k", "peers": [{"presharedKey": "p", "endpoint": "e"}]},
            "image": "ghcr.io/siderolabs/installer:v1.13.9",
        }
    )
    assert masked == {
        "apiUrl": f"https://siderolink.example.com/?jointoken={MASK}&grpc_tunnel=true",
        "note": MASK,
        "files": [{"content": MASK, "path": "/var/etc/x"}],
        "wireguard": {"privateKey": MASK, "peers": [{"presharedKey": MASK, "endpoint": "e"}]},
        "image": "ghcr.io/siderolabs/installer:v1.13.9",
    }


# --------------------------------------------------------------------------- the directory


def _desired(tmp_path: Path, mapping: str | None, **files: str) -> Path:
    (tmp_path / "worker.yaml").write_text(BASE)
    (tmp_path / "controlplane.yaml").write_text(BASE.replace("type: worker", "type: controlplane"))
    for name, text in files.items():
        path = tmp_path / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if mapping is not None:
        (tmp_path / "talos-desired.yaml").write_text(mapping)
    return tmp_path


def test_bases_alone_need_no_mapping_file(tmp_path: Path) -> None:
    desired = load_desired(_desired(tmp_path, None))
    plan = desired.plan("w-1", "worker")
    assert (plan.base, plan.patches, plan.named) == ("worker.yaml", (), False)
    assert compare_configs(BASE, desired.render(plan)).equal


def test_patches_select_by_hostname_role_and_label_in_file_order(tmp_path: Path) -> None:
    mapping = """\
nodes:
  gpu-1: {labels: {gpu: "true"}}
  w-2: {role: controlplane}
patches:
  - file: patches/all.yaml
  - {file: patches/workers.yaml, roles: [worker]}
  - {file: patches/gpu.yaml, labels: {gpu: "true"}}
  - {file: nodes/w-1.yaml, hostnames: w-1}
"""
    desired = load_desired(_write_named(tmp_path, mapping))
    assert desired.plan("gpu-1", "worker").patches == (
        "patches/all.yaml",
        "patches/workers.yaml",
        "patches/gpu.yaml",
    )
    assert desired.plan("w-2", "worker").role == "controlplane"
    assert desired.plan("w-2", "worker").patches == ("patches/all.yaml",)
    rendered = desired.config_for("w-1", "worker").decode()
    assert "tier" not in rendered  # the later $patch: delete wins: order matters
    assert "gpu" in desired.config_for("gpu-1", "worker").decode()


def _write_named(tmp_path: Path, mapping: str) -> Path:
    files = {
        "patches/all.yaml": "machine:\n  nodeLabels: {tier: all}\n",
        "patches/workers.yaml": "machine:\n  nodeLabels: {tier: worker}\n",
        "patches/gpu.yaml": "machine:\n  nodeLabels: {gpu: 'yes'}\n",
        "nodes/w-1.yaml": "machine:\n  nodeLabels:\n    tier:\n      $patch: delete\n",
    }
    _desired(tmp_path, mapping)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_json6902_patches_apply_to_single_document_configs_only(tmp_path: Path) -> None:
    ops = '[{"op": "add", "path": "/machine/nodeLabels", "value": {"x": "1"}}]'
    root = _desired(tmp_path, "patches: [ops.json]\n")
    (root / "ops.json").write_text(ops)
    single = BASE.split("---")[0]
    (root / "worker.yaml").write_text(single)
    rendered = load_desired(root).config_for("w", "worker")
    assert compare_configs(single, rendered).to_json()[0]["actual"] == '{"x": "1"}'
    (root / "worker.yaml").write_text(BASE)
    with pytest.raises(ConfigError, match=r"cannot apply ops.json for node w .*multi-document"):
        load_desired(root).config_for("w", "worker")


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ("bases: {}\n", "the top level has unknown keys ['bases']; allowed: base, nodes, patches"),
        ("patches: [{file: missing.yaml}]\n", "the patch missing.yaml does not exist"),
        ("patches: [{file: ../outside.yaml}]\n", "lies outside the desired-state directory"),
        ("patches: [{file: worker.yaml, roles: [master]}]\n", "roles has ['master']"),
        ("patches: [{file: worker.yaml, host: a}]\n", "patches[0] has unknown keys ['host']"),
        ("nodes: {a: {role: boss}}\n", "nodes.a.role is 'boss'"),
        ("base: {worker: nope.yaml}\n", "the base config nope.yaml does not exist"),
        ("patches: not-a-list\n", "patches must be a list"),
    ],
)
def test_mapping_errors_name_what_to_fix(tmp_path: Path, mapping: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_desired(_desired(tmp_path, mapping))
    assert message in str(raised.value)
    assert "talos-desired.yaml" in str(raised.value) or "nope.yaml" in str(raised.value)


def test_a_patch_that_does_not_parse_stops_the_load(tmp_path: Path) -> None:
    root = _desired(tmp_path, "patches: [bad.yaml]\n")
    (root / "bad.yaml").write_text("machine: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not a patch"):
        load_desired(root)


def test_a_missing_directory_says_what_it_should_hold(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"does not exist; give the directory holding "
        r"talos-desired\.yaml",
    ):
        load_desired(tmp_path / "nope")


def test_a_node_whose_role_has_no_base_is_an_error(tmp_path: Path) -> None:
    root = _desired(tmp_path, "base: {worker: worker.yaml}\n")
    with pytest.raises(ConfigError, match=r"no base config for it; give base\.controlplane"):
        load_desired(root).plan("cp-1", "controlplane")
