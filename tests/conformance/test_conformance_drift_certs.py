"""The drift and certificate checks run as a user runs them: ``--talos-desired`` from the
command line, ini and environment, masked diffs in the terminal and in every report, the
certificate thresholds, and the errors for bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from tests.conformance.suite_runner import SuiteRun, run_suite, target_args

DRIFT, STAGED = "config.matches-desired", "config.persisted-matches-active"
SELECT = ("-k", "drift or certs")
WORKER = "talos-default-worker-1"


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatedCluster]:
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        yield cluster


@pytest.fixture
def desired(emulator: EmulatedCluster, tmp_path: Path) -> Path:
    directory = tmp_path / "desired"
    emulator.write_desired(directory)
    return directory


def run(
    emulator: EmulatedCluster, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> SuiteRun:
    return run_suite([*target_args(emulator), *SELECT, *args], tmp_path / "report", env=env)


def outcomes(result: SuiteRun, check: str) -> dict[str, str]:
    return {c["node"]: c["outcome"] for c in result.checks if c["id"] == check}


def test_a_secret_that_drifted_is_reported_masked_everywhere(
    emulator: EmulatedCluster, desired: Path, tmp_path: Path
) -> None:
    worker = (desired / "worker.yaml").read_text()
    token = yaml.safe_load(worker.split("\n---")[0])["cluster"]["token"]
    (desired / "worker.yaml").write_text(
        worker.replace(token, "qqqqqq.qqqqqqqqqqqqqqqq").replace(
            "kubePrism:", "kubePrism:\n            # a comment, ignored"
        )
    )
    result = run(emulator, tmp_path, "--talos-desired", str(desired))
    assert outcomes(result, DRIFT) == {
        "talos-default-controlplane-1": "passed",
        WORKER: "failed",
    }, result.describe()
    line = "v1alpha1 cluster.token: desired and actual differ (secret values masked)"
    assert line in result.output
    check = next(c for c in result.checks if c["id"] == DRIFT and c["node"] == WORKER)
    assert check["evidence"]["differences"] == [
        {
            "document": "v1alpha1",
            "path": "cluster.token",
            "desired": "<masked>",
            "actual": "<masked>",
            "masked": True,
        }
    ]
    report = tmp_path / "report"
    texts = [
        result.output,
        *((report / name).read_text() for name in ("results.json", "report.md", "report.html")),
    ]
    assert all(line in text for text in texts[1:])
    for text in texts:
        assert token not in text
        assert "qqqqqq" not in text


def test_desired_state_comes_from_ini_and_environment_too(
    emulator: EmulatedCluster, desired: Path, tmp_path: Path
) -> None:
    from_env = run(emulator, tmp_path, "-v", env={"TALOS_DESIRED": str(desired)})
    assert set(outcomes(from_env, DRIFT).values()) == {"passed"}, from_env.describe()
    assert f"conformance: desired state {desired} [$TALOS_DESIRED]" in from_env.output
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\ntalos_desired = desired\n")
    from_ini = run(
        emulator,
        tmp_path,
        "-v",
        "-c",
        str(ini),
        "--rootdir",
        str(tmp_path),
        env={"TALOS_DESIRED": str(tmp_path / "not-this-one")},
    )
    assert set(outcomes(from_ini, STAGED).values()) == {"passed"}, from_ini.describe()
    assert "[ini talos_desired]" in from_ini.output


def test_without_a_desired_state_the_drift_checks_skip_and_say_why(
    emulator: EmulatedCluster, tmp_path: Path
) -> None:
    # config.matches-desired alone: config.persisted-matches-active needs no desired state.
    result = run(emulator, tmp_path, "-k", "active_config_matches_desired")
    messages = {c["message"] for c in result.checks if c["id"] == DRIFT}
    # Only skips: the verdict is INCOMPLETE (exit 6), never PASSED.
    assert result.returncode == 6, result.describe()
    assert result.results is not None
    assert result.results["verdict"] == "INCOMPLETE", result.describe()
    assert messages == {
        "no desired state to compare with: give --talos-desired DIR (base "
        "configs, patches and talos-desired.yaml, kept in git)"
    }
    assert not [c for c in result.checks if c["id"] == STAGED]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("missing-dir", "--talos-desired: the desired-state directory"),
        ("emulator:", "--talos-desired emulator: needs --talos-emulator"),
    ],
)
def test_a_bad_desired_state_is_an_error_naming_the_option(
    emulator: EmulatedCluster, tmp_path: Path, value: str, message: str
) -> None:
    result = run(emulator, tmp_path, "-k", "drift", "--talos-desired", value)
    assert set(outcomes(result, DRIFT).values()) == {"error"}, result.describe()
    assert message in result.output


def test_certificate_thresholds_warn_and_fail(emulator: EmulatedCluster, tmp_path: Path) -> None:
    warned = run(emulator, tmp_path, "-k", "certs", "--talos-cert-warn-days", "400")
    assert warned.returncode == 0, warned.describe()
    client = next(c for c in warned.checks if c["id"] == "certs.client-certificate")
    assert any("warn under 400 days" in w for w in client["evidence"]["warnings"])
    assert "CertificateWarning" in warned.output
    failed = run(
        emulator,
        tmp_path,
        "-v",
        "-k",
        "certs",
        "--talos-cert-warn-days",
        "500",
        "--talos-cert-fail-days",
        "400",
    )
    assert failed.broken() == {
        "certs.client-certificate": "failed",
        "certs.kubernetes-api": "failed",
    }, failed.describe()
    assert "conformance: certificates warn under 500 days, fail under 400 days" in failed.output
    bad = run(emulator, tmp_path, "--collect-only", "--talos-cert-fail-days", "40")
    assert bad.returncode == 4
    assert "--talos-cert-fail-days 40 is more than --talos-cert-warn-days 30" in bad.output


def test_certificate_evidence_shows_facts_and_no_key_material(
    emulator: EmulatedCluster, tmp_path: Path
) -> None:
    result = run(emulator, tmp_path, "-k", "certs")
    assert result.returncode == 0, result.describe()
    apid = next(c for c in result.checks if c["id"] == "certs.api-certificate")
    shown = apid["evidence"]["certificates"][0]
    assert {"subject", "issuer", "serial", "sans", "not_after", "days_left"} <= set(shown)
    text = json.dumps(result.results)
    assert "PRIVATE KEY" not in text
    assert "LS0tLS1CRUdJTiBFRDI1NTE5IFBSSVZBVEUgS0VZ" not in text
