"""The read-only checks that read every node at once: one fan-out a check, every node's
read on a fan-out thread, each node's test handed its own outcome (a pass, or the failure
its node's read found), as a user's run of the suite shows them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.suite_runner import SuiteRun, run_suite

RECORDER = ("-p", "tests.conformance.fanout_recorder")
# check id -> what its fan-out is recorded as (fanout_recorder._name)
AT_ONCE = {
    "api.version-answers": "api.version-answers",
    "api.reader-cannot-apply": "api.reader-cannot-apply",
    "api.reader-cannot-get-kubeconfig": "api.reader-cannot-get-kubeconfig",
    "api.reader-cannot-mint-roles": "api.reader-cannot-mint-roles",
    "services.resources-match-service-list": "services.resources-match-service-list",
    "certs.api-certificate": "apid_certificate_reads.<locals>.read",
}
SELECTED = " or ".join(
    (
        "version_answers_on_every_node",
        "reader_cannot_apply_configuration",
        "reader_cannot_get_kubeconfig",
        "reader_cannot_mint_admin",
        "resources_agree_with_service_list",
        "apid_certificate_trusted",
    )
)


def _run(tmp_path: Path, *faults: str) -> tuple[SuiteRun, dict[str, Any]]:
    record = tmp_path / "fanouts.json"
    fault_args = [arg for fault in faults for arg in ("--talos-emulator-fault", fault)]
    run = run_suite(
        ["--talos-emulator=1:2", *RECORDER, "-k", SELECTED, *fault_args],
        tmp_path / "report",
        env={"FANOUT_RECORD": str(record), "PYTHONPATH": os.pathsep.join(_paths())},
    )
    assert record.exists(), run.describe()
    return run, json.loads(record.read_text())


def _paths() -> list[str]:
    repo = str(Path(__file__).resolve().parents[2])
    return [repo, *filter(None, [os.environ.get("PYTHONPATH")])]


def _per_node(run: SuiteRun, check: str) -> list[str]:
    return sorted(c["outcome"] for c in run.checks if c["id"] == check)


def test_each_check_reads_every_node_in_one_fan_out(tmp_path: Path) -> None:
    run, record = _run(tmp_path)

    assert run.returncode == 0, run.describe()
    for check, read in AT_ONCE.items():
        assert _per_node(run, check) == ["passed"] * 3, (check, run.describe())
        rounds = [r for r in record["rounds"] if r["read"] == read]
        assert rounds == [{"read": read, "nodes": 3}], (check, record["rounds"])
        reads = [r for r in record["reads"] if r["read"] == read]
        assert len({r["node"] for r in reads}) == 3
        assert all(r["thread"].startswith("talos-fanout") for r in reads)


@pytest.mark.parametrize(
    ("fault", "check", "failing"),
    [
        # every node lets the reader through
        (
            "reader-gets-kubeconfig",
            "api.reader-cannot-get-kubeconfig",
            ["talos-default-controlplane-1", "talos-default-worker-1", "talos-default-worker-2"],
        ),
        # the last node's certificate alone lacks its hostname (scope last-node)
        ("apid-cert-missing-san", "certs.api-certificate", ["talos-default-worker-2"]),
    ],
)
def test_a_defect_found_at_once_fails_the_tests_of_the_nodes_that_have_it(
    tmp_path: Path, fault: str, check: str, failing: list[str]
) -> None:
    run, record = _run(tmp_path, fault)

    found = {c["node"]: c["outcome"] for c in run.checks if c["id"] == check}
    assert sorted(n for n, outcome in found.items() if outcome == "failed") == failing, (
        run.describe()
    )
    assert sorted(n for n, outcome in found.items() if outcome == "passed") == sorted(
        set(found) - set(failing)
    )
    others = {k: v for k, v in run.outcomes().items() if k in AT_ONCE and k != check}
    assert all(v == {"passed"} for v in others.values()), run.describe()
    assert [r["nodes"] for r in record["rounds"] if r["read"] == AT_ONCE[check]] == [3]
