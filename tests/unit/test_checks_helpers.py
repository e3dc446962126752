"""The pure parts of node/cluster/wait/checks: no sockets, no emulator."""

from __future__ import annotations

import base64

import pytest
import yaml

from pytest_talos.checks import CheckResult, default_expected_ports
from pytest_talos.cluster import _kube_settings
from pytest_talos.errors import TalosError, WaitTimeout
from pytest_talos.node import host_of
from pytest_talos.node._node import as_patch_list
from pytest_talos.wait import ServiceState, StabilityReport, config_summary, wait_until


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_default_ports_by_role() -> None:
    """Without a machine config, Talos's defaults: kube-proxy's healthz 10256 on every node."""
    assert default_expected_ports("worker") == {50000, 10250, 10256}
    assert default_expected_ports("controlplane") == {50000, 50001, 6443, 2379, 2380, 10250, 10256}
    assert default_expected_ports("init") == default_expected_ports("controlplane")
    assert default_expected_ports(None) == {50000, 10250, 10256}


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("10.5.0.2", "10.5.0.2"),
        ("10.5.0.2:50000", "10.5.0.2"),
        ("[fd00::2]:50000", "fd00::2"),
        ("fd00::2", "fd00::2"),
        ("node-1.example", "node-1.example"),
    ],
)
def test_host_of(address: str, host: str) -> None:
    assert host_of(address) == host


def test_patch_lists_are_told_from_json6902_op_lists() -> None:
    ops = [{"op": "add", "path": "/machine/nodeLabels/a", "value": "b"}]
    assert as_patch_list(ops) == [ops]
    strategic = {"machine": {"nodeLabels": {"a": "b"}}}
    assert as_patch_list(strategic) == [strategic]
    assert as_patch_list([strategic, "@patch.yaml"]) == [strategic, "@patch.yaml"]
    assert as_patch_list(("a: 1", "b: 2")) == ["a: 1", "b: 2"]
    assert as_patch_list("machine: {}") == ["machine: {}"]


def test_config_summary_never_shows_content() -> None:
    secret = b"machine:\n  token: very-secret\n"
    summary = config_summary(secret, 7)
    assert summary.startswith(f"version 7, {len(secret)} bytes, sha256 ")
    assert "secret" not in summary
    assert config_summary(b"x") == ("1 bytes, sha256 2d711642b726")


def test_service_state_text() -> None:
    assert str(ServiceState("kubelet", True, True, False)) == "kubelet: running, healthy"
    assert str(ServiceState("kubelet", True, False, True)) == "kubelet: running, health unknown"
    assert str(ServiceState("kubelet", True, False, False)) == "kubelet: running, unhealthy"
    assert str(ServiceState("kubelet", False, False, True)) == "kubelet: not running"


def test_stability_report_repr_and_timeline() -> None:
    report = StabilityReport("kubelet", 12.0)
    assert report.timeline() == "(no change)"
    report.changes.append((0.5, ServiceState("kubelet", False, False, True)))
    report.restarts = 1
    assert repr(report) == "<kubelet: 1 changes, 1 restarts, last kubelet: not running>"
    assert report.timeline() == "+  0.50s kubelet: not running"


def test_wait_until_backs_off_and_reports_the_last_observation() -> None:
    clock = FakeClock()
    seen = iter(["booting", "booting", "booting", "booting", "booting", "booting"])
    with pytest.raises(WaitTimeout) as timeout:
        wait_until(
            lambda: next(seen),
            lambda value: value == "running",
            timeout=2.0,
            description="the node to run",
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.sleeps == pytest.approx([0.2, 0.4, 0.8, 0.6])
    assert str(timeout.value) == (
        "gave up waiting for the node to run (waited 2.0s; last observed: 'booting')"
    )
    assert timeout.value.last_observation == "booting"


def test_wait_until_counts_talos_errors_as_observations() -> None:
    clock = FakeClock()
    answers: list[TalosError | str] = [TalosError("apid is restarting"), "running"]

    def probe() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert (
        wait_until(
            probe,
            lambda value: value == "running",
            timeout=5,
            description="x",
            clock=clock,
            sleep=clock.sleep,
        )
        == "running"
    )
    assert clock.sleeps == [0.2]


def _kubeconfig(user: dict[str, str]) -> bytes:
    return yaml.safe_dump(
        {
            "current-context": "admin@c",
            "contexts": [{"name": "admin@c", "context": {"cluster": "c", "user": "admin@c"}}],
            "clusters": [
                {
                    "name": "c",
                    "cluster": {
                        "server": "https://10.5.0.2:6443",
                        "certificate-authority-data": base64.b64encode(b"CA").decode(),
                    },
                }
            ],
            "users": [{"name": "admin@c", "user": user}],
        }
    ).encode()


def test_kubeconfig_with_inline_certificates() -> None:
    settings = _kube_settings(
        _kubeconfig(
            {
                "client-certificate-data": base64.b64encode(b"CRT").decode(),
                "client-key-data": base64.b64encode(b"KEY").decode(),
            }
        )
    )
    assert settings == {
        "server": "https://10.5.0.2:6443",
        "ca": b"CA",
        "crt": b"CRT",
        "key": b"KEY",
    }


def test_kubeconfig_with_a_token() -> None:
    assert _kube_settings(_kubeconfig({"token": "abc"}))["token"] == b"abc"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b": not yaml: [", "the kubeconfig from the Talos API is not valid YAML"),
        (b"- a list", "the kubeconfig from the Talos API is not a mapping"),
        (
            b"current-context: nope\ncontexts: []\n",
            "the kubeconfig has no context named 'nope' in contexts",
        ),
    ],
)
def test_kubeconfig_problems_are_talos_errors(data: bytes, message: str) -> None:
    with pytest.raises(TalosError) as error:
        _kube_settings(data)
    assert str(error.value) == message


def test_kubeconfig_without_usable_credentials() -> None:
    with pytest.raises(TalosError, match="neither inline client certificate data nor a token"):
        _kube_settings(_kubeconfig({"exec": "aws"}))


def test_check_result_defaults() -> None:
    result = CheckResult("no-shell", "node-1")
    assert (result.evidence, result.notes) == ({}, [])
