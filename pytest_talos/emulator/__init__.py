"""The emulated Talos cluster: state, servicers, PKI, servers, fault profiles.

Importing this package is cheap; the heavy modules load on first use of a name::

    from pytest_talos.emulator import EmulatedCluster, Fault
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_talos.emulator.apid.calllog import CallRecord
    from pytest_talos.emulator.cluster.emulated import (
        ClientIdentity,
        EmulatedCluster,
        EmulatedNode,
        EmulatorError,
        NodeInfo,
    )
    from pytest_talos.emulator.faults import (
        FAULTS,
        Fault,
        FaultProfile,
        describe_faults,
        fault_names,
        resolve_faults,
    )

__all__ = [
    "FAULTS",
    "CallRecord",
    "ClientIdentity",
    "EmulatedCluster",
    "EmulatedNode",
    "EmulatorError",
    "Fault",
    "FaultProfile",
    "NodeInfo",
    "describe_faults",
    "fault_names",
    "resolve_faults",
]

_HOMES = {
    "FAULTS": "faults",
    "Fault": "faults",
    "FaultProfile": "faults",
    "describe_faults": "faults",
    "fault_names": "faults",
    "resolve_faults": "faults",
    "CallRecord": "apid.calllog",
    "ClientIdentity": "cluster.emulated",
    "EmulatedCluster": "cluster.emulated",
    "EmulatedNode": "cluster.emulated",
    "EmulatorError": "cluster.emulated",
    "NodeInfo": "cluster.emulated",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
