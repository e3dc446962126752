"""Honest verdicts and exit codes: PASSED 0, FAILED 1, usage error 4 (at start, before any
check), INCOMPLETE 6 (nothing passed, or a check that must run did not), UNREACHABLE 7."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_talos.emulator.cluster.emulated import EmulatedCluster
from tests.conformance.suite_runner import SuiteRun, run_suite, target_args
from tests.plugin import interruptions as scenarios


def run(tmp_path: Path, *args: str, emulator: bool = True) -> SuiteRun:
    return run_suite([*(["--talos-emulator"] if emulator else []), *args], tmp_path / "report")


def verdict_line(result: SuiteRun) -> str:
    return next(
        line for line in result.output.splitlines() if line.startswith("conformance: verdict ")
    )


def test_a_healthy_run_passes(tmp_path: Path) -> None:
    result = run(tmp_path, "-k", "pid1 or mtls_required")
    assert result.returncode == 0, result.describe()
    assert result.results is not None
    assert result.results["verdict"] == "PASSED"
    assert result.results["exit_code"] == 0
    assert verdict_line(result) == "conformance: verdict PASSED (exit 0)"


@pytest.mark.slow
def test_a_failed_check_fails(tmp_path: Path) -> None:
    result = run(tmp_path, "--talos-emulator-fault", "extra-port", "-k", "only_expected_ports")
    assert result.returncode == 1, result.describe()
    assert verdict_line(result).startswith("conformance: verdict FAILED (exit 1)")


def test_nothing_passed_is_incomplete(tmp_path: Path) -> None:
    result = run(tmp_path, "-k", "try_mode")  # mutating: skipped under --talos-allow none
    assert result.returncode == 6, result.describe()
    assert result.results is not None
    assert result.results["verdict"] == "INCOMPLETE"
    assert "no check passed" in result.results["verdict_reasons"]
    assert "**Verdict: INCOMPLETE**" in (tmp_path / "report" / "report.md").read_text()


def _reader_args(cluster: EmulatedCluster, tmp_path: Path) -> list[str]:
    # As the docs say: talosctl config new --roles os:reader; the emulator mints the same.
    reader = cluster.issue_client(["os:reader"], path=tmp_path / "reader-talosconfig")
    args = target_args(cluster)
    args[1] = str(reader.path)
    return args


def test_a_reader_ci_gate_on_quick_passes_and_names_what_needs_admin(tmp_path: Path) -> None:
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        args = _reader_args(cluster, tmp_path)
        result = run(
            tmp_path,
            *args,
            "--talos-suite",
            "quick",
            "--talos-fail-under",
            "high",
            "--junitxml",
            str(tmp_path / "junit.xml"),
            emulator=False,
        )
    assert result.returncode == 0, result.describe()
    line = verdict_line(result)
    assert line.startswith("conformance: verdict PASSED (exit 0): ")
    assert "check(s) not run: they need os:admin, which this talosconfig lacks" in line
    assert "immutability.rootfs-read-only" in line
    assert result.results is not None
    admin = [c for c in result.checks if c["skip_kind"] == "needs-admin"]
    assert {c["id"] for c in admin} >= {"immutability.rootfs-read-only", "api.kube-ca-refused"}
    assert all(c["outcome"] == "skipped" and "os:admin" in c["message"] for c in admin)
    assert result.results["summary"]["needs_admin"] == len(admin)
    report = (tmp_path / "report" / "report.md").read_text()
    assert "NOT RUN (needs os:admin)" in report
    assert "an os:admin talosconfig runs them" in report
    html = (tmp_path / "report" / "report.html").read_text()
    assert "not run: needs os:admin" in html
    assert "Its roles</dt><dd>os:reader" in html


@pytest.mark.slow
def test_vendor_image_needs_a_profile_or_says_it_leaves_it_out(tmp_path: Path) -> None:
    refused = run(tmp_path, "--talos-suite", "vendor-image")
    assert refused.returncode == 4, refused.describe()
    assert "--talos-suite vendor-image needs --talos-profile FILE" in refused.output
    assert "--talos-leave-out vendor" in refused.output
    assert refused.results is None  # stopped before any check
    result = run(
        tmp_path, "--talos-suite", "vendor-image", "--talos-leave-out", "vendor", "-k", "pid1"
    )
    assert result.returncode == 0, result.describe()
    assert result.results is not None
    assert "left out: vendor (needs --talos-profile FILE)" in result.results["run"]["notes"]


def test_post_upgrade_first_step_saves_the_snapshot_as_documented(tmp_path: Path) -> None:
    snapshot = tmp_path / "pre-upgrade.json"
    result = run(
        tmp_path, "--talos-suite", "post-upgrade", "--talos-snapshot", "save", str(snapshot)
    )
    assert result.returncode == 0, result.describe()
    assert verdict_line(result) == "conformance: verdict PASSED (exit 0)"
    assert snapshot.is_file()
    assert result.results is not None
    assert result.outcomes()["upgrade.snapshot-recorded"] == {"passed"}
    assert "upgrade.talos-version" not in result.outcomes()
    assert any(
        "before the upgrade: this run saves the snapshot" in n
        for n in result.results["run"]["notes"]
    )


def test_post_upgrade_needs_its_inputs(tmp_path: Path) -> None:
    refused = run(tmp_path, "--talos-suite", "post-upgrade")
    assert refused.returncode == 4, refused.describe()
    for needed in (
        "--talos-expect-version VERSION",
        "--talos-expect-kubernetes-version VERSION",
        "--talos-snapshot compare PATH",
    ):
        assert needed in refused.output
    missing = run(
        tmp_path,
        "--talos-suite",
        "post-upgrade",
        "--talos-expect-version",
        "v1.13.9",
        "--talos-leave-out",
        "upgrade-kubernetes-version",
        "--talos-snapshot",
        "compare",
        str(tmp_path / "absent.json"),
    )
    assert missing.returncode == 4, missing.describe()
    assert f"--talos-snapshot compare {tmp_path / 'absent.json'}: no such file" in missing.output


@pytest.mark.slow
def test_post_upgrade_with_its_inputs_passes(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.json"
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        saved = run(
            tmp_path,
            *target_args(cluster),
            "--talos-snapshot",
            "save",
            str(snapshot),
            "-k",
            "snapshot_is_recorded",
            emulator=False,
        )
        assert saved.returncode == 0, saved.describe()
        result = run(
            tmp_path,
            *target_args(cluster),
            "--talos-suite",
            "post-upgrade",
            "--talos-expect-version",
            "v1.13.9",
            "--talos-leave-out",
            "upgrade-kubernetes-version",
            "--talos-snapshot",
            "compare",
            str(snapshot),
            "-k",
            "upgrade",
            emulator=False,
        )
    assert result.returncode == 0, result.describe()
    assert "upgrade.kubernetes-version" not in result.outcomes()


def test_an_unwritable_report_directory_fails_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run(tmp_path, "--talos-report", str(blocker / "report"), "-k", "pid1")
    assert result.returncode == 4, result.describe()
    assert f"--talos-report {blocker / 'report'}: cannot write there" in result.output
    assert "passed" not in result.output


def test_no_target_is_one_paragraph_and_a_usage_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = run_suite(["-k", "pid1 or mtls"], tmp_path / "report", env={"HOME": str(home)})
    assert result.returncode == 4, result.describe()
    assert result.output.count("pytest-talos has no target to test") == 1
    assert "--talos-emulator" in result.output


def test_an_unreachable_target_is_its_own_exit_code(tmp_path: Path) -> None:
    talosconfig = tmp_path / "talosconfig"
    with EmulatedCluster(1, 0) as cluster:
        talosconfig.write_bytes(Path(cluster.talosconfig_path).read_bytes())
    result = run(
        tmp_path,
        "--talosconfig",
        str(talosconfig),
        "--talos-endpoint",
        "127.0.0.1:1",
        "--talos-timeout",
        "2",
        "-k",
        "pid1",
        emulator=False,
    )
    assert result.returncode == 7, result.describe()
    assert "conformance: verdict UNREACHABLE (exit 7)" in result.output
    assert "blocking failure" not in result.output  # the target was unreachable, said once


def test_a_waiver_does_not_hide_an_unreachable_target(tmp_path: Path) -> None:
    # Waivers are xfail markers that take exceptions only: a check that never reached its
    # node (pytest.fail from the fixtures) stays an error, and the verdict UNREACHABLE.
    talosconfig = tmp_path / "talosconfig"
    with EmulatedCluster(1, 0) as cluster:
        talosconfig.write_bytes(Path(cluster.talosconfig_path).read_bytes())
    waivers = tmp_path / "waivers.yaml"
    waivers.write_text(
        "waivers:\n  - check: immutability.pid1-is-machined\n"
        "    reason: known\n    expires: 2999-01-01\n"
    )
    result = run(
        tmp_path,
        "--talosconfig",
        str(talosconfig),
        "--talos-endpoint",
        "127.0.0.1:1",
        "--talos-timeout",
        "2",
        "--talos-waivers",
        str(waivers),
        "-k",
        "pid1",
        emulator=False,
    )
    assert result.returncode == 7, result.describe()
    assert {c["outcome"] for c in result.checks} == {"error"}


def test_a_standalone_emulator_at_real_time_is_reported_emulated(tmp_path: Path) -> None:
    # The clock rate says nothing (1x, as a real node): its Version reply names it.
    with scenarios.emulator(tmp_path, time_scale=1) as emu:
        result = run(
            tmp_path,
            "--talosconfig",
            str(emu.talosconfig),
            "--talos-endpoint",
            emu.endpoint,
            "--junitxml",
            str(tmp_path / "junit.xml"),
            "-k",
            "pid1",
            emulator=False,
        )
    assert result.returncode == 0, result.describe()
    assert result.results is not None
    assert result.results["run"]["tested"]["kind"] == "emulated"
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="talos_target" value="EMULATED cluster (pytest-talos emulator)' in junit
    assert "EMULATED TARGET" in (tmp_path / "report" / "report.html").read_text()


def test_thirty_nodes_single_out_the_odd_version(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        "--talos-emulator=3:27",
        "--talos-emulator-fault",
        "wrong-version",
        "-k",
        "one_talos_version",
    )
    assert result.returncode == 1, result.describe()
    odd = "29 node(s) run v1.13.9; talos-default-worker-27 run(s) v1.12.6"
    assert result.output.count(odd) == 1, result.describe()
    assert "talos-default-worker-3: v1.13.9" not in result.output
    [check] = result.checks
    assert check["evidence"]["versions"]["v1.12.6"] == "talos-default-worker-27"
    nodes = check["evidence"]["versions"]["v1.13.9"].split(", ")
    assert nodes.index("talos-default-worker-2") < nodes.index("talos-default-worker-10")


def test_a_post_upgrade_failure_says_what_the_node_ran_before(tmp_path: Path) -> None:
    snapshot = tmp_path / "pre-upgrade.json"
    with EmulatedCluster(1, 1, time_scale=20) as cluster:
        saved = run(
            tmp_path,
            *target_args(cluster),
            "--talos-suite",
            "post-upgrade",
            "--talos-snapshot",
            "save",
            str(snapshot),
            "-k",
            "snapshot_is_recorded",
            emulator=False,
        )
        assert saved.returncode == 0, saved.describe()
        result = run(
            tmp_path,
            *target_args(cluster),
            "--talos-snapshot",
            "compare",
            str(snapshot),
            "--talos-expect-version",
            "v1.14.0",
            "-k",
            "expected_talos_version",
            emulator=False,
        )
    assert result.returncode == 1, result.describe()
    assert (
        "it still runs v1.13.9, the version it ran before the upgrade (snapshot): the upgrade "
        "did not take, or the node rolled back to its previous boot partition"
    ) in result.output
    assert {c["evidence"]["before the upgrade (snapshot)"] for c in result.checks} == {"v1.13.9"}
