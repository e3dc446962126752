"""Sharding a run across CI jobs (``--talos-shard I/N``) and merging the shards' reports
(``talos-report merge``): every node in exactly one shard, cluster-wide checks in shard 1,
the merged verdict as one run over every node would have it, bad input refused."""

from __future__ import annotations

import datetime as dt
import json
import string
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_talos.plugin.conformance.shard import Shard, assign_shards, parse_shard
from pytest_talos.reporting import CheckRecord, Outcome, RunInfo, TargetInfo, write_reports
from pytest_talos.reporting.cli import main as report_main
from tests.conformance.suite_runner import SuiteRun, run_suite

NODES = ("talos-default-controlplane-1", "talos-default-worker-1")
hostnames = st.text(alphabet=string.ascii_lowercase + string.digits + "-.", min_size=1, max_size=30)


# --------------------------------------------------------------------------- the split


@given(st.sets(hostnames, min_size=1, max_size=200), st.integers(min_value=1, max_value=12))
def test_shards_partition_the_nodes(names: set[str], count: int) -> None:
    shards = [Shard(index, count).nodes(names) for index in range(1, count + 1)]
    every = [name for shard in shards for name in shard]
    assert sorted(every) == sorted(names)  # every node in exactly one shard
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 1  # dealt round robin: balanced


@given(st.lists(hostnames, min_size=1, max_size=50, unique=True), st.integers(1, 6))
def test_the_split_does_not_depend_on_the_order_the_nodes_are_listed(
    names: list[str], count: int
) -> None:
    assert assign_shards(names, count) == assign_shards(list(reversed(names)), count)


def test_the_split_is_stable_across_processes() -> None:
    # SHA-256 of the hostnames, not Python's salted hash(): the same in every CI job.
    names = [f"talos-w-{i}" for i in range(8)]
    assert assign_shards(names, 3) == {name: index for name, index in json.loads(_golden()).items()}


def _golden() -> str:
    import subprocess
    import sys

    code = (
        "import json; from pytest_talos.plugin.conformance.shard import assign_shards; "
        "print(json.dumps(assign_shards([f'talos-w-{i}' for i in range(8)], 3)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PYTHONPATH": str(Path(__file__).parents[2])},
        timeout=60,
    )
    return done.stdout


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "2", "a/b", "1/2/3", ""])
def test_a_bad_shard_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not"):
        parse_shard(text)


def test_parse_shard() -> None:
    assert parse_shard(" 2 / 4 ") == Shard(2, 4)
    assert str(Shard(2, 4)) == "2/4"


# --------------------------------------------------------------------------- runs


def report_dir(tmp_path: Path, shard: str) -> Path:
    return tmp_path / f"shard-{shard.replace('/', '-')}"


def shard_run(tmp_path: Path, shard: str, *args: str) -> SuiteRun:
    return run_suite(
        ["--talos-emulator", "--talos-shard", shard, *args], report_dir(tmp_path, shard)
    )


def merge(tmp_path: Path, *dirs: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = report_main(["merge", *map(str, dirs), "--out", str(tmp_path / "merged")])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_shards_split_the_nodes_and_merge_into_one_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    selection = ("-v", "-k", "pid1 or members_are_consistent")  # -v: the header
    first, second = shard_run(tmp_path, "1/2", *selection), shard_run(tmp_path, "2/2", *selection)
    for run, index in ((first, 1), (second, 2)):
        assert run.returncode == 0, run.describe()
        assert f"conformance: shard {index}/2 checks 1 of 2 nodes: " in run.output
    one = {c["node"] for c in first.checks if c["id"] == "immutability.pid1-is-machined"}
    two = {c["node"] for c in second.checks if c["id"] == "immutability.pid1-is-machined"}
    assert one | two == set(NODES), (one, two)
    assert not one & two, (one, two)
    # A cluster-wide check runs in shard 1 only.
    assert [c["node"] for c in first.checks if c["id"] == "cluster.members-consistent"] == [None]
    assert not [c for c in second.checks if c["id"] == "cluster.members-consistent"]
    assert first.results is not None
    assert first.results["run"]["shard"]["index"] == 1
    code, output = merge(
        tmp_path, report_dir(tmp_path, "1/2"), report_dir(tmp_path, "2/2"), capsys=capsys
    )
    assert code == 0, output
    assert "talos-report: verdict PASSED (exit 0)" in output
    merged = json.loads((tmp_path / "merged" / "results.json").read_text())
    assert merged["verdict"] == "PASSED"
    assert merged["run"]["shard"] == {"count": 2, "merged": [1, 2]}
    assert sorted((c["id"], c["node"] or "") for c in merged["checks"]) == sorted(
        [
            ("cluster.members-consistent", ""),
            *(("immutability.pid1-is-machined", node) for node in NODES),
        ]
    )
    assert "Talos conformance report" in (tmp_path / "merged" / "report.html").read_text()


@pytest.mark.slow  # three default-suite runs at once: about 20 s on 2 loaded CPUs
def test_the_merged_shards_of_a_run_are_the_run_unsharded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ThreadPoolExecutor(3) as pool:  # the runs mostly wait on the emulator's timers
        whole_run = pool.submit(run_suite, ["--talos-emulator"], tmp_path / "whole")
        shard_runs = [pool.submit(shard_run, tmp_path, f"{i}/2") for i in (1, 2)]
        whole, shards = whole_run.result(), [run.result() for run in shard_runs]
    assert whole.returncode == 0, whole.describe()
    code, output = merge(tmp_path, *(report_dir(tmp_path, f"{i}/2") for i in (1, 2)), capsys=capsys)
    assert code == 0, output
    merged = json.loads((tmp_path / "merged" / "results.json").read_text())
    assert whole.results is not None
    assert merged["summary"] == whole.results["summary"]
    assert sorted((c["test"], c["outcome"]) for c in merged["checks"]) == sorted(
        (c["test"], c["outcome"]) for c in whole.checks
    )
    assert all(len(run.checks) < len(whole.checks) for run in shards)


def test_a_test_without_a_node_in_every_shard_is_kept_once_with_its_worst_outcome(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [
        shard_dir(tmp_path, 1, 2, (None, "passed")),
        shard_dir(tmp_path, 2, 2, (None, "error")),
    ]
    code, output = merge(tmp_path, *dirs, capsys=capsys)
    assert code == 1, output
    merged = json.loads((tmp_path / "merged" / "results.json").read_text())
    assert [c["outcome"] for c in merged["checks"]] == ["error"]


@pytest.mark.slow  # two suite runs: 5 s alone, 21 s on 2 busy CPUs
def test_merging_a_failing_shard_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # wrong-version: only the last node (the worker, in shard 1) reports another version.
    selection = ("--talos-emulator-fault", "wrong-version", "-k", "pid1 or version_api_matches")
    first, second = shard_run(tmp_path, "1/2", *selection), shard_run(tmp_path, "2/2", *selection)
    assert first.returncode == 1, first.describe()
    assert second.returncode == 0, second.describe()
    code, output = merge(
        tmp_path, report_dir(tmp_path, "2/2"), report_dir(tmp_path, "1/2"), capsys=capsys
    )
    assert code == 1, output
    assert "talos-report: verdict FAILED (exit 1): 1 blocking failure(s)" in output


def test_a_bad_shard_option_stops_the_run(tmp_path: Path) -> None:
    result = shard_run(tmp_path, "3/2")
    assert result.returncode == 4, result.describe()
    assert "--talos-shard: '3/2' is not a shard: I must be from 1 to N" in result.output
    assert "the jobs --talos-shard 1/3, 2/3 and 3/3 split the nodes" in result.output
    assert result.results is None
    many = shard_run(tmp_path, "1/3", "-k", "pid1")
    assert many.returncode == 4, many.describe()
    assert "the run has 2 target node(s), fewer than the 3 shards" in many.output


# --------------------------------------------------------------------------- merge


def shard_dir(
    tmp_path: Path,
    index: int,
    count: int,
    *outcomes: tuple[str | None, Outcome],
    unreachable: frozenset[str] = frozenset(),
    **run: Any,
) -> Path:
    """A shard's report directory, as a run with --talos-shard writes it."""
    start = dt.datetime(2026, 12, 1, 12, index, tzinfo=dt.UTC)
    info = RunInfo(
        started=start,
        finished=start + dt.timedelta(seconds=30),
        targets=[TargetInfo(name) for name in ("n1", "n2", "n3")],
        settings={"talos_allow": "none"},
        unreachable=unreachable,
        shard={"index": index, "count": count},
        **run,
    )
    records = [
        CheckRecord(
            "api.mtls-required",
            "critical",
            "claim",
            outcome,
            node=node,
            test_id=f"test_mtls[{node}]",
        )
        for node, outcome in outcomes
    ]
    out = tmp_path / f"shard-{index}"
    write_reports(out, records, info)
    return out


@pytest.mark.parametrize(
    ("first", "second", "verdict"),
    [
        ("passed", "passed", "PASSED"),
        ("passed", "failed", "FAILED"),
        ("failed", "passed", "FAILED"),
        ("waived", "passed", "PASSED"),
        ("passed", "unreachable", "UNREACHABLE"),
        ("failed", "unreachable", "FAILED"),
    ],
)
def test_the_merged_verdict_is_the_worst_of_the_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first: str, second: str, verdict: str
) -> None:
    lost = frozenset({"test_mtls[n3]"}) if second == "unreachable" else frozenset()
    dirs = [
        shard_dir(tmp_path, 1, 2, ("n1", first), ("n2", "passed")),  # type: ignore[arg-type]
        shard_dir(
            tmp_path,
            2,
            2,
            ("n3", "error" if lost else second),  # type: ignore[arg-type]
            unreachable=lost,
        ),
    ]
    shard_verdicts = [json.loads((d / "results.json").read_text())["verdict"] for d in dirs]
    code, output = merge(tmp_path, *dirs, capsys=capsys)
    assert f"talos-report: verdict {verdict} (exit " in output, output
    rank = ["PASSED", "INCOMPLETE", "UNREACHABLE", "FAILED"]
    assert verdict == max(shard_verdicts, key=rank.index)
    assert code == {"PASSED": 0, "FAILED": 1, "UNREACHABLE": 7}[verdict]


def error_of(tmp_path: Path, capsys: pytest.CaptureFixture[str], *paths: Path) -> str:
    code, output = merge(tmp_path, *paths, capsys=capsys)
    assert code == 4, output
    assert not (tmp_path / "merged").exists()
    return output


def test_merge_refuses_what_is_not_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = shard_dir(tmp_path / "a", 1, 2, ("n1", "passed"))
    two = shard_dir(tmp_path / "b", 2, 2, ("n2", "passed"), suite="quick")
    assert (
        "the shards are not of one run: suite profile is 'all checks' in "
        f"{one / 'results.json'} but 'quick' in {two / 'results.json'}"
    ) in error_of(tmp_path, capsys, one, two)
    three = shard_dir(tmp_path / "c", 2, 3, ("n2", "passed"))
    assert "shard count is 2" in error_of(tmp_path, capsys, one, three)
    assert "shard(s) 2/2 missing: a merge needs every shard of the run, 1/2 to 2/2" in error_of(
        tmp_path, capsys, one
    )
    assert "shard 1/2 is given more than once" in error_of(tmp_path, capsys, one, one)
    again = shard_dir(tmp_path / "d", 2, 2, ("n1", "passed"))
    assert "api.mtls-required on n1 is in " in error_of(tmp_path, capsys, one, again)


def test_merge_refuses_files_that_are_not_shard_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "cannot read it" in error_of(tmp_path, capsys, tmp_path / "nowhere")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{")
    assert "not JSON" in error_of(tmp_path, capsys, tmp_path / "bad")
    plain = tmp_path / "plain"
    write_reports(plain, [], RunInfo(started=dt.datetime(2026, 12, 1, tzinfo=dt.UTC)))
    assert "the run had no --talos-shard" in error_of(tmp_path, capsys, plain)


def test_the_documented_matrix_recipe_is_valid_yaml_that_shards_and_merges() -> None:
    import yaml

    doc = (Path(__file__).parents[2] / "docs" / "conformance.md").read_text()
    block = doc.split("# .github/workflows/talos-conformance-fleet.yml\n", 1)[1]
    workflow = yaml.safe_load(block.split("```", 1)[0])
    shard_job, verdict_job = workflow["jobs"]["shard"], workflow["jobs"]["verdict"]
    count = len(shard_job["strategy"]["matrix"]["shard"])
    steps = {step.get("name"): step for step in shard_job["steps"]}
    run_step = steps[f"Conformance, shard ${{{{ matrix.shard }}}} of {count}"]
    assert run_step["env"]["TALOS_SHARD"] == f"${{{{ matrix.shard }}}}/{count}"
    assert "--talos-report talos-report" in run_step["run"]
    assert verdict_job["needs"] == "shard"
    assert verdict_job["if"] == "always()"
    merge_step = next(s for s in verdict_job["steps"] if "talos-report merge" in s.get("run", ""))
    assert merge_step["run"].startswith("talos-report merge shards/talos-shard-* --out ")
