"""What keeps configs safe when a run is stopped: signals, journals found at start, recovery.

* SIGTERM (CI cancellation, ``timeout``, pod deletion) raises :class:`Terminated`, a
  KeyboardInterrupt: pytest stops the test, tears down (every guard restores), reports and
  exits with status 2, exactly as for Ctrl-C.
* After the first interrupt, while any guard still has a node to restore, further SIGINT and
  SIGTERM only print ``talos: restoring <node>, please wait``; the restore is never cut short.
* When the run first reaches its targets, it looks for journals killed runs left for those
  nodes: with changes allowed it restores them (only if the node still runs what the kit
  left), otherwise it says how.
* ``pytest --talos-recover`` runs :mod:`pytest_talos.recover` on the state directory.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Generator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_talos.errors import TalosError
from pytest_talos.guard import SignalShield, Terminated, node_key_of, set_announcer
from pytest_talos.journal import JournalRecord, journal_dir, journals
from pytest_talos.node import TalosNode

if TYPE_CHECKING:
    from pytest_talos.plugin.session import TalosSession

__all__ = ["RunSafety", "recover_command", "recover_targets"]

_TERMINATED = "SIGTERM received: stopping like Ctrl-C (nodes are restored first)"


class RunSafety:
    """Per-run signal handling, registered as a plugin object by ``pytest_configure``."""

    def __init__(self, config: pytest.Config, session: TalosSession) -> None:
        self.config = config
        self.session = session
        self.interrupted = False
        self._shield: SignalShield | None = None
        self._sigterm_installed = False
        self._previous_announcer: Callable[[str], None] | None = None
        self.finishing = False  # the session is finishing: its reports are being written
        self.late_sigterm = False
        self._sigint_installed = False
        # the exception a SIGTERM or Ctrl-C raised before the session was finishing
        self.signalled: type[KeyboardInterrupt] | None = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                    signal.signal(signal.SIGTERM, self._on_sigterm)
                    self._sigterm_installed = True
                if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                    signal.signal(signal.SIGINT, self._on_sigint)
                    self._sigint_installed = True
        self._previous_announcer = set_announcer(self.announce)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """Ctrl-C as Python's own handler takes it (KeyboardInterrupt), remembered: see
        :meth:`pytest_runtest_protocol`."""
        if not self.finishing:
            self.signalled = KeyboardInterrupt
        signal.default_int_handler(signum, frame)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM stops the run like Ctrl-C, except once the session is finishing: every
        test has ended and the reports are being written, so raising there would cut the
        report short and end in a traceback; the run exits when they are written, with the
        exit code the report gives."""
        if not self.finishing:
            self.signalled = Terminated
            raise Terminated(_TERMINATED)
        if not self.late_sigterm:
            self.late_sigterm = True
            self.announce(
                "talos: SIGTERM received while the run finishes (its reports are being "
                "written): exiting when they are, with the run's own exit code"
            )

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        """A SIGTERM's or a Ctrl-C's exception can land where Python swallows it (a weakref
        callback, a __del__: "Exception ignored in ..."): the run then went on and could end
        PASSED. Once the test it came in has ended, the run stops as the signal asked."""
        result = yield
        if self.signalled is Terminated:
            raise Terminated(_TERMINATED)
        if self.signalled is KeyboardInterrupt:
            raise KeyboardInterrupt
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        self.finishing = True
        return (yield)

    def uninstall(self) -> None:
        self.end_shield()
        if self._sigterm_installed:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self._sigterm_installed = False
        if self._sigint_installed:
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(signal.SIGINT) == self._on_sigint:
                    signal.signal(signal.SIGINT, signal.default_int_handler)
            self._sigint_installed = False
        set_announcer(self._previous_announcer)

    def announce(self, text: str) -> None:
        """Print past pytest's output capture (a notice must reach the person waiting)."""
        capman: Any = self.config.pluginmanager.getplugin("capturemanager")
        reporter: Any = self.config.pluginmanager.get_plugin("terminalreporter")
        context = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
        with context:
            if reporter is not None:
                reporter.write_line(text, yellow=True, bold=True)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()

    def pending_nodes(self) -> list[str]:
        return [name for guard in self.session.guards for name in guard.protected]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Journals killed runs left are handled at the start, whatever the tests touch."""
        settings = self.session.settings
        if settings.emulator.value is not None or not settings.anything_given:
            return
        if not any(journals(Path(settings.state_dir.value))):
            return
        with contextlib.suppress(TalosError):  # unreachable: the tests will say so
            self.session.cluster()  # connecting handles the journals (recover_targets)

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.interrupted = True
        if self.pending_nodes() and self._shield is None:
            # From here to the end of the run, restores must not be cut short.
            self._shield = SignalShield(self.pending_nodes, reraise=False).__enter__()
            self.announce(
                f"talos: interrupted; restoring {', '.join(self.pending_nodes())} before "
                "exiting (further Ctrl-C waits for it)"
            )

    def end_shield(self) -> None:
        shield, self._shield = self._shield, None
        if shield is not None:
            shield.close()


# --------------------------------------------------------------------------- journals at start


def recover_targets(session: TalosSession) -> list[str]:
    """Handle journals killed runs left for this run's target nodes; lines to show."""
    from pytest_talos.recover import recover_journal  # only when a journal exists

    settings = session.settings
    state_dir = Path(settings.state_dir.value)
    paths = list(journals(state_dir))
    if not paths or session.emulator is not None or session.cached_cluster is None:
        return []
    nodes: dict[str, TalosNode] = {}
    for target in session.cached_cluster.reachable:
        with contextlib.suppress(TalosError):
            nodes[node_key_of(target.client, target.address)] = target
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text.replace("talos-recover:", "talos:"))

    others = 0
    for path in paths:
        node = nodes.get(path.stem)
        if node is None:
            others += 1
        elif settings.allows_mutating:
            recover_journal(state_dir, path, _same_node(node), say)
        else:
            lines.append(
                f"talos: WARNING: node {node.name} has a journal from an interrupted run "
                f"({path}): it may still run a changed config. Restore it with pytest "
                "--talos-recover (or talos-recover), or run with --talos-allow mutating"
            )
    if others:
        lines.append(
            f"talos: {others} other journal(s) in {journal_dir(state_dir)} are for nodes "
            "outside this run; talos-recover handles them"
        )
    return lines


def _same_node(node: TalosNode) -> Callable[[JournalRecord], TalosNode]:
    return lambda record: node


# --------------------------------------------------------------------------- --talos-recover


def recover_command(config: pytest.Config) -> int:
    """``pytest --talos-recover``: the talos-recover command with this run's settings."""
    from pytest_talos.plugin.settings import resolve_settings
    from pytest_talos.recover import connect_as_recorded, recover_all

    settings = resolve_settings(config)
    if settings.emulator.value is not None:
        raise pytest.UsageError(
            "--talos-recover works on real targets: the built-in emulated cluster of a run "
            "ends with it and leaves no journal"
        )
    node_for = connect_as_recorded(
        talosconfig=settings.talosconfig.value if settings.talosconfig.given else None,
        context=settings.context.value,
        endpoint=settings.endpoints.value[0] if settings.endpoints.value else None,
        timeout=settings.timeout.value,
    )
    status = recover_all(Path(settings.state_dir.value), node_for, print)
    return int(pytest.ExitCode.OK if status == 0 else pytest.ExitCode.TESTS_FAILED)
