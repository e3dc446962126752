"""What the admin kubeconfig from the Talos API must say about trusting the API server
(unit-tested on its own).

``pkg/kubeconfig/generate.go`` writes one cluster whose ``certificate-authority-data`` is the
cluster's accepted Kubernetes CAs, and never ``insecure-skip-tls-verify``: a kubeconfig that
turns verification off, or has no CA to verify with, still "works", but hands the admin
credentials to whoever answers at the server's address.
"""

from __future__ import annotations

from typing import Any

__all__ = ["kubeconfig_tls_problems"]


def kubeconfig_tls_problems(document: Any) -> list[str]:
    """Why the parsed kubeconfig ``document`` would not verify its API servers (one line
    per cluster entry at fault); empty when every cluster carries CA data and verifies."""
    clusters = document.get("clusters") if isinstance(document, dict) else None
    if not isinstance(clusters, list) or not clusters:
        return ["the kubeconfig names no cluster"]
    problems = []
    for entry in clusters:
        entry = entry if isinstance(entry, dict) else {}
        name = entry.get("name") or "(unnamed)"
        found = entry.get("cluster")
        cluster: dict[str, Any] = found if isinstance(found, dict) else {}
        if cluster.get("insecure-skip-tls-verify") is True:
            problems.append(f"cluster {name}: insecure-skip-tls-verify: true")
        if not cluster.get("certificate-authority-data"):
            problems.append(f"cluster {name}: no certificate-authority-data")
    return problems
