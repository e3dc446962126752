"""What a call names: its gRPC method (:class:`Rpc`) and its node(s) (:class:`Target`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message

from pytest_talos.talos_api import roles_needed

__all__ = ["NO_TARGET", "Rpc", "Target", "check_positive"]

ReqT = TypeVar("ReqT", bound=Message)
RepT = TypeVar("RepT", bound=Message)


@dataclass(frozen=True)
class Rpc(Generic[ReqT, RepT]):
    """One gRPC method: its wire path, message types and the roles allowed to call it
    (by default those of the shared role table, :func:`~pytest_talos.talos_api.roles_needed`).
    """

    path: str
    request_type: type[ReqT]
    reply_type: type[RepT]
    roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.roles:
            object.__setattr__(self, "roles", roles_needed(self.path))


@dataclass(frozen=True)
class Target:
    """Which node(s) a call addresses through the endpoint (none: the endpoint itself)."""

    node: str | None = None
    nodes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.node is not None and self.nodes:
            raise ValueError("a call targets either one node or a list of nodes, not both")

    @property
    def label(self) -> str | None:
        return self.node if self.node is not None else (",".join(self.nodes) or None)

    def metadata(self) -> list[tuple[str, str]]:
        if self.node is not None:
            return [("node", self.node)]
        return [("nodes", node) for node in self.nodes]


NO_TARGET = Target()


def check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
