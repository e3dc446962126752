"""The Kubernetes client (all its ~250 model modules and pydantic: 0.3 s of CPU) is loaded
only where a run talks to Kubernetes, never by loading the plugin and the suite's plugin."""

from __future__ import annotations

import subprocess
import sys

from pytest_talos.cluster import kubernetes_client_errors


def _fresh_python(code: str) -> str:
    """What ``code`` prints in a new interpreter (nothing imported yet)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


def test_loading_the_plugins_does_not_load_the_kubernetes_client() -> None:
    code = (
        "import sys, pytest_talos.plugin, pytest_talos.plugin.conformance; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'pydantic')))"
    )
    assert _fresh_python(code) == "[]"


def test_the_clients_error_is_caught_once_the_client_is_loaded() -> None:
    from kubernetes.client.exceptions import ApiException

    assert kubernetes_client_errors() == (ApiException,)


def test_without_the_client_there_is_no_error_of_its_to_catch() -> None:
    code = (
        "from pytest_talos.cluster import kubernetes_client_errors; "
        "import sys; print(kubernetes_client_errors(), 'kubernetes' in sys.modules)"
    )
    assert _fresh_python(code) == "() False"
