"""Small value types the conformance fixtures hand to the checks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_talos.client import TalosClient

__all__ = ["ReaderAccess", "Timing"]


@dataclass(frozen=True)
class Timing:
    """Converts node time to real time: the emulator may run its clock faster.

    ``source`` says where the rate was learned (shown with it); a real node runs at 1.
    """

    scale: float = 1.0
    source: str = "real time"

    def real(self, node_seconds: float) -> float:
        return node_seconds / self.scale


@dataclass
class ReaderAccess:
    """A client holding an ``os:reader`` certificate, or why there is none."""

    client: TalosClient | None
    reason: str = ""

    def for_node(self, address: str) -> TalosClient:
        if self.client is None:
            pytest.skip(self.reason)
        return self.client.with_node(address)
