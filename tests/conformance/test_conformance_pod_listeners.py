"""The opt-in ``immutability.pod-listeners-expected`` through the suite: skipped without a
hook implementation, passing when the hook allows the Cilium pod's ports, failing when it
does not (the ``cilium`` variant: its agent pod on the host network under a k8s.io shim)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.suite_runner import SUITE, run_suite

CHECK = "immutability.pod-listeners-expected"
AREA = str(SUITE / "immutability")
ARGS = ["--talos-emulator", "--talos-emulator-variant", "cilium", "-k", "pod_listeners"]
PLUGIN = ["-p", "tests.conformance.pod_ports_plugin"]


def _outcomes(tmp_path: Path, args: list[str], allow: str | None) -> dict[str, str]:
    env = {} if allow is None else {"POD_PORTS_TEST_ALLOW": allow}
    run = run_suite(args, tmp_path / "report", paths=[AREA], env=env)
    outcomes = {c["node"]: c["outcome"] for c in run.checks if c["id"] == CHECK}
    assert outcomes, run.describe()
    return outcomes


@pytest.mark.slow
def test_pod_listeners_check_is_skipped_without_the_hook(tmp_path: Path) -> None:
    assert set(_outcomes(tmp_path, ARGS, None).values()) == {"skipped"}


@pytest.mark.slow
@pytest.mark.parametrize(("allow", "outcome"), [("4240,4244", "passed"), ("4240", "failed")])
def test_pod_listeners_check_judges_the_cilium_pod(
    tmp_path: Path, allow: str, outcome: str
) -> None:
    assert set(_outcomes(tmp_path, [*ARGS, *PLUGIN], allow).values()) == {outcome}
