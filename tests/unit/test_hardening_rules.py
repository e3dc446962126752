"""Rules hardened after audit 2: lifecycle taints, the kubeconfig's TLS, a PID 1 that only
looks like machined, shell and package-tool names and links, apid's lifetime, the
kube-apiserver in-cluster names, and a service that starts over without a stop."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from conformance.immutability.rules import PACKAGE_MANAGERS, machined_doubts
from conformance.kubernetes.kubeconfig_rules import kubeconfig_tls_problems
from conformance.kubernetes.taints import (
    Taint,
    blocking_taints,
    declared_taint_keys,
    owned_taint_keys,
    taints_of,
)
from pytest_talos import models
from pytest_talos.certs import certificate_facts
from pytest_talos.certs.readers import in_cluster_names
from pytest_talos.certs.verdicts import lifetime_findings
from pytest_talos.checks import SHELL_NAMES, find_programs, is_program_named
from pytest_talos.checks.shell import is_shell_process
from pytest_talos.emulator.node.kubelet import talos_taints
from pytest_talos.pki import CertificateAuthority, issue_apid_cert
from pytest_talos.restarts import restart_episodes
from pytest_talos.restarts.history import TimedServiceEvent

SHIM = "/usr/bin/containerd-shim-runc-v2"

# ---- taints ----------------------------------------------------------------------------------


def _kube_node(taints: list[tuple[str, str, str]], annotations: dict[str, str]) -> Any:
    spec_taints = [SimpleNamespace(key=k, value=v or None, effect=e) for k, v, e in taints]
    return SimpleNamespace(
        spec=SimpleNamespace(taints=spec_taints),
        metadata=SimpleNamespace(annotations=annotations),
    )


def test_lifecycle_taints_block_unless_declared() -> None:
    node = _kube_node(
        [
            ("node-role.kubernetes.io/control-plane", "", "NoSchedule"),
            ("node.cloudprovider.kubernetes.io/uninitialized", "true", "NoSchedule"),
            ("node.kubernetes.io/not-ready", "", "NoExecute"),
            ("dedicated", "gpu", "NoSchedule"),  # an operator's own taint: not judged
            ("node.kubernetes.io/out-of-service", "", "NoExecute"),
        ],
        {"talos.dev/owned-taints": '["node-role.kubernetes.io/control-plane"]'},
    )
    found = blocking_taints(taints_of(node), owned_taint_keys(node))
    assert [str(t) for t in found] == [
        "node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule",
        "node.kubernetes.io/not-ready:NoExecute",
        "node.kubernetes.io/out-of-service:NoExecute",
    ]
    declared = {"node.kubernetes.io/out-of-service"}  # machine.nodeTaints sets it
    assert [t.key for t in blocking_taints(found, declared)] == [
        "node.cloudprovider.kubernetes.io/uninitialized",
        "node.kubernetes.io/not-ready",
    ]


@pytest.mark.parametrize("annotation", ["", "not json", '{"a": 1}', "[1, 2]"])
def test_an_odd_owned_taints_annotation_owns_nothing(annotation: str) -> None:
    node = _kube_node([], {"talos.dev/owned-taints": annotation})
    assert owned_taint_keys(node) == frozenset()


def test_the_config_declares_node_taints_and_kubelet_registration_taints() -> None:
    document = {
        "machine": {
            "nodeTaints": {"node.kubernetes.io/out-of-service": "NoExecute"},
            "kubelet": {
                "extraConfig": {"registerWithTaints": [{"key": "a", "effect": "NoSchedule"}]},
                "extraArgs": {"register-with-taints": "b=x:NoSchedule,c:NoExecute"},
            },
        }
    }
    assert declared_taint_keys(document) == {"node.kubernetes.io/out-of-service", "a", "b", "c"}
    assert declared_taint_keys({}) == frozenset()


def test_the_control_plane_taint_never_blocks() -> None:
    taint = Taint("node-role.kubernetes.io/control-plane", "", "NoSchedule")
    assert blocking_taints([taint]) == []


@pytest.mark.parametrize(
    ("controlplane", "cluster", "machine", "expected"),
    [
        (True, {}, {}, [("node-role.kubernetes.io/control-plane", "", "NoSchedule")]),
        (False, {}, {}, []),
        (True, {"allowSchedulingOnControlPlanes": True}, {}, []),
        (True, {"allowSchedulingOnMasters": True}, {}, []),
        (
            True,
            {"allowSchedulingOnControlPlanes": False, "allowSchedulingOnMasters": True},
            {},
            [("node-role.kubernetes.io/control-plane", "", "NoSchedule")],
        ),
        (
            False,
            {},
            {"nodeTaints": {"dedicated": "gpu:NoSchedule", "edge": "NoExecute"}},
            [("dedicated", "gpu", "NoSchedule"), ("edge", "", "NoExecute")],
        ),
    ],
)
def test_talos_taints_follow_node_taint_spec(
    controlplane: bool,
    cluster: dict[str, Any],
    machine: dict[str, Any],
    expected: list[tuple[str, str, str]],
) -> None:
    import yaml

    config = yaml.safe_dump({"version": "v1alpha1", "machine": machine, "cluster": cluster})
    found = talos_taints(controlplane, config.encode())
    assert [(t["key"], t.get("value", ""), t["effect"]) for t in found] == expected


# ---- the kubeconfig's TLS ----------------------------------------------------------------------


def _kubeconfig(cluster: dict[str, Any]) -> dict[str, Any]:
    return {"clusters": [{"name": "c", "cluster": {"server": "https://x:6443", **cluster}}]}


def test_a_kubeconfig_must_verify_its_server() -> None:
    assert kubeconfig_tls_problems(_kubeconfig({"certificate-authority-data": "Q0E="})) == []
    assert kubeconfig_tls_problems(
        _kubeconfig({"certificate-authority-data": "Q0E=", "insecure-skip-tls-verify": True})
    ) == ["cluster c: insecure-skip-tls-verify: true"]
    assert kubeconfig_tls_problems(_kubeconfig({})) == ["cluster c: no certificate-authority-data"]
    assert kubeconfig_tls_problems({"clusters": []}) == ["the kubeconfig names no cluster"]


# ---- PID 1 -----------------------------------------------------------------------------------


def _proc(pid: int, ppid: int, exe: str, args: str, threads: int = 8) -> models.ProcessInfo:
    command = exe.rsplit("/", 1)[-1]
    return models.ProcessInfo(pid, ppid, "S", threads, 0.0, 0, 0, command, exe, args)


def test_a_real_machined_raises_no_doubt() -> None:
    init = _proc(1, 0, "/usr/bin/init", "/sbin/init", threads=24)
    table = [
        init,
        _proc(100, 1, "/usr/bin/init", "/sbin/dashboard"),  # a symlink to machined
        _proc(110, 1, SHIM, f"{SHIM} -namespace system -id apid"),
        _proc(111, 110, "/apid", "/apid"),
        # a Talos-in-Talos pod: its own init is the pod's business
        _proc(120, 1, SHIM, f"{SHIM} -namespace k8s.io -id talos"),
        _proc(121, 120, "/usr/bin/init", "/sbin/init"),
    ]
    assert machined_doubts(init, table) == []
    unknown = _proc(1, 0, "/usr/bin/init", "/sbin/init", threads=0)  # not reported
    assert machined_doubts(unknown, [unknown]) == []


def test_a_one_thread_wrapper_running_machined_is_doubted() -> None:
    init = _proc(1, 0, "/usr/bin/init", "/sbin/init", threads=1)
    table = [init, _proc(100, 1, "/usr/bin/init", "/sbin/init", threads=24)]
    assert machined_doubts(init, table) == [
        "PID 1 runs a single thread (machined, a Go program, always runs several)",
        "pid 100 (parent 1) also runs /usr/bin/init as /sbin/init: machined started by "
        "another init",
    ]


# ---- shells, package tools and links ---------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["bash-5.2", "busybox-1.36.1", "sh.distrib", "dash.orig", "bash.real", "ash_1"]
)
def test_versioned_and_diverted_shells_are_shells(name: str) -> None:
    assert is_program_named(name, SHELL_NAMES)


@pytest.mark.parametrize("name", ["mksh-config", "shutdown", "sha256sum", "bashbug-x"])
def test_look_alikes_stay_other_programs(name: str) -> None:
    assert not is_program_named(name, SHELL_NAMES)


@pytest.mark.parametrize("name", ["dpkg-query", "rpm-ostree", "ostree", "pip", "pip3", "pip3.12"])
def test_more_package_tools(name: str) -> None:
    assert is_program_named(name, PACKAGE_MANAGERS)


@pytest.mark.parametrize(("command", "exe"), [("login", "/usr/bin/login"), ("sulogin", "/x")])
def test_a_login_process_is_a_way_in(command: str, exe: str) -> None:
    process = models.ProcessInfo(9, 1, "S", 1, 0.0, 0, 0, command, exe, f"{command} -f root")
    assert is_shell_process(process)


class _Files:
    def __init__(self, listing: dict[str, list[models.FileInfo]]) -> None:
        self._listing = listing

    def entries(self, path: str) -> list[models.FileInfo] | None:
        return self._listing.get(path)


def _entry(name: str, link: str = "", is_dir: bool = False) -> models.FileInfo:
    return models.FileInfo(name, 0, 0, None, is_dir, link=link)


def test_links_to_a_shell_are_found_by_their_target() -> None:
    node: Any = SimpleNamespace(
        name="n",
        files=_Files(
            {
                "/usr/bin": [
                    _entry("/usr/bin/init"),
                    _entry("/usr/bin/dashboard", "init"),  # the stock image's links
                    _entry("/usr/bin/systemd-udevd", "udevadm"),
                    _entry("/usr/bin/ls", "/var/lib/tools/busybox"),
                ],
                "/usr/libexec": [_entry("/usr/libexec/toolbox", is_dir=True)],
                "/usr/libexec/toolbox": [_entry("/usr/libexec/toolbox/bash-5.2")],
                "/opt": [_entry("/opt/x", is_dir=True), _entry("/opt/y", is_dir=True)],
                "/opt/x": [_entry("/opt/x/sbin", is_dir=True)],
                "/opt/x/sbin": [_entry("/opt/x/sbin/sh")],
                "/opt/y": [_entry("/opt/y/lib", is_dir=True)],
            }
        ),
    )
    found, searched, absent = find_programs(node, SHELL_NAMES)
    assert found == [
        "/usr/bin/ls -> /var/lib/tools/busybox",
        "/usr/libexec/toolbox/bash-5.2",
        "/opt/x/sbin/sh",
    ]
    assert {"/usr/libexec/toolbox", "/opt/x/sbin"} <= set(searched)
    assert "/opt/y/sbin" not in searched  # a wildcard names only the trees that have it
    assert "/opt/y/bin" not in absent


# ---- certificates ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.generate()


def test_an_apid_certificate_living_longer_than_talos_issues_fails(
    ca: CertificateAuthority,
) -> None:
    talos = issue_apid_cert(ca, hostname="w", fqdn="w", ips=["10.5.0.3"])
    assert lifetime_findings(certificate_facts(talos.cert_pem), "apid's certificate") == []
    years = issue_apid_cert(
        ca, hostname="w", fqdn="w", ips=["10.5.0.3"], validity=dt.timedelta(days=3650)
    )
    (finding,) = lifetime_findings(certificate_facts(years.cert_pem), "apid's certificate")
    assert finding.message.startswith("apid's certificate is valid for 3650.0 days (")
    assert "Talos issues it for 1.0 days and renews it at half that" in finding.message


def test_in_cluster_names_follow_the_cluster_network() -> None:
    fixed = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost", "127.0.0.1"]
    assert in_cluster_names(None) == fixed
    default = models.MachineConfig(raw=b"", documents=[{"version": "v1alpha1"}], version=1)
    assert in_cluster_names(default) == [
        *fixed,
        "kubernetes.default.svc.cluster.local",
        "10.96.0.1",
    ]
    network = {"dnsDomain": "k8s.internal", "serviceSubnets": ["10.201.0.0/16", "fd00:10::/108"]}
    dual = models.MachineConfig(
        raw=b"", documents=[{"version": "v1alpha1", "cluster": {"network": network}}], version=1
    )
    assert in_cluster_names(dual)[-3:] == [
        "kubernetes.default.svc.k8s.internal",
        "10.201.0.1",
        "fd00:10::1",
    ]


# ---- restarts --------------------------------------------------------------------------------


def test_a_start_over_after_running_is_an_episode() -> None:
    events = [
        TimedServiceEvent(1.0, "kubelet", "PREPARING", "Running pre state"),
        TimedServiceEvent(2.0, "kubelet", "RUNNING", "Started task kubelet"),
        TimedServiceEvent(9.0, "kubelet", "PREPARING", "Running pre state"),
        TimedServiceEvent(9.5, "kubelet", "STARTING", "Starting service"),
        TimedServiceEvent(10.0, "kubelet", "RUNNING", "Started task kubelet"),
    ]
    (episode,) = restart_episodes(events)
    assert (episode.kind, episode.at) == ("restart", 9.0)
    text = episode.describe()
    assert text.startswith("kubelet started over without a stop at ")
    assert text.endswith("(node time): Preparing Running pre state")
