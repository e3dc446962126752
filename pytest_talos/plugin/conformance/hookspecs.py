"""The hook a suite implements to say which tests are its checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_talos_conformance_root() -> Path | None:
    """The folder of a conformance suite: every test under it is a check (it needs exactly one
    ``talos_check`` marker, and sits in the folder of its area). The suite's ``conftest.py``
    implements it; tests outside every root are left alone."""
