"""Every environment variable pytest-talos and its conformance suite read, in one list.

It is derived, never written out: the ``talos`` option table
(:data:`~pytest_talos.plugin.settings.OPTION_ENVIRONMENT`), the conformance option table
(:data:`~pytest_talos.plugin.conformance.options.SUITE_OPTIONS`, each option with an ini key)
and talosctl's talosconfig lookup (``$TALOS_HOME``). The kit's own tests clear every one of
them, so that a developer's settings never leak into a test run, and the docs name no other.
The emulator's own knob (``$TALOS_EMULATOR_CALL_LOG_SIZE``) is the emulator's, not a setting.
"""

from __future__ import annotations

from pytest_talos.plugin.conformance.options import SUITE_OPTIONS
from pytest_talos.plugin.settings import OPTION_ENVIRONMENT
from pytest_talos.talosconfig.lookup import CONFIG_ENV, HOME_ENV

__all__ = ["TALOS_ENVIRONMENT"]

TALOS_ENVIRONMENT: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            *OPTION_ENVIRONMENT,
            CONFIG_ENV,
            HOME_ENV,
            *(option.env for option in SUITE_OPTIONS.values() if option.ini),
        )
    )
)
