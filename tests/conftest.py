"""Fixtures shared by every test of the kit itself."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

# A developer's own talosconfig or TALOS_* settings must never leak into the kit's tests.
_TALOS_ENVIRONMENT = (
    "TALOSCONFIG",
    "TALOS_HOME",
    "TALOS_CONTEXT",
    "TALOS_ENDPOINTS",
    "TALOS_NODES",
    "TALOS_EMULATOR",
    "TALOS_EMULATOR_FAULTS",
    "TALOS_EMULATOR_TIME_SCALE",
    "TALOS_ALLOW",
    "TALOS_TIMEOUT",
)


@pytest.fixture(autouse=True)
def _no_talos_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _TALOS_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
