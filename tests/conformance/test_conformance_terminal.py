"""What the suite prints and hands over, run as a user runs it: a failure as check id, node,
severity, cause and evidence; the closing table by check id; --talos-list-checks and
--talos-check; each RPC in --log-cli-level=DEBUG; what was tested in every report; the
report screenshot in a real browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conformance.suite_runner import REPO, SuiteRun, run_suite

SHELL = "immutability.no-shell-or-ssh"
VERSION = "api.version-answers"


def run(tmp_path: Path, *args: str) -> SuiteRun:
    return run_suite(["--talos-emulator", *args], tmp_path / "report")


def test_a_failure_shows_id_node_severity_cause_and_evidence_not_test_source(
    tmp_path: Path,
) -> None:
    result = run(tmp_path, "--talos-emulator-fault", "ssh-open", "--talos-check", SHELL)
    assert result.returncode == 1, result.describe()
    out = result.output
    assert (
        f"{SHELL} on talos-default-worker-1 [critical]: the node offers a way in besides "
        "the Talos API"
    ) in out, result.describe()
    assert "  port 22: open (tcp 0.0.0.0:22" in out
    assert "  expected: no shell, no busybox, no sshd, port 22 closed" in out
    assert "(--tb=long shows the test's traceback)" in out
    # No test source, no fixture reprs, no frames of the kit.
    assert "def test_node_has_no_shell_and_no_ssh" not in out
    assert "talos_node = " not in out
    assert "pytest_talos/checks.py:" not in out
    # Only the asked-for check ran.
    assert set(result.outcomes()) == {SHELL}, result.outcomes()


def test_tb_long_still_shows_the_full_traceback(tmp_path: Path) -> None:
    result = run(
        tmp_path, "--talos-emulator-fault", "ssh-open", "--talos-check", SHELL, "--tb=long"
    )
    assert result.returncode == 1, result.describe()
    assert "def test_node_has_no_shell_and_no_ssh" in result.output, result.describe()


def test_the_run_closes_with_a_table_by_check_id(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        "--talos-emulator-fault",
        "ssh-open",
        "--talos-check",
        SHELL,
        "--talos-check",
        VERSION,
    )
    lines = result.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("conformance check"))
    assert lines[head].split() == [
        "conformance",
        "check",
        "severity",
        "pass",
        "fail",
        "waived",
        "skip",
    ]
    # -q (the runner's) lists what did not pass cleanly, failing nodes named.
    assert lines[head + 2].split()[:5] == [SHELL, "critical", "0", "2", "0"], lines[head:]
    assert "talos-default-controlplane-1, talos-default-worker-1" in lines[head + 2]
    assert "... and 1 checks that passed or skipped" in result.output


def test_list_checks_prints_the_catalogue_and_exits_without_a_target(tmp_path: Path) -> None:
    result = run_suite(["--talos-list-checks"], tmp_path / "report")
    assert result.returncode == 0, result.describe()
    rows = {line.split()[0] for line in result.output.splitlines() if line.strip()}
    assert SHELL in rows
    assert VERSION in rows
    assert "upgrade.config-unchanged" in rows
    assert f"{SHELL}" in result.output
    assert "critical" in result.output
    assert "checks; run some with --talos-check ID" in result.output
    assert "passed" not in result.output  # nothing ran


def test_a_check_id_typo_is_a_usage_error_with_did_you_mean(tmp_path: Path) -> None:
    result = run(tmp_path, "--talos-check", "immutability.no-shell")
    assert result.returncode == 4, result.describe()
    assert "--talos-check immutability.no-shell: there is no such check" in result.output
    assert f"did you mean {SHELL}" in result.output
    assert "--talos-list-checks" in result.output


def test_debug_logging_shows_each_rpc_its_target_and_duration(tmp_path: Path) -> None:
    result = run(tmp_path, "--talos-check", VERSION, "--log-cli-level=DEBUG")
    assert result.returncode == 0, result.describe()
    lines = [
        line for line in result.output.splitlines() if "/machine.MachineService/Version to " in line
    ]
    assert lines, result.describe()
    # The method, the node it was sent to (its address), the endpoint and how long it took.
    shape = re.compile(
        r"DEBUG +pytest_talos\.transport:.* /machine\.MachineService/Version "
        r"to 127\.[0-9.]+ via 127\.[0-9.]+:50000: ok in [0-9.]+s$"
    )
    assert any(shape.search(line) for line in lines), lines


def test_every_report_says_the_target_was_emulated_with_its_faults(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    result = run(
        tmp_path,
        "--talos-emulator-fault",
        "ssh-open",
        "--talos-check",
        SHELL,
        "--talos-check",
        "certs.client-certificate",
        # the emulator's client certificate lives a year: warned of within 400 days, so the
        # check raises a CertificateWarning (the built-in talosconfig gets no privilege advice)
        "--talos-cert-warn-days",
        "400",
        "--junitxml",
        str(junit),
    )
    assert result.results is not None, result.describe()
    tested = result.results["run"]["tested"]
    assert tested["kind"] == "emulated", tested
    assert tested["faults"] == ["ssh-open"], tested
    assert tested["time_scale"] == 20.0, tested
    assert tested["endpoints"], tested
    assert result.results["run"]["kit"]["name"] == "pytest-talos"
    report = tmp_path / "report"
    for name in ("report.md", "report.html"):
        text = (report / name).read_text()
        for shown in ("EMULATED TARGET", "ssh-open", "--talos-allow none", "v1.13.9"):
            assert shown in text, (name, shown)
    props = {p.get("name"): p.get("value", "") for p in ET.parse(junit).iter("property")}
    assert props["talos_target"].startswith("EMULATED"), props
    assert props["talos_emulated_faults"] == "ssh-open"
    assert props["talos_allowed_changes"] == "--talos-allow none"
    assert props["talos_kit"].startswith("pytest-talos ")
    assert json.loads((report / "results.json").read_text())["run"]["tested"] == tested
    # A warning a check raised is a note on that check, in the reports.
    certs = next(c for c in result.checks if c["id"] == "certs.client-certificate")
    assert any(n.startswith("CertificateWarning: ") for n in certs["notes"]), certs
    assert "Note: CertificateWarning: " in (report / "report.html").read_text()


CHROMIUM = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium on PATH (apt-get install chromium) to render the report in a real browser",
)
@pytest.mark.slow
def test_the_screenshot_script_renders_the_report_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "report.png"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "report_screenshot.py"),
            "--report-dir",
            str(tmp_path / "rep"),
            "--out",
            str(out),
            "--width",
            "1200",
            "--height",
            "1400",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    png = out.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 20_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1200, 1400)
    assert "EMULATED TARGET" in (tmp_path / "rep" / "report.html").read_text()
