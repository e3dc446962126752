"""Workload isolation on an emulated node: whether machined starts sandboxd.

Talos v1.14 (v1.14.0-rc.1 ``internal/app/machined/pkg/sandboxd/enabled.go`` Enabled, called
by ``v1alpha1_sequencer_tasks.go`` StartAllServices): off in container mode, otherwise on
only when the machine config has a ``SecurityProfileConfig`` document with
``workloadIsolation: true`` (``pkg/machinery/config/types/runtime/security_profile_config.go``;
unset is off). Releases before v1.14 have no sandboxd (``pytest_talos.releases``
``Release.has_sandboxd``). The namespace itself is not modelled: sandboxd is a service that
runs and is healthy (``services/sandboxd.go`` HealthFunc: healthy while the sandbox is up).
"""

from __future__ import annotations

from pytest_talos.emulator.machineconfig.loader import lenient_documents
from pytest_talos.releases import Release

__all__ = ["SANDBOXD", "SECURITY_PROFILE_KIND", "sandboxd_enabled", "workload_isolation"]

SANDBOXD = "sandboxd"  # internal/app/machined/pkg/sandboxd/runner.go ServiceID
SECURITY_PROFILE_KIND = "SecurityProfileConfig"


def workload_isolation(data: bytes) -> bool:
    """Whether the machine config ``data`` enables workload isolation."""
    return any(
        doc.get("kind") == SECURITY_PROFILE_KIND and doc.get("workloadIsolation") is True
        for doc in lenient_documents(data)
    )


def sandboxd_enabled(release: Release, platform: str, config: bytes) -> bool:
    """Whether machined starts sandboxd on a node of ``release`` in ``platform`` mode."""
    return release.has_sandboxd and platform != "container" and workload_isolation(config)
