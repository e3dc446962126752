"""The transport's write coalescing: a loop turn's writes leave as one, in order, and
closing or aborting treats what is still held as the TLS transport would."""

from __future__ import annotations

import asyncio
from typing import Any

from pytest_talos.coalesce import CoalescingTransport


class Recording(asyncio.Transport):
    """A TLS transport stand-in that notes every write and how it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = ""

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return bool(self.closed)

    def close(self) -> None:
        self.closed = "closed"

    def abort(self) -> None:
        self.closed = "aborted"

    def get_write_buffer_size(self) -> int:
        return 0


def _wrapped() -> tuple[CoalescingTransport, Recording]:
    below = Recording()
    return CoalescingTransport(below, asyncio.get_running_loop()), below


def test_the_writes_of_one_turn_leave_as_one_write_in_order() -> None:
    async def run() -> list[bytes]:
        wrapped, below = _wrapped()
        wrapped.write(b"HEADERS")
        wrapped.write(bytearray(b"DATA"))
        wrapped.write(b"")  # nothing to send: no write at all
        wrapped.writelines([b"WINDOW", memoryview(b"_UPDATE")])
        assert below.writes == []  # held until the turn ends
        assert wrapped.get_write_buffer_size() == len(b"HEADERSDATAWINDOW_UPDATE")
        await asyncio.sleep(0)
        wrapped.write(b"next turn")
        await asyncio.sleep(0)
        return below.writes

    assert asyncio.run(run()) == [b"HEADERSDATAWINDOW_UPDATE", b"next turn"]


def test_close_hands_over_what_is_held_first() -> None:
    async def run() -> Recording:
        wrapped, below = _wrapped()
        wrapped.write(b"GOAWAY")
        wrapped.close()
        await asyncio.sleep(0)  # the scheduled hand-over finds nothing left
        return below

    below = asyncio.run(run())
    assert (below.writes, below.closed) == ([b"GOAWAY"], "closed")


def test_abort_drops_what_is_held_and_a_closed_transport_gets_nothing() -> None:
    async def run() -> Recording:
        wrapped, below = _wrapped()
        wrapped.write(b"lost")
        wrapped.abort()
        wrapped.write(b"after the end")
        await asyncio.sleep(0)
        return below

    below = asyncio.run(run())
    assert (below.writes, below.closed) == ([], "aborted")
