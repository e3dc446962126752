"""The emulator's machine-config rules: generation, validation texts, immediate-apply, dry run."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.machineconfig import ConfigRejected
from pytest_talos.patches import apply_patches

ENDPOINT = "https://10.5.0.2:6443"


def generate(role: str = "controlplane", **overrides: Any) -> bytes:
    options: dict[str, Any] = {
        "cluster_name": "talos-default",
        "hostname": f"talos-default-{role}-1",
        "role": role,
        "address": "10.5.0.2",
        "endpoint": ENDPOINT,
    }
    options.update(overrides)
    return mc.generate_config(**options)


@pytest.fixture(scope="module")
def cp() -> bytes:
    return generate("controlplane")


@pytest.fixture(scope="module")
def worker() -> bytes:
    return generate("worker", hostname="talos-default-worker-1", address="10.5.0.3")


def patched(config: bytes, *patches: str) -> bytes:
    return apply_patches(config, list(patches))


def rejection(data: bytes, **kwargs: Any) -> str:
    with pytest.raises(ConfigRejected) as caught:
        mc.validate(data, **kwargs)
    assert caught.value.code == "INVALID_ARGUMENT"
    return caught.value.message


def v1alpha1_error(*errors: str) -> str:
    """The text Talos returns for errors found in the v1alpha1 document."""
    return mc.multierror([f"v1alpha1.Config: {mc.multierror(list(errors))}"])


def documents(data: bytes) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(data))


# --------------------------------------------------------------------------- generation


def test_generated_controlplane_config_looks_like_gen_config(cp: bytes) -> None:
    main, hostname_doc = documents(cp)
    assert (main["version"], main["debug"], main["persist"]) == ("v1alpha1", False, True)
    machine, cluster = main["machine"], main["cluster"]
    assert machine["type"] == "controlplane"
    assert machine["kubelet"] == {
        "image": "ghcr.io/siderolabs/kubelet:v1.36.0",
        "defaultRuntimeSeccompProfileEnabled": True,
        "disableManifestsDirectory": True,
    }
    # A docker cluster sets no install disk or image; 1.13 turns grubUseUKICmdline on.
    assert machine["install"] == {"wipe": False, "grubUseUKICmdline": True}
    assert machine["features"] == {
        "diskQuotaSupport": True,
        "kubePrism": {"enabled": True, "port": 7445},
        "hostDNS": {"enabled": True, "forwardKubeDNSToHost": True},
    }
    assert "network" not in machine
    assert machine["nodeLabels"] == {"node.kubernetes.io/exclude-from-external-load-balancers": ""}
    assert cluster["controlPlane"] == {"endpoint": ENDPOINT}
    assert cluster["clusterName"] == "talos-default"
    assert cluster["network"] == {
        "dnsDomain": "cluster.local",
        "podSubnets": ["10.244.0.0/16"],
        "serviceSubnets": ["10.96.0.0/12"],
    }
    assert cluster["apiServer"]["image"] == "registry.k8s.io/kube-apiserver:v1.36.0"
    assert "certSANs" not in cluster["apiServer"]  # 1.13 no longer adds the endpoint host
    assert "disablePodSecurityPolicy" not in cluster["apiServer"]
    assert "etcd" in cluster
    assert hostname_doc == {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}


def test_generated_config_has_talosctl_style_comments(cp: bytes) -> None:
    text = cp.decode()
    assert text.startswith(
        "version: v1alpha1 # Indicates the schema used to decode the contents.\n"
    )
    assert "# Provides machine specific configuration options.\nmachine:\n" in text
    assert "\n    type: controlplane # Defines the role of the machine within the cluster.\n" in (
        text
    )
    assert '    node.kubernetes.io/exclude-from-external-load-balancers: ""\n' in text
    assert "\nauto: stable # " in text


def test_generated_worker_config(worker: bytes) -> None:
    main = documents(worker)[0]
    assert main["machine"]["type"] == "worker"
    assert "nodeLabels" not in main["machine"]
    for control_plane_only in (
        "apiServer",
        "etcd",
        "scheduler",
        "controllerManager",
        "aggregatorCA",
        "serviceAccount",
        "secretboxEncryptionSecret",
    ):
        assert control_plane_only not in main["cluster"]
    assert main["cluster"]["token"] == documents(generate())[0]["cluster"]["token"]
    assert main["machine"]["ca"]["key"] == ""  # a worker holds no CA key
    assert main["cluster"]["ca"]["key"] == ""


def test_generated_config_is_one_template_per_role() -> None:
    # talosctl cluster create hands every node of a role the same config; the platform names
    # the node, so neither the hostname nor the address is written.
    assert generate(hostname="a", address="10.5.0.2") == generate(hostname="b", address="::1")
    assert mc.hostname(generate()) == ""


def test_generated_config_without_extra_documents() -> None:
    data = generate("worker", extra_documents=False)
    (main,) = documents(data)
    assert "network" not in main["machine"]
    assert mc.validate(data).warnings == []


def test_generated_install_options() -> None:
    main = documents(
        generate(install_image="ghcr.io/siderolabs/installer:v1.13.9", install_disk="/dev/vda")
    )[0]
    assert main["machine"]["install"] == {
        "disk": "/dev/vda",
        "image": "ghcr.io/siderolabs/installer:v1.13.9",
        "wipe": False,
        "grubUseUKICmdline": True,
    }


def test_generated_config_is_deterministic_and_per_cluster(cp: bytes) -> None:
    assert generate() == cp
    other = documents(generate(cluster_name="other"))[0]
    mine = documents(cp)[0]
    assert other["cluster"]["id"] != mine["cluster"]["id"]
    assert other["machine"]["token"] != mine["machine"]["token"]


def test_generated_config_holds_no_private_keys(cp: bytes) -> None:
    main = documents(cp)[0]
    cluster = main["cluster"]
    keys = [
        main["machine"]["ca"]["key"],
        cluster["ca"]["key"],
        cluster["aggregatorCA"]["key"],
        cluster["serviceAccount"]["key"],
        cluster["etcd"]["ca"]["key"],
    ]
    for key in keys:  # where Talos writes a key there is a placeholder that is none
        assert base64.b64decode(key).decode().endswith(": not a key")
    assert b"PRIVATE KEY" not in cp
    assert b"PRIVATE KEY" not in base64.b64decode(main["machine"]["ca"]["crt"])


def test_generated_config_embeds_given_ca_certificates() -> None:
    talos_ca = b"-----BEGIN CERTIFICATE-----\nVEFMT1M=\n-----END CERTIFICATE-----\n"
    kube_ca = b"-----BEGIN CERTIFICATE-----\nS1VCRQ==\n-----END CERTIFICATE-----\n"
    main = documents(generate(ca_crt_pem=talos_ca, kubernetes_ca_crt_pem=kube_ca))[0]
    assert base64.b64decode(main["machine"]["ca"]["crt"]) == talos_ca
    assert base64.b64decode(main["cluster"]["ca"]["crt"]) == kube_ca


def test_generate_options() -> None:
    data = generate(
        "worker",
        pod_subnets=("10.200.0.0/16",),
        service_subnets=("10.201.0.0/16",),
        kubernetes_version="v1.35.1",
        cert_sans=("127.0.0.1", "talos.example"),
    )
    assert mc.pod_subnets(data) == ["10.200.0.0/16"]
    assert mc.service_subnets(data) == ["10.201.0.0/16"]
    assert mc.kubernetes_version(data) == "1.35.1"
    assert mc.cert_sans(data) == ["127.0.0.1", "talos.example"]
    with pytest.raises(ValueError, match="role must be"):
        generate("init")


def test_generated_configs_validate(cp: bytes, worker: bytes) -> None:
    for data in (cp, worker):
        assert mc.validate(data).warnings == []
        assert mc.validate(data, container_mode=True).warnings == []


# --------------------------------------------------------------------------- loader errors


@pytest.mark.parametrize("data", [b"", b"---\n", b"# only a comment\n", b"---\n---\n"])
def test_empty_config(data: bytes) -> None:
    assert rejection(data) == "config not found"


def test_yaml_syntax_errors() -> None:
    assert rejection(b"machine:\n  type: worker\n bad: indent\n").startswith(
        "decode error: yaml: line 3: "
    )
    assert rejection(b"a: b\n c: d\n") == (
        "decode error: yaml: line 2: mapping values are not allowed in this context"
    )


def test_a_document_must_be_a_mapping() -> None:
    assert rejection(b"- a\n- b\n") == "expected a YAML document at line 1"


def test_missing_kind_and_api_version() -> None:
    assert rejection(b"foo: bar\n") == ("error decoding document /v1alpha1/ (line 1): missing kind")
    assert rejection(b"apiVersion: v1alpha2\nfoo: 1\n") == (
        "error decoding document v1alpha2/v1alpha1/ (line 1): missing kind"
    )
    assert rejection(b"kind: HostnameConfig\nhostname: x\n") == (
        "error decoding document /HostnameConfig/ (line 1): missing apiVersion"
    )


def test_unknown_document_kind(cp: bytes) -> None:
    assert rejection(cp + b"---\napiVersion: v1alpha1\nkind: NoSuchConfig\n").endswith(
        ': "NoSuchConfig" "v1alpha1": not registered'
    )


def test_duplicate_documents(cp: bytes) -> None:
    line = cp.count(b"\n") + 2
    assert rejection(cp + b"---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n") == (
        f"duplicate document v1alpha1/HostnameConfig/ is not allowed (line {line})"
    )


def test_config_without_v1alpha1_document() -> None:
    only_hostname = b"apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: node-1\n"
    assert rejection(only_hostname) == (
        "the applied machine configuration doesn't contain v1alpha1 config, did you mean to "
        "patch the machine config instead?"
    )
    assert rejection(only_hostname) == mc.NO_V1ALPHA1_MESSAGE
    assert mc.validate(only_hostname, maintenance=True).warnings == []


# --------------------------------------------------------------------------- strict decoding


def test_unknown_keys_are_listed_as_yaml(cp: bytes) -> None:
    data = patched(cp, "machine:\n  kubelet:\n    bogus: 1\n  foo: bar\nextra: true\n")
    assert rejection(data) == (
        "error decoding document /v1alpha1/ (line 1): unknown keys found during decoding:\n"
        "extra: true\n"
        "machine:\n"
        "    foo: bar\n"
        "    kubelet:\n"
        "        bogus: 1\n"
    )


def test_unknown_cluster_key(cp: bytes) -> None:
    assert rejection(patched(cp, "cluster:\n  network:\n    podCIDR: 10.0.0.0/8\n")).endswith(
        "unknown keys found during decoding:\ncluster:\n    network:\n        podCIDR: 10.0.0.0/8\n"
    )


def test_unknown_key_in_hostname_config(cp: bytes) -> None:
    data = cp.replace(b"kind: HostnameConfig\n", b"kind: HostnameConfig\nstable: true\n")
    message = rejection(data)
    assert message.startswith("error decoding document v1alpha1/HostnameConfig/ (line ")
    assert message.endswith("unknown keys found during decoding:\nstable: true\n")


def test_type_errors_read_like_yaml_v3() -> None:
    data = (
        b"version: v1alpha1\nmachine:\n  type: worker\n  nodeLabels: [a]\n"
        b"  install:\n    wipe: maybe-not-at-all\n    disk: {a: b}\n"
        b"  kubelet:\n    extraArgs:\n      node-labels: [a, b]\n"
        b"cluster:\n  network:\n    podSubnets: 10.244.0.0/16\n"
    )
    assert rejection(data) == (
        "error decoding document /v1alpha1/ (line 1): error decoding  to *v1alpha1.Config: "
        "yaml: unmarshal errors:\n"
        "  line 4: cannot unmarshal !!seq into map[string]string\n"
        "  line 6: cannot unmarshal !!str `maybe-n...` into bool\n"
        "  line 7: cannot unmarshal !!map into string\n"
        "  line 10: cannot unmarshal !!seq into string\n"
        "  line 13: cannot unmarshal !!str `10.244....` into []string"
    )


def test_label_value_must_be_a_string(worker: bytes) -> None:
    message = rejection(patched(worker, "machine:\n  nodeLabels:\n    team:\n      a: b\n"))
    assert "cannot unmarshal !!map into string" in message


def test_duplicate_keys_are_rejected() -> None:
    message = rejection(b"machine:\n  type: worker\nmachine:\n  type: worker\n")
    assert message.endswith('  line 3: mapping key "machine" already defined at line 1')


def test_scalars_decode_into_strings_and_yaml11_bools(worker: bytes) -> None:
    data = patched(
        worker,
        "machine:\n  kubelet:\n    extraArgs:\n      max-pods: 20\n"
        "  install:\n    wipe: yes\n  nodeLabels:\n    flag: 'off'\n",
    )
    assert mc.validate(data).warnings == []
    assert mc.kubelet_extra_args(data) == {"max-pods": "20"}
    assert mc.node_labels(data) == {"flag": "off"}


# --------------------------------------------------------------------------- validation


def test_label_name_with_a_space_is_rejected_b3(worker: bytes) -> None:
    data = patched(worker, "machine:\n  nodeLabels:\n    my label: x\n")
    assert rejection(data) == (
        "1 error occurred:\n\t* v1alpha1.Config: 1 error occurred:\n\t* invalid machine node "
        'labels: 1 error occurred:\n\t* name "my label" is invalid\n\n\n\n\n\n'
    )


def test_label_key_and_value_rules(worker: bytes) -> None:
    labels = {
        "/foo": "",
        "123@.dev/x": "v",
        "a/b/c": "v",
        "ok.example/fine": "x" * 64,
        "bad value": "v",
        "good": "a b",
        "x" * 64: "",
        "example.com/": "",
    }
    body = "".join(f"    {key!r}: {value!r}\n" for key, value in labels.items())
    message = rejection(patched(worker, "machine:\n  nodeLabels:\n" + body))
    assert message == v1alpha1_error(
        "invalid machine node labels: "
        + mc.multierror(
            [
                'prefix cannot be empty: "/foo"',
                'prefix "123@.dev" is invalid: domain doesn\'t match required format: "123@.dev"',
                'invalid format: too many slashes: "a/b/c"',
                'name "bad value" is invalid',
                'name cannot be empty: "example.com/"',
                'label value "a b" is invalid',
                f'label value length exceeds limit of 63: "{"x" * 64}"',
                f'name is too long: "{"x" * 64}" (limit is 63)',
            ]
        )
    )


def test_valid_labels_are_accepted(worker: bytes) -> None:
    data = patched(
        worker,
        "machine:\n  nodeLabels:\n    topology.kubernetes.io/zone: eu-1a\n"
        "    empty: ''\n    A_b.c-D: X.y_z-1\n",
    )
    assert mc.validate(data).warnings == []
    assert mc.node_labels(data) == {
        "topology.kubernetes.io/zone": "eu-1a",
        "empty": "",
        "A_b.c-D": "X.y_z-1",
    }


def test_annotations_and_taints(worker: bytes) -> None:
    data = patched(
        worker,
        "machine:\n  nodeAnnotations:\n    'bad key': v\n"
        "    talos.dev/owned-labels: '[]'\n"
        "  nodeTaints:\n    dedicated: gpu:NoSchedule\n    plain: NoExecute\n"
        "    broken: gpu:Sometimes\n    wrong: 'a b:NoExecute'\n",
    )
    assert rejection(data) == v1alpha1_error(
        "invalid machine node annotations: "
        + mc.multierror(
            [
                'name "bad key" is invalid',
                'annotation "talos.dev/owned-labels" is reserved',
            ]
        ),
        "invalid machine node taints: "
        + mc.multierror(
            [
                'invalid taint effect: "Sometimes"',
                'label value "a b" is invalid',
            ]
        ),
    )


def test_unknown_kubelet_flag_is_accepted_b4(worker: bytes) -> None:
    data = patched(
        worker,
        "machine:\n  kubelet:\n    extraArgs:\n      no-such-flag: 'true'\n"
        "      rotate-server-certificates: 'true'\n",
    )
    assert mc.validate(data).warnings == []
    assert mc.unknown_kubelet_flags(data) == ["no-such-flag"]
    assert mc.kubelet_extra_args(data) == {
        "no-such-flag": "true",
        "rotate-server-certificates": "true",
    }


def test_known_kubelet_flags_include_the_common_ones() -> None:
    assert {
        "node-ip",
        "cloud-provider",
        "max-pods",
        "v",
        "feature-gates",
        "node-labels",
        "register-with-taints",
        "system-reserved",
        "kube-reserved",
        "eviction-hard",
    } <= mc.KNOWN_KUBELET_FLAGS
    assert len(mc.KNOWN_KUBELET_FLAGS) >= 40


def test_cluster_network_and_endpoint_checks(cp: bytes) -> None:
    data = patched(
        cp,
        "cluster:\n  controlPlane:\n    endpoint: 'not a url'\n"
        "  network:\n    dnsDomain: 'bad domain'\n"
        "    podSubnets: [10.244.0.0/33]\n    serviceSubnets: [nope]\n",
    )
    assert rejection(data) == v1alpha1_error(
        'invalid controlplane endpoint: "not a url" is not a valid endpoint URL',
        '"bad domain" is not a valid DNS name',
        'invalid pod subnet "10.244.0.0/33": invalid CIDR address: 10.244.0.0/33',
        'invalid service subnet "nope": invalid CIDR address: nope',
    )


def test_missing_sections() -> None:
    assert rejection(b"cluster:\n  clusterName: x\n") == v1alpha1_error(
        "machine instructions are required"
    )
    no_cluster = b"machine:\n  type: worker\n  ca: {crt: x}\n"
    assert rejection(no_cluster) == v1alpha1_error("cluster instructions are required")
    no_endpoint = no_cluster + b"cluster:\n  clusterName: x\n"
    assert rejection(no_endpoint) == v1alpha1_error("cluster controlplane endpoint is required")


def test_machine_type_and_ca_rules(cp: bytes, worker: bytes) -> None:
    assert rejection(patched(worker, "machine:\n  type: bogus\n")) == v1alpha1_error(
        'unknown machine type "bogus"'
    )
    assert rejection(patched(worker, "machine:\n  ca:\n    key: c2VjcmV0\n")) == v1alpha1_error(
        "issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)"
    )
    no_ca = patched(worker, "machine:\n  ca:\n    $patch: delete\n")
    assert rejection(no_ca) == v1alpha1_error(
        "issuing CA or some accepted CAs are required (.machine.ca, machine.acceptedCAs)"
    )
    assert rejection(patched(cp, "cluster:\n  network:\n    cni:\n      name: calico\n")) == (
        v1alpha1_error('cni name should be one of ["flannel", "custom", "none"]')
    )
    assert rejection(
        patched(worker, "cluster:\n  etcd:\n    advertisedSubnets: [10.0.0.0/8]\n")
    ) == v1alpha1_error("etcd config is only allowed on control plane machines")


def test_custom_cni_without_urls_is_a_warning(cp: bytes) -> None:
    data = patched(cp, "cluster:\n  network:\n    cni:\n      name: custom\n")
    assert mc.validate(data).warnings == ['"urls" field should not be empty for "custom" CNI']


def test_install_extensions_warning(worker: bytes) -> None:
    data = patched(worker, "machine:\n  install:\n    extensions:\n      - image: ghcr.io/x/y:1\n")
    assert mc.validate(data).warnings == [
        ".machine.install.extensions is deprecated, please see "
        "https://www.talos.dev/latest/talos-guides/install/boot-assets/"
    ]


def test_persist_and_hostname(worker: bytes) -> None:
    inline = generate("worker", extra_documents=False)
    data = patched(inline, "persist: false\nmachine:\n  network:\n    hostname: -bad-\n")
    assert rejection(data) == v1alpha1_error(
        'invalid hostname "-bad-"',
        ".persist should be enabled",
    )


def test_several_errors_use_the_plural_form(worker: bytes) -> None:
    data = patched(worker, "persist: false\nmachine:\n  type: nope\n")
    message = rejection(data)
    assert message.startswith("1 error occurred:\n\t* v1alpha1.Config: 2 errors occurred:\n\t* ")


def test_container_mode_needs_host_dns(worker: bytes) -> None:
    data = patched(
        worker,
        "machine:\n  features:\n    hostDNS:\n      enabled: false\n"
        "      forwardKubeDNSToHost: false\n",
    )
    assert mc.validate(data).warnings == []
    assert rejection(data, container_mode=True) == v1alpha1_error(
        "feature HostDNS should be enabled in container mode (.machine.features.hostDNS.enabled)",
        "feature HostDNS should forward kube-dns to host in container mode "
        "(.machine.features.hostDNS.forwardKubeDNSToHost)",
    )


def test_hostname_config_rules(worker: bytes) -> None:
    named = worker.replace(b"auto: stable", b'auto: "off"\nhostname: talos-default-worker-1')
    assert mc.validate(named).warnings == []
    assert mc.hostname(named) == "talos-default-worker-1"
    auto_and_name = worker.replace(b"auto: stable", b"auto: stable\nhostname: w1")
    assert rejection(auto_and_name) == mc.multierror(
        ["HostnameConfig: 'auto' and 'hostname' cannot be set at the same time"]
    )
    twice = patched(named, "machine:\n  network:\n    hostname: other\n")
    assert rejection(twice) == mc.multierror(["static hostname is already set in v1alpha1 config"])
    neither = worker.replace(b"auto: stable", b'auto: ""')
    assert rejection(neither) == mc.multierror(
        ["HostnameConfig: either 'auto' or 'hostname' must be set"]
    )
    odd = worker.replace(b"auto: stable", b"auto: sometimes")
    assert rejection(odd) == mc.multierror(
        ['HostnameConfig: invalid auto hostname kind "sometimes"']
    )


def accepted_or_rejected(data: bytes) -> None:
    """Whatever comes in, validate answers with warnings or a ConfigRejected, nothing else."""
    outcome: ConfigRejected | mc.ValidationOutcome
    try:
        outcome = mc.validate(data)
    except ConfigRejected as exc:
        outcome = exc
    if isinstance(outcome, ConfigRejected):
        assert outcome.code == "INVALID_ARGUMENT"
        assert outcome.message
    else:
        assert isinstance(outcome.warnings, list)


YAMLISH = st.text(alphabet=list("ab1:-[]{}\n '\"#&*!|>%@,?.\t/"), max_size=120)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
SINGLE_DOCUMENT_WORKER = documents(generate("worker", extra_documents=False))[0]
FIELDS = st.sampled_from(
    [
        "machine",
        "cluster",
        "debug",
        "persist",
        "machine.nodeLabels",
        "machine.kubelet",
        "machine.kubelet.extraArgs",
        "cluster.network",
        "machine.type",
        "cluster.controlPlane",
    ]
)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200) | YAMLISH)
def test_any_text_is_accepted_or_rejected_cleanly(text: str) -> None:
    accepted_or_rejected(text.encode("utf-8"))


@settings(max_examples=100, deadline=None)
@given(FIELDS, VALUES)
def test_any_value_in_any_field_is_accepted_or_rejected_cleanly(path: str, value: Any) -> None:
    config = copy.deepcopy(SINGLE_DOCUMENT_WORKER)
    *parents, last = path.split(".")
    target = config
    for key in parents:
        target = target[key]
    target[last] = value
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    accepted_or_rejected(yaml.dump(config, Dumper=dumper).encode("utf-8"))


# --------------------------------------------------------------------------- immediate apply


def test_fields_that_apply_without_reboot(cp: bytes) -> None:
    data = patched(
        cp,
        "debug: true\nmachine:\n  nodeLabels: {a: b}\n  kubelet:\n    extraArgs:\n"
        "      v: '2'\n  network:\n    nameservers: [1.1.1.1]\n  features:\n"
        "    kubePrism:\n      port: 7446\ncluster:\n  clusterName: renamed\n"
        "---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: renamed\n",
    )
    assert mc.immediate_apply_blockers(cp, data) == []


def test_fields_that_need_a_reboot(cp: bytes) -> None:
    data = patched(
        cp,
        "machine:\n  type: worker\n  token: abcdef.0123456789abcdef\n"
        "  files:\n    - path: /var/f\n      content: x\n      op: create\n"
        "  features:\n    rbac: false\n  nodeLabels: {a: b}\n",
    )
    assert mc.immediate_apply_blockers(cp, data) == [
        "machine.type",
        "machine.token",
        "machine.features.rbac",
        "machine.files",
    ]


def test_immediate_apply_error_shows_only_the_blocking_diff(cp: bytes) -> None:
    data = patched(cp, "machine:\n  type: worker\n  nodeLabels: {a: b}\n")
    message = mc.immediate_apply_error(cp, data)
    assert message.startswith(
        "this config change can't be applied in immediate mode\ndiff:\n--- a\n+++ b\n@@"
    )
    assert "\n-  type: controlplane\n+  type: worker\n" in message
    assert "a: b" not in message


def test_absent_and_null_are_the_same_but_empty_is_not(worker: bytes) -> None:
    # files: null decodes to a nil slice, as absent does; files: [] to an empty non-nil one,
    # which reflect.DeepEqual tells from nil (v1alpha1_runtime.go CanApplyImmediate).
    assert mc.immediate_apply_blockers(worker, patched(worker, "machine:\n  files: null\n")) == []
    data = patched(worker, "machine:\n  files: []\n")
    assert mc.immediate_apply_blockers(worker, data) == ["machine.files"]


# --------------------------------------------------------------------------- reply texts


@pytest.mark.parametrize(
    ("mode", "text"),
    [
        ("NO_REBOOT", "Applied configuration without a reboot"),
        ("TRY", "Applied configuration without a reboot"),
        ("STAGED", "Staged configuration to be applied after the next reboot"),
        ("REBOOT", "Applied configuration with a reboot"),
    ],
)
def test_apply_mode_details(mode: str, text: str) -> None:
    assert mc.apply_mode_details(mode) == text


def test_apply_mode_details_for_try_and_auto() -> None:
    assert mc.apply_mode_details("TRY", try_timeout="30s") == (
        "Applied configuration without a reboot\nThe config is applied in 'try' mode and will "
        "be automatically reverted back in 30s"
    )
    assert mc.apply_mode_details("REBOOT", reason="why") == (
        "Applied configuration with a reboot: why"
    )


def test_dry_run_without_changes(cp: bytes) -> None:
    assert mc.dry_run_details("NO_REBOOT", cp, cp) == (
        "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\n"
        "Config diff:\n\nNo changes."
    )


def test_dry_run_with_a_diff(cp: bytes) -> None:
    data = patched(cp, "machine:\n  nodeLabels:\n    team: a\n")
    details = mc.dry_run_details("STAGED", cp, data)
    assert details.startswith(
        "Dry run summary:\nStaged configuration to be applied after the next reboot "
        "(skipped in dry-run).\nConfig diff:\n\n--- a\n+++ b\n@@ "
    )
    assert "\n+    team: a\n" in details


def test_dry_run_of_auto_resolved_to_reboot(cp: bytes) -> None:
    # The handler returns the dry run before it appends AUTO's `: <reason>`.
    data = patched(cp, "machine:\n  type: worker\n")
    details = mc.dry_run_details("REBOOT", cp, data)
    assert details.startswith(
        "Dry run summary:\nApplied configuration with a reboot (skipped in dry-run).\n"
        "Config diff:\n\n--- a\n+++ b\n"
    )
    assert "can't be applied in immediate mode" not in details


# --------------------------------------------------------------------------- accessors


def test_accessors(cp: bytes, worker: bytes) -> None:
    assert mc.machine_type(cp) == "controlplane"
    assert mc.machine_type(worker) == "worker"
    assert mc.hostname(worker) == ""  # the platform names the node
    assert mc.cluster_name(cp) == "talos-default"
    assert mc.cert_sans(cp) == []
    assert mc.kubernetes_version(cp) == "1.36.0"
    assert mc.node_labels(worker) == {}
    assert mc.kubelet_extra_args(worker) == {}
    assert mc.unknown_kubelet_flags(worker) == []


def test_accessors_on_a_bare_config() -> None:
    bare = b"machine:\n  type: worker\n"
    assert mc.pod_subnets(bare) == ["10.244.0.0/16"]
    assert mc.service_subnets(bare) == ["10.96.0.0/12"]
    assert mc.hostname(bare) == ""
    assert mc.cluster_name(bare) == ""
    assert mc.kubernetes_version(bare) == ""
    assert mc.node_labels(b"not: [valid") == {}


def test_inferred_behaviour_is_documented() -> None:
    assert len(mc.INFERRED) >= 5
    assert all(isinstance(item, str) and item for item in mc.INFERRED)
    assert any("invalid machine node labels" in item for item in mc.INFERRED)
