"""Loopback addresses for an emulated cluster: a free ``127.A.B.0/24`` per cluster.

Linux routes all of 127.0.0.0/8 to the loopback interface, so every node can have its own
address without privileges. A /24 is free when nothing is bound on its ``.1`` and ``.2``
port 50000 yet; picking at random among 65 000 of them lets parallel test workers coexist.
"""

from __future__ import annotations

import errno
import ipaddress
import random
import socket

from pytest_talos.emulator.errors import EmulatorError

__all__ = ["EmulatorError", "pick_subnet"]


def _probe_bind(address: str, port: int) -> int:
    """0 if ``address:port`` can be bound right now, else the errno."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            return exc.errno or errno.EADDRINUSE
    return 0


def pick_subnet(rng: random.Random | None = None) -> ipaddress.IPv4Network:
    """A free ``127.A.B.0/24`` (nothing bound on its .2:50000 and .1:50000)."""
    rng = rng or random.SystemRandom()
    for _ in range(50):
        network = ipaddress.IPv4Network(f"127.{rng.randint(16, 254)}.{rng.randint(0, 255)}.0/24")
        status = _probe_bind(str(network[2]), 50000)
        if status == errno.EADDRNOTAVAIL:
            raise EmulatorError(
                "this machine does not route 127.0.0.0/8 to loopback (only 127.0.0.1 answers); "
                "on macOS add aliases (sudo ifconfig lo0 alias 127.X.Y.Z) and pass subnet=..."
            )
        if status == 0 and _probe_bind(str(network[1]), 50000) == 0:
            return network
    raise EmulatorError(
        "no free 127.A.B.0/24 found for the emulated cluster; is port 50000 "
        "bound on all addresses (0.0.0.0:50000) by another program?"
    )
