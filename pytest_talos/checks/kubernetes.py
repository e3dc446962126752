"""Kubernetes' view of a node: its Node is Ready (:func:`assert_node_ready`), looked up by
the name Talos registers it under (:attr:`TalosNode.kubernetes_registration`: the nodename,
the FQDN with ``registerWithFQDN``), never by the bare hostname (:func:`read_kube_node`)."""

from __future__ import annotations

from typing import Any

from pytest_talos.checks.result import CheckResult
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.errors import ConformanceFailure, WaitTimeout
from pytest_talos.node import TalosNode
from pytest_talos.wait import wait_until

__all__ = ["assert_node_ready", "is_not_found", "missing_node", "read_kube_node"]


def is_not_found(exc: BaseException) -> bool:
    """Whether ``exc`` is the Kubernetes client's 404 (its own ApiException)."""
    return getattr(exc, "status", None) == 404


def missing_node(check: str, node: TalosNode) -> ConformanceFailure:
    """The failure for a node whose Kubernetes Node does not exist."""
    registration = node.kubernetes_registration
    return ConformanceFailure(
        check,
        f"Kubernetes has no Node named {registration.name}",
        node=node.name,
        expected=f"a Node named {registration.name} ({registration.source})",
        observed="404 Not Found",
        evidence=registration.evidence(),
    )


def read_kube_node(kube: KubernetesAccess, node: TalosNode, check: str) -> Any:
    """``node``'s Kubernetes Node object, by the name Talos registers it under.

    A Node that does not exist is ``check``'s :class:`ConformanceFailure`; other errors of
    the Kubernetes client propagate. Call it only for a node that registers a Node
    (``node.kubernetes_registration.registered``).
    """
    try:
        return kube.node(node.kubernetes_name)
    except Exception as exc:  # the kubernetes client raises its own ApiException
        if is_not_found(exc):
            raise missing_node(check, node) from None
        raise


def assert_node_ready(
    cluster: TalosCluster, node: TalosNode, *, timeout: float = 0.0
) -> CheckResult:
    """The Kubernetes Node of ``node`` (named as Talos registers it) reports Ready=True.

    With ``timeout`` > 0, waits up to that long for it (polling the API server). A node
    with ``machine.kubelet.skipNodeRegistration`` has no Node: the result says so in its
    ``notes`` and judges nothing.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = "kubernetes.node-ready"
    registration = node.kubernetes_registration
    if not registration.registered:
        return CheckResult(check, node.name, registration.evidence(), [registration.skip_reason])
    kube = cluster.kubernetes

    def probe() -> dict[str, tuple[str, str]]:
        return _conditions(kube.node(registration.name))

    try:
        conditions = (
            probe()
            if timeout <= 0
            else wait_until(
                probe,
                _is_ready,
                timeout=timeout,
                node=node.name,
                description=f"Kubernetes node {registration.name} to be Ready",
            )
        )
    except WaitTimeout as exc:
        conditions = exc.last_observation if isinstance(exc.last_observation, dict) else {}
    except Exception as exc:  # the kubernetes client raises its own ApiException
        if is_not_found(exc):
            raise missing_node(check, node) from None
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
                or "(none)",
                **registration.evidence(),
            },
        )
    return CheckResult(check, node.name, {"conditions": conditions, **registration.evidence()})


def _conditions(kube_node: Any) -> dict[str, tuple[str, str]]:
    found = getattr(getattr(kube_node, "status", None), "conditions", None) or []
    return {
        str(c.type): (str(c.status), " ".join(filter(None, [c.reason, c.message]))) for c in found
    }


def _is_ready(conditions: dict[str, tuple[str, str]]) -> bool:
    return conditions.get("Ready", ("", ""))[0] == "True"
