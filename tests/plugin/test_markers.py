"""Markers: registration, skip reasons naming the flag, run order, role/version/platform gates."""

from __future__ import annotations

from collections.abc import Callable

import pytest

Run = Callable[..., pytest.RunResult]

MARKED_TESTS = """
import pytest

@pytest.mark.talos_disruptive
def test_reboots():
    pass

def test_reads():
    pass

@pytest.mark.talos_mutating
def test_patches():
    pass
"""

MUTATING_REASON = (
    "talos_mutating: changes node configuration (restored afterwards); run with "
    "--talos-allow mutating to enable it"
)
DISRUPTIVE_REASON = (
    "talos_disruptive: may reboot, reset or upgrade nodes; run with --talos-allow disruptive "
    "to enable it"
)


def test_markers_are_registered(run: Run) -> None:
    result = run("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.talos_role(*roles): run only against nodes of these roles*",
            "@pytest.mark.talos_mutating: changes node configuration*--talos-allow mutating",
            "@pytest.mark.talos_disruptive: may reboot, reset or upgrade nodes*runs last",
            "@pytest.mark.talos_min_version(version): skip nodes running an older Talos*",
            "@pytest.mark.talos_platform(*platforms): skip nodes on other platforms*",
        ]
    )


def test_strict_markers_accept_every_talos_marker(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_role("worker")
        @pytest.mark.talos_min_version("1.13")
        @pytest.mark.talos_platform("metal", "container")
        def test_marked():
            pass
    """)
    result = run("--strict-markers", "--no-header", "--collect-only", "-q")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*::test_marked", "1 test collected*"])


def test_changing_tests_skip_by_default_with_the_flag_in_the_reason(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(MARKED_TESTS)
    result = run("-rs", "--no-header")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] *.py:3: {DISRUPTIVE_REASON}"])
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] *.py:10: {MUTATING_REASON}"])


def test_allow_mutating_still_skips_disruptive(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MARKED_TESTS)
    result = run("-rs", "--no-header", "--talos-allow", "mutating")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] *: {DISRUPTIVE_REASON}"])


def test_allow_disruptive_runs_everything_with_disruptive_tests_last(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(MARKED_TESTS)
    result = run("-v", "--no-header", "--talos-allow", "disruptive")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*::test_reads PASSED*",
            "*::test_patches PASSED*",
            "*::test_reboots PASSED*",
        ]
    )


def test_allow_from_the_environment_enables_mutating_tests(
    run: Run, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(MARKED_TESTS)
    monkeypatch.setenv("TALOS_ALLOW", "mutating")
    run("--no-header").assert_outcomes(passed=2, skipped=1)


# --------------------------------------------------------------------------- node gates


@pytest.fixture
def emulator_run(run: Run) -> Run:
    def inner(*args: str) -> pytest.RunResult:
        return run("--talos-emulator=1:1", "--no-header", "-rs", *args)

    return inner


def test_role_marker_selects_nodes(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_role("worker")
        def test_worker_only(talos_node):
            assert talos_node.role == "worker"

        @pytest.mark.talos_role("controlplane")
        def test_controlplane_only(talos_node):
            assert talos_node.role == "controlplane"

        def test_every_node(talos_node):
            pass
    """)
    result = emulator_run("-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "*::test_worker_only[[]talos-default-worker-1[]] PASSED*",
            "*::test_controlplane_only[[]talos-default-controlplane-1[]] PASSED*",
            "*::test_every_node[[]talos-default-controlplane-1[]] PASSED*",
            "*::test_every_node[[]talos-default-worker-1[]] PASSED*",
        ]
    )


def test_role_without_matching_node_skips_with_reason(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_role("worker")
        def test_worker_only(talos_node):
            pass
    """)
    result = run("--talos-emulator=1:0", "--no-header", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] *: talos_role(worker): no target node has that role "
            "(talos-default-controlplane-1=controlplane)"
        ]
    )


def test_unknown_role_is_a_collection_error(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_role("master")
        def test_old_name(talos_node):
            pass
    """)
    result = emulator_run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*talos_role: unknown role master; use controlplane or worker"])


def test_min_version_and_platform_skip_with_reasons(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_min_version("1.13")
        @pytest.mark.talos_platform("container")
        def test_runs(talos_node):
            pass

        @pytest.mark.talos_min_version("1.14")
        def test_too_new(talos_node):
            pass

        @pytest.mark.talos_platform("metal")
        def test_metal_only(talos_node):
            pass

        @pytest.mark.talos_platform("aws")
        def test_cluster_level(talos_cluster):
            pass
    """)
    result = emulator_run()
    result.assert_outcomes(passed=2, skipped=5)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] *: talos_min_version(1.14): talos-default-controlplane-1 runs Talos "
            "v1.13.9",
            "SKIPPED [[]1[]] *: talos_platform(metal): talos-default-worker-1 runs on platform "
            "container",
            "SKIPPED [[]1[]] *: talos_platform(aws): talos-default-controlplane-1 runs on platform "
            "container",
        ],
        consecutive=False,
    )


def test_bad_min_version_fails_with_the_fix(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_min_version("latest")
        def test_x(talos_cluster):
            pass
    """)
    result = emulator_run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*talos_min_version: 'latest' is not a version like '1.13'"])


def test_container_only_capability_skips_instead_of_failing(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_disruptive
        @pytest.mark.talos_role("worker")
        def test_upgrade(talos_node):
            talos_node.client.upgrade("ghcr.io/siderolabs/installer:v1.13.9")
    """)
    result = emulator_run("--talos-allow", "disruptive")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] *: the node lacks this capability in container mode (method is not "
            "supported in container mode)"
        ]
    )


def test_min_version_skips_a_node_that_reports_an_older_version(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_min_version("1.13")
        def test_new_enough(talos_node):
            pass
    """)
    result = run(
        "--talos-emulator", "--talos-emulator-fault", "wrong-version", "--no-header", "-rs"
    )
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] *: talos_min_version(1.13): talos-default-worker-1 runs Talos v1.12.6"]
    )


def test_container_refusals_outside_talos_tests_stay_failures(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        from pytest_talos.errors import FailedPrecondition

        def test_unrelated():
            raise FailedPrecondition("method is not supported in container mode")
    """)
    run("--no-header").assert_outcomes(failed=1)
