"""The typed Talos API client: :class:`TalosClient` (sync) over :class:`AsyncTalosClient`.

Every method returns frozen dataclasses from :mod:`pytest_talos.models`, never protobuf;
every failure is a :class:`~pytest_talos.errors.TalosError` (see :mod:`pytest_talos.transport`
for how wire failures are classified).

Layout: ``_rpcs`` (method paths and roles), ``_calls`` (request builders, fan-out table),
``_gate`` (the change gate: which changes a client may send), ``_convert`` (machine API
replies -> models), ``_resources`` (COSI resources and type resolution), ``_streams``
(confirmed server streams), ``_connection`` (:class:`Connection`: the call policy over any
:class:`~pytest_talos.transport.Transport`, written once: deadlines, metadata, error
mapping, logging), ``_caller`` (targeting, gate, unary / stream / fan-out plumbing),
``_cosi`` (the COSI calls), ``_subscriptions`` (Events, HealthCheck), ``_async`` (the
asyncio client, delegating to those), ``_sync`` (the blocking facade on a private loop
thread).
"""

from pytest_talos.client._async import (
    DEFAULT_WATCH_TIMEOUT,
    AsyncTalosClient,
    FanoutCall,
    TalosConfigWarning,
)
from pytest_talos.client._connection import Connection
from pytest_talos.client._gate import ChangeGate
from pytest_talos.client._sync import StreamIterator, TalosClient
from pytest_talos.transport import DEFAULT_STREAM_TIMEOUT, DEFAULT_TIMEOUT

__all__ = [
    "DEFAULT_STREAM_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "DEFAULT_WATCH_TIMEOUT",
    "AsyncTalosClient",
    "ChangeGate",
    "Connection",
    "FanoutCall",
    "StreamIterator",
    "TalosClient",
    "TalosConfigWarning",
]
