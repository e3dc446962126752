"""The run's targets (emulator and cluster, created on first use) and the report header."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_talos.client import ChangeGate
from pytest_talos.cluster import TalosCluster, read_each
from pytest_talos.errors import ConfigError, TalosError
from pytest_talos.guard import ConfigGuard, ConfigRestoreError, JournalOrigin, unchanged_while
from pytest_talos.hookspecs import PytestTalosDeprecationWarning
from pytest_talos.node import TalosNode, expected_ports_for
from pytest_talos.plugin.settings import Setting, TalosSettings
from pytest_talos.releases import release_of
from pytest_talos.talosconfig import load_talosconfig

if TYPE_CHECKING:
    from pytest_talos.emulator.cluster.emulated import EmulatedCluster

__all__ = ["SESSION_KEY", "TalosSession", "header_lines", "session_of"]


class TalosSession:
    """The run's targets: the emulator (if any) and the cluster, created on first use."""

    def __init__(self, config: pytest.Config, settings: TalosSettings) -> None:
        self.config = config
        self.settings = settings
        self.emulator: EmulatedCluster | None = None
        self.guards: list[ConfigGuard] = []
        self._cluster: TalosCluster | None = None
        self._error: TalosError | None = None
        self._ports: dict[str, frozenset[int]] = {}
        self._ports_read = False  # the kit's expected ports of every node read at once
        self._prefetched: dict[str, frozenset[int]] = {}
        # Every client the plugin hands out checks this gate before a changing call; its level
        # is the run's --talos-allow outside tests and the test's marker inside one.
        self.gate = ChangeGate(settings.allow.value, explain=self._refusal)
        self.in_test = False  # a test's setup or call is running (the gate has its level)

    def cluster(self) -> TalosCluster:
        """The cluster of the selected targets; raises the (cached) TalosError if unreachable."""
        if self._cluster is None and self._error is None:
            try:
                connected = self._connect()
            except TalosError as exc:
                self._error = exc
            else:
                # One object for the whole run: it owns the connection and the Kubernetes client.
                connected.client.change_gate = self.gate  # shared by every node's client
                self._cluster = connected.with_nodes(self._select(connected.nodes))
                self._recover_journals()
        if self._error is not None:
            raise self._error
        assert self._cluster is not None
        return self._cluster

    @property
    def connect_error(self) -> TalosError | None:
        """Why the targets could not be reached, once a connection was tried and failed."""
        return self._error

    def check_emulator_ports(self) -> None:
        """Raise pytest.UsageError (one paragraph) if --talos-emulator cannot start here: ports
        its nodes serve are taken on every address, as a local Kubernetes takes 6443 and
        10250. Only loopback is touched."""
        if self.settings.emulator.value is None:
            return
        from pytest_talos.emulator.apid.listeners import check_served_ports
        from pytest_talos.emulator.errors import CannotListen

        try:
            check_served_ports()
        except CannotListen as exc:
            raise pytest.UsageError(f"pytest-talos: {exc}") from None

    def check_target(self) -> None:
        """Raise pytest.UsageError (one paragraph) if the run names no usable target: no
        talosconfig found, an unreadable one, or a --talos-context it lacks. No network."""
        s = self.settings
        if s.emulator.value is not None:
            return
        path = None if s.talosconfig.source.startswith("$") else s.talosconfig.value
        try:
            load_talosconfig(path, context=s.context.value)
        except ConfigError as exc:
            raise pytest.UsageError(no_target_message(exc)) from None

    def _refusal(self, needed: str, method: str, node: str | None) -> str:
        what = (
            "a disruptive change (it reboots, resets or upgrades the node, or changes etcd)"
            if needed == "disruptive"
            else "a change to the node"
        )
        if self.in_test:
            return (
                f"{method} is {what} and this test is not marked talos_{needed}, so its clients "
                f"refuse it (nothing was sent); mark it @pytest.mark.talos_{needed} and run "
                f"with --talos-allow {needed}"
            )
        return (
            f"{method} is {what} and the run allows {self.settings.allow.value} changes, so "
            f"the kit's clients refuse it (nothing was sent); run with --talos-allow {needed}"
        )

    def targets(self) -> list[TalosNode]:
        return self.cluster().nodes

    def _connect(self) -> TalosCluster:
        s = self.settings
        if s.emulator.value is None:
            # $TALOSCONFIG is left to talosctl's lookup, which then reports it as the source.
            path = None if s.talosconfig.source.startswith("$") else s.talosconfig.value
            return TalosCluster.connect(
                path,
                context=s.context.value,
                endpoints=s.endpoints.value,
                nodes=s.nodes.value,
                timeout=s.timeout.value,
            )
        emulator = self._start_emulator(*s.emulator.value)
        cluster = TalosCluster.connect(
            emulator.talosconfig_path,
            endpoints=[emulator.endpoint],
            timeout=s.timeout.value,
            scan_baseline=emulator.vacant_address,
            env={},
        )
        return cluster.select(s.nodes.value) if s.nodes.value else cluster

    def _start_emulator(self, controlplanes: int, workers: int) -> EmulatedCluster:
        from pytest_talos.emulator.cluster.emulated import (
            EmulatedCluster,  # imported only when asked
        )
        from pytest_talos.emulator.errors import EmulatorError

        emulator = EmulatedCluster(
            controlplanes,
            workers,
            faults=self.settings.faults.value,
            variants=self.settings.variants.value,
            time_scale=self.settings.time_scale.value,
            talos_version=self.settings.emulator_version.value or "v1.13.9",
            latency=self.settings.latency.value,
        )
        try:
            self.emulator = emulator.__enter__()
        except EmulatorError as exc:  # the emulator's own root: reported like an unreachable target
            raise TalosError(str(exc)) from None
        return emulator

    def _select(self, nodes: list[TalosNode]) -> list[TalosNode]:
        chosen = self.config.hook.pytest_talos_select_nodes(nodes=nodes, config=self.config)
        return list(nodes if chosen is None else chosen)

    def expected_ports(self, node: TalosNode) -> frozenset[int]:
        if node.address not in self._ports:
            known = self._kit_ports(node)
            # the role and the node's machine config
            ports = set(known if known is not None else expected_ports_for(node))
            returned = self.config.hook.pytest_talos_expected_ports(
                node=node, role=node.role, ports=ports
            )
            for extra in returned:  # the deprecated way: a returned set extends ``ports``
                if extra is not None:
                    _warn_returned_ports(extra)
                    ports.update(extra)
            self._ports[node.address] = frozenset(ports)
        return self._ports[node.address]

    def _kit_ports(self, node: TalosNode) -> frozenset[int] | None:
        """The kit's expected ports of ``node`` as read for every node at once, by the first
        node's test (two calls a node: a fleet pays one node's round trips, not N); None
        when not read so (under pytest-xdist, whose workers each get a few nodes, or the
        read failed: the node's own read then raises its error, for its own test)."""
        if not self._ports_read:
            self._ports_read = True
            if self._cluster is not None and not hasattr(self.config, "workerinput"):
                nodes = self._cluster.reachable
                found = zip(nodes, read_each(nodes, _ports_or_none), strict=True)
                self._prefetched = {n.address: p for n, p in found if p is not None}
        return self._prefetched.pop(node.address, None)

    def describe_target(self) -> str:
        s = self.settings
        if s.emulator.value is not None:
            cp, workers = s.emulator.value
            faults = ", ".join(s.faults.value) or "none"
            variants = f"; variants: {', '.join(s.variants.value)}" if s.variants.value else ""
            release = f"Talos {s.emulator_version.value}, " if s.emulator_version.value else ""
            return (
                f"the emulated cluster ({release}{_count(cp, 'control plane')}, "
                f"{_count(workers, 'worker')}; faults: {faults}{variants})"
            )
        endpoints = ", ".join(s.endpoints.value) or "the talosconfig's endpoints"
        return f"{endpoints} (talosconfig: {s.talosconfig.value or 'talosctl lookup'})"

    def unreachable_message(self, exc: TalosError) -> str:
        return (
            f"pytest-talos could not reach {self.describe_target()}: {exc}. Check the "
            "endpoint and talosconfig (--talos-endpoint, --talosconfig, --talos-context), or "
            "run against the built-in emulated cluster with --talos-emulator."
        )

    def restore_leftovers(self) -> list[str]:
        """Restore what no test-level guard did (an interrupted run); the failures."""
        failures = []
        for guard in list(self.guards):  # a guard's own thread may drop it meanwhile
            try:
                guard.restore(reraise_deferred=False)
            except ConfigRestoreError as exc:
                failures.append(str(exc))
        return failures

    @contextlib.contextmanager
    def registered_guard(self, label: str = "") -> Iterator[ConfigGuard]:
        """A guard the run knows of, restored when the block ends (from any thread).

        The run's fallback (:meth:`restore_leftovers`) restores it too if the run stops
        before the block ends; a guard whose restore fails stays registered for it, and
        the ConfigRestoreError propagates.
        """
        guard = self.new_guard(label=label)
        self.guards.append(guard)
        try:
            yield guard
        finally:
            guard.restore(reraise_deferred=False)
            self.guards.remove(guard)

    def unchanged_while(self, node: TalosNode) -> contextlib.AbstractContextManager[None]:
        """A read that no other worker or run changes ``node`` during (its lock, in the
        run's state directory, waited for as long as a change may take)."""
        s = self.settings
        return unchanged_while(node, state_dir=s.state_dir.value, timeout=s.lock_timeout.value)

    @property
    def cached_cluster(self) -> TalosCluster | None:
        return self._cluster

    def new_guard(self, label: str = "") -> ConfigGuard:
        """A guard that locks and journals in the run's state directory."""
        s = self.settings
        found = self._cluster.talosconfig if self._cluster is not None else None
        return ConfigGuard(
            state_dir=s.state_dir.value,
            lock_timeout=s.lock_timeout.value,
            journal=self.emulator is None,  # an in-run emulator dies with the run
            origin=JournalOrigin(
                str(found.path) if found else s.talosconfig.value,
                found.context_name if found else s.context.value,
            ),
            label=label,
        )

    def _recover_journals(self) -> None:
        """Journals killed runs left for these targets: restore them or say how."""
        from pytest_talos.plugin.safety import recover_targets

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in recover_targets(self):
            if reporter is not None:
                reporter.write_line(line, yellow=True)

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
        if self.emulator is not None:
            self.emulator.__exit__(None, None, None)
            self.emulator = None


def no_target_message(exc: TalosError) -> str:
    return (
        f"pytest-talos has no target to test: {exc}. Point it at a cluster with "
        "--talosconfig PATH (or $TALOSCONFIG; --talos-context and --talos-endpoint choose "
        "within it), or run against the built-in emulated cluster with --talos-emulator."
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


SESSION_KEY = pytest.StashKey[TalosSession]()


def session_of(config: pytest.Config) -> TalosSession:
    return config.stash[SESSION_KEY]


def header_lines(session: TalosSession) -> list[str]:
    """The report header: targets, each node's version and role, sources, allowed changes."""
    if not session.settings.anything_given:
        # Nothing asked for Talos: do not contact a cluster just to print a header.
        return [
            "talos: targets: talosctl's talosconfig lookup, contacted only if a test needs a node"
        ]
    lines = [f"talos: targets: {session.describe_target()}"]
    try:
        cluster = session.cluster()
    except TalosError as exc:
        lines.append(f"talos: cannot reach the targets: {exc}")
    else:
        lines.extend(_node_lines(cluster))
    lines.append("talos: settings: " + _settings_text(session.settings))
    lines.extend(_allow_lines(session))
    return lines


def _node_lines(cluster: TalosCluster) -> list[str]:
    lines = []
    if cluster.talosconfig is not None and cluster.talosconfig.expiry_warning:
        lines.append(f"talos: WARNING: {cluster.talosconfig.expiry_warning}")
    for node in cluster.nodes:
        if node.unreachable is not None:
            lines.append(f"talos: node {node.address}: unreachable: {node.unreachable}")
            continue
        note = None
        try:
            version = node.version
            facts = f"Talos {version.tag}, platform {version.platform}"
            note = release_of(version.tag).note  # judged by another release's entry
        except TalosError as exc:
            facts = f"version unknown: {exc}"
        lines.append(f"talos: node {node.name} ({node.address}): {node.role}, {facts}")
        if note:
            lines.append(f"talos: node {node.name}: {note}")
    if not cluster.nodes:
        lines.append("talos: no target nodes")
    return lines


def _settings_text(settings: TalosSettings) -> str:
    def shown(label: str, setting: Setting[Any], text: str) -> str:
        return f"{label} {text} [{setting.source}]"

    if settings.emulator.value is not None:
        cp, workers = settings.emulator.value
        parts = [shown("emulator", settings.emulator, f"{cp}:{workers}")]
        if settings.faults.value:
            parts.append(shown("faults", settings.faults, ",".join(settings.faults.value)))
        if settings.emulator_version.value:
            parts.append(
                shown("release", settings.emulator_version, settings.emulator_version.value)
            )
        if settings.time_scale.given:
            parts.append(
                shown("time scale", settings.time_scale, f"{settings.time_scale.value:g}x")
            )
        if settings.latency.given:
            rtt = f"{settings.latency.value * 1000:g}ms"
            parts.append(shown("latency", settings.latency, rtt))
    else:
        parts = [
            shown(
                "talosconfig",
                settings.talosconfig,
                settings.talosconfig.value or "(talosctl lookup)",
            ),
            shown("context", settings.context, settings.context.value or "(current)"),
            shown(
                "endpoints",
                settings.endpoints,
                ",".join(settings.endpoints.value) or "(from talosconfig)",
            ),
        ]
    parts += [
        shown("nodes", settings.nodes, ",".join(settings.nodes.value) or "(all)"),
        shown("timeout", settings.timeout, f"{settings.timeout.value:g}s"),
        shown("allow", settings.allow, settings.allow.value),
    ]
    if settings.ignored:
        parts.append(f"ignored with the emulator: {', '.join(settings.ignored)}")
    return "; ".join(parts)


def _allow_lines(session: TalosSession) -> list[str]:
    settings = session.settings
    if settings.allow.value == "none":
        return [
            "talos: changes allowed: none (talos_mutating and talos_disruptive tests are "
            "skipped; enable them with --talos-allow mutating|disruptive)"
        ]
    what = (
        "config changes (undone afterwards), reboots, resets and upgrades"
        if settings.allows_disruptive
        else "config changes (undone afterwards)"
    )
    lines = [f"talos: changes allowed: {settings.allow.value}: {what}"]
    if settings.emulator.value is None:
        lines.append(
            f"talos: WARNING: {settings.allow.source} {settings.allow.value} lets tests change "
            f"REAL nodes ({session.describe_target()})"
        )
    return lines


def _warn_returned_ports(extra: Iterable[int]) -> None:
    warnings.warn(
        PytestTalosDeprecationWarning(
            f"a pytest_talos_expected_ports implementation returned {sorted(extra)}: returning "
            "ports to add is deprecated; add them to the `ports` argument in place instead "
            "(ports.update(...)) and return nothing"
        ),
        stacklevel=2,
    )


def _ports_or_none(node: TalosNode) -> frozenset[int] | None:
    try:
        return expected_ports_for(node)
    except TalosError:
        return None
