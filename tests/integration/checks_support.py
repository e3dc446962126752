"""An emulated cluster with a connected TalosCluster, for the checks' integration tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from pytest_talos.cluster import TalosCluster
from pytest_talos.emulator import EmulatedCluster

# 20x: a 5 s crash-loop period lasts 0.25 s, a 20 s try-mode timer 1 s.
TIME_SCALE = 20.0


@contextlib.contextmanager
def connected(
    faults: Sequence[str] = (),
    *,
    controlplanes: int = 1,
    workers: int = 1,
    variants: Sequence[str] = (),
    time_scale: float = TIME_SCALE,
    latency: float = 0.0,
) -> Iterator[tuple[EmulatedCluster, TalosCluster]]:
    """Start an emulated cluster and connect to it over real mTLS, as a user would
    (``latency``: seconds of round trip per hop, the emulator's latency model)."""
    with EmulatedCluster(
        controlplanes=controlplanes,
        workers=workers,
        faults=faults,
        variants=variants,
        time_scale=time_scale,
        latency=latency,
    ) as emulator:
        cluster = TalosCluster.connect(
            emulator.talosconfig_path,
            endpoints=[emulator.endpoint],
            scan_baseline=emulator.vacant_address,
            env={},
        )
        with cluster:
            yield emulator, cluster
