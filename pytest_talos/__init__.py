"""pytest-talos: a pytest plugin and conformance kit for Talos Linux nodes.

The public API is re-exported here and loaded on first use, so that ``import pytest_talos``
(which every pytest run in an environment with the plugin installed does) stays cheap and
``python -m pytest_talos.ports`` does not import the scanner twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "APIError": "pytest_talos.errors",
    "AsyncTalosClient": "pytest_talos.client",
    "AuthenticationError": "pytest_talos.errors",
    "ConfigError": "pytest_talos.errors",
    "ConfigGuard": "pytest_talos.checks",
    "ConformanceFailure": "pytest_talos.errors",
    "ConnectError": "pytest_talos.errors",
    "DeadlineExceeded": "pytest_talos.errors",
    "NodeError": "pytest_talos.errors",
    "PatchError": "pytest_talos.patches",
    "TalosClient": "pytest_talos.client",
    "TalosCluster": "pytest_talos.cluster",
    "TalosConfig": "pytest_talos.talosconfig",
    "TalosError": "pytest_talos.errors",
    "TalosNode": "pytest_talos.node",
    "TransportError": "pytest_talos.errors",
    "WaitCancelled": "pytest_talos.errors",
    "WaitTimeout": "pytest_talos.errors",
    "apply_patches": "pytest_talos.patches",
    "load_talosconfig": "pytest_talos.talosconfig",
    "scan": "pytest_talos.ports",
}

__all__ = [
    "APIError",
    "AsyncTalosClient",
    "AuthenticationError",
    "ConfigError",
    "ConfigGuard",
    "ConformanceFailure",
    "ConnectError",
    "DeadlineExceeded",
    "NodeError",
    "PatchError",
    "TalosClient",
    "TalosCluster",
    "TalosConfig",
    "TalosError",
    "TalosNode",
    "TransportError",
    "WaitCancelled",
    "WaitTimeout",
    "__version__",
    "apply_patches",
    "load_talosconfig",
    "scan",
]

if TYPE_CHECKING:
    from pytest_talos.checks import ConfigGuard
    from pytest_talos.client import AsyncTalosClient, TalosClient
    from pytest_talos.cluster import TalosCluster
    from pytest_talos.errors import (
        APIError,
        AuthenticationError,
        ConfigError,
        ConformanceFailure,
        ConnectError,
        DeadlineExceeded,
        NodeError,
        TalosError,
        TransportError,
        WaitCancelled,
        WaitTimeout,
    )
    from pytest_talos.node import TalosNode
    from pytest_talos.patches import PatchError, apply_patches
    from pytest_talos.ports import scan
    from pytest_talos.talosconfig import TalosConfig, load_talosconfig


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_talos' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
