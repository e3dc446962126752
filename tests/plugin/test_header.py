"""The report header: targets, each node's version and role, setting sources, allowed changes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_talos.emulator import EmulatedCluster
from tests.plugin.conftest import target_args

Run = Callable[..., pytest.RunResult]


def header(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines if line.startswith("talos: ")]


def test_emulator_header(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run("--talos-emulator=1:2", "--talos-timeout", "4")
    cp, w1, w2 = (_address_in(result, name) for name in ("controlplane-1", "worker-1", "worker-2"))
    assert header(result) == [
        "talos: targets: the emulated cluster (1 control plane, 2 workers; faults: none)",
        f"talos: node talos-default-controlplane-1 ({cp}): controlplane, Talos v1.13.9, "
        "platform container",
        f"talos: node talos-default-worker-1 ({w1}): worker, Talos v1.13.9, platform container",
        f"talos: node talos-default-worker-2 ({w2}): worker, Talos v1.13.9, platform container",
        "talos: settings: emulator 1:2 [--talos-emulator]; nodes (all) [default]; "
        "timeout 4s [--talos-timeout]; allow none [default]",
        "talos: changes allowed: none (talos_mutating and talos_disruptive tests are skipped; "
        "enable them with --talos-allow mutating|disruptive)",
    ]


def _address_in(result: pytest.RunResult, suffix: str) -> str:
    for line in result.stdout.lines:
        if f"talos-default-{suffix} (" in line:
            return line.split("(", 1)[1].split(")", 1)[0]
    raise AssertionError(f"no header line for {suffix}")


def test_emulator_header_names_faults_and_allow_source(
    run: Run, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv("TALOS_ALLOW", "mutating")
    monkeypatch.setenv("TALOS_ENDPOINTS", "10.5.0.2")
    result = run("--talos-emulator", "--talos-emulator-fault", "extra-port")
    lines = header(result)
    assert lines[0] == (
        "talos: targets: the emulated cluster (1 control plane, 1 worker; faults: extra-port)"
    )
    assert lines[-2] == (
        "talos: settings: emulator 1:1 [--talos-emulator]; faults extra-port "
        "[--talos-emulator-fault]; nodes (all) [default]; timeout 10s [default]; "
        "allow mutating [$TALOS_ALLOW]; ignored with the emulator: $TALOS_ENDPOINTS"
    )
    # Changes to emulated nodes harm nobody: no warning line.
    assert lines[-1] == "talos: changes allowed: mutating: config changes (undone afterwards)"


def test_real_cluster_header_warns_when_changes_are_allowed(
    run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    pytester.makeini("[pytest]\ntalos_allow = disruptive\n")
    result = run(*target_args(emulated))
    lines = header(result)
    assert lines[0] == (
        f"talos: targets: {emulated.endpoint} (talosconfig: {emulated.talosconfig_path})"
    )
    cp, worker = emulated.nodes
    assert lines[1:3] == [
        f"talos: node {cp.hostname} ({cp.address}): controlplane, Talos v1.13.9, platform "
        "container",
        f"talos: node {worker.hostname} ({worker.address}): worker, Talos v1.13.9, platform "
        "container",
    ]
    assert lines[3] == (
        f"talos: settings: talosconfig {emulated.talosconfig_path} [--talosconfig]; "
        f"context (current) [default]; endpoints {emulated.endpoint} [--talos-endpoint]; "
        "nodes (all) [default]; timeout 10s [default]; allow disruptive [ini talos_allow]"
    )
    assert lines[4:] == [
        "talos: changes allowed: disruptive: config changes (undone afterwards), reboots, "
        "resets and upgrades",
        f"talos: WARNING: ini talos_allow disruptive lets tests change REAL nodes "
        f"({emulated.endpoint} (talosconfig: {emulated.talosconfig_path}))",
    ]


def test_header_reports_unreachable_targets_without_failing_the_run(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run("--talos-endpoint", "127.0.0.1:1")
    result.assert_outcomes(passed=1)
    lines = header(result)
    assert lines[0] == "talos: targets: 127.0.0.1:1 (talosconfig: talosctl lookup)"
    assert lines[1].startswith("talos: cannot reach the targets: no talosconfig found; looked at ")


def test_nodes_selected_by_hostname_in_the_emulator(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run("--talos-emulator=1:2", "--talos-nodes", "talos-default-worker-2")
    lines = header(result)
    assert [line.split(" (")[0] for line in lines[1:2]] == ["talos: node talos-default-worker-2"]
    assert "nodes talos-default-worker-2 [--talos-nodes]" in lines[2]


def test_no_talos_setting_means_no_connection_for_the_header(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = run()
    result.assert_outcomes(passed=1)
    assert header(result) == [
        "talos: targets: talosctl's talosconfig lookup, contacted only if a test needs a node"
    ]


def test_a_target_node_that_does_not_answer_is_named_in_the_header_and_fails_its_tests(
    run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster
) -> None:
    # The emulator's apid never dials outside 127.0.0.0/8: 192.0.2.1 (TEST-NET-1) is unreachable.
    pytester.makepyfile("def test_node(talos_node):\n    pass\n")
    worker = emulated.node("talos-default-worker-1").address
    result = run(*target_args(emulated), "--talos-nodes", f"{worker},192.0.2.1")
    lines = header(result)
    assert lines[1].startswith("talos: node 192.0.2.1: unreachable: ")
    assert lines[2].startswith(f"talos: node talos-default-worker-1 ({worker}): worker, ")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*node 192.0.2.1 did not answer: *"])
