"""The emulator's own errors, apart from the client's :class:`~pytest_talos.errors.TalosError`.

``except TalosError`` in user code catches what the client raises about a node, never the
emulator's internals; ``except EmulatorError`` catches everything the emulator raises on
purpose. Invalid arguments (an unknown fault name, a bad ``time_scale``) stay
:class:`~pytest_talos.errors.ConfigError`: they are the caller's configuration, reported the
same way as a bad talosconfig.
"""

from __future__ import annotations

from pytest_talos.errors import StatusCode

__all__ = [
    "CannotListen",
    "ConfigRejected",
    "EmulatorError",
    "ListenerError",
    "RPCFailure",
    "ServiceRefused",
]


class EmulatorError(Exception):
    """Root of the emulator's errors; raised as such when the emulated cluster cannot start."""


class _CodedError(EmulatorError):
    """An error a node answers with: ``code`` is its gRPC status (``INVALID_ARGUMENT``)."""

    def __init__(self, code: StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RPCFailure(_CodedError):
    """A request the node refuses, answered as a gRPC status (``NOT_FOUND``)."""


class ConfigRejected(_CodedError):
    """The node refuses a machine config."""


class ServiceRefused(EmulatorError):
    """A service API call Talos answers with a plain (code Unknown) error."""


class ListenerError(EmulatorError, OSError):
    """A port of the node could not be opened."""


class CannotListen(EmulatorError):
    """The emulated cluster cannot start: a port its nodes serve is taken on this machine
    (one paragraph: which port and what to do)."""
