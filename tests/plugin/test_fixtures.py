"""Fixtures, hooks and the emulator call-log cross-check, through inner pytest runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_talos.emulator import EmulatedCluster

Run = Callable[..., pytest.RunResult]


@pytest.fixture
def emulator_run(run: Run) -> Run:
    def inner(*args: str) -> pytest.RunResult:
        return run("--talos-emulator", "--no-header", *args)

    return inner


def test_talos_node_facade(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_facade(talos_node):
            assert talos_node.version.tag == "v1.13.9"
            assert talos_node.hostname.startswith("talos-default-")
            assert talos_node.address == talos_node.host
            assert talos_node.service("kubelet").healthy
            assert "apid" in {s.id for s in talos_node.services}
            config = talos_node.machine_config
            assert config.version >= 1 and b"machine:" in config.raw
            assert talos_node.files.exists("/etc/os-release")
            assert not talos_node.files.exists("/bin/sh")
            assert "ID=talos" in talos_node.files.read_text("/etc/os-release")
            assert any(l.local_port == 50000 for l in talos_node.listeners)
            assert isinstance(talos_node.logs("kubelet", tail=5), str)
            assert 50000 in talos_node.scan_ports("49990-50010").open_ports
            assert talos_node.expected_ports >= {50000, 10250}
    """)
    emulator_run().assert_outcomes(passed=2)


def test_talos_cluster_fixture(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_cluster(talos_cluster):
            assert talos_cluster.roles == {
                "talos-default-controlplane-1": "controlplane",
                "talos-default-worker-1": "worker",
            }
            assert talos_cluster.controlplane().name == "talos-default-controlplane-1"
            assert talos_cluster.worker().name == "talos-default-worker-1"
            names = {n.metadata.name for n in talos_cluster.kubernetes.core_v1.list_node().items}
            assert names == set(talos_cluster.roles)

        def test_same_object_for_the_session(talos_cluster, request):
            assert request.getfixturevalue("talos_cluster") is talos_cluster
    """)
    emulator_run().assert_outcomes(passed=2)


def test_talos_emulator_fixture_is_the_running_cluster(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        def test_emulator(talos_emulator, talos_cluster):
            assert talos_emulator.clock.time_scale == 5.0
            assert {n.hostname for n in talos_emulator.nodes} == set(talos_cluster.roles)
            assert talos_emulator.call_log  # the cluster fixture already talked to it
    """)
    emulator_run("--talos-emulator-time-scale=5").assert_outcomes(passed=1)


def test_talos_emulator_fixture_is_none_against_real_nodes(
    run: Run, pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from pytest_talos.emulator import EmulatedCluster

    with EmulatedCluster() as cluster:
        pytester.makepyfile("""
            def test_emulator(talos_emulator):
                assert talos_emulator is None
        """)
        result = run("--no-header", f"--talosconfig={cluster.talosconfig_path}")
    result.assert_outcomes(passed=1)


def test_ids_are_sorted_hostnames(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_node(talos_node):\n    pass\n")
    result = run("--talos-emulator=2:2", "--collect-only", "-q", "--no-header")
    result.stdout.fnmatch_lines(
        [
            "*::test_node[[]talos-default-controlplane-1[]]",
            "*::test_node[[]talos-default-controlplane-2[]]",
            "*::test_node[[]talos-default-worker-1[]]",
            "*::test_node[[]talos-default-worker-2[]]",
        ]
    )


def test_unreachable_target_is_a_fixture_error_with_one_message(
    run: Run, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    # A talosconfig whose endpoint answers nothing (no talosconfig at all is a usage error:
    # test_no_target.py).
    talosconfig = tmp_path / "talosconfig"
    with EmulatedCluster(1, 0) as cluster:
        talosconfig.write_bytes(Path(cluster.talosconfig_path).read_bytes())
    pytester.makepyfile("""
        def test_node(talos_node):
            pass

        def test_cluster(talos_cluster):
            pass
    """)
    result = run(f"--talosconfig={talosconfig}", "--talos-endpoint", "127.0.0.1:1", "--no-header")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_node[[]unreachable[]]*",
            f"pytest-talos could not reach 127.0.0.1:1 (talosconfig: {talosconfig}): *. Check the "
            "endpoint and talosconfig (--talos-endpoint, --talosconfig, --talos-context), or run "
            "against the built-in emulated cluster with --talos-emulator.",
        ]
    )
    output = result.stdout.str()
    assert "Traceback" not in output
    assert "During handling" not in output


def test_unmarked_test_cannot_change_a_node(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        from pytest_talos.errors import TalosError

        @pytest.mark.talos_role("worker")
        def test_refused(talos_node):
            with pytest.raises(TalosError) as refused:
                talos_node.apply_patch({"machine": {"nodeLabels": {"a": "b"}}})
            assert str(refused.value) == (
                "[node talos-default-worker-1] this test is not marked talos_mutating, so its "
                "talos_node refuses changes; mark it @pytest.mark.talos_mutating (run with "
                "--talos-allow mutating)"
            )
    """)
    emulator_run().assert_outcomes(passed=1)


def test_call_log_fails_an_unmarked_test_that_changed_a_node(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    # The plugin's own clients refuse undeclared changes (test_change_gate.py); the call log
    # catches a client the test built itself.
    pytester.makepyfile("""
        import pytest
        from pytest_talos.client import TalosClient

        def own_client(talos_emulator, talos_node):
            return TalosClient.from_talosconfig(
                talos_emulator.talosconfig_path, node=talos_node.address)

        @pytest.mark.talos_role("worker")
        def test_sneaky(talos_node, talos_emulator):
            with own_client(talos_emulator, talos_node) as client:
                client.service_restart("kubelet")

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_declared(talos_node, talos_emulator):
            with own_client(talos_emulator, talos_node) as client:
                client.service_restart("kubelet")
    """)
    result = emulator_run("--talos-allow", "mutating")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "this test sent changing calls to the emulated cluster (ServiceRestart to "
            "talos-default-worker-1) but is not marked talos_mutating; mark it "
            "@pytest.mark.talos_mutating so that it runs only when --talos-allow permits "
            "such changes"
        ]
    )


def test_call_log_requires_disruptive_for_a_reboot(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        import pytest

        from pytest_talos.client import TalosClient

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_reboots(talos_node, talos_emulator):
            with TalosClient.from_talosconfig(
                talos_emulator.talosconfig_path, node=talos_node.address
            ) as client:
                client.reboot()
    """)
    result = emulator_run("--talos-allow", "disruptive")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "this test sent changing calls to the emulated cluster (Reboot to "
            "talos-default-worker-1) but is not marked talos_disruptive; *"
        ]
    )


# --------------------------------------------------------------------------- hooks


def test_expected_ports_hook_edits_the_one_set_in_place(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    # Two implementations: the plugin's runs after the conftest's and sees its edit.
    pytester.makeconftest("""
        import pytest

        class Cilium:
            @pytest.hookimpl(trylast=True)
            def pytest_talos_expected_ports(self, role, ports):
                assert 2379 not in ports or role == "worker"  # the conftest's edit is seen
                ports.update({4240, 4244})

        def pytest_configure(config):
            config.pluginmanager.register(Cilium(), "cilium")

        def pytest_talos_expected_ports(node, role, ports):
            if role == "controlplane":
                ports.discard(2379)
    """)
    pytester.makepyfile("""
        def test_ports(talos_node):
            if talos_node.role == "worker":
                assert talos_node.expected_ports == {50000, 10250, 10256, 4240, 4244}
            else:
                assert talos_node.expected_ports == {
                    50000, 50001, 6443, 2380, 10250, 10256, 4240, 4244}
    """)
    result = emulator_run("-W", "error::DeprecationWarning")
    result.assert_outcomes(passed=2)


def test_expected_ports_hook_returning_ports_still_extends_but_is_deprecated(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makeconftest("""
        def pytest_talos_expected_ports(node, role, ports):
            if role == "worker":
                return {4240}
            ports.discard(2379)
    """)
    pytester.makepyfile("""
        def test_ports(talos_node):
            if talos_node.role == "worker":
                assert talos_node.expected_ports == {50000, 10250, 10256, 4240}
            else:
                assert talos_node.expected_ports == {50000, 50001, 6443, 2380, 10250, 10256}
    """)
    result = emulator_run()
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*PytestTalosDeprecationWarning: a pytest_talos_expected_ports implementation "
            "returned ?4240?: returning ports to add is deprecated; add them to the `ports` "
            "argument in place instead*"
        ]
    )


def test_expected_ports_of_every_node_are_read_at_once_by_the_first_node(
    run: Run, pytester: pytest.Pytester
) -> None:
    # The kit's part (the role, the config) is read for all three nodes on the first
    # node's setup, each on a thread of its own; the hook still runs once per node, here.
    pytester.makeconftest("""
        import threading
        from pytest_talos.plugin import session

        READ, HOOKED = [], []
        kit_ports = session.expected_ports_for

        def recorded(node):
            READ.append((node.name, threading.current_thread().name))
            return kit_ports(node)

        def pytest_configure(config):
            session.expected_ports_for = recorded

        def pytest_unconfigure(config):  # the inner run shares this process's modules
            session.expected_ports_for = kit_ports

        def pytest_talos_expected_ports(node, role, ports):
            HOOKED.append((node.name, threading.current_thread().name))
    """)
    pytester.makepyfile("""
        import conftest

        def test_ports(talos_node):
            assert 50000 in talos_node.expected_ports
            assert len(conftest.READ) == 3
            assert all(thread.startswith("talos-each") for _, thread in conftest.READ)
            assert conftest.HOOKED[-1] == (talos_node.name, "MainThread")

        def test_each_node_hooked_once():
            names = [name for name, _ in conftest.HOOKED]
            assert sorted(names) == sorted(set(names)) and len(names) == 3
    """)
    result = run("--talos-emulator=1:2")
    result.assert_outcomes(passed=4)


def test_a_node_whose_ports_cannot_be_read_errors_its_own_test_only(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makeconftest("""
        from pytest_talos.errors import TalosError
        from pytest_talos.plugin import session

        kit_ports = session.expected_ports_for

        def failing(node):
            if node.name == "talos-default-worker-2":
                raise TalosError("the config read timed out", node=node.name)
            return kit_ports(node)

        def pytest_configure(config):
            session.expected_ports_for = failing

        def pytest_unconfigure(config):  # the inner run shares this process's modules
            session.expected_ports_for = kit_ports
    """)
    pytester.makepyfile("""
        def test_ports(talos_node):
            assert 50000 in talos_node.expected_ports
    """)
    result = run("--talos-emulator=1:2", "-v")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_ports?talos-default-worker-2? ERROR*"])
    result.stdout.fnmatch_lines(["*the config read timed out*"])


def test_select_nodes_hook(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        def pytest_talos_select_nodes(nodes, config):
            return [node for node in nodes if node.role == "worker"]
    """)
    pytester.makepyfile("""
        def test_node(talos_node):
            pass

        def test_cluster(talos_cluster):
            assert [n.name for n in talos_cluster.nodes] == [
                "talos-default-worker-1", "talos-default-worker-2"]
    """)
    result = run("--talos-emulator=1:2", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "talos: node talos-default-worker-1 *",
            "talos: node talos-default-worker-2 *",
        ]
    )
    assert "test_node[talos-default-controlplane-1]" not in result.stdout.str()


def test_node_report_hook_adds_evidence(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        def pytest_talos_node_report(node, report):
            if report.failed:
                state = node.service("kubelet").state
                report.sections.append(("talos evidence", f"{node.name} kubelet {state}"))
    """)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_role("worker")
        def test_fails(talos_node):
            assert False, "on purpose"
    """)
    result = emulator_run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- talos evidence -*",
            "talos-default-worker-1 kubelet Running",
        ]
    )


def test_xdist_workers_agree_on_the_ids(run: Run, pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile("""
        import pytest

        def test_a(talos_node):
            assert talos_node.version.tag == "v1.13.9"

        @pytest.mark.talos_mutating
        def test_b(talos_node):
            talos_node.apply_patch({"machine": {"nodeLabels": {"xdist": "yes"}}})
    """)
    result = run(
        "--talos-emulator=1:1",
        "-n",
        "2",
        "--dist",
        "loadgroup",
        "--talos-allow",
        "mutating",
        "--no-header",
    )
    result.assert_outcomes(passed=4)
