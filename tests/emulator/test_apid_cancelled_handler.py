"""A call's handler that fails after its call was cancelled ends as cancelled
(pytest_talos/emulator/apid/status.py handler_failure): grpclib would log "Failed to handle
cancellation" with a traceback for any other end, which a client killed mid-call (the
interruption tests) made show up in the emulator's stderr now and then."""

from __future__ import annotations

import asyncio
import contextlib

from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from pytest_talos.emulator.apid.status import handler_failure


def test_a_failure_of_a_call_still_running_is_its_status() -> None:
    async def handler() -> BaseException:
        return handler_failure(ValueError("boom"))

    found = asyncio.run(handler())
    assert isinstance(found, GRPCError)
    assert found.status is Status.INTERNAL
    assert found.message == "emulator error: ValueError: boom"


def test_a_failure_after_the_call_was_cancelled_ends_it_as_cancelled() -> None:
    async def handler(started: asyncio.Event) -> BaseException:
        started.set()
        # lost on the way, as Python 3.11's wait_for may lose it
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        # then the next send finds the stream gone
        return handler_failure(StreamTerminatedError("Connection lost"))

    async def main() -> BaseException:
        started = asyncio.Event()
        task = asyncio.ensure_future(handler(started))
        await started.wait()
        task.cancel()  # what grpclib's Wrapper does when the client goes away
        return await task

    assert isinstance(asyncio.run(main()), asyncio.CancelledError)
