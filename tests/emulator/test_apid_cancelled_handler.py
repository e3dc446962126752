"""A call's handler that fails after grpclib cancelled its call ends as cancelled
(pytest_talos/emulator/apid/status.py handler_failure): for any other end grpclib logs
"Failed to handle cancellation" with a traceback, which a client killed mid-call (the
interruption tests) made show up in the emulator's stderr now and then.

A real grpclib server over TCP: the handler loses the cancellation on the way (as Python
3.11's wait_for may), then finds its stream gone; the client closes its connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.empty_pb2 import Empty
from grpclib.client import Channel
from grpclib.const import Cardinality, Handler
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.server import Server, Stream

from pytest_talos.emulator.apid.status import as_grpc_error, handler_failure

PATH = "/test.Lost/Call"
Outcome = Callable[[Exception, Stream[Any, Any]], BaseException]


class _Lost:
    """One method whose handler swallows its cancellation, then fails."""

    def __init__(self, outcome: Outcome) -> None:
        self.started = asyncio.Event()
        self._outcome = outcome

    def __mapping__(self) -> dict[str, Handler]:
        return {PATH: Handler(self.call, Cardinality.UNARY_UNARY, Empty, Empty)}

    async def call(self, stream: Stream[Any, Any]) -> None:
        try:
            await stream.recv_message()
            self.started.set()
            with contextlib.suppress(asyncio.CancelledError):  # lost on the way
                await asyncio.sleep(30)
            raise StreamTerminatedError("Connection lost")  # the next send finds it gone
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise self._outcome(exc, stream) from None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _client_goes_away(outcome: Outcome) -> None:
    service = _Lost(outcome)
    server = Server([service])
    port = _free_port()
    await server.start("127.0.0.1", port)
    channel = Channel("127.0.0.1", port)

    async def call() -> None:
        async with channel.request(PATH, Cardinality.UNARY_UNARY, Empty, Empty) as stream:
            await stream.send_message(Empty(), end=True)
            await stream.recv_message()

    caller = asyncio.ensure_future(call())
    try:
        await asyncio.wait_for(service.started.wait(), 5)
        channel.close()  # the client is gone mid-call
        await asyncio.sleep(0.3)  # the server sees the connection lost and cancels the call
    finally:
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await caller
        channel.close()
        server.close()
        await server.wait_closed()


def _cancellation_errors(caplog: pytest.LogCaptureFixture, outcome: Outcome) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="grpclib"):
        asyncio.run(_client_goes_away(outcome))
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and "cancellation" in r.getMessage()
    ]


def test_a_handler_failing_after_its_client_left_ends_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The check sees the defect: the plain status, as the handler raised before.
    assert _cancellation_errors(caplog, lambda exc, _stream: as_grpc_error(exc)) == [
        "Failed to handle cancellation"
    ]
    assert _cancellation_errors(caplog, handler_failure) == []


def test_a_failure_of_a_call_still_running_is_its_status() -> None:
    found = handler_failure(ValueError("boom"), object())  # a stream grpclib did not cancel
    assert isinstance(found, GRPCError)
    assert found.message == "emulator error: ValueError: boom"
