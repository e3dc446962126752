"""The restore guarantee: whatever happens in a test, every node gets its exact config back.

The emulated cluster here is an *outside* cluster (module fixture): the inner runs reach it
through ``--talosconfig``/``--talos-endpoint`` like a real one, and the outer test reads the
node's config afterwards over the API.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster
from tests.plugin.conftest import active_config, target_args

Run = Callable[..., pytest.RunResult]
WORKER = "talos-default-worker-1"

PATCHING_TEST = """
import pytest

@pytest.mark.talos_mutating
@pytest.mark.talos_role("worker")
def test_patch(talos_node):
    talos_node.apply_patch({{"machine": {{"nodeLabels": {{"guard": "was-here"}}}}}})
    assert b"was-here" in talos_node.machine_config.raw
    {ending}
"""


@pytest.fixture
def cluster_run(run: Run, emulated: EmulatedCluster) -> Run:
    def inner(*args: str) -> pytest.RunResult:
        return run(*target_args(emulated), "--talos-allow", "mutating", "--no-header", *args)

    return inner


@pytest.fixture
def original(emulated: EmulatedCluster) -> bytes:
    return active_config(emulated, WORKER)


@pytest.mark.parametrize(
    ("ending", "outcome"),
    [
        ("pass", {"passed": 1}),
        ("assert False, 'the test failed after patching'", {"failed": 1}),
        ("raise RuntimeError('the test broke after patching')", {"failed": 1}),
    ],
    ids=["pass", "fail", "error"],
)
def test_config_restored_after_pass_and_failure(
    ending: str,
    outcome: dict[str, int],
    cluster_run: Run,
    pytester: pytest.Pytester,
    emulated: EmulatedCluster,
    original: bytes,
) -> None:
    pytester.makepyfile(PATCHING_TEST.format(ending=ending))
    cluster_run().assert_outcomes(**outcome)
    assert active_config(emulated, WORKER) == original


def test_config_restored_after_a_fixture_error(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.fixture
        def labelled(talos_node):
            talos_node.apply_patch({"machine": {"nodeLabels": {"guard": "fixture"}}})
            raise RuntimeError("the fixture broke after patching")

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_uses_fixture(labelled):
            pass
    """)
    cluster_run().assert_outcomes(errors=1)
    assert active_config(emulated, WORKER) == original


def test_config_restored_after_keyboard_interrupt_mid_patch(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_interrupted(talos_node):
            talos_node.apply_patch({"machine": {"nodeLabels": {"guard": "interrupted"}}})
            assert b"interrupted" in talos_node.machine_config.raw
            raise KeyboardInterrupt

        @pytest.mark.talos_role("worker")
        def test_never_runs(talos_node):
            pass
    """)
    result = cluster_run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    assert active_config(emulated, WORKER) == original


def test_restore_failure_is_loud_and_the_session_fallback_retries(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    # monkeypatch is set up before talos_node, so it is undone only after the guard's own
    # restore: that restore fails; the session-level fallback then succeeds.
    pytester.makepyfile("""
        import pytest
        from pytest_talos.errors import Unavailable

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_patch(monkeypatch, talos_node):
            talos_node.apply_patch({"machine": {"nodeLabels": {"guard": "stuck"}}})

            def refuse(*args, **kwargs):
                raise Unavailable("apid is restarting")

            monkeypatch.setattr(talos_node.client, "apply_configuration", refuse)
    """)
    result = cluster_run()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_patch*",
            "talos_config_guard: could not restore the original machine config of node "
            f"{WORKER} (*): the restore call failed: *UNAVAILABLE: apid is restarting. The node "
            "may still run a changed config. Its original config stays in the journal "
            "*/journal/*.json (0600; it holds the cluster's secrets): talos-recover --state-dir * "
            "retries the restore.",
        ]
    )
    assert "RESTORE FAILED" not in result.stdout.str()  # the fallback succeeded
    assert active_config(emulated, WORKER) == original


def test_unchanged_nodes_get_no_restore_call(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_dry_run(talos_node, talos_config_guard):
            talos_config_guard.protect(talos_node)
            result = talos_node.apply_patch(
                {"machine": {"nodeLabels": {"guard": "dry"}}}, dry_run=True)
            assert "Dry run summary" in result.mode_details
    """)
    before = len(emulated.call_log)
    cluster_run().assert_outcomes(passed=1)
    applied = [
        call for call in emulated.call_log[before:] if call.method.endswith("/ApplyConfiguration")
    ]
    assert applied, "the dry run reached the node"
    assert not [call for call in applied if call.mutating], "a dry run only: no restore apply"
    assert active_config(emulated, WORKER) == original


def test_a_node_left_changed_fails_the_run_loudly(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    pytester.makepyfile("""
        import pytest
        from pytest_talos.errors import Unavailable

        @pytest.mark.talos_mutating
        @pytest.mark.talos_role("worker")
        def test_patch(talos_node):
            talos_node.apply_patch({"machine": {"nodeLabels": {"guard": "stuck-for-good"}}})

            def refuse(*args, **kwargs):
                raise Unavailable("apid is gone")

            talos_node.client.apply_configuration = refuse  # never undone
    """)
    try:
        result = cluster_run()
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(
            [
                "talos: RESTORE FAILED: could not restore the original machine config of node "
                f"{WORKER} (*): the restore call failed: *UNAVAILABLE: apid is gone. *"
            ]
        )
        assert b"stuck-for-good" in active_config(emulated, WORKER)
    finally:
        node = emulated.node(WORKER)
        with TalosClient.from_talosconfig(emulated.talosconfig_path, node=node.address) as client:
            client.apply_configuration(original, "no-reboot")
    assert active_config(emulated, WORKER) == original


def test_cluster_level_changes_go_through_the_guard_fixture(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    pytester.makepyfile("""
        import pytest
        from pytest_talos.errors import TalosError

        def test_unguarded_change_is_refused(talos_cluster):
            with pytest.raises(TalosError, match="needs a guard that can undo it"):
                talos_cluster.worker().apply_patch({"machine": {"nodeLabels": {"a": "b"}}})

        @pytest.mark.talos_mutating
        def test_guarded_change(talos_cluster, talos_config_guard):
            worker = talos_cluster.worker()
            worker.apply_patch({"machine": {"nodeLabels": {"guard": "cluster"}}},
                               guard=talos_config_guard)
            assert talos_config_guard.protected == [worker.name]
    """)
    cluster_run().assert_outcomes(passed=2)
    assert active_config(emulated, WORKER) == original


def test_a_run_guard_restores_after_a_change_from_a_thread_and_on_an_interrupt(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    # talos_guarded: a guard of the run's own, used from another thread. The first block
    # ends normally; the second ends with the run's KeyboardInterrupt.
    pytester.makepyfile("""
        import threading
        import pytest

        def change(talos_cluster, guard, label):
            node = talos_cluster.node("talos-default-worker-1").with_guard(guard)
            node.apply_patch({"machine": {"nodeLabels": {"guard": label}}})

        @pytest.mark.talos_mutating
        def test_block_restores(talos_cluster, talos_guarded):
            with talos_guarded("from-a-thread") as guard:
                worker = threading.Thread(target=change, args=(talos_cluster, guard, "thread"))
                worker.start()
                worker.join(30)
                assert guard.protected == ["talos-default-worker-1"]
            node = talos_cluster.node("talos-default-worker-1")
            assert b"thread" not in node.machine_config.raw
            assert guard.protected == []

        @pytest.mark.talos_mutating
        def test_interrupted_inside_a_block(talos_cluster, talos_guarded):
            with talos_guarded("left-open") as guard:
                change(talos_cluster, guard, "left-open")
                raise KeyboardInterrupt
    """)
    result = cluster_run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*1 passed*"])
    assert active_config(emulated, WORKER) == original


def test_a_run_guard_that_fails_to_restore_stays_for_the_runs_fallback(
    cluster_run: Run, pytester: pytest.Pytester, emulated: EmulatedCluster, original: bytes
) -> None:
    # The block's restore fails (the client refuses); the guard stays registered, and the
    # run's fallback restores the node once the monkeypatch is undone.
    pytester.makepyfile("""
        import pytest
        from pytest_talos.errors import ConfigRestoreError, Unavailable

        @pytest.mark.talos_mutating
        def test_stuck(monkeypatch, talos_cluster, talos_guarded):
            node = talos_cluster.node("talos-default-worker-1")
            with pytest.raises(ConfigRestoreError, match="apid is restarting"):
                with talos_guarded("stuck") as guard:
                    guarded = node.with_guard(guard)
                    guarded.apply_patch({"machine": {"nodeLabels": {"guard": "stuck"}}})

                    def refuse(*args, **kwargs):
                        raise Unavailable("apid is restarting")

                    monkeypatch.setattr(guarded.client, "apply_configuration", refuse)
            assert guard.protected == ["talos-default-worker-1"]
    """)
    result = cluster_run()
    result.assert_outcomes(passed=1)
    assert "RESTORE FAILED" not in result.stdout.str()  # the fallback succeeded
    assert active_config(emulated, WORKER) == original
