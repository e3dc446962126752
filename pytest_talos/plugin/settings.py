"""The ``talos`` settings: options, ini keys, environment variables and their precedence.

Command line > ini > environment > default. Every resolved value remembers where it came
from (``--talos-timeout``, ``ini talos_timeout``, ``$TALOS_TIMEOUT``, ``default``) so that the
report header can say so. Bad values and bad combinations raise ``pytest.UsageError`` with a
one-line fix.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from pytest_talos.releases import release_named

__all__ = [
    "ALLOW_LEVELS",
    "DEFAULT_EMULATOR",
    "DEFAULT_TIMEOUT",
    "OPTION_ENVIRONMENT",
    "Setting",
    "TalosSettings",
    "add_options",
    "layered_value",
    "resolve_settings",
]

T = TypeVar("T")

ALLOW_LEVELS = ("none", "mutating", "disruptive")
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 86400.0  # a day: longer deadlines are typos (inf, 99999999999) and overflow
DEFAULT_LOCK_TIMEOUT = 600.0
DEFAULT_EMULATOR = (1, 1)


@dataclass(frozen=True)
class Setting(Generic[T]):
    """A resolved setting and where it came from (``--talos-timeout``, ``$TALOS_TIMEOUT``...)."""

    value: T
    source: str

    @property
    def given(self) -> bool:
        return self.source != "default"


@dataclass(frozen=True)
class _Option:
    dest: str
    flag: str
    ini: str
    env: str
    help: str


_OPTIONS = {
    o.dest: o
    for o in (
        _Option(
            "talosconfig",
            "--talosconfig",
            "talosconfig",
            "TALOSCONFIG",
            "talosconfig path (default as talosctl: $TALOSCONFIG, ~/.talos/config)",
        ),
        _Option(
            "talos_context",
            "--talos-context",
            "talos_context",
            "TALOS_CONTEXT",
            "talosconfig context (default: the file's current context)",
        ),
        _Option(
            "talos_endpoints",
            "--talos-endpoint",
            "talos_endpoints",
            "TALOS_ENDPOINTS",
            "Talos API endpoint host[:port]; repeat or comma-separate (default: the "
            "context's endpoints)",
        ),
        _Option(
            "talos_nodes",
            "--talos-nodes",
            "talos_nodes",
            "TALOS_NODES",
            "target nodes; repeat or comma-separate (default: the context's nodes, else "
            "the cluster's members)",
        ),
        _Option(
            "talos_emulator",
            "--talos-emulator",
            "talos_emulator",
            "TALOS_EMULATOR",
            "start the built-in emulated cluster for the session: CP:W control planes "
            "and workers (default 1:1); excludes --talos-endpoint",
        ),
        _Option(
            "talos_emulator_faults",
            "--talos-emulator-fault",
            "talos_emulator_faults",
            "TALOS_EMULATOR_FAULTS",
            "turn on an emulator fault profile; repeatable",
        ),
        _Option(
            "talos_emulator_variants",
            "--talos-emulator-variant",
            "talos_emulator_variants",
            "TALOS_EMULATOR_VARIANTS",
            "run the emulated cluster as a healthy variant "
            "(domain, metal, discovery-disabled, ...); repeatable",
        ),
        _Option(
            "talos_emulator_version",
            "--talos-emulator-version",
            "talos_emulator_version",
            "TALOS_EMULATOR_VERSION",
            "the Talos release the emulated nodes run: v1.12.x, v1.13.x (default v1.13.9) "
            "or v1.14.x, or a full tag of one",
        ),
        _Option(
            "talos_emulator_time_scale",
            "--talos-emulator-time-scale",
            "talos_emulator_time_scale",
            "TALOS_EMULATOR_TIME_SCALE",
            "run the emulated cluster's clock this many times faster (try windows, crash "
            "loops, grace periods); default 1",
        ),
        _Option(
            "talos_emulator_latency",
            "--talos-emulator-latency",
            "talos_emulator_latency",
            "TALOS_EMULATOR_LATENCY",
            "add this round-trip time per network hop to the emulated cluster, as to a "
            "remote site (e.g. 20ms); default 0",
        ),
        _Option(
            "talos_allow",
            "--talos-allow",
            "talos_allow",
            "TALOS_ALLOW",
            "changes tests may make: none (default), mutating (config changes, undone "
            "afterwards) or disruptive (also reboots, resets, upgrades)",
        ),
        _Option(
            "talos_timeout",
            "--talos-timeout",
            "talos_timeout",
            "TALOS_TIMEOUT",
            f"deadline of each Talos API call in seconds (default {DEFAULT_TIMEOUT:g}, "
            f"at most {MAX_TIMEOUT:g})",
        ),
        _Option(
            "talos_state_dir",
            "--talos-state-dir",
            "talos_state_dir",
            "TALOS_STATE_DIR",
            "where node locks and the journals of unfinished changes live (they hold "
            "config secrets; default $XDG_STATE_HOME/pytest-talos)",
        ),
        _Option(
            "talos_lock_timeout",
            "--talos-lock-timeout",
            "talos_lock_timeout",
            "TALOS_LOCK_TIMEOUT",
            "seconds a change waits while another worker or run "
            f"changes the same node (default {DEFAULT_LOCK_TIMEOUT:g})",
        ),
    )
}
# The environment variables of the options above, in table order.
OPTION_ENVIRONMENT: tuple[str, ...] = tuple(o.env for o in _OPTIONS.values())


@dataclass(frozen=True)
class TalosSettings:
    talosconfig: Setting[str | None]
    context: Setting[str | None]
    endpoints: Setting[tuple[str, ...]]
    nodes: Setting[tuple[str, ...]]
    emulator: Setting[tuple[int, int] | None]
    faults: Setting[tuple[str, ...]]
    variants: Setting[tuple[str, ...]]
    time_scale: Setting[float]
    emulator_version: Setting[str | None]
    allow: Setting[str]
    timeout: Setting[float]
    state_dir: Setting[str]
    lock_timeout: Setting[float]
    latency: Setting[float] = Setting(0.0, "default")  # seconds of round trip per hop
    ignored: tuple[str, ...] = ()  # environment settings the emulator overrides

    @property
    def anything_given(self) -> bool:
        """Whether any talos setting came from the command line, ini or environment."""
        return any(
            getattr(self, name).given
            for name in (
                "talosconfig",
                "context",
                "endpoints",
                "nodes",
                "emulator",
                "faults",
                "variants",
                "time_scale",
                "emulator_version",
                "latency",
                "allow",
                "timeout",
            )
        )

    @property
    def allows_mutating(self) -> bool:
        return self.allow.value in ("mutating", "disruptive")

    @property
    def allows_disruptive(self) -> bool:
        return self.allow.value == "disruptive"


def layered_value(
    config: pytest.Config, dest: str, flag: str, ini: str, env: str
) -> tuple[Any, str] | None:
    """The first of command line (option ``dest``, shown as ``flag``), ini key ``ini`` and
    environment variable ``env`` that is set, with its source (``--talos-x``, ``ini talos_x``,
    ``$TALOS_X``); None when none is. The conformance suite resolves its options with it too.
    """
    cli = config.getoption(dest)
    if cli not in (None, [], ""):
        return cli, flag
    from_ini = config.getini(ini)
    if from_ini not in (None, [], ""):
        return from_ini, f"ini {ini}"
    from_env = os.environ.get(env, "")
    if from_env.strip():
        return from_env, f"${env}"
    return None


def _raw(config: pytest.Config, dest: str) -> tuple[Any, str] | None:
    """The first of command line, ini, environment that sets ``dest``, with its source."""
    option = _OPTIONS[dest]
    return layered_value(config, dest, option.flag, option.ini, option.env)


def _split(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(part.strip() for item in items for part in str(item).split(",") if part.strip())


def _path_setting(config: pytest.Config) -> Setting[str | None]:
    found = _raw(config, "talosconfig")
    if found is None:
        return Setting(None, "default")
    value, source = found
    if source.startswith("$"):
        return Setting(str(value), source)  # as given: talosctl's own lookup reads it
    base = config.invocation_params.dir if source.startswith("--") else config.rootpath
    return Setting(str(base / Path(os.path.expanduser(str(value)))), source)


def _text_setting(config: pytest.Config, dest: str) -> Setting[str | None]:
    found = _raw(config, dest)
    return Setting(str(found[0]).strip(), found[1]) if found else Setting(None, "default")


def _list_setting(config: pytest.Config, dest: str) -> Setting[tuple[str, ...]]:
    found = _raw(config, dest)
    return Setting(_split(found[0]), found[1]) if found else Setting((), "default")


def _emulator_setting(config: pytest.Config) -> Setting[tuple[int, int] | None]:
    found = _raw(config, "talos_emulator")
    if found is None:
        return Setting(None, "default")
    value, source = str(found[0]).strip().lower(), found[1]
    if value in ("0", "false", "no", "off"):
        return Setting(None, source)
    if value in ("", "1", "true", "yes", "on"):
        return Setting(DEFAULT_EMULATOR, source)
    match = re.fullmatch(r"(\d+):(\d+)", value)
    if match is None or int(match[1]) < 1:
        raise pytest.UsageError(
            f"{source}: {found[0]!r} is not CP:W with at least one control plane (e.g. 1:1 or "
            "3:2); write --talos-emulator=CP:W, or put test paths before --talos-emulator"
        )
    return Setting((int(match[1]), int(match[2])), source)


def _allow_setting(config: pytest.Config) -> Setting[str]:
    found = _raw(config, "talos_allow")
    if found is None:
        return Setting("none", "default")
    value = str(found[0]).strip().lower()
    if value not in ALLOW_LEVELS:
        raise pytest.UsageError(
            f"{found[1]}: {found[0]!r} is not a change level; use one of {', '.join(ALLOW_LEVELS)}"
        )
    return Setting(value, found[1])


def _positive_setting(
    config: pytest.Config,
    dest: str,
    default: float,
    what: str,
    example: str,
    maximum: float | None = None,
) -> Setting[float]:
    found = _raw(config, dest)
    if found is None:
        return Setting(default, "default")
    try:
        value = float(found[0])
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise pytest.UsageError(f"{found[1]}: {found[0]!r} is not {what}; e.g. {example}")
    if maximum is not None and value > maximum:
        raise pytest.UsageError(
            f"{found[1]}: {found[0]!r} is more than the most allowed, {maximum:g}; e.g. {example}"
        )
    return Setting(value, found[1])


def _timeout_setting(config: pytest.Config) -> Setting[float]:
    return _positive_setting(
        config,
        "talos_timeout",
        DEFAULT_TIMEOUT,
        "a positive number of seconds",
        "--talos-timeout 10",
        MAX_TIMEOUT,
    )


def _lock_timeout_setting(config: pytest.Config) -> Setting[float]:
    return _positive_setting(
        config,
        "talos_lock_timeout",
        DEFAULT_LOCK_TIMEOUT,
        "a positive number of seconds",
        "--talos-lock-timeout 600",
    )


def _state_dir_setting(config: pytest.Config) -> Setting[str]:
    found = _raw(config, "talos_state_dir")
    if found is None:
        from pytest_talos.journal import default_state_dir

        return Setting(str(default_state_dir()), "default")
    value, source = found
    base = config.rootpath if source.startswith("ini") else config.invocation_params.dir
    return Setting(str(base / Path(os.path.expanduser(str(value).strip()))), source)


def _time_scale_setting(config: pytest.Config) -> Setting[float]:
    return _positive_setting(
        config,
        "talos_emulator_time_scale",
        1.0,
        "a positive factor",
        "--talos-emulator-time-scale 20",
    )


def _latency_setting(config: pytest.Config) -> Setting[float]:
    found = _raw(config, "talos_emulator_latency")
    if found is None:
        return Setting(0.0, "default")
    from pytest_talos.emulator.apid.latency import parse_latency  # a leaf module, cheap

    try:
        return Setting(parse_latency(str(found[0])), found[1])
    except ValueError as exc:
        raise pytest.UsageError(f"{found[1]}: {exc}") from None


def resolve_settings(config: pytest.Config) -> TalosSettings:
    """Every ``talos`` setting with its source; pytest.UsageError for bad values or mixes."""
    settings = TalosSettings(
        talosconfig=_path_setting(config),
        context=_text_setting(config, "talos_context"),
        endpoints=_list_setting(config, "talos_endpoints"),
        nodes=_list_setting(config, "talos_nodes"),
        emulator=_emulator_setting(config),
        faults=_list_setting(config, "talos_emulator_faults"),
        variants=_list_setting(config, "talos_emulator_variants"),
        time_scale=_time_scale_setting(config),
        emulator_version=_text_setting(config, "talos_emulator_version"),
        allow=_allow_setting(config),
        timeout=_timeout_setting(config),
        state_dir=_state_dir_setting(config),
        lock_timeout=_lock_timeout_setting(config),
        latency=_latency_setting(config),
    )
    return _check_combination(settings)


def _check_combination(settings: TalosSettings) -> TalosSettings:
    if settings.emulator.value is None:
        for source in (
            settings.faults.source,
            settings.variants.source,
            settings.time_scale.source,
            settings.emulator_version.source,
            settings.latency.source,
        ):
            if source != "default":
                raise pytest.UsageError(
                    f"{source} needs the emulated cluster: add --talos-emulator"
                )
        return settings
    ignored = []
    for setting, what in (
        (settings.endpoints, "an endpoint"),
        (settings.talosconfig, "a talosconfig"),
        (settings.context, "a talosconfig context"),
    ):
        if setting.source.startswith("$"):
            ignored.append(setting.source)
        elif setting.given:
            raise pytest.UsageError(
                f"{settings.emulator.source} and {setting.source} are mutually exclusive: the "
                f"emulated cluster brings its own {what.split(' ', 1)[1]}; drop one of the two"
            )
    _check_faults(settings.faults)
    _check_variants(settings.variants)
    _check_emulator_version(settings.emulator_version)
    return TalosSettings(**{**settings.__dict__, "ignored": tuple(ignored)})


def _check_faults(faults: Setting[tuple[str, ...]]) -> None:
    if not faults.value:
        return
    from pytest_talos.emulator.faults import fault_names  # only when the emulator is wanted

    unknown = [name for name in faults.value if name not in fault_names()]
    if unknown:
        raise pytest.UsageError(
            f"{faults.source}: unknown fault profile {', '.join(map(repr, unknown))}"
            f"{_nearest(unknown, fault_names())} Choose from {', '.join(fault_names())}"
        )


def _nearest(unknown: Sequence[str], known: Sequence[str]) -> str:
    """``; did you mean X?`` for the first misspelt name (as a misspelt check id gets)."""
    close = difflib.get_close_matches(unknown[0], list(known), n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(close)}?" if close else "."


def _check_emulator_version(version: Setting[str | None]) -> None:
    if version.value is None:
        return
    try:
        release_named(version.value)
    except ValueError as exc:
        raise pytest.UsageError(f"{version.source}: {exc}") from None


def _check_variants(variants: Setting[tuple[str, ...]]) -> None:
    if not variants.value:
        return
    from pytest_talos.emulator.faults.variants import (
        variant_names,  # only when the emulator is wanted
    )

    unknown = [name for name in variants.value if name not in variant_names()]
    if unknown:
        raise pytest.UsageError(
            f"{variants.source}: unknown emulator variant {', '.join(map(repr, unknown))}"
            f"{_nearest(unknown, variant_names())} Choose from {', '.join(variant_names())}"
        )


def add_options(parser: pytest.Parser) -> None:
    """The ``talos`` option group and the ini keys."""
    group = parser.getgroup("talos", "Talos Linux nodes (pytest-talos)")
    for option in _OPTIONS.values():
        env_help = f" [ini {option.ini}; env ${option.env}]"
        kwargs: dict[str, Any] = {
            "dest": option.dest,
            "default": None,
            "help": option.help + env_help,
        }
        if option.dest in (
            "talos_endpoints",
            "talos_nodes",
            "talos_emulator_faults",
            "talos_emulator_variants",
        ):
            kwargs.update(action="append", metavar="NAME" if "emulator" in option.dest else "HOST")
        elif option.dest == "talos_emulator":
            kwargs.update(nargs="?", const="1:1", metavar="CP:W")
        elif option.dest == "talos_allow":
            kwargs.update(choices=ALLOW_LEVELS)
        group.addoption(option.flag, **kwargs)
        parser.addini(option.ini, option.help, default=None)
    group.addoption(
        "--talos-recover",
        action="store_true",
        dest="talos_recover",
        default=False,
        help="restore nodes a killed run left changed (from the journals in the state "
        "directory), then exit; the same as the talos-recover command",
    )
