"""The journal, the node lock, the recovery verdict and the call-log ring (no sockets)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_talos.emulator.apid.calllog import CallLog, CallRecord
from pytest_talos.errors import TalosError
from pytest_talos.guard import judge_recovery
from pytest_talos.journal import (
    Change,
    JournalRecord,
    NodeBusy,
    NodeLock,
    default_state_dir,
    journal_path,
    new_record,
    node_key,
    read_journal,
    remove_journal,
    sha256,
    write_journal,
)

ORIGINAL = b"version: v1alpha1\nmachine:\n  token: secret\n"
OURS = b"version: v1alpha1\nmachine:\n  token: secret\n  nodeLabels: {a: b}\n"
THEIRS = b"version: v1alpha1\nmachine:\n  token: secret\n  nodeLabels: {c: d}\n"


def _record(
    key: str = "k", persistent: bytes | None = ORIGINAL, mode: str = "no-reboot"
) -> JournalRecord:
    record = new_record(
        key,
        node="w1",
        address="10.5.0.3",
        endpoint="10.5.0.2:50000",
        original=ORIGINAL,
        version=7,
        persistent=persistent,
        talos_version="v1.13.9",
        run="test_x",
    )
    record.changes.append(Change(sha256(OURS), mode, state="applied"))
    return record


def test_state_dir_default_follows_xdg(tmp_path: Path) -> None:
    assert default_state_dir({"HOME": "/h"}) == Path("/h/.local/state/pytest-talos")
    assert default_state_dir({"HOME": "/h", "XDG_STATE_HOME": "/x"}) == Path("/x/pytest-talos")
    assert default_state_dir({"XDG_STATE_HOME": "relative", "HOME": "/h"}) == Path(
        "/h/.local/state/pytest-talos"
    )
    assert default_state_dir({"TALOS_STATE_DIR": str(tmp_path)}) == tmp_path


def test_journal_is_written_private_and_read_back(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = write_journal(state, _record())
    assert path == journal_path(state, "k")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    back = read_journal(path)
    assert back.original_bytes == ORIGINAL
    assert back.persistent_bytes == ORIGINAL
    assert back.changes == [Change(sha256(OURS), "no-reboot", "applied", None, back.changes[0].at)]
    assert "secret" not in repr(back)  # the config is never in a repr
    assert "secret" not in back.describe()
    assert "its last change (no-reboot, sha256 " in back.describe()
    remove_journal(state, "k")
    assert not path.exists()


def test_a_broken_journal_is_a_talos_error(tmp_path: Path) -> None:
    path = tmp_path / "journal" / "x.json"
    path.parent.mkdir()
    path.write_text("{not json")
    with pytest.raises(TalosError, match="not a readable pytest-talos journal"):
        read_journal(path)


def test_node_keys_are_file_names_and_tell_identities_apart() -> None:
    assert node_key("id-1", "10.5.0.3").startswith("10.5.0.3-")
    assert node_key("id-1", "[fd00::3]").startswith("_fd00__3_-")
    assert node_key("id-1", "10.5.0.3") != node_key("id-2", "10.5.0.3")


def test_the_lock_excludes_another_process_and_names_the_holder(tmp_path: Path) -> None:
    lock = NodeLock(tmp_path, "k", label="test_a")
    lock.acquire(1.0, "w1")
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from pytest_talos.journal import NodeLock\n"
            "lock = NodeLock(Path(sys.argv[1]), 'k')\n"
            "try:\n    lock.acquire(0.3, 'w1')\nexcept Exception as exc:\n    print(exc)\n",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "node w1 is being changed by pid " in other.stdout
    assert "(test_a)" in other.stdout
    assert "was not free within 0.3s" in other.stdout
    lock.release()
    assert NodeLock(tmp_path, "k").try_acquire("w1")


def test_a_killed_holder_never_blocks(tmp_path: Path) -> None:
    script = (
        "import sys, os; from pathlib import Path; from pytest_talos.journal import NodeLock\n"
        "NodeLock(Path(sys.argv[1]), 'k').acquire(1, 'w1'); os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
    assert NodeLock(tmp_path, "k").try_acquire("w1")


def test_node_busy_is_a_talos_error() -> None:
    assert issubclass(NodeBusy, TalosError)


@pytest.mark.parametrize(
    ("active", "persistent", "mode", "verdict"),
    [
        (ORIGINAL, ORIGINAL, "no-reboot", "clean"),
        (OURS, OURS, "no-reboot", "restore"),
        (OURS, ORIGINAL, "try", "restore"),  # the try window was still open
        (ORIGINAL, ORIGINAL, "try", "restore"),  # reverted, but a timer may still be armed
        (THEIRS, THEIRS, "no-reboot", "refuse"),
        (OURS, THEIRS, "no-reboot", "refuse"),  # someone staged their own config since
    ],
)
def test_recovery_restores_only_what_the_kit_left(
    active: bytes, persistent: bytes, mode: str, verdict: str
) -> None:
    result = judge_recovery(_record(mode=mode), active, 9, persistent)
    assert result.verdict == verdict
    if verdict == "refuse":
        assert "someone changed the node since, so it is not restored" in result.message
        assert "secret" not in result.message


def _call(n: int) -> CallRecord:
    return CallRecord(node="w1", address="10.5.0.3", method=f"/m/{n}", roles=(), mutating=False)


def test_the_call_log_is_a_ring_numbered_for_life(monkeypatch: pytest.MonkeyPatch) -> None:
    log = CallLog(maxlen=3)
    for n in range(5):
        log.append(_call(n))
    assert len(log) == 3
    assert log.total == 5
    assert log.dropped == 2
    assert [r.method for r in log.snapshot()] == ["/m/2", "/m/3", "/m/4"]
    assert [r.method for r in log.since(4)] == ["/m/4"]
    assert [r.method for r in log.since(0)] == ["/m/2", "/m/3", "/m/4"]  # older ones are gone
    assert log.since(5) == []
    log.maxlen = 1
    assert [r.method for r in log.snapshot()] == ["/m/4"]
    monkeypatch.setenv("TALOS_EMULATOR_CALL_LOG_SIZE", "7")
    assert CallLog().maxlen == 7
    monkeypatch.setenv("TALOS_EMULATOR_CALL_LOG_SIZE", "lots")
    with pytest.raises(ValueError, match="not a positive number of records"):
        CallLog()
