"""The conformance suite's own options, parsed once per run into :class:`SuiteSettings`."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_talos.errors import ConfigError
from pytest_talos.plugin.conformance.catalogue import SUITES, SuiteProfile
from pytest_talos.plugin.conformance.options import (
    DEFAULT_CERT_FAIL_DAYS,
    DEFAULT_CERT_WARN_DAYS,
    DEFAULT_OBSERVE,
    DEFAULT_RESTART_WINDOW,
    DESIRED_FROM_EMULATOR,
    SUITE_OPTIONS,
    add_options,
)
from pytest_talos.plugin.conformance.shard import Shard, parse_shard
from pytest_talos.plugin.conformance.vendor_profile import VendorProfile, load_vendor_profile
from pytest_talos.plugin.settings import layered_value
from pytest_talos.reporting import SEVERITIES, Severity, Waiver, load_waivers, parse_severity

__all__ = [
    "DEFAULT_CERT_FAIL_DAYS",
    "DEFAULT_CERT_WARN_DAYS",
    "DEFAULT_OBSERVE",
    "DEFAULT_RESTART_WINDOW",
    "DESIRED_FROM_EMULATOR",
    "SuiteSettings",
    "add_options",
    "read_settings",
]

SnapshotMode = Literal["save", "compare"]  # --talos-snapshot (conformance/_support/snapshot.py)


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
    leave_out: tuple[str, ...] = ()  # --talos-leave-out: parts of the suite left out
    list_checks: bool = False  # --talos-list-checks: print the catalogue and exit
    shard: Shard | None = None  # --talos-shard I/N: this job checks one shard of the nodes

    def _given(self, name: str) -> str:
        """`` [source]`` of a setting given on the command line, in ini or the environment."""
        return f" [{self.sources[name]}]" if name in self.sources else ""

    def describe(self) -> list[str]:
        """Report-header lines (never credentials)."""
        lines = [
            "conformance: suite profile "
            + (
                f"{self.suite.name} ({self.suite.description})"
                if self.suite
                else "all checks (choose one with --talos-suite "
                "quick|full|post-upgrade|vendor-image)"
            ),
            f"conformance: fail under {self.fail_under}{self._given('talos_fail_under')}; "
            f"restarts watched {self.observe:g}s (history {self.restart_window:g}s, node time)",
        ]
        if self.vendor_profile:
            lines.append(
                f"conformance: vendor profile {self.vendor_profile.name} "
                f"({self.vendor_profile.source})"
            )
        if self.expect_version or self.expect_kubernetes_version:
            lines.append(
                f"conformance: expecting Talos {self.expect_version or '-'}, "
                f"Kubernetes {self.expect_kubernetes_version or '-'}"
            )
        if self.snapshot_mode:
            lines.append(f"conformance: snapshot {self.snapshot_mode} {self.snapshot_path}")
        if self.checks:
            lines.append(
                f"conformance: only the checks {', '.join(self.checks)}{self._given('talos_check')}"
            )
        if self.shard:
            lines.append(
                f"conformance: shard {self.shard}{self._given('talos_shard')}: "
                "the nodes of this shard; cluster-wide checks "
                + ("here" if self.shard.runs_cluster_checks else "in shard 1")
            )
        if self.waivers_path:
            lines.append(f"conformance: {len(self.waivers)} waiver(s) from {self.waivers_path}")
        if self.report_dir:
            lines.append(f"conformance: reports to {self.report_dir}")
        if self.desired:
            lines.append(
                f"conformance: desired state {self.desired} "
                f"[{self.sources.get('desired', '--talos-desired')}]"
            )
        if (self.cert_warn_days, self.cert_fail_days) != (
            DEFAULT_CERT_WARN_DAYS,
            DEFAULT_CERT_FAIL_DAYS,
        ):
            lines.append(
                f"conformance: certificates warn under {self.cert_warn_days:g} days, "
                f"fail under {self.cert_fail_days:g} days"
            )
        return lines


def _layered(config: pytest.Config, name: str) -> tuple[Any, str] | None:
    """Command line ``--talos-x`` > ini ``talos_x`` > ``$TALOS_X``: the value and its source."""
    option = SUITE_OPTIONS[name]
    return layered_value(config, option.option_dest, option.flag, name, option.env)


def _resolve(config: pytest.Config, source: str, value: str) -> Path:
    """A path from ini is relative to the rootdir, from the command line or env to the
    invocation directory."""
    base = config.rootpath if source.startswith("ini") else config.invocation_params.dir
    return base / Path(value.strip()).expanduser()


def _path(config: pytest.Config, name: str, sources: dict[str, str]) -> Path | None:
    found = _layered(config, name)
    if found is None or not str(found[0]).strip():
        return None
    sources[name] = found[1]
    return _resolve(config, found[1], str(found[0]))


def _text(config: pytest.Config, name: str, sources: dict[str, str]) -> str | None:
    found = _layered(config, name)
    if found is None or not str(found[0]).strip():
        return None
    sources[name] = found[1]
    return str(found[0]).strip()


def _choice(
    config: pytest.Config, name: str, choices: Collection[str], sources: dict[str, str]
) -> str | None:
    found = _layered(config, name)
    if found is None:
        return None
    value = str(found[0]).strip().lower()
    if value not in choices:
        raise pytest.UsageError(f"{found[1]}: {found[0]!r} is not one of {', '.join(choices)}")
    sources[name] = found[1]
    return value


def _positive(config: pytest.Config, name: str, default: float, sources: dict[str, str]) -> float:
    found = _layered(config, name)
    if found is None:
        return default
    try:
        value = float(found[0])
    except (TypeError, ValueError):
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise pytest.UsageError(f"{found[1]}: {found[0]!r} is not a positive number of seconds")
    sources[name] = found[1]
    return value


def _list(
    config: pytest.Config,
    name: str,
    sources: dict[str, str],
    choices: Collection[str] | None = None,
) -> tuple[str, ...]:
    """A repeatable option; from ini or env comma-separated. Duplicates dropped, order kept."""
    found = _layered(config, name)
    if found is None:
        return ()
    raw, source = found
    items = raw if isinstance(raw, list) else [raw]
    values = tuple(
        dict.fromkeys(
            part.strip() for item in items for part in str(item).split(",") if part.strip()
        )
    )
    unknown = [v for v in values if choices is not None and v not in choices]
    if unknown:
        raise pytest.UsageError(
            f"{source}: {unknown[0]!r} is not one of {', '.join(sorted(choices or ()))}"
        )
    sources[name] = source
    return values


def _snapshot(
    config: pytest.Config, sources: dict[str, str]
) -> tuple[SnapshotMode | None, Path | None]:
    found = _layered(config, "talos_snapshot")
    if found is None:
        return None, None
    raw, source = found
    parts = list(raw) if isinstance(raw, (list, tuple)) else str(raw).split(None, 1)
    if len(parts) != 2:
        raise pytest.UsageError(
            f"{source}: {raw!r} is not MODE PATH; write save PATH before the upgrade and "
            "compare PATH after it"
        )
    mode, path = str(parts[0]).strip(), str(parts[1])
    if mode not in ("save", "compare"):
        raise pytest.UsageError(
            f"{source}: {mode!r} is not a mode; write --talos-snapshot save PATH before the "
            "upgrade and --talos-snapshot compare PATH after it"
        )
    sources["talos_snapshot"] = source
    return ("save" if mode == "save" else "compare"), _resolve(config, source, path)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _flag(config: pytest.Config, name: str, sources: dict[str, str]) -> bool:
    """A switch: the flag itself, or true/false in ini or the environment."""
    found = _layered(config, name)
    if found is None:
        return False
    value, source = found
    text = str(value).strip().lower()
    if value is True or text in _TRUE:
        sources[name] = source
        return True
    if text in _FALSE:
        return False
    raise pytest.UsageError(f"{source}: {value!r} is not true or false")


def _shard(config: pytest.Config, sources: dict[str, str]) -> Shard | None:
    found = _layered(config, "talos_shard")
    if found is None:
        return None
    raw, source = found
    try:
        shard = parse_shard(str(raw))
    except ValueError as exc:
        raise pytest.UsageError(
            f"{source}: {exc}. Give the shard this job runs and how many shards there are, "
            "I/N with 1 <= I <= N: the jobs --talos-shard 1/3, 2/3 and 3/3 split the nodes "
            "between them (every node in exactly one shard; cluster-wide checks run in shard "
            "1), and talos-report merge DIR... combines their reports"
        ) from None
    sources["talos_shard"] = source
    return shard


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
        raise pytest.UsageError(
            f"--talos-cert-fail-days {fail:g} is more than "
            f"--talos-cert-warn-days {warn:g}; a certificate must warn "
            "before it fails"
        )
    return warn, fail


def shipped_profiles(config: pytest.Config) -> list[Path]:
    """The ``profiles`` folders of the suite: in a checkout ``conformance/profiles``, from the
    wheel ``pytest_talos_conformance/profiles`` in site-packages."""
    roots = [Path(root) for root in config.hook.pytest_talos_conformance_root() if root]
    for name in ("pytest_talos_conformance", "conformance"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            roots.append(Path(spec.origin).parent)
    return list(dict.fromkeys(root / "profiles" for root in roots))


def _vendor_profile(config: pytest.Config, path: Path) -> VendorProfile:
    """``--talos-profile PATH``, or the name of a profile the kit ships (``example-vendor``),
    found inside the installed suite when no such file exists here."""
    if not path.exists() and "/" not in path.name:
        for folder in shipped_profiles(config):
            for candidate in (folder / path.name, folder / f"{path.name}.yaml"):
                if candidate.is_file():
                    return load_vendor_profile(candidate)
    return load_vendor_profile(path)


def read_settings(config: pytest.Config, parts: Collection[str] = ()) -> SuiteSettings:
    """Parse and validate every conformance option (``parts``: what --talos-leave-out may
    name); pytest.UsageError names what to fix, and the source of a bad value."""
    try:
        return _read(config, parts)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def _read(config: pytest.Config, parts: Collection[str]) -> SuiteSettings:
    sources: dict[str, str] = {}
    suite_name = _choice(config, "talos_suite", sorted(SUITES), sources)
    profile_path = _path(config, "talos_profile", sources)
    waivers_path = _path(config, "talos_waivers", sources)
    snapshot_mode, snapshot_path = _snapshot(config, sources)
    fail_under = _choice(config, "talos_fail_under", SEVERITIES, sources)
    desired, desired_source = _desired(config)
    if desired_source:
        sources["desired"] = desired_source
    warn_days, fail_days = _cert_days(config)
    return SuiteSettings(
        suite=SUITES[suite_name] if suite_name else None,
        vendor_profile=_vendor_profile(config, profile_path) if profile_path else None,
        expect_version=_text(config, "talos_expect_version", sources),
        expect_kubernetes_version=_text(config, "talos_expect_kubernetes_version", sources),
        snapshot_mode=snapshot_mode,
        snapshot_path=snapshot_path,
        waivers=tuple(load_waivers(waivers_path)) if waivers_path else (),
        waivers_path=waivers_path,
        fail_under=parse_severity(fail_under) if fail_under else "low",
        report_dir=_path(config, "talos_report", sources),
        observe=_positive(config, "talos_observe", DEFAULT_OBSERVE, sources),
        restart_window=_positive(config, "talos_restart_window", DEFAULT_RESTART_WINDOW, sources),
        docker=_flag(config, "talos_docker", sources),
        desired=desired,
        cert_warn_days=warn_days,
        cert_fail_days=fail_days,
        sources=sources,
        checks=_list(config, "talos_check", sources),
        leave_out=_list(config, "talos_leave_out", sources, choices=parts),
        list_checks=bool(config.getoption("talos_list_checks")),
        shard=_shard(config, sources),
    )
