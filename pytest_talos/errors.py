"""The exception tree of pytest-talos.

Everything the library raises on purpose is a :class:`TalosError` (or a
:class:`ConformanceFailure`, which is an ``AssertionError`` so pytest reports it as a
test failure rather than an error)::

    TalosError                      .node and .method where known
    +-- ConfigError                 talosconfig problems; names the file and key path
    +-- TransportError
    |   +-- ConnectError            DNS / TCP / TLS failure; says which and what to check
    |   +-- AuthenticationError     handshake or certificate rejected
    |   +-- DeadlineExceeded        .timeout
    +-- APIError                    non-OK gRPC status: .code, .details
    |   +-- InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
    |       FailedPrecondition, Unimplemented, Unauthenticated, Unavailable,
    |       ResourceExhausted, Internal, Unknown, Cancelled, Aborted
    |       (NotSupportedInMode is a FailedPrecondition, NotInRelease an Unimplemented)
    +-- NodeError                   an error carried in one node's reply metadata
    +-- ConfigRestoreError          a guard could not put a node's config back
    +-- WaitTimeout                 .last_observation, .elapsed
    +-- WaitCancelled               the waiter was told to stop (a run that is stopping)
    ConformanceFailure(AssertionError)  .node, .check, .expected, .observed, .evidence

This module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "APIError",
    "Aborted",
    "AlreadyExists",
    "AuthenticationError",
    "Cancelled",
    "ChangeNotAllowed",
    "ConfigError",
    "ConfigRestoreError",
    "ConformanceFailure",
    "ConnectError",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NodeError",
    "NotFound",
    "NotInRelease",
    "NotObserved",
    "NotSupportedInMode",
    "PermissionDenied",
    "ResourceExhausted",
    "StatusCode",
    "TalosError",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "WaitCancelled",
    "WaitTimeout",
    "api_error_for_code",
]


class StatusCode(enum.StrEnum):
    """A gRPC status code by its canonical name (``grpc/codes``), with its number.

    The client's errors (``APIError.code``), the emulator's refusals (``RPCFailure.code``) and
    the fake transport's statuses all speak it, so a misspelt code fails type checking."""

    OK = "OK"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    DATA_LOSS = "DATA_LOSS"
    UNAUTHENTICATED = "UNAUTHENTICATED"

    @property
    def number(self) -> int:
        """The code's number on the wire (grpc-status)."""
        return list(StatusCode).index(self)

    @classmethod
    def of(cls, number: int) -> StatusCode:
        """The code numbered ``number``; an unknown number is UNKNOWN (as grpc-go maps it)."""
        members = list(cls)
        return members[number] if 0 <= number < len(members) else cls.UNKNOWN


class TalosError(Exception):
    """Base of every error pytest-talos raises on purpose."""

    def __init__(self, message: str, *, node: str | None = None, method: str | None = None):
        super().__init__(message)
        self.message = message
        self.node = node
        self.method = method

    def __str__(self) -> str:
        where = []
        if self.node:
            where.append(f"node {self.node}")
        if self.method:
            where.append(self.method)
        prefix = f"[{', '.join(where)}] " if where else ""
        return prefix + self.message


class ConfigError(TalosError):
    """The talosconfig (or another input file) is missing, unreadable or invalid."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None):
        parts = [p for p in (path, key) if p]
        full = f"{': '.join(parts)}: {message}" if parts else message
        super().__init__(full)
        self.path = path
        self.key = key


class TransportError(TalosError):
    """The call never reached a Talos API server, or the connection broke."""


class ConnectError(TransportError):
    """DNS, TCP or TLS failure while connecting."""


class AuthenticationError(TransportError):
    """The TLS handshake or the certificates were rejected (by either side)."""


class DeadlineExceeded(TransportError):
    """The call did not finish within its deadline."""

    def __init__(
        self, message: str, *, timeout: float, node: str | None = None, method: str | None = None
    ):
        super().__init__(message, node=node, method=method)
        self.timeout = timeout


class APIError(TalosError):
    """The server answered with a non-OK gRPC status."""

    code_name = StatusCode.UNKNOWN

    def __init__(
        self,
        details: str,
        *,
        code: StatusCode | None = None,
        node: str | None = None,
        method: str | None = None,
    ):
        self.code = code or self.code_name
        self.details = details
        super().__init__(f"{self.code}: {details}", node=node, method=method)


class Cancelled(APIError):
    code_name = StatusCode.CANCELLED


class Unknown(APIError):
    code_name = StatusCode.UNKNOWN


class InvalidArgument(APIError):
    code_name = StatusCode.INVALID_ARGUMENT


class NotFound(APIError):
    code_name = StatusCode.NOT_FOUND


class AlreadyExists(APIError):
    code_name = StatusCode.ALREADY_EXISTS


class PermissionDenied(APIError):
    code_name = StatusCode.PERMISSION_DENIED


class ResourceExhausted(APIError):
    code_name = StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(APIError):
    code_name = StatusCode.FAILED_PRECONDITION


class NotSupportedInMode(FailedPrecondition):
    """The node's runtime mode lacks the capability this call needs (``.mode``: ``container``).

    Talos in container mode (in Docker) refuses reboot, shutdown, upgrade, rollback and META
    writes, and install, this way: a capability the platform lacks, not a defect of the node.
    The transport raises it for a ``FAILED_PRECONDITION`` carrying Talos's refusal text
    (:func:`pytest_talos.talos_api.unsupported_mode`).
    """

    def __init__(
        self,
        details: str,
        *,
        mode: str,
        code: StatusCode | None = None,
        node: str | None = None,
        method: str | None = None,
    ):
        super().__init__(details, code=code, node=node, method=method)
        self.mode = mode


class Aborted(APIError):
    code_name = StatusCode.ABORTED


class Unimplemented(APIError):
    code_name = StatusCode.UNIMPLEMENTED


class NotInRelease(Unimplemented):
    """The node's Talos release does not serve this method (``.releases``: the known release
    lines that lack it, e.g. ``("v1.12",)``; empty when every known release serves it).

    machined answers a method it does not register with grpc-go's Unimplemented ``unknown
    service S`` or ``unknown method M for service S``, before its authorizer: a call a newer
    release added (``machine.ImageService`` on v1.12), not a defect of the node. The
    transport raises it for those texts (:func:`pytest_talos.releases.lacking`).
    """

    def __init__(
        self,
        details: str,
        *,
        releases: tuple[str, ...],
        code: StatusCode | None = None,
        node: str | None = None,
        method: str | None = None,
    ):
        super().__init__(details, code=code, node=node, method=method)
        self.releases = releases


class Internal(APIError):
    code_name = StatusCode.INTERNAL


class Unavailable(APIError):
    code_name = StatusCode.UNAVAILABLE


class Unauthenticated(APIError):
    code_name = StatusCode.UNAUTHENTICATED


_BY_CODE: dict[StatusCode, type[APIError]] = {
    cls.code_name: cls
    for cls in (
        Cancelled,
        Unknown,
        InvalidArgument,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        Unimplemented,
        Internal,
        Unavailable,
        Unauthenticated,
    )
}


def api_error_for_code(code: StatusCode | str) -> type[APIError]:
    """The APIError subclass for a gRPC status code (or its name, ``INVALID_ARGUMENT``)."""
    try:
        return _BY_CODE.get(StatusCode(str(code).upper()), APIError)
    except ValueError:
        return APIError


class NodeError(TalosError):
    """One node of a fan-out call failed; its error came back in the reply metadata.

    ``.cause`` is the typed :class:`APIError` rebuilt from the node's status when known.
    """

    def __init__(
        self, node: str, message: str, *, cause: APIError | None = None, method: str | None = None
    ):
        super().__init__(message, node=node, method=method)
        self.cause = cause


class ChangeNotAllowed(TalosError):
    """A client refused to send a call that changes a node: the allow level does not cover it.

    ``.needed`` is the level the call needs (``mutating`` or ``disruptive``), ``.allowed`` the
    level in force; nothing was sent.
    """

    def __init__(
        self,
        message: str,
        *,
        needed: str,
        allowed: str,
        node: str | None = None,
        method: str | None = None,
    ):
        super().__init__(message, node=node, method=method)
        self.needed = needed
        self.allowed = allowed


class ConfigRestoreError(TalosError):
    """A config guard could not put a node's original machine config back. Needs a human."""


class WaitTimeout(TalosError):
    """A wait gave up; says what it last saw and how long it waited."""

    def __init__(
        self,
        message: str,
        *,
        last_observation: Any,
        elapsed: float,
        node: str | None = None,
    ):
        super().__init__(
            f"{message} (waited {elapsed:.1f}s; last observed: {last_observation!r})", node=node
        )
        self.last_observation = last_observation
        self.elapsed = elapsed


class WaitCancelled(TalosError):
    """A wait ended early because its caller asked it to stop (the run is stopping)."""


class NotObserved(TalosError):
    """A check could not see what it judges: this machine read the node too late for a
    window the node's own timer sets (a busy machine, a slow link), even after widening it.

    Not a verdict on the node: the conformance plugin reports the check as skipped, "not
    judged". ``.window`` is the last window tried (node seconds), ``.seen_after`` how long
    after it opened the node was read (node seconds).
    """

    def __init__(self, message: str, *, window: float, seen_after: float, node: str | None = None):
        super().__init__(message, node=node)
        self.window = window
        self.seen_after = seen_after


class ConformanceFailure(AssertionError):
    """A node does not do what a conformance check claims; carries the evidence."""

    def __init__(
        self,
        check: str,
        message: str,
        *,
        node: str | None = None,
        expected: Any = None,
        observed: Any = None,
        evidence: Mapping[str, Any] | None = None,
    ):
        self.check = check
        self.node = node
        self.expected = expected
        self.observed = observed
        self.evidence: dict[str, Any] = dict(evidence or {})
        super().__init__(self._render(message))

    def _render(self, message: str) -> str:
        lines = [f"{self.check}" + (f" on {self.node}" if self.node else "") + f": {message}"]
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.observed is not None:
            lines.append(f"  observed: {self.observed}")
        for key, value in self.evidence.items():
            text = str(value).rstrip()
            if "\n" in text:
                indented = "\n".join("    " + line for line in text.splitlines())
                lines.append(f"  {key}:\n{indented}")
            else:
                lines.append(f"  {key}: {text}")
        return "\n".join(lines)
