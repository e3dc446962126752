"""Which talosconfig to use, in talosctl's lookup order."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pytest_talos.errors import ConfigError

IN_POD_PATH = Path("/var/run/secrets/talos.dev/config")
# The variables talosctl's lookup reads (pytest_talos.plugin.environment lists them too).
CONFIG_ENV = "TALOSCONFIG"
HOME_ENV = "TALOS_HOME"


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def _expand_user(text: str, env: Mapping[str, str]) -> Path:
    if text == "~" or text.startswith("~/"):
        return _home(env) / text[2:]
    return Path(text)


def _candidates(explicit: str | None, env: Mapping[str, str]) -> list[tuple[Path, str]]:
    if explicit:
        return [(_expand_user(explicit, env), "given explicitly")]
    if env.get(CONFIG_ENV):
        return [(_expand_user(env[CONFIG_ENV], env), f"${CONFIG_ENV}")]
    talos_home = env.get(HOME_ENV, "")
    if talos_home and Path(talos_home).is_absolute():
        home_config = (Path(talos_home) / "config", "$TALOS_HOME/config")
    else:
        home_config = (_home(env) / ".talos" / "config", "~/.talos/config")
    return [home_config, (IN_POD_PATH, "in-pod mount, read-only")]


def resolve_talosconfig_path(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str]
) -> tuple[Path, str]:
    """The talosconfig to use and how it was found, in talosctl's lookup order.

    Raises ConfigError listing every place looked at, in order, when none exists.
    """
    candidates = _candidates(os.fspath(explicit) if explicit else None, env)
    for path, source in candidates:
        if path.exists():
            return path, source
    if len(candidates) == 1:
        path, source = candidates[0]
        raise ConfigError(
            f"talosconfig not found ({source}); fix the path or point $TALOSCONFIG at an "
            "existing talosconfig",
            path=str(path),
        )
    looked = ", then ".join(f"{path} ({source})" for path, source in candidates)
    raise ConfigError(
        f"no talosconfig found; looked at {looked}. Set $TALOSCONFIG or pass the path of a "
        "talosconfig (talosctl gen config writes one; talosctl config merge installs it)"
    )
