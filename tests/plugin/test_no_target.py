"""A run that names no usable target stops at once with one paragraph (usage error, exit 4);
one whose target does not answer marks its tests as unreachable for the conformance verdict."""

from __future__ import annotations

from collections.abc import Callable

import pytest

Run = Callable[..., pytest.RunResult]


def test_no_talosconfig_is_one_usage_error(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_node(talos_node):
            pass

        def test_cluster(talos_cluster):
            pass

        def test_other(talos_cluster):
            pass
    """)
    result = run("--no-header")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert output.count("pytest-talos has no target to test: no talosconfig found") == 1
    assert (
        "Point it at a cluster with --talosconfig PATH (or $TALOSCONFIG; --talos-context and "
        "--talos-endpoint choose within it), or run against the built-in emulated cluster with "
        "--talos-emulator."
    ) in output
    assert "Traceback" not in output


def test_a_missing_context_is_a_usage_error(run: Run, pytester: pytest.Pytester) -> None:
    from pytest_talos.emulator import EmulatedCluster

    pytester.makepyfile("def test_cluster(talos_cluster):\n    pass\n")
    with EmulatedCluster(1, 0) as cluster:
        result = run(f"--talosconfig={cluster.talosconfig_path}", "--talos-context", "nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pytest-talos has no target to test: " in result.stderr.str()
    assert "nope" in result.stderr.str()


def test_tests_that_do_not_use_talos_run_without_a_target(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    run().assert_outcomes(passed=1)
