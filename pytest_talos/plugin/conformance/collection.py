"""Collection: every test under a suite root is a check (one ``talos_check`` marker, in the
folder of its area); checks get their area and profile markers, their waivers as ``xfail``
markers, and the selection (profile, ``--talos-check``, ``--talos-leave-out``, shard)."""

from __future__ import annotations

import datetime as dt
import difflib
from pathlib import Path

import pytest

from pytest_talos.errors import ConfigError, TalosError
from pytest_talos.plugin.conformance.catalogue import AREAS, SUITES, CheckSpec
from pytest_talos.plugin.conformance.catalogue import check_spec_from_marker as _from_marker
from pytest_talos.plugin.conformance.collector import (
    PROP_CHECK,
    PROP_CLAIM,
    PROP_HELD,
    PROP_NODE,
    PROP_SEVERITY,
    PROP_WAIVER,
)
from pytest_talos.plugin.conformance.parts import left_out
from pytest_talos.plugin.conformance.settings import SuiteSettings
from pytest_talos.plugin.conformance.shard import Shard
from pytest_talos.plugin.conformance.state import EXPIRED_WAIVER, SETTINGS, SPEC, check_spec
from pytest_talos.plugin.items import changes_level, held_back, node_param
from pytest_talos.plugin.session import session_of
from pytest_talos.reporting import check_waivers_known, find_waiver

__all__ = ["collect_checks", "shard_line", "shard_nodes"]


def _root_of(item: pytest.Item, roots: list[Path]) -> Path | None:
    return next((root for root in roots if root in item.path.parents), None)


def _spec_of(item: pytest.Item, root: Path) -> CheckSpec:
    marks = list(item.iter_markers("talos_check"))
    if len(marks) != 1:
        raise pytest.UsageError(
            f"{item.nodeid}: every conformance test needs exactly one @pytest.mark.talos_check("
            f"id, severity=..., claim=...) marker (found {len(marks)})"
        )
    try:
        spec = _from_marker(marks[0].args, marks[0].kwargs)
    except ConfigError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
    folder = item.path.relative_to(root).parts[0]
    if folder != spec.area:
        raise pytest.UsageError(
            f"{item.nodeid}: check {spec.id} belongs in conformance/"
            f"{spec.area}/, not conformance/{folder}/"
        )
    return spec


def _register(item: pytest.Item, spec: CheckSpec) -> None:
    item.stash[SPEC] = spec
    item.add_marker(spec.area)
    for profile in SUITES.values():
        if profile.name != "full" and profile.selects(spec.area, changes_level(item)):
            item.add_marker(profile.marker)
    item.user_properties.extend(
        [
            (PROP_CHECK, spec.id),
            (PROP_SEVERITY, spec.severity),
            (PROP_CLAIM, spec.claim),
            (PROP_NODE, node_param(item)),
        ]
    )
    held = held_back(item, session_of(item.config).settings)
    if held is not None:
        item.user_properties.append((PROP_HELD, held))


def _waive(item: pytest.Item, spec: CheckSpec, settings: SuiteSettings, today: dt.date) -> None:
    """An active waiver makes the check an expected failure (pytest's own ``xfail``, not
    strict: a waived check that passes is a pass). Only exceptions are waived: a test that
    never reached its node (``pytest.fail`` from the fixtures) stays an error. An expired
    waiver waives nothing; its note goes with the failure."""
    match = find_waiver(settings.waivers, spec.id, node_param(item), today)
    waiver = match.active
    if waiver is not None:
        reason = f"waived until {waiver.expires.isoformat()}: {waiver.reason}"
        item.add_marker(pytest.mark.xfail(reason=reason, strict=False, raises=Exception))
        item.user_properties.append(
            (
                PROP_WAIVER,
                {
                    "check": waiver.check,
                    "reason": waiver.reason,
                    "expires": waiver.expires.isoformat(),
                    "node": waiver.node,
                },
            )
        )
    elif match.expired is not None:
        item.stash[EXPIRED_WAIVER] = match.expired_note()


def _check_unique(owners: dict[str, str], spec: CheckSpec, item: pytest.Item) -> None:
    function = item.nodeid.split("[", 1)[0]
    owner = owners.setdefault(spec.id, function)
    if owner != function:
        raise pytest.UsageError(f"check id {spec.id} is used by both {owner} and {function}")


def _selected(item: pytest.Item, spec: CheckSpec, settings: SuiteSettings) -> bool:
    if left_out(settings, spec.id):
        return False
    if settings.checks:
        return spec.id in settings.checks  # asked for by id: whatever the profile
    if settings.suite is None or settings.suite.selects(spec.area, changes_level(item)):
        return True
    # Saving a snapshot is asked for explicitly: run it whatever the profile.
    return spec.id == "upgrade.snapshot-recorded" and settings.snapshot_mode == "save"


def shard_nodes(config: pytest.Config, shard: Shard) -> list[str] | None:
    """The hostnames of this shard, or None when the targets cannot be listed (then every
    shard runs every test, and each reports that it could not reach them)."""
    try:
        names = [node.name for node in session_of(config).targets()]
    except TalosError:
        return None
    if len(names) < shard.count:
        raise pytest.UsageError(
            f"--talos-shard {shard}: the run has {len(names)} target node(s), fewer than the "
            f"{shard.count} shards, so some shard would check no node; use at most "
            f"{len(names)} shard(s)"
        )
    return shard.nodes(names)


def shard_line(config: pytest.Config, shard: Shard) -> str:
    """The report header's line: which nodes this shard checks."""
    try:
        names = [node.name for node in session_of(config).targets()]
    except TalosError:
        return f"conformance: shard {shard}: nodes not known (the targets cannot be reached)"
    mine = shard.nodes(names)
    shown = ", ".join(mine[:6]) + (f" (+{len(mine) - 6} more)" if len(mine) > 6 else "")
    return f"conformance: shard {shard} checks {len(mine)} of {len(names)} nodes: {shown or 'none'}"


def _in_shard(item: pytest.Item, shard: Shard, nodes: list[str] | None) -> bool:
    if nodes is None:
        return True
    node = node_param(item)
    return shard.runs_cluster_checks if node is None else node in nodes


def _check_ids_known(wanted: tuple[str, ...], known: dict[str, str], source: str) -> None:
    """--talos-check with an id that no check has is a usage error with the nearest ids."""
    for check_id in wanted:
        if check_id in known:
            continue
        close = difflib.get_close_matches(check_id, list(known), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise pytest.UsageError(
            f"{source} {check_id}: there is no such check{hint} (list them with "
            "--talos-list-checks)"
        )


def _list_checks(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Print the catalogue (one line per check, by area) and end the run."""
    seen: dict[str, tuple[CheckSpec, str | None]] = {}
    for item in items:
        spec = item.stash[SPEC]
        seen.setdefault(spec.id, (spec, changes_level(item)))
    order = {area: i for i, area in enumerate(AREAS)}
    rows = sorted(seen.values(), key=lambda row: (order.get(row[0].area, 99), row[0].id))
    width = max((len(spec.id) for spec, _ in rows), default=10)
    lines = [f"{'check':<{width}}  {'severity':<8}  {'changes':<10}  claim"]
    lines += [
        f"{spec.id:<{width}}  {spec.severity:<8}  {changes or 'read-only':<10}  {spec.claim}"
        for spec, changes in rows
    ]
    lines.append(
        f"{len(rows)} checks; run some with --talos-check ID (repeatable) or a "
        "profile with --talos-suite"
    )
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)
    pytest.exit("listed the checks (--talos-list-checks)", returncode=0)


def collect_checks(config: pytest.Config, items: list[pytest.Item], roots: list[Path]) -> None:
    """Register every check under ``roots``, then keep the selected ones."""
    settings = config.stash[SETTINGS]
    owners: dict[str, str] = {}
    ours = []
    today = dt.date.today()
    for item in items:
        root = _root_of(item, roots)
        if root is None:
            continue
        spec = _spec_of(item, root)
        _check_unique(owners, spec, item)
        _register(item, spec)
        _waive(item, spec, settings, today)
        ours.append(item)
    if ours and settings.waivers:
        try:
            check_waivers_known(settings.waivers, owners)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
    if ours and settings.checks:
        _check_ids_known(
            settings.checks, owners, settings.sources.get("talos_check", "--talos-check")
        )
    if settings.list_checks:
        _list_checks(config, ours)
    _deselect(config, items, settings)


def _deselect(config: pytest.Config, items: list[pytest.Item], settings: SuiteSettings) -> None:
    shard = settings.shard
    nodes = shard_nodes(config, shard) if shard is not None and items else None

    def keep(item: pytest.Item) -> bool:
        spec = check_spec(item)
        if spec is None:
            return True
        return _selected(item, spec, settings) and (shard is None or _in_shard(item, shard, nodes))

    kept = [item for item in items if keep(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not keep(item)])
        items[:] = kept
