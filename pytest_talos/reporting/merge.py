"""Combine the ``results.json`` of a sharded run (``--talos-shard I/N``) into one result.

The shards must be of one run: the same suite profile, settings, severity gate, kit version,
kind of target and node list, and together exactly shards 1 to N. A node checked by two
shards means they saw different node lists; merging refuses that too. The merged verdict is
the one a single run over every node would have had (the union of the records and of the
tests that could not reach their node): a shard that failed or could not reach its nodes
makes the merge fail the same way; a check a shard could not run counts as run if another
shard ran it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_talos.errors import ConfigError
from pytest_talos.reporting.records import CheckRecord, RunInfo
from pytest_talos.reporting.results import RESULTS_FORMAT
from pytest_talos.reporting.severity import OUTCOMES

__all__ = ["ShardResults", "load_shard", "merge_shards"]


@dataclass(frozen=True)
class ShardResults:
    """One shard's ``results.json``, and where it was read from."""

    source: str
    results: Mapping[str, Any]

    @property
    def run(self) -> Mapping[str, Any]:
        run: Mapping[str, Any] = self.results["run"]
        return run

    @property
    def shard(self) -> Mapping[str, Any]:
        shard: Mapping[str, Any] = self.run.get("shard") or {}
        return shard


def load_shard(path: str | Path) -> ShardResults:
    """``DIR`` (its ``results.json``) or the file itself; ConfigError naming what is wrong."""
    file = Path(path)
    if file.is_dir():
        file = file / "results.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(
            f"cannot read it ({exc.strerror or exc}); give the --talos-report "
            "directory of each shard",
            path=str(file),
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON ({exc.msg}, line {exc.lineno})", path=str(file)) from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ConfigError(
            f"not a conformance results.json (format {RESULTS_FORMAT})", path=str(file)
        )
    shard = ShardResults(str(file), data)
    if not shard.shard.get("count"):
        raise ConfigError(
            "not the results of a shard: the run had no --talos-shard", path=str(file)
        )
    return shard


def _fingerprint(shard: ShardResults) -> dict[str, Any]:
    """What the shards of one run share."""
    run, tested = shard.run, shard.run.get("tested") or {}
    return {
        "suite profile": run.get("suite") or "all checks",
        "shard count": shard.shard.get("count"),
        "settings": run.get("settings"),
        "severity gate": run.get("fail_under"),
        "kit version": (run.get("kit") or {}).get("version"),
        "target kind": tested.get("kind"),
        "emulated faults": tested.get("faults"),
        "emulated variants": tested.get("variants"),
        "nodes": sorted(str(t.get("name")) for t in run.get("targets") or ()),
    }


def _check_one_run(shards: Sequence[ShardResults]) -> int:
    """The shard count, once every shard is shown to be of the same run."""
    first, expected = shards[0], _fingerprint(shards[0])
    for shard in shards[1:]:
        for key, value in _fingerprint(shard).items():
            if value != expected[key]:
                raise ConfigError(
                    f"the shards are not of one run: {key} is {expected[key]!r} in "
                    f"{first.source} but {value!r} in {shard.source}; merge the shards of "
                    "one run (one --talos-suite and settings, --talos-shard 1/N to N/N)"
                )
    count = int(expected["shard count"])
    indexes = [int(shard.shard.get("index") or 0) for shard in shards]
    twice = sorted({i for i in indexes if indexes.count(i) > 1})
    if twice:
        raise ConfigError(f"shard {twice[0]}/{count} is given more than once")
    missing = sorted(set(range(1, count + 1)) - set(indexes))
    if missing:
        raise ConfigError(
            f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing: a merge needs "
            f"every shard of the run, 1/{count} to {count}/{count}"
        )
    return count


def _records(shards: Sequence[ShardResults]) -> list[CheckRecord]:
    """Every shard's records. A test of a node in two shards means the shards saw different
    node lists; a test without a node in several (every shard runs them when the targets
    could not be listed) is kept once, with its worst outcome."""
    kept: dict[str, tuple[CheckRecord, str]] = {}
    for shard in shards:
        for check in shard.results.get("checks") or ():
            record = CheckRecord.from_json(check)
            key = record.test_id or f"{record.check_id}@{record.node}"
            if key not in kept:
                kept[key] = (record, shard.source)
                continue
            earlier, source = kept[key]
            if record.node is not None:
                raise ConfigError(
                    f"{record.check_id} on {record.node} is in {source} and in "
                    f"{shard.source}: the shards saw different node lists; run them against "
                    "the same cluster"
                )
            if OUTCOMES.index(record.outcome) < OUTCOMES.index(earlier.outcome):
                kept[key] = (record, source)
    return [record for record, _ in kept.values()]


def _run(shards: Sequence[ShardResults], count: int) -> RunInfo:
    runs = [RunInfo.from_json(shard.run) for shard in shards]
    merged = runs[0]
    merged.started = min(run.started for run in runs)
    merged.finished = max(run.finished or run.started for run in runs)
    merged.notes = list(dict.fromkeys(note for run in runs for note in run.notes))
    merged.notes.append(f"merged from {count} shards ({', '.join(s.source for s in shards)})")
    merged.unreachable = frozenset().union(*(run.unreachable for run in runs))
    endpoints = [e for run in runs for e in (run.tested.get("endpoints") or ())]
    merged.tested = {**merged.tested, "endpoints": list(dict.fromkeys(endpoints))}
    merged.shard = {"count": count, "merged": list(range(1, count + 1))}
    merged.stopped = _stopped(shards, runs)
    return merged


def _stopped(shards: Sequence[ShardResults], runs: Sequence[RunInfo]) -> dict[str, Any] | None:
    """A shard that did not finish makes the merged run unfinished: its verdict is never
    PASSED (a killed shard's "not finished" report wins over a stopped one)."""
    unfinished = [(s, r.stopped) for s, r in zip(shards, runs, strict=True) if r.stopped]
    if not unfinished:
        return None
    killed = [(s, st) for s, st in unfinished if st.get("status") == "in progress"]
    if killed:
        shard, stopped = killed[0]
        return {**stopped, "at": f"{stopped.get('at')} (shard {shard.source})"}
    shard, stopped = unfinished[0]
    return {
        **stopped,
        "why": f"shard {shard.source}: {stopped.get('why')}",
        "planned": None
        if any(st.get("planned") is None for _, st in unfinished)
        else sum(int(st["planned"]) for _, st in unfinished),
        "not_run": [t for _, st in unfinished for t in st.get("not_run") or ()],
    }


def merge_shards(shards: Sequence[ShardResults]) -> tuple[list[CheckRecord], RunInfo]:
    """The records and the run of every shard as one run (ConfigError if they are not)."""
    if not shards:
        raise ConfigError("no shard results given")
    ordered = sorted(shards, key=lambda shard: int(shard.shard.get("index") or 0))
    count = _check_one_run(ordered)
    return _records(ordered), _run(ordered, count)
