"""The report is a document a release manager signs: who ran it, which build, a sign-off
block and print furniture; it re-renders from results.json; JUnit names carry the check id
and node; the certificate advice appears only where it applies; a misspelt fault name gets
the nearest match."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from tests.conformance.suite_runner import run_suite, subprocess_env, target_args

GITHUB = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_ACTOR": "release-bot",
    "GITHUB_REPOSITORY": "example/fleet",
    "GITHUB_RUN_ID": "4242",
    "GITHUB_SERVER_URL": "https://github.com",
    "USER": "runner",
}


def test_the_report_says_who_ran_which_build_and_can_be_signed(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    result = run_suite(
        ["--talos-emulator", "-k", "pid1 or client_certificate", "--junitxml", str(junit)],
        tmp_path / "report",
        env=GITHUB,
    )
    assert result.returncode == 0, result.describe()
    assert result.results is not None
    who = result.results["run"]["operator"]
    assert (who["ci"], who["actor"], who["job"]) == ("GitHub Actions", "release-bot", "4242")
    assert who["url"] == "https://github.com/example/fleet/actions/runs/4242"
    assert who["certificate"]["roles"] == ["os:admin"]
    assert "PRIVATE KEY" not in (tmp_path / "report" / "results.json").read_text()
    targets = result.results["run"]["targets"]
    assert {t["sha"] for t in targets} == {"3ebd10a7c"}  # the Version reply's sha of v1.13.9
    html = (tmp_path / "report" / "report.html").read_text()
    for text in (
        "<h2>Run by</h2>",
        "<dt>Started by</dt><dd>release-bot</dd>",
        "<dt>Talos build</dt><dd>v1.13.9 sha 3ebd10a7c</dd>",
        "<h2>Sign-off</h2>",
        'counter(page) " of " counter(pages)',
        "@top-left",
    ):
        assert text in html, text
    assert "## Sign-off" in (tmp_path / "report" / "report.md").read_text()
    cases = ET.parse(junit).getroot().iter("testcase")
    names = {(c.get("classname"), c.get("name")) for c in cases}
    assert ("immutability.pid1-is-machined", "talos-default-worker-1") in names
    assert ("certs.client-certificate", "cluster") in names
    # The built-in emulator's own admin talosconfig gets no least-privilege advice.
    assert "every selected check is read-only" not in result.output

    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_talos.reporting.cli",
            "render",
            str(tmp_path / "report" / "results.json"),
            "--out",
            str(tmp_path / "again"),
        ],
        env=subprocess_env(None),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "talos-report: verdict PASSED (exit 0)" in again.stdout
    assert (tmp_path / "again" / "report.html").read_text() == html


def test_the_least_privilege_advice_applies_to_a_chosen_admin_talosconfig(tmp_path: Path) -> None:
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        result = run_suite([*target_args(cluster), "-k", "client_certificate"], tmp_path / "report")
    assert result.returncode == 0, result.describe()
    assert "every selected check is read-only" in result.output


def test_a_misspelt_fault_gets_the_nearest_name(tmp_path: Path) -> None:
    result = run_suite(
        ["--talos-emulator", "--talos-emulator-fault", "extra-prot", "-k", "pid1"],
        tmp_path / "report",
    )
    assert result.returncode == 4, result.describe()
    assert "unknown fault profile 'extra-prot'; did you mean extra-port" in result.output


def test_the_report_names_the_installer_the_node_reports(tmp_path: Path) -> None:
    # A metal node's config names its installer (machine.install.image).
    result = run_suite(
        ["--talos-emulator", "--talos-emulator-variant", "metal", "-k", "pid1"],
        tmp_path / "report",
    )
    assert result.returncode == 0, result.describe()
    assert result.results is not None
    images = {t["install_image"] for t in result.results["run"]["targets"]}
    assert images == {"ghcr.io/siderolabs/installer:v1.13.9"}
    html = (tmp_path / "report" / "report.html").read_text()
    assert "<dt>Installer image</dt><dd>ghcr.io/siderolabs/installer:v1.13.9</dd>" in html
