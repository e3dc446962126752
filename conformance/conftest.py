"""The conformance suite is a folder of checks for the conformance plugin
(:mod:`pytest_talos.plugin.conformance`: options, catalogue, waivers, verdict, reports);
the fixtures its checks use are in :mod:`conformance._support.fixtures`."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = (
    "pytest_talos.plugin.conformance",
    "conformance._support.fixtures",
    "conformance._support.early",
)


def pytest_talos_conformance_root() -> Path:
    """Every test under this folder is a check."""
    return Path(__file__).parent
