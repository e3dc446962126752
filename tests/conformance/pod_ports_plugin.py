"""A plugin that opts in to ``immutability.pod-listeners-expected``: it adds the ports in
``$POD_PORTS_TEST_ALLOW`` (comma-separated) to the pod allowlist (loaded with ``-p``)."""

from __future__ import annotations

import os
from typing import Any


def pytest_talos_expected_pod_ports(node: Any, role: str, ports: set[int]) -> None:
    extra = os.environ.get("POD_PORTS_TEST_ALLOW", "")
    ports.update(int(port) for port in extra.split(",") if port.strip())
