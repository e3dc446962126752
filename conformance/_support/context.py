"""Small value types the conformance fixtures hand to the checks."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_talos.client import TalosClient

__all__ = ["LOAD_FLOOR", "ReaderAccess", "Timing"]

# Real seconds a wait for something that must happen is given at least (Timing.allow).
LOAD_FLOOR = 3.0


@dataclass(frozen=True)
class Timing:
    """Converts node time to real time: the emulator may run its clock faster.

    ``source`` says where the rate was learned (shown with it); a real node runs at 1.
    """

    scale: float = 1.0
    source: str = "real time"

    def real(self, node_seconds: float) -> float:
        return node_seconds / self.scale

    def allow(self, node_seconds: float) -> float:
        """Real seconds to wait for what must happen within ``node_seconds``: that long on
        the node's clock, but no less than :data:`LOAD_FLOOR` real seconds (nor more than
        ``node_seconds``). On a real node (rate 1) it is ``node_seconds``; a fast emulator
        clock no longer turns a 30 s allowance into 1.5 s, which a busy machine can spend
        on one round trip (a false failure)."""
        return max(self.real(node_seconds), min(node_seconds, LOAD_FLOOR))


@dataclass
class ReaderAccess:
    """A client holding an ``os:reader`` certificate, or why there is none."""

    client: TalosClient | None
    reason: str = ""

    def for_node(self, address: str) -> TalosClient:
        if self.client is None:
            pytest.skip(self.reason)
        return self.client.with_node(address)
