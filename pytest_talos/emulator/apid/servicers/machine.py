"""machine.MachineService of an emulated node: every RPC of our proto subset."""

from __future__ import annotations

from pytest_talos.emulator.apid.servicers.machine_info import MachineInfoMixin
from pytest_talos.emulator.apid.servicers.machine_ops import MachineOpsMixin

__all__ = ["MachineServicer"]


class MachineServicer(MachineInfoMixin, MachineOpsMixin):
    """All 27 MachineService RPCs (the generated base's method names)."""
