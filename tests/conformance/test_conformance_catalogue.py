"""The catalogue: every check is marked, documented in docs/conformance.md, and the suite
profiles and markers select what they promise (collect-only runs: no check executes)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_talos.plugin.conformance.catalogue import AREAS, SUITES
from tests.conformance.suite_runner import REPO, SUITE, plugin_args, run_pytest, subprocess_env

DOCS = REPO / "docs" / "conformance.md"
HEADING = re.compile(r"^#### `(?P<id>[a-z0-9.-]+)`", re.MULTILINE)
SEVERITY = re.compile(
    r"^#### `(?P<id>[a-z0-9.-]+)`.*?\n\*\*Severity:\*\* (?P<sev>\w+)", re.MULTILINE | re.DOTALL
)


def collect(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    """The catalogue a collect-only run of the suite dumps (forked from the tests' fork
    server where it can be, as the suite runs are: ``run_pytest``)."""
    out = tmp_path / f"catalogue-{len(list(tmp_path.iterdir()))}.json"
    env = subprocess_env({"CONFORMANCE_CATALOGUE_OUT": str(out)})
    argv = [
        *plugin_args(),
        "-p",
        "tests.conformance.catalogue_dump",
        str(SUITE),
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "--talos-emulator",
        *args,
    ]
    ended = run_pytest(argv, cwd=tmp_path, env=env, timeout=120)
    code, output = ended.returncode, ended.stdout + ended.stderr
    assert code == 0, output
    entries: list[dict[str, Any]] = json.loads(out.read_text())
    return entries


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return collect(tmp_path_factory.mktemp("catalogue"))


def checks_of(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["id"]: entry for entry in entries}


def test_every_area_folder_has_checks_and_every_check_its_area_marker(
    catalogue: list[dict[str, Any]],
) -> None:
    assert {entry["id"].split(".")[0] for entry in catalogue} == set(AREAS)
    for entry in catalogue:
        assert entry["id"].split(".")[0] in entry["markers"], entry["test"]
        assert entry["severity"] in ("critical", "high", "medium", "low"), entry["test"]
        assert entry["claim"], entry["test"]


def test_test_names_state_the_claim_they_check(catalogue: list[dict[str, Any]]) -> None:
    names = {entry["test"].split("::")[1].split("[")[0] for entry in catalogue}
    vague = [n for n in names if len(n.split("_")) < 4]  # test_<subject>_<verb>_<object>
    assert vague == []


def test_docs_catalogue_lists_exactly_the_checks_with_their_severity(
    catalogue: list[dict[str, Any]],
) -> None:
    text = DOCS.read_text(encoding="utf-8")
    checks = checks_of(catalogue)
    assert sorted(set(HEADING.findall(text))) == sorted(checks)
    documented = {m["id"]: m["sev"] for m in SEVERITY.finditer(text)}
    assert documented == {cid: entry["severity"] for cid, entry in checks.items()}


@pytest.mark.parametrize("profile", sorted(p for p in SUITES if p != "full"))
def test_suite_profile_selects_its_areas_and_only_read_only_checks(
    profile: str, tmp_path: Path, catalogue: list[dict[str, Any]]
) -> None:
    chosen = collect(tmp_path, "--talos-suite", profile)
    suite = SUITES[profile]
    expected = sorted(
        {
            e["test"]
            for e in catalogue
            if e["id"].split(".")[0] in suite.areas
            and not {"talos_mutating", "talos_disruptive"} & set(e["markers"])
        }
    )
    assert sorted(e["test"] for e in chosen) == expected
    by_marker = collect(tmp_path, "-m", suite.marker)
    assert sorted(e["test"] for e in by_marker) == expected


def test_full_suite_profile_keeps_every_check(
    tmp_path: Path, catalogue: list[dict[str, Any]]
) -> None:
    chosen = collect(tmp_path, "--talos-suite", "full")
    assert sorted(e["test"] for e in chosen) == sorted(e["test"] for e in catalogue)


def test_snapshot_saving_runs_whatever_the_profile(tmp_path: Path) -> None:
    chosen = collect(
        tmp_path, "--talos-suite", "quick", "--talos-snapshot", "save", str(tmp_path / "snap.json")
    )
    assert "upgrade.snapshot-recorded" in checks_of(chosen)


# Config checks that only read: the node against its desired state (--talos-desired).
READ_ONLY_CONFIG_CHECKS = frozenset({"config.matches-desired", "config.persisted-matches-active"})


def test_config_checks_are_all_opt_in(catalogue: list[dict[str, Any]]) -> None:
    read_only = {e["id"] for e in catalogue if e["id"] in READ_ONLY_CONFIG_CHECKS}
    assert read_only == READ_ONLY_CONFIG_CHECKS
    assert all(
        not {"talos_mutating", "talos_disruptive"} & set(e["markers"])
        for e in catalogue
        if e["id"] in read_only
    )
    config = [e for e in catalogue if e["id"].startswith("config.") and e["id"] not in read_only]
    assert config
    assert all({"talos_mutating", "talos_disruptive"} & set(e["markers"]) for e in config)
    disruptive = {e["id"] for e in config if "talos_disruptive" in e["markers"]}
    assert disruptive == {"config.kubelet-flag-failure-detected"}


def test_docs_fault_table_lists_every_fault_and_the_checks_it_breaks() -> None:
    from tests.conformance.fault_matrix import FAULT_MATRIX

    doc = (Path(__file__).resolve().parents[2] / "docs" / "conformance.md").read_text()
    rows = {
        line.split("|")[1].strip().split()[0].strip("`"): line
        for line in doc.splitlines()
        if line.startswith("| `")
    }
    for fault, case in FAULT_MATRIX.items():
        assert fault in rows, f"docs/conformance.md has no row for fault {fault}"
        for check, outcome in case.broken.items():
            if outcome == "failed":
                assert f"`{check}`" in rows[fault], f"{fault}: {check} missing from the docs row"
