"""The fault matrix: the suite is green on a healthy emulator, and each emulator fault breaks
exactly the checks ``fault_matrix.FAULT_MATRIX`` names — so a check that cannot fail, or one
that fails for the wrong reason, is caught.

All runs start in a module fixture (one subprocess each, four per CPU at once: a run mostly
waits on the emulator's timers), the longest first; the tests below only compare. A fault's
run covers the areas of the checks it must break (``FaultCase.areas``); the healthy run and
the healthy variants run the whole suite. Under pytest-xdist the module
stays on one worker (the project runs with ``--dist loadfile``), so the fixture runs the
matrix once, not once per worker.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from pytest_talos.emulator.faults import fault_names
from pytest_talos.emulator.faults.variants import variant_names
from pytest_talos.plugin.conformance.catalogue import AREAS
from pytest_talos.reporting.reach import NO_DIRECT_REACH
from tests.conformance.fault_matrix import (
    FAULT_MATRIX,
    HEALTHY_VARIANTS,
    NO_FAULT_YET,
    PROVED_ELSEWHERE,
    FaultCase,
)
from tests.conformance.suite_runner import MATRIX_ARGS, SUITE, SuiteRun, run_suite

# The first test to use matrix_runs waits for every run (minutes on 2 loaded cores).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

HEALTHY = "healthy"
ALLOWED_SKIPS = (
    "no vendor acceptance profile",
    "no expected version",
    "no expected Kubernetes version",
    "no snapshot to compare with",
    "not recording a snapshot",
    # immutability.pod-listeners-expected is opt-in: it runs where a hook gives its allow-list
    "opt-in: implement the pytest_talos_expected_pod_ports hook",
)
# Skips a healthy variant gives by design, allowed on the runs that include that variant only:
# with discovery off there are no Members to compare; with the discovery service out of
# reach every node sees only itself (the checks say so instead of failing); with the workers
# reached only through the endpoint, the checks that need their own connection to a worker
# say so (pytest_talos/reporting/reach.py NO_DIRECT_REACH) and the verdict names them.
VARIANT_SKIPS: Mapping[str, tuple[str, ...]] = {
    "discovery-disabled": ("discovery is disabled",),
    "discovery-unreachable": ("discovery unreachable",),
    "endpoint-only": (NO_DIRECT_REACH,),
}


VARIANT = "variant:"
RELEASE = "release:"


@dataclass(frozen=True)
class ReleaseRun:
    """A healthy run of the emulator at another release (``--talos-emulator-version``)."""

    version: str
    variants: tuple[str, ...] = ()


# The healthy emulator at every release it plays (v1.13 is HEALTHY and the variants), in
# container and metal mode: zero failures, as on v1.13.
RELEASE_RUNS: Mapping[str, ReleaseRun] = {
    "v1.12": ReleaseRun("v1.12.x"),
    "v1.12+metal": ReleaseRun("v1.12.x", ("metal",)),
    "v1.14": ReleaseRun("v1.14.x"),
    "v1.14+metal": ReleaseRun("v1.14.x", ("metal",)),
    # The field shapes at the other releases (Omni on v1.12 metal, Cilium on v1.14 metal).
    "v1.12+siderolink+wireguard+metal+domain": ReleaseRun(
        "v1.12.x", ("siderolink", "wireguard", "metal", "domain")
    ),
    "v1.14+cilium+metal": ReleaseRun("v1.14.x", ("cilium", "metal")),
}
Case = FaultCase | tuple[str, ...] | ReleaseRun | None


def allowed_skips(run: str) -> tuple[str, ...]:
    """The skip reasons (prefixes) a healthy run may give: the common ones, plus those of
    each variant the run includes."""
    if run.startswith(RELEASE):
        variants = RELEASE_RUNS[run.removeprefix(RELEASE)].variants
    elif run.startswith(VARIANT):
        variants = HEALTHY_VARIANTS[run.removeprefix(VARIANT)]
    else:
        variants = ()
    return ALLOWED_SKIPS + tuple(r for v in variants for r in VARIANT_SKIPS.get(v, ()))


def _args(case: Case) -> list[str]:
    args = ["--talos-emulator", "--talos-allow", "disruptive", *MATRIX_ARGS]
    if isinstance(case, ReleaseRun):
        args += ["--talos-emulator-version", case.version]
        case = case.variants
    if isinstance(case, tuple):  # a healthy variant
        for variant in case:
            args += ["--talos-emulator-variant", variant]
        return args
    return args + (case.fault_args() if case else [])


def _paths(case: Case) -> tuple[str, ...]:
    """The healthy runs cover the whole suite; a fault's run the areas it targets."""
    return case.paths(SUITE) if isinstance(case, FaultCase) else (str(SUITE),)


def _longest_first(name: str) -> int:
    """Whole-suite runs take longest, then those with the config area (its try windows and
    settle times), then the rest: started in that order, no long run is left for the end."""
    case = FAULT_MATRIX.get(name)
    areas = case.areas if case is not None else None
    if areas is None:
        return 0
    return 1 if "config" in areas else 2


@pytest.fixture(scope="module")
def matrix_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SuiteRun]:
    cases: dict[str, Case] = {
        HEALTHY: None,
        **FAULT_MATRIX,
        **{VARIANT + name: variants for name, variants in HEALTHY_VARIANTS.items()},
        **{RELEASE + name: release for name, release in RELEASE_RUNS.items()},
    }
    # A run is mostly waiting on the emulator's timers (a whole-suite run: about 7 CPU
    # seconds in 22 s), so four run at once on each CPU.
    workers = min(12, 4 * (os.cpu_count() or 1))

    # Directories first, in this thread: tmp_path_factory is not thread-safe.
    reports = {
        name: tmp_path_factory.mktemp("matrix-" + name.replace(":", "-").replace("+", "-"))
        / "report"
        for name in cases
    }

    def run(name: str) -> SuiteRun:
        return run_suite(_args(cases[name]), reports[name], paths=_paths(cases[name]))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        started = {name: pool.submit(run, name) for name in sorted(cases, key=_longest_first)}
        runs = {name: started[name].result() for name in cases}
    # Each run's wall time, slowest first, for whoever tunes the matrix (not asserted).
    timings = {name: round(r.seconds, 1) for name, r in runs.items()}
    (tmp_path_factory.getbasetemp() / "fault-matrix-seconds.json").write_text(
        json.dumps(dict(sorted(timings.items(), key=lambda kv: -kv[1])), indent=1)
    )
    return runs


def test_every_emulator_fault_has_a_row() -> None:
    assert sorted(FAULT_MATRIX) == fault_names()


def test_every_check_can_be_shown_to_fail_or_is_a_known_gap(
    matrix_runs: dict[str, SuiteRun],
) -> None:
    every = {check["id"] for check in matrix_runs[HEALTHY].checks}
    broken_by_faults = {
        check
        for case in FAULT_MATRIX.values()
        for check, outcome in case.broken.items()
        if outcome == "failed"
    }
    accounted = broken_by_faults | set(PROVED_ELSEWHERE) | set(NO_FAULT_YET)
    assert every - accounted == set(), "checks no fault breaks and no test proves failing"
    assert accounted - every == set(), "the matrix names checks the suite does not have"
    assert broken_by_faults & set(NO_FAULT_YET) == set(), "a gap is closed: update NO_FAULT_YET"


def test_each_fault_runs_the_areas_of_its_checks() -> None:
    for name, case in FAULT_MATRIX.items():
        if case.areas is None:
            assert case.broken == {} or case.whole_suite, name
            continue
        assert set(case.areas) <= set(AREAS), name
        assert all((SUITE / area).is_dir() for area in case.areas), name
        assert {check.split(".", 1)[0] for check in case.broken} <= set(case.areas), name
    assert _paths(None) == (str(SUITE),)
    assert _paths(HEALTHY_VARIANTS["domain"]) == (str(SUITE),)
    assert _paths(FAULT_MATRIX["rw-rootfs"]) == (str(SUITE / "immutability"),)


def test_every_healthy_variant_is_in_the_matrix() -> None:
    covered = {variant for variants in HEALTHY_VARIANTS.values() for variant in variants}
    assert sorted(covered) == variant_names()


def test_variant_skips_are_allowed_on_their_variants_only() -> None:
    assert set(VARIANT_SKIPS) <= set(variant_names())
    assert "discovery is disabled" not in allowed_skips(HEALTHY)
    assert "discovery is disabled" in allowed_skips(VARIANT + "discovery-disabled")
    assert "discovery is disabled" in allowed_skips(VARIANT + "metal+domain+discovery-disabled")
    assert "discovery unreachable" not in allowed_skips(VARIANT + "discovery-disabled")
    assert "discovery unreachable" in allowed_skips(VARIANT + "discovery-unreachable")
    assert allowed_skips(VARIANT + "domain") == ALLOWED_SKIPS


@pytest.mark.parametrize(
    "variant",
    [
        HEALTHY,
        *(VARIANT + name for name in HEALTHY_VARIANTS),
        *(RELEASE + name for name in RELEASE_RUNS),
    ],
)
def test_healthy_emulator_passes_every_check(
    variant: str, matrix_runs: dict[str, SuiteRun]
) -> None:
    run = matrix_runs[variant]
    assert run.results is not None, run.describe()
    assert run.broken() == {}, run.describe()
    assert run.returncode == 0, run.describe()
    allowed = allowed_skips(variant)
    odd_skips = [
        f"{c['id']} on {c['node']}: {c['message']}"
        for c in run.checks
        if c["outcome"] == "skipped" and not c["message"].startswith(allowed)
    ]
    assert odd_skips == [], "checks skipped for a reason the healthy emulator should not give"


@pytest.mark.parametrize("fault", sorted(FAULT_MATRIX))
def test_fault_breaks_exactly_its_checks(fault: str, matrix_runs: dict[str, SuiteRun]) -> None:
    run = matrix_runs[fault]
    assert run.results is not None, run.describe()
    assert run.broken() == dict(FAULT_MATRIX[fault].broken), run.describe()
    assert run.returncode == (1 if FAULT_MATRIX[fault].broken else 0), run.describe()
