"""Kubernetes' view of a node: the Node named after its hostname is Ready
(:func:`assert_node_ready`)."""

from __future__ import annotations

from typing import Any

from pytest_talos.checks.result import CheckResult
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import ConformanceFailure, WaitTimeout
from pytest_talos.node import TalosNode
from pytest_talos.wait import wait_until

__all__ = ["assert_node_ready"]


def assert_node_ready(
    cluster: TalosCluster, node: TalosNode, *, timeout: float = 0.0
) -> CheckResult:
    """The Kubernetes Node named after ``node``'s hostname reports Ready=True.

    With ``timeout`` > 0, waits up to that long for it (polling the API server).
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = "kubernetes.node-ready"
    kube = cluster.kubernetes

    def probe() -> dict[str, tuple[str, str]]:
        return _conditions(kube.node(node.hostname))

    try:
        conditions = (
            probe()
            if timeout <= 0
            else wait_until(
                probe,
                _is_ready,
                timeout=timeout,
                node=node.name,
                description=f"Kubernetes node {node.hostname} to be Ready",
            )
        )
    except WaitTimeout as exc:
        conditions = exc.last_observation if isinstance(exc.last_observation, dict) else {}
    except Exception as exc:  # the kubernetes client raises its own ApiException
        if getattr(exc, "status", None) == 404:
            raise ConformanceFailure(
                check,
                f"Kubernetes has no Node named {node.hostname}",
                node=node.name,
            ) from None
        raise
    if not _is_ready(conditions):
        status, reason = conditions.get("Ready", ("missing", ""))
        raise ConformanceFailure(
            check,
            "the Kubernetes Node is not Ready",
            node=node.name,
            expected="Ready=True",
            observed=f"Ready={status}" + (f" ({reason})" if reason else ""),
            evidence={
                "conditions": "\n".join(
                    f"{kind}={value} {why}".rstrip() for kind, (value, why) in conditions.items()
                )
                or "(none)"
            },
        )
    return CheckResult(check, node.name, {"conditions": conditions})


def _conditions(kube_node: Any) -> dict[str, tuple[str, str]]:
    found = getattr(getattr(kube_node, "status", None), "conditions", None) or []
    return {
        str(c.type): (str(c.status), " ".join(filter(None, [c.reason, c.message]))) for c in found
    }


def _is_ready(conditions: dict[str, tuple[str, str]]) -> bool:
    return conditions.get("Ready", ("", ""))[0] == "True"
