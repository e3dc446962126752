"""The suite's own options, run as a user runs them: the README command, waivers, the
severity gate, reports (with no key material) and JUnit properties, bad input."""

from __future__ import annotations

import base64
import datetime as dt
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from tests.conformance.suite_runner import SuiteRun, run_suite, target_args

FAR_FUTURE = (dt.date.today() + dt.timedelta(days=365)).isoformat()
YESTERDAY = (dt.date.today() - dt.timedelta(days=1)).isoformat()
PORTS_CHECK = "immutability.only-expected-ports"
KEY_MARKERS = (
    "PRIVATE KEY",
    base64.b64encode(b"-----" + b"BEGIN ED25519 PRIVATE KEY").decode()[:24],
)


def run(tmp_path: Path, *args: str) -> SuiteRun:
    return run_suite(["--talos-emulator", *args], tmp_path / "report")


def waivers(tmp_path: Path, *entries: dict[str, str]) -> str:
    path = tmp_path / "waivers.yaml"
    path.write_text(json.dumps({"waivers": list(entries)}))  # JSON is YAML
    return str(path)


def outcomes(result: SuiteRun, check: str) -> dict[str, str]:
    return {c["node"]: c["outcome"] for c in result.checks if c["id"] == check}


@pytest.mark.slow
def test_readme_command_passes_and_names_the_flag_that_enables_skipped_checks(
    tmp_path: Path,
) -> None:
    result = run(tmp_path)
    assert result.returncode == 0, result.describe()
    assert result.broken() == {}
    skipped = {c["id"]: c["message"] for c in result.checks if c["outcome"] == "skipped"}
    assert "--talos-allow mutating" in skipped["config.try-mode-reverts"]
    assert "--talos-allow disruptive" in skipped["config.kubelet-flag-failure-detected"]
    assert "--talos-allow mutating" in skipped["api.resource-writes-refused"]
    assert "--talos-profile" in skipped["vendor.platform"]


def run_extra_port_with_waivers(tmp_path: Path, waivers_file: str) -> SuiteRun:
    """The port check alone against an emulator with an extra open port, under a waivers file."""
    return run(
        tmp_path,
        "--talos-emulator-fault",
        "extra-port",
        "-k",
        "only_expected_ports",
        "--talos-waivers",
        waivers_file,
    )


@pytest.mark.slow
def test_active_waiver_turns_the_failure_into_a_waived_one(tmp_path: Path) -> None:
    path = waivers(
        tmp_path, {"check": PORTS_CHECK, "reason": "agent on 8080 (OPS-7)", "expires": FAR_FUTURE}
    )
    result = run_extra_port_with_waivers(tmp_path, path)
    assert result.returncode == 0, result.describe()
    assert set(outcomes(result, PORTS_CHECK).values()) == {"waived"}
    assert f"waived until {FAR_FUTURE}: agent on 8080 (OPS-7)" in result.output
    check = next(c for c in result.checks if c["id"] == PORTS_CHECK)
    assert check["waiver"] == {
        "reason": "agent on 8080 (OPS-7)",
        "expires": FAR_FUTURE,
        "node": None,
    }
    assert "Waived until" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.slow
def test_node_waiver_covers_only_its_node(tmp_path: Path) -> None:
    path = waivers(
        tmp_path,
        {
            "check": PORTS_CHECK,
            "node": "talos-default-worker-1",
            "reason": "r",
            "expires": FAR_FUTURE,
        },
    )
    result = run_extra_port_with_waivers(tmp_path, path)
    assert result.returncode == 1, result.describe()
    assert outcomes(result, PORTS_CHECK) == {
        "talos-default-controlplane-1": "failed",
        "talos-default-worker-1": "waived",
    }


@pytest.mark.slow
def test_expired_waiver_fails_and_says_so(tmp_path: Path) -> None:
    path = waivers(
        tmp_path, {"check": PORTS_CHECK, "reason": "vendor fix pending", "expires": YESTERDAY}
    )
    result = run_extra_port_with_waivers(tmp_path, path)
    assert result.returncode == 1, result.describe()
    assert set(outcomes(result, PORTS_CHECK).values()) == {"failed"}
    assert (
        f"waiver expired on {YESTERDAY} (vendor fix pending); renew it in the waivers "
        "file or fix the node"
    ) in result.output


def test_waiver_for_an_unknown_check_stops_the_run(tmp_path: Path) -> None:
    path = waivers(
        tmp_path, {"check": "immutability.only-expected-port", "reason": "r", "expires": FAR_FUTURE}
    )
    result = run(tmp_path, "--collect-only", "--talos-waivers", path)
    assert result.returncode == 4, result.describe()
    assert "there is no check 'immutability.only-expected-port'" in result.output


@pytest.mark.parametrize(
    ("gate", "exit_code", "summary"),
    [
        ("critical", 0, "severity gate 'critical': 0 blocking failure(s), 2 failure(s) below"),
        ("high", 1, "severity gate 'high': 1 blocking failure(s), 1 failure(s) below"),
    ],
)
def test_severity_gate_fails_only_at_or_above_its_threshold(
    tmp_path: Path, gate: str, exit_code: int, summary: str
) -> None:
    result = run(
        tmp_path,
        "--talos-emulator-fault",
        "wrong-version",
        "-k",
        "version",
        "--talos-fail-under",
        gate,
    )
    assert result.broken() == {
        "api.version-consistent": "failed",
        "api.version-matches-resource": "failed",
    }
    assert result.returncode == exit_code, result.describe()
    assert f"conformance: {summary}" in result.output
    assert result.results is not None
    assert result.results["gate"]["passed"] is (exit_code == 0)


def test_reports_carry_evidence_and_never_key_material(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    result = run(
        tmp_path,
        "--talos-emulator-fault",
        "kubelet-crashloop",
        "--talos-observe",
        "30",
        "-k",
        "expected_services or reader_cannot",
        "--junitxml",
        str(junit),
    )
    assert result.returncode == 1, result.describe()
    failed = next(c for c in result.checks if c["id"] == "services.expected-running-healthy")
    assert "kubelet log tail" in failed["evidence"]
    assert "CRI v1 runtime API is not implemented" in failed["evidence"]["kubelet log tail"]
    report_dir = tmp_path / "report"
    assert "**Verdict: FAILED**" in (report_dir / "report.md").read_text()
    for path in [*report_dir.iterdir(), junit]:
        text = path.read_text()
        for marker in KEY_MARKERS:
            assert marker not in text, path.name


def test_junit_xml_carries_check_and_node_properties(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    result = run(tmp_path, "-k", "pid1", "--junitxml", str(junit))
    assert result.returncode == 0, result.describe()
    root = ET.parse(junit).getroot()
    suite_props = {
        p.get("name"): p.get("value")
        for p in root.iter("property")
        if p.get("name", "").startswith("talos_node_")
    }
    assert suite_props["talos_node_talos-default-controlplane-1"] == (
        "controlplane v1.13.9 container"
    )
    case = next(root.iter("testcase"))
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["talos_check"] == "immutability.pid1-is-machined"
    assert props["talos_severity"] == "critical"
    assert props["talos_node"] in ("talos-default-controlplane-1", "talos-default-worker-1")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--talos-suite", "fast"], "invalid choice: 'fast'"),
        (["--talos-fail-under", "urgent"], "invalid choice: 'urgent'"),
        (
            ["--talos-snapshot", "keep", "x.json"],
            "'keep' is not a mode; write --talos-snapshot save PATH before the upgrade",
        ),
        (["--talos-observe", "0"], "--talos-observe: 0.0 is not a positive number of seconds"),
        (["--talos-waivers", "missing.yaml"], "cannot read the waivers file"),
        (["--talos-profile", "missing.yaml"], "cannot read the vendor profile"),
    ],
)
def test_bad_options_stop_the_run_with_a_clear_message(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = run(tmp_path, "--collect-only", *args)
    assert result.returncode == 4, result.describe()
    assert message in result.output
    assert "Traceback" not in result.output


def test_vendor_profile_errors_name_the_key(tmp_path: Path) -> None:
    profile = tmp_path / "vendor.yaml"
    profile.write_text("talos:\n  verison: v1.13.9\n")
    result = run(tmp_path, "--collect-only", "--talos-profile", str(profile))
    assert result.returncode == 4, result.describe()
    assert "talos: unknown keys ['verison']; allowed: version" in result.output


def test_reader_talosconfig_runs_the_quick_profile_and_skips_what_needs_admin(
    tmp_path: Path,
) -> None:
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        reader = cluster.issue_client(["os:reader"], path=tmp_path / "reader-talosconfig")
        args = target_args(cluster)
        args[1] = str(reader.path)
        result = run_suite(
            [
                *args,
                "--talos-suite",
                "quick",
                "--talos-observe",
                "1",
                "-k",
                "not only_expected_ports",
            ],
            tmp_path / "report",
        )
    # A least-privilege gate as the docs advise it: PASSED on a conforming cluster, and the
    # verdict names the checks that need os:admin (not run, neither failed nor hidden).
    assert result.returncode == 0, result.describe()
    assert result.results is not None
    assert result.results["verdict"] == "PASSED"
    reasons = " ".join(result.results["verdict_reasons"])
    assert "not run: they need os:admin" in reasons, reasons
    assert "immutability.rootfs-read-only" in reasons, reasons
    skipped = {c["id"]: c["message"] for c in result.checks if c["outcome"] == "skipped"}
    assert skipped["immutability.rootfs-read-only"].startswith(
        "needs os:admin; this talosconfig has os:reader"
    )
    assert "GenerateClientConfiguration" in skipped["api.reader-cannot-apply"]
    assert skipped["kubernetes.node-ready"].startswith("needs os:admin to fetch the kubeconfig")
    assert result.outcomes()["api.mtls-required"] == {"passed"}
