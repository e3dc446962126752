"""Parts of the suite that need an input (``--talos-leave-out``), and what the run checks at
start so that nothing fails only at the end: missing inputs, an unwritable report directory."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # settings imports the option table, which names the parts
    from pytest_talos.plugin.conformance.settings import SuiteSettings

__all__ = ["INPUT_AREAS", "PARTS", "PROFILE_PARTS", "Part", "check_inputs", "check_parts"]


@dataclass(frozen=True)
class Part:
    """Checks that need an input: left out with --talos-leave-out, else the input is needed
    by the profiles that stand on them."""

    checks: frozenset[str]  # check ids, or "area.*" for a whole area
    needs: str  # the option that gives the input
    given: Callable[[SuiteSettings], bool]

    def holds(self, check_id: str) -> bool:
        return check_id in self.checks or f"{check_id.split('.', 1)[0]}.*" in self.checks


PARTS: dict[str, Part] = {
    "vendor": Part(
        frozenset({"vendor.*"}), "--talos-profile FILE", lambda s: s.vendor_profile is not None
    ),
    "upgrade-version": Part(
        frozenset({"upgrade.talos-version"}),
        "--talos-expect-version VERSION",
        lambda s: bool(s.expect_version),
    ),
    "upgrade-kubernetes-version": Part(
        frozenset({"upgrade.kubernetes-version"}),
        "--talos-expect-kubernetes-version VERSION",
        lambda s: bool(s.expect_kubernetes_version),
    ),
    "upgrade-snapshot": Part(
        frozenset(
            {
                "upgrade.config-unchanged",
                "upgrade.extensions-unchanged",
                "upgrade.node-labels-unchanged",
            }
        ),
        "--talos-snapshot compare PATH",
        lambda s: s.snapshot_mode == "compare",
    ),
}
# The parts a suite profile is for: it cannot claim anything without their inputs.
PROFILE_PARTS = {
    "vendor-image": ("vendor",),
    "post-upgrade": ("upgrade-version", "upgrade-kubernetes-version", "upgrade-snapshot"),
}
# Areas whose checks need inputs: their skips do not make a run incomplete unless the
# profile is for them (see pytest_talos.reporting.decide_verdict).
INPUT_AREAS = frozenset({"vendor", "upgrade"})


def left_out(settings: SuiteSettings, check_id: str) -> bool:
    return any(PARTS[part].holds(check_id) for part in settings.leave_out)


def check_parts(settings: SuiteSettings) -> None:
    """A profile run without the inputs it is for stops (unless it leaves them out)."""
    name = settings.suite.name if settings.suite else "full"
    missing = [
        part
        for part in PROFILE_PARTS.get(name, ())
        if part not in settings.leave_out and not PARTS[part].given(settings)
    ]
    if missing:
        needs = ", ".join(PARTS[part].needs for part in missing)
        leave = " ".join(f"--talos-leave-out {part}" for part in missing)
        suite = settings.sources.get("talos_suite", "--talos-suite")
        raise pytest.UsageError(
            f"{suite} {name} needs {needs}: without it the checks it is for cannot run. "
            f"Give it, or say that this run leaves that part out: {leave}"
        )


def check_inputs(settings: SuiteSettings) -> None:
    path = settings.snapshot_path
    if settings.snapshot_mode == "compare" and path is not None and not path.is_file():
        raise pytest.UsageError(
            f"--talos-snapshot compare {path}: no such file. Take the snapshot before the "
            "upgrade with --talos-snapshot save PATH"
        )
    report = settings.report_dir
    if report is None:
        return
    try:
        report.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=report, prefix=".talos-write-check-"):
            pass
    except OSError as exc:
        raise pytest.UsageError(
            f"--talos-report {report}: cannot write there ({exc.strerror or exc}); choose a "
            "directory this user can write"
        ) from None
