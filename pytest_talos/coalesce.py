"""One TLS record and one ``send`` for all the HTTP/2 frames written in one loop turn.

grpclib writes each frame as it makes it: a call's HEADERS, then its DATA, then every
WINDOW_UPDATE and PING ACK, each a ``transport.write``. Under TLS each write is a record of
its own, encrypted and sent by a system call of its own, and each of those lets go of the
GIL and takes it back. A probe sends sixteen calls at once, two records each; in a quick
run of ten emulated nodes, py-spy found the probes' threads in those writes in 54 % of
their samples, most of it waiting to take the GIL back beside the other nodes' threads
(19 % once joined; ``docs/benchmarks.md``, seventh round).

:class:`CoalescingTransport` stands between grpclib and the TLS transport: the writes of
one turn of the event loop are joined and handed over together when the turn ends
(``call_soon``), in the order they were written. No byte waits for anything but the end of
the turn it was written in, so no round trip gets longer; closing hands over what is still
held first, and aborting drops it, as the transport below would.

Both sides use it: the client's channel (``transport/_channel.py``) and the emulator's apid
(``emulator/apid/gate.py``). apid is a grpc-go server, whose writer queues frames and
flushes its buffered connection only once its queue has run dry (grpc-go v1.82.1, as
Talos v1.13.9 pins it: ``internal/transport/controlbuf.go`` ``loopyWriter.run``,
``http_util.go`` ``bufWriter``): frames ready together leave together there too. This
module imports asyncio alone, no grpclib: a leaf that the transport and the emulator may
both import.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CoalescingTransport"]


class CoalescingTransport(asyncio.Transport):
    """``transport`` with the writes of each loop turn joined into one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self._hand_over)
        self._held.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def _hand_over(self) -> None:
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._hand_over()
        self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def can_write_eof(self) -> bool:
        return False  # TLS has no half close

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()
