"""ConfigGuard: every change to a node's machine config is undone, whatever stops the run.

A guard snapshots a node's exact config before its first change and puts it back at the
end. Around that promise sit four safety nets, so that a config is never lost:

* **One changer per node.** Before the snapshot the guard takes the node's lock
  (:class:`~pytest_talos.journal.NodeLock`), shared by every process using the same state
  directory: pytest-xdist workers and parallel runs wait for each other instead of
  snapshotting a node while another one's change is live. A second guard in the same
  process shares the lock only if the node still runs the first guard's original config;
  otherwise the snapshot is refused.
* **A journal.** Before the first change the guard writes the original config, the node,
  its Talos version and each change in flight to a 0600 file in the state directory (see
  :mod:`pytest_talos.journal`; it holds the cluster's secrets). A restore removes it; a run
  killed with SIGKILL leaves it for :func:`recover_record` (``talos-recover``).
* **A shielded restore.** While the guard restores, SIGINT and SIGTERM print
  ``restoring <node>, please wait`` and are deferred until the config is back.
* **Explicit try-mode undo.** After a try-mode change the guard re-applies the original
  itself, even if the node's timer already reverted it: a pending timer is cancelled by
  that apply (``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go``
  ApplyConfiguration cancels a pending rollback for every non-try mode).

::

    with ConfigGuard() as guard:            # restores every touched node on exit
        node.apply_patch(patch, guard=guard)

The package is split by responsibility: :mod:`pytest_talos.guard.config_guard` (the guard
and its journaling client), :mod:`pytest_talos.guard.snapshot` (snapshots and the restore),
:mod:`pytest_talos.guard.signals` (the signal shield) and :mod:`pytest_talos.guard.recovery`
(judging and restoring from a dead run's journal). Import from ``pytest_talos.guard``.
"""

from __future__ import annotations

from pytest_talos.errors import ConfigRestoreError
from pytest_talos.guard.config_guard import (
    DEFAULT_LOCK_TIMEOUT,
    ConfigGuard,
    GuardConflict,
    JournalOrigin,
    unchanged_while,
)

# Internal to the kit (kept out of __all__), re-exported for checks (the helpers' guard) and
# the interruption tests (which wrap the journaling client's apply).
from pytest_talos.guard.config_guard import RecordingClient as RecordingClient
from pytest_talos.guard.config_guard import guarding as guarding
from pytest_talos.guard.recovery import Recovery, judge_recovery, recover_record
from pytest_talos.guard.signals import SignalShield, Terminated, set_announcer
from pytest_talos.guard.snapshot import node_key_of

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "ConfigGuard",
    "ConfigRestoreError",
    "GuardConflict",
    "JournalOrigin",
    "Recovery",
    "SignalShield",
    "Terminated",
    "judge_recovery",
    "node_key_of",
    "recover_record",
    "set_announcer",
    "unchanged_while",
]
