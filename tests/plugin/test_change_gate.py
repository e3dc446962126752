"""The clients the plugin hands out refuse changes the test did not declare (a real node is
never changed by an unmarked test); the emulator's call log stays as a second net."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_talos.client import ChangeGate
from pytest_talos.errors import ChangeNotAllowed
from pytest_talos.talos_api import CHANGING_METHODS, change_level, permits

Run = Callable[..., pytest.RunResult]
WORKER = "talos-default-worker-1"


@pytest.fixture
def emulator_run(run: Run) -> Run:
    def inner(*args: str) -> pytest.RunResult:
        return run("--talos-emulator", "--no-header", *args)

    return inner


def test_the_table_grades_changes() -> None:
    m = "/machine.MachineService/"
    assert change_level(m + "Version") is None
    assert change_level(m + "EtcdSnapshot") is None
    assert change_level(m + "PacketCapture") is None
    assert change_level(m + "ServiceRestart") == "mutating"
    assert change_level(m + "Reboot") == "disruptive"
    assert change_level(m + "EtcdLeaveCluster") == "disruptive"
    assert change_level("/machine.LifecycleService/Upgrade") == "disruptive"
    assert CHANGING_METHODS["/cosi.resource.State/Destroy"] == "mutating"
    from pytest_talos._proto.machine import machine_pb2 as pb

    apply = m + "ApplyConfiguration"
    mode = pb.ApplyConfigurationRequest
    assert change_level(apply, mode(mode=mode.NO_REBOOT)) == "mutating"
    assert change_level(apply, mode(mode=mode.NO_REBOOT, dry_run=True)) is None
    assert change_level(apply, mode(mode=mode.REBOOT)) == "disruptive"
    assert change_level(apply, mode(mode=mode.AUTO)) == "disruptive"
    assert permits("none", None)
    assert not permits("none", "mutating")
    assert permits("disruptive", "mutating")
    assert not permits("mutating", "disruptive")


def test_a_gate_refuses_before_sending() -> None:
    gate = ChangeGate("none")
    with pytest.raises(ChangeNotAllowed) as refused:
        gate.check("/machine.MachineService/ServiceStop", None, "10.5.0.3")
    assert refused.value.needed == "mutating"
    assert refused.value.allowed == "none"
    assert "ServiceStop is a mutating change" in str(refused.value)
    gate.check("/machine.MachineService/Version", None, "10.5.0.3")
    gate.allowed = "mutating"
    gate.check("/machine.MachineService/ServiceStop", None, "10.5.0.3")
    with pytest.raises(ValueError):
        gate.allowed = "everything"


def test_unmarked_test_cannot_change_a_node_through_its_client(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        import pytest
        from pytest_talos.errors import ChangeNotAllowed

        @pytest.mark.talos_role("worker")
        def test_apply(talos_node, talos_emulator):
            before = talos_node.machine_config.raw
            changed = before.replace(b"machine:", b"machine:\\n  nodeLabels: {sneaky: x}", 1)
            calls = talos_emulator.call_log_store.total
            with pytest.raises(ChangeNotAllowed) as refused:
                talos_node.client.apply_configuration(changed, "no-reboot")
            assert talos_node.machine_config.raw == before
            assert not any(c.mutating for c in talos_emulator.call_log_store.since(calls))
            raise refused.value

        @pytest.mark.talos_role("worker")
        def test_restart(talos_node):
            talos_node.client.service_restart("kubelet")

        def test_cluster_client(talos_cluster):
            worker = talos_cluster.worker().address
            talos_cluster.client.with_node(worker).service_stop("kubelet")

        @pytest.mark.talos_role("worker")
        def test_dry_run_and_reads_pass(talos_node, talos_cluster):
            raw = talos_node.machine_config.raw
            talos_node.client.apply_configuration(raw, "no-reboot", dry_run=True)
            talos_cluster.client.with_node(talos_node.address).version()
    """)
    result = emulator_run("--talos-allow", "disruptive")
    result.assert_outcomes(passed=1, failed=3)
    for method in ("ApplyConfiguration", "ServiceRestart", "ServiceStop"):
        result.stdout.fnmatch_lines(
            [
                f"*ChangeNotAllowed: [[]node *, /machine.MachineService/{method}[]] {method} is a "
                "change to the node and this test is not marked talos_mutating, so its clients "
                "refuse it (nothing was sent); mark it @pytest.mark.talos_mutating and run with "
                "--talos-allow mutating"
            ]
        )
    assert "sent changing calls" not in result.stdout.str()  # refused before the wire


def test_a_mutating_test_may_not_reboot(emulator_run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_reboots(talos_node):
            talos_node.client.reboot()
    """)
    result = emulator_run("--talos-allow", "disruptive")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*Reboot is a disruptive change (it reboots, resets or upgrades the node, or changes "
            "etcd) and this test is not marked talos_disruptive, *@pytest.mark.talos_disruptive "
            "and run with --talos-allow disruptive"
        ]
    )


def test_marked_test_changes_and_the_guard_restores(
    emulator_run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        import pytest

        ORIGINAL = {}

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_change(talos_node):
            ORIGINAL["raw"] = talos_node.machine_config.raw
            talos_node.client.service_restart("kubelet")
            talos_node.apply_patch({"machine": {"nodeLabels": {"gate": "open"}}})
            assert b"gate: open" in talos_node.machine_config.raw

        @pytest.mark.talos_role("worker")
        def test_after(talos_node):
            assert talos_node.machine_config.raw == ORIGINAL["raw"]  # the guard restored it
    """)
    emulator_run("--talos-allow", "mutating").assert_outcomes(passed=2)


def test_a_test_allowed_to_change_the_cluster_counts_as_a_change(
    run: Run, pytester: pytest.Pytester
) -> None:
    """Readers that keep what they read for later (the port check's fan-out) compare the
    gate's count: a marked test may change the cluster by other means than the API."""
    pytester.makepyfile("""
        import pytest
        from pytest_talos.plugin.session import session_of

        def test_a_reader(request):
            assert session_of(request.config).gate.changes == 0

        @pytest.mark.talos_mutating
        def test_b_changer():
            pass

        def test_c_reader(request):
            assert session_of(request.config).gate.changes == 1
    """)
    run("--talos-allow", "mutating").assert_outcomes(passed=3)
