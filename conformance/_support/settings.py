"""The conformance suite's own options, parsed once per run into :class:`SuiteSettings`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conformance._support.catalogue import SUITES, SuiteProfile
from conformance._support.snapshot import SnapshotMode
from conformance._support.vendor_profile import VendorProfile, load_vendor_profile
from pytest_talos.errors import ConfigError
from pytest_talos.reporting import SEVERITIES, Severity, Waiver, load_waivers, parse_severity

__all__ = ["DEFAULT_CERT_FAIL_DAYS", "DEFAULT_CERT_WARN_DAYS", "DEFAULT_OBSERVE",
           "DEFAULT_RESTART_WINDOW", "DESIRED_FROM_EMULATOR", "SuiteSettings", "add_options",
           "read_settings"]

DEFAULT_OBSERVE = 10.0  # node seconds: two kubelet crash-loop periods (~5 s each)
DEFAULT_CERT_WARN_DAYS = 30.0  # a long-lived certificate this close to expiry warns
DEFAULT_CERT_FAIL_DAYS = 7.0  # ... and this close fails
DESIRED_FROM_EMULATOR = "emulator:"  # --talos-desired: what the emulated cluster writes
DEFAULT_RESTART_WINDOW = 300.0  # node seconds of event history searched for restarts


@dataclass(frozen=True)
class SuiteSettings:
    suite: SuiteProfile | None = None
    vendor_profile: VendorProfile | None = None
    expect_version: str | None = None
    expect_kubernetes_version: str | None = None
    snapshot_mode: SnapshotMode | None = None
    snapshot_path: Path | None = None
    waivers: tuple[Waiver, ...] = ()
    waivers_path: Path | None = None
    fail_under: Severity = "low"
    report_dir: Path | None = None
    observe: float = DEFAULT_OBSERVE
    restart_window: float = DEFAULT_RESTART_WINDOW
    docker: bool = False
    desired: Path | str | None = None  # a directory, or DESIRED_FROM_EMULATOR
    cert_warn_days: float = DEFAULT_CERT_WARN_DAYS
    cert_fail_days: float = DEFAULT_CERT_FAIL_DAYS
    sources: dict[str, str] = field(default_factory=dict)
    checks: tuple[str, ...] = ()  # --talos-check: run only these check ids
    list_checks: bool = False  # --talos-list-checks: print the catalogue and exit

    def describe(self) -> list[str]:
        """Report-header lines (never credentials)."""
        lines = [
            "conformance: suite profile "
            + (f"{self.suite.name} ({self.suite.description})" if self.suite else
               "all checks (choose one with --talos-suite quick|full|post-upgrade|vendor-image)"),
            f"conformance: fail under {self.fail_under}; restarts watched {self.observe:g}s "
            f"(history {self.restart_window:g}s, node time)",
        ]
        if self.vendor_profile:
            lines.append(f"conformance: vendor profile {self.vendor_profile.name} "
                         f"({self.vendor_profile.source})")
        if self.expect_version or self.expect_kubernetes_version:
            lines.append(f"conformance: expecting Talos {self.expect_version or '-'}, "
                         f"Kubernetes {self.expect_kubernetes_version or '-'}")
        if self.snapshot_mode:
            lines.append(f"conformance: snapshot {self.snapshot_mode} {self.snapshot_path}")
        if self.checks:
            lines.append(f"conformance: only the checks {', '.join(self.checks)} "
                         "(--talos-check)")
        if self.waivers_path:
            lines.append(f"conformance: {len(self.waivers)} waiver(s) from {self.waivers_path}")
        if self.report_dir:
            lines.append(f"conformance: reports to {self.report_dir}")
        if self.desired:
            lines.append(f"conformance: desired state {self.desired} "
                         f"[{self.sources.get('desired', '--talos-desired')}]")
        if (self.cert_warn_days, self.cert_fail_days) != (DEFAULT_CERT_WARN_DAYS,
                                                          DEFAULT_CERT_FAIL_DAYS):
            lines.append(f"conformance: certificates warn under {self.cert_warn_days:g} days, "
                         f"fail under {self.cert_fail_days:g} days")
        return lines


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("talos-conformance", "Talos conformance suite (conformance/)")
    group.addoption(
        "--talos-suite", choices=sorted(SUITES), default=None, metavar="PROFILE",
        help="which checks to run: quick (read-only, seconds), full (everything --talos-allow "
        "permits), post-upgrade, vendor-image (default: every check)")
    group.addoption(
        "--talos-profile", default=None, metavar="PATH",
        help="vendor acceptance profile (YAML; see conformance/profiles/example-vendor.yaml)")
    group.addoption(
        "--talos-expect-version", default=None, metavar="VERSION",
        help="Talos version every node must run, e.g. v1.13.9 or v1.13.x (post-upgrade)")
    group.addoption(
        "--talos-expect-kubernetes-version", default=None, metavar="VERSION",
        help="Kubernetes (kubelet) version every node must run, e.g. v1.36.0 (post-upgrade)")
    group.addoption(
        "--talos-snapshot", nargs=2, default=None, metavar=("MODE", "PATH"),
        help="save: record config digest, extensions and node labels before an upgrade; "
        "compare: check the nodes against that record after it")
    group.addoption(
        "--talos-waivers", default=None, metavar="FILE",
        help="YAML waivers (check, reason, expires[, node]): a waived failure is reported as "
        "an expected failure until it expires")
    group.addoption(
        "--talos-fail-under", choices=SEVERITIES, default=None, metavar="SEVERITY",
        help="fail the run only for failing checks of this severity or worse: critical, high, "
        "medium, low (default: low, i.e. any failure)")
    group.addoption(
        "--talos-report", default=None, metavar="DIR",
        help="write results.json, report.md and report.html into DIR")
    group.addoption(
        "--talos-observe", type=float, default=None, metavar="SECONDS",
        help=f"how long to watch each node for service restarts (node seconds; default "
        f"{DEFAULT_OBSERVE:g})")
    group.addoption(
        "--talos-restart-window", type=float, default=None, metavar="SECONDS",
        help=f"a service that failed or restarted this recently fails the check (node seconds; "
        f"default {DEFAULT_RESTART_WINDOW:g})")
    group.addoption(
        "--talos-desired", default=None, metavar="DIR",
        help="desired state in git: base configs, patches and talos-desired.yaml; the drift "
        "checks compare every node with it (emulator: what --talos-emulator was generated "
        "from) [ini talos_desired; env $TALOS_DESIRED]")
    group.addoption(
        "--talos-cert-warn-days", type=float, default=None, metavar="DAYS",
        help=f"a certificate expiring within DAYS warns (default {DEFAULT_CERT_WARN_DAYS:g}) "
        "[ini talos_cert_warn_days; env $TALOS_CERT_WARN_DAYS]")
    group.addoption(
        "--talos-cert-fail-days", type=float, default=None, metavar="DAYS",
        help=f"a certificate expiring within DAYS fails (default {DEFAULT_CERT_FAIL_DAYS:g}) "
        "[ini talos_cert_fail_days; env $TALOS_CERT_FAIL_DAYS]")
    for ini, what in (("talos_desired", "the desired-state directory (--talos-desired)"),
                      ("talos_cert_warn_days", "days before expiry a certificate warns"),
                      ("talos_cert_fail_days", "days before expiry a certificate fails")):
        parser.addini(ini, what, default=None)
    group.addoption(
        "--talos-check", action="append", default=None, metavar="ID", dest="talos_check_ids",
        help="run only this check (its id, e.g. immutability.no-shell-or-ssh); repeatable; "
        "replaces the --talos-suite selection")
    group.addoption(
        "--talos-list-checks", action="store_true", default=False,
        help="print every check of the suite (id, severity, area, what it changes, claim) and "
        "exit")
    group.addoption(
        "--talos-docker", action="store_true", default=False,
        help="the nodes are local Docker containers named after their hostnames (talosctl "
        "cluster create docker): also require `docker exec <node> sh` to fail with 127")


def _path(config: pytest.Config, value: str | None) -> Path | None:
    if not value:
        return None
    return config.invocation_params.dir / Path(value).expanduser()


def _positive(name: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if not float(value) > 0:
        raise pytest.UsageError(f"{name}: {value!r} is not a positive number of seconds")
    return float(value)


def _snapshot(config: pytest.Config) -> tuple[SnapshotMode | None, Path | None]:
    raw = config.getoption("talos_snapshot")
    if not raw:
        return None, None
    mode, path = raw
    if mode == "save":
        return "save", _path(config, path)
    if mode == "compare":
        return "compare", _path(config, path)
    raise pytest.UsageError(
        f"--talos-snapshot: {mode!r} is not a mode; write --talos-snapshot save PATH before the "
        "upgrade and --talos-snapshot compare PATH after it")


def _layered(config: pytest.Config, dest: str) -> tuple[Any, str] | None:
    """The first of command line, ini, environment that sets ``dest``, and its source."""
    value = config.getoption(dest)
    if value not in (None, ""):
        return value, "--" + dest.replace("_", "-")
    value = config.getini(dest)
    if value not in (None, ""):
        return value, f"ini {dest}"
    value = os.environ.get(dest.upper(), "").strip()
    return (value, f"${dest.upper()}") if value else None


def _desired(config: pytest.Config) -> tuple[Path | str | None, str]:
    found = _layered(config, "talos_desired")
    if found is None:
        return None, ""
    value, source = str(found[0]).strip(), found[1]
    if value == DESIRED_FROM_EMULATOR:
        return value, source
    base = config.rootpath if source.startswith("ini") else config.invocation_params.dir
    return base / Path(value).expanduser(), source


def _days(config: pytest.Config, dest: str, default: float) -> float:
    found = _layered(config, dest)
    if found is None:
        return default
    try:
        days = float(found[0])
    except (TypeError, ValueError):
        days = -1.0
    if not days >= 0:
        raise pytest.UsageError(f"{found[1]}: {found[0]!r} is not a number of days (0 or more)")
    return days


def _cert_days(config: pytest.Config) -> tuple[float, float]:
    warn = _days(config, "talos_cert_warn_days", DEFAULT_CERT_WARN_DAYS)
    fail = _days(config, "talos_cert_fail_days", DEFAULT_CERT_FAIL_DAYS)
    if fail > warn:
        raise pytest.UsageError(f"--talos-cert-fail-days {fail:g} is more than "
                                f"--talos-cert-warn-days {warn:g}; a certificate must warn "
                                "before it fails")
    return warn, fail


def read_settings(config: pytest.Config) -> SuiteSettings:
    """Parse and validate every conformance option; pytest.UsageError names what to fix."""
    try:
        return _read(config)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def _read(config: pytest.Config) -> SuiteSettings:
    suite_name = config.getoption("talos_suite")
    profile_path = _path(config, config.getoption("talos_profile"))
    waivers_path = _path(config, config.getoption("talos_waivers"))
    snapshot_mode, snapshot_path = _snapshot(config)
    fail_under = config.getoption("talos_fail_under")
    report = config.getoption("talos_report")
    desired, desired_source = _desired(config)
    warn_days, fail_days = _cert_days(config)
    return SuiteSettings(
        suite=SUITES[suite_name] if suite_name else None,
        vendor_profile=load_vendor_profile(profile_path) if profile_path else None,
        expect_version=config.getoption("talos_expect_version"),
        expect_kubernetes_version=config.getoption("talos_expect_kubernetes_version"),
        snapshot_mode=snapshot_mode,
        snapshot_path=snapshot_path,
        waivers=tuple(load_waivers(waivers_path)) if waivers_path else (),
        waivers_path=waivers_path,
        fail_under=parse_severity(fail_under) if fail_under else "low",
        report_dir=_path(config, report),
        observe=_positive("--talos-observe", config.getoption("talos_observe"),
                          DEFAULT_OBSERVE),
        restart_window=_positive("--talos-restart-window",
                                 config.getoption("talos_restart_window"),
                                 DEFAULT_RESTART_WINDOW),
        docker=bool(config.getoption("talos_docker")),
        desired=desired,
        cert_warn_days=warn_days,
        cert_fail_days=fail_days,
        sources={"desired": desired_source} if desired_source else {},
        checks=tuple(dict.fromkeys(c.strip() for c in config.getoption("talos_check_ids") or ())),
        list_checks=bool(config.getoption("talos_list_checks")),
    )
