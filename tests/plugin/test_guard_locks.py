"""One changer per node: a second guard, another worker or run holding the node's lock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.guard import node_key_of
from pytest_talos.journal import NodeLock
from tests.plugin.conftest import active_config, target_args

Run = Callable[..., pytest.RunResult]
WORKER = "talos-default-worker-1"


@pytest.fixture
def cluster_run(run: Run, emulated: EmulatedCluster, tmp_path: Path) -> Run:
    def inner(*args: str) -> pytest.RunResult:
        return run(
            *target_args(emulated),
            "--talos-allow",
            "mutating",
            "--no-header",
            f"--talos-state-dir={tmp_path / 'state'}",
            *args,
        )

    return inner


def test_a_second_guard_refuses_to_snapshot_a_change_in_flight(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster
) -> None:
    original = active_config(emulated, WORKER)
    pytester.makepyfile("""
        import pytest
        from pytest_talos.guard import ConfigGuard, GuardConflict

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_second_guard_after_a_change(talos_node):
            talos_node.apply_patch({"machine": {"nodeLabels": {"first": "guard"}}})
            with pytest.raises(GuardConflict) as refused:
                ConfigGuard().protect(talos_node)
            assert "another guard in this run changed node talos-default-worker-1" in str(
                refused.value)
            assert "a snapshot now would record that change as the original" in str(
                refused.value)

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_second_guard_before_any_change_shares(talos_node):
            with ConfigGuard() as mine:
                talos_node.apply_patch({"machine": {"nodeLabels": {"both": "guards"}}},
                                       guard=mine)
                assert sorted(mine.protected) == ["talos-default-worker-1"]
            assert b"both: guards" not in talos_node.machine_config.raw  # mine restored it
    """)
    cluster_run().assert_outcomes(passed=2)
    assert active_config(emulated, WORKER) == original


def test_a_node_locked_elsewhere_waits_then_says_who_holds_it(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, tmp_path: Path
) -> None:
    original = active_config(emulated, WORKER)
    address = emulated.node(WORKER).address
    with TalosClient.from_talosconfig(emulated.talosconfig_path, node=address) as client:
        key = node_key_of(client, address)
    held = NodeLock(tmp_path / "state", key, label="another run's test_x")
    held.acquire(1.0, WORKER)
    try:
        pytester.makepyfile("""
            import pytest

            @pytest.mark.talos_mutating
            @pytest.mark.talos_role("worker")
            def test_change(talos_node):
                talos_node.apply_patch({"machine": {"nodeLabels": {"never": "applied"}}})
        """)
        result = cluster_run("--talos-lock-timeout=0.5")
    finally:
        held.release()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*NodeBusy: [[]node {WORKER}[]] node {WORKER} is being changed by pid * "
            "(another run's test_x) and its lock (*.lock) was not free within 0.5s; wait for "
            "that run to finish, or raise --talos-lock-timeout*",
        ]
    )
    assert active_config(emulated, WORKER) == original


def test_an_unusable_state_directory_refuses_the_change_clearly(
    run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, tmp_path: Path
) -> None:
    original = active_config(emulated, WORKER)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_change(talos_node):
            talos_node.apply_patch({"machine": {"nodeLabels": {"never": "applied"}}})
    """)
    result = run(
        *target_args(emulated),
        "--talos-allow",
        "mutating",
        "--no-header",
        f"--talos-state-dir={blocker / 'state'}",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*cannot lock and journal node {WORKER} in the state directory */not-a-directory/state"
            " (Not a directory); no change was made. Point --talos-state-dir*",
        ]
    )
    assert active_config(emulated, WORKER) == original


def test_a_read_that_must_not_see_a_change_waits_for_the_changer(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, tmp_path: Path
) -> None:
    # config.persisted-matches-active reads under the node's lock (talos_unchanged): while
    # another worker or run holds it, the read waits; here it gives up after the lock
    # timeout and says who holds the node, instead of comparing a config mid-change.
    address = emulated.node(WORKER).address
    with TalosClient.from_talosconfig(emulated.talosconfig_path, node=address) as client:
        key = node_key_of(client, address)
    held = NodeLock(tmp_path / "state", key, label="another worker's try window")
    held.acquire(1.0, WORKER)
    try:
        pytester.makepyfile("""
            import pytest

            @pytest.mark.talos_role("worker")
            def test_read(talos_node, talos_unchanged):
                with talos_unchanged(talos_node):
                    pass
        """)
        busy = cluster_run("--talos-lock-timeout=0.5")
    finally:
        held.release()
    busy.assert_outcomes(failed=1)
    busy.stdout.fnmatch_lines(
        [f"*NodeBusy: *node {WORKER} is being changed by pid * (another worker's try window)*"]
    )
    free = cluster_run("--talos-lock-timeout=0.5")  # nobody holds it: the read goes ahead
    free.assert_outcomes(passed=1)
