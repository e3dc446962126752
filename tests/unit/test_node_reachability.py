"""A target that did not answer is an ordinary TalosNode whose ``unreachable`` holds the error.

No subclass and no ``isinstance`` test: the cluster, the fixtures and the header all read the
node's explicit state (``reachable`` / ``unreachable``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, TypeGuard

from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import TransportError
from pytest_talos.node import TalosNode

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_talos"


class _Client:
    """Enough of a TalosClient for building nodes: already targeted at ``node``."""

    def __init__(self, node: str | None) -> None:
        self.node = node

    def with_node(self, node: str) -> _Client:
        return _Client(node)


def _node(address: str, **kwargs: Any) -> TalosNode:
    client: Any = _Client(address)
    return TalosNode(client, address, **kwargs)


def test_a_node_that_answered_is_reachable() -> None:
    node = _node("10.5.0.2", hostname="cp-1", role="controlplane")
    assert node.reachable
    assert node.unreachable is None


def test_an_unreachable_node_keeps_its_error_through_with_guard() -> None:
    error = TransportError("connection refused")
    node = _node("10.5.0.9", role="unknown", unreachable=error)
    guarded = node.with_guard(None)
    assert not guarded.reachable
    assert guarded.unreachable is error


def test_the_cluster_leaves_unreachable_nodes_out_of_its_roles() -> None:
    up = _node("10.5.0.2", hostname="cp-1", role="controlplane")
    down = _node("10.5.0.9", role="controlplane", unreachable=TransportError("timed out"))
    client: Any = _Client(None)
    cluster = TalosCluster(client, [up, down])
    assert cluster.nodes == [down, up]  # sorted by name: the address stands in for it
    assert cluster.reachable == [up]
    assert cluster.controlplanes == [up]


def _is_node_class_test(call: ast.AST) -> TypeGuard[ast.Call]:
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "isinstance"
        and len(call.args) == 2
        and "TalosNode" in ast.unparse(call.args[1])
    )


def test_no_module_tells_nodes_apart_by_class() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "UnreachableNode" not in text, path
        for call in ast.walk(ast.parse(text)):
            if _is_node_class_test(call):
                offenders.append(f"{path.relative_to(PACKAGE)}:{call.lineno}")
    assert offenders == []
