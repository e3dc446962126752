"""How an emulated apid words its errors: the gRPC status of an emulator error, grpc-go's
``rpc error: code = ... desc = ...`` text, and the per-node error metadata of a one-to-many
reply (``internal/app/apid/pkg/backend/apid.go`` BuildError)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import h2.exceptions
from grpclib.const import Status
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from pytest_talos._proto.common import common_pb2
from pytest_talos.emulator.errors import ConfigRejected, RPCFailure, ServiceRefused

__all__ = [
    "CONNECTION_LOST",
    "DEADLINE_TEXT",
    "as_grpc_error",
    "collect",
    "error_metadata",
    "failure_reason",
    "go_error_text",
    "handler_failure",
    "is_deadline",
]

DEADLINE_TEXT = "context deadline exceeded"  # grpc-go's context.DeadlineExceeded
CONNECTION_LOST = StreamTerminatedError | ProtocolError | h2.exceptions.ProtocolError | EOFError
_GO_CODE_NAMES = {
    Status.CANCELLED: "Canceled",
    Status.UNKNOWN: "Unknown",
    Status.INVALID_ARGUMENT: "InvalidArgument",
    Status.DEADLINE_EXCEEDED: "DeadlineExceeded",
    Status.NOT_FOUND: "NotFound",
    Status.ALREADY_EXISTS: "AlreadyExists",
    Status.PERMISSION_DENIED: "PermissionDenied",
    Status.RESOURCE_EXHAUSTED: "ResourceExhausted",
    Status.FAILED_PRECONDITION: "FailedPrecondition",
    Status.ABORTED: "Aborted",
    Status.OUT_OF_RANGE: "OutOfRange",
    Status.UNIMPLEMENTED: "Unimplemented",
    Status.INTERNAL: "Internal",
    Status.UNAVAILABLE: "Unavailable",
    Status.DATA_LOSS: "DataLoss",
    Status.UNAUTHENTICATED: "Unauthenticated",
}


def go_error_text(status: Status, message: str) -> str:
    return f"rpc error: code = {_GO_CODE_NAMES.get(status, status.name)} desc = {message}"


def as_grpc_error(exc: Exception) -> GRPCError:
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, RPCFailure | ConfigRejected):
        return GRPCError(Status[exc.code], str(exc.message))
    if isinstance(exc, ServiceRefused):
        return GRPCError(Status.UNKNOWN, str(exc))  # v1alpha1_server.go: plain errors, code Unknown
    return GRPCError(Status.INTERNAL, f"emulator error: {type(exc).__name__}: {exc}")


def handler_failure(exc: Exception, stream: Any) -> BaseException:
    """What a call's handler raises for ``exc``: its gRPC status, or CancelledError when
    grpclib has cancelled the call meanwhile (its client went away, its own deadline passed)
    and the cancellation was lost on the way (Python 3.11's ``asyncio.wait_for`` can swallow
    one that comes as its inner await ends). For a cancelled handler that ends any other way
    grpclib logs "Failed to handle cancellation" with a traceback; apid has nothing to say
    to a client that is gone. Whether grpclib cancelled it is its server stream's wrapper's
    flag (grpclib/server.py request_handler, the private hook checked in
    tests/unit/test_grpclib_hooks.py); a deadline of a call this handler made itself is not
    that, and keeps its status."""
    wrapper = getattr(getattr(stream, "_stream", None), "wrapper", None)
    if getattr(wrapper, "cancelled", False):
        return asyncio.CancelledError()
    return as_grpc_error(exc)


async def collect(replies: AsyncIterator[Any]) -> list[Any] | GRPCError:
    try:
        return [reply async for reply in replies]
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return as_grpc_error(exc)


def error_metadata(metadata: common_pb2.Metadata, target: str, error: GRPCError) -> None:
    message = str(error.message or "")
    metadata.hostname = target
    metadata.error = go_error_text(error.status, message)
    metadata.status.code = error.status.value
    metadata.status.message = message


def is_deadline(exc: BaseException) -> bool:
    """grpclib's (asyncio's) deadline error; an OS-level ETIMEDOUT carries an errno."""
    return isinstance(exc, TimeoutError) and exc.errno is None


def failure_reason(exc: BaseException) -> str:
    """Why a forward failed, as grpc-go's dial error ends."""
    # INFERRED: a connection that broke means the node went down; the redial grpc-go makes
    # then is refused, and that is what it reports (as for a node already down).
    if isinstance(exc, ConnectionRefusedError | ConnectionResetError | CONNECTION_LOST):
        return "connect: connection refused"
    if isinstance(exc, ssl.SSLError):
        return f"tls: {exc.reason or exc}"
    return str(exc) or type(exc).__name__
