"""machine.MachineService of an emulated node: every RPC of our proto subset, each served by
the plain servicer of its group (no mixins): :mod:`.machine_info` (what a node shows) and
:mod:`.machine_ops` (what changes it or hands out credentials)."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_talos._proto.machine import machine_grpc
from pytest_talos.emulator.apid.servicers.machine_info import MachineInfoServicer
from pytest_talos.emulator.apid.servicers.machine_ops import MachineOpsServicer

__all__ = ["GROUPS", "machine_servicer"]

GROUPS: tuple[type[object], ...] = (MachineInfoServicer, MachineOpsServicer)


def _rpc_names() -> frozenset[str]:
    """The generated base's RPC methods (its abstract methods, one per RPC)."""
    return frozenset(getattr(machine_grpc.MachineServiceBase, "__abstractmethods__", ()))


def machine_servicer() -> SimpleNamespace:
    """One object with every MachineService handler, taken from the group that serves it
    (the generated ``__mapping__`` reads the handlers off one object)."""
    handlers: dict[str, object] = {}
    for group in GROUPS:
        servicer = group()
        for name in _rpc_names() & set(dir(group)):
            if name in handlers:
                raise TypeError(f"{name} is served by two groups")
            handlers[name] = getattr(servicer, name)
    missing = _rpc_names() - handlers.keys()
    if missing:
        raise TypeError(f"MachineService methods no group serves: {sorted(missing)}")
    return SimpleNamespace(**handlers)
