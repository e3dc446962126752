"""Whether this machine reaches a node's own address: one short TCP connect.

Many runners reach only the control plane endpoint (or a load balancer in front of it): the
workers sit on a private network and answer only through the endpoint's apid, which forwards
calls by their ``node`` metadata (``internal/app/apid/pkg/director/director.go``). A check
that needs its own connection to a node (a port scan, a TLS handshake with the node's apid)
then cannot judge that node. :func:`probe_reach` tells the two apart before such a check
starts: a TCP connect to the node's apid port that is refused, finds no route or gets no
answer within its deadline did not reach the node. Only the TCP connect counts: a node that
accepts the connection is reached, so a TLS or authentication failure after it stays the
check's finding and is never taken for "no reach".
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from pytest_talos.talos_api import APID_PORT, join_host_port

__all__ = ["REACH_TIMEOUT", "Reach", "probe_reach"]

# Seconds the TCP connect may take: a node on the same network answers in milliseconds; a
# filtered address never answers, so this is also how long a run waits once per such node.
REACH_TIMEOUT = 3.0

_WHY = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "timed out",
}


@dataclass(frozen=True)
class Reach:
    """The outcome of one TCP connect to ``host:port``: reached, or why not."""

    host: str
    port: int
    reached: bool
    why: str = ""  # why the connect failed ("" when it succeeded)

    @property
    def tried(self) -> str:
        """The address tried, as ``host:port``."""
        return join_host_port(self.host, self.port)


def probe_reach(host: str, port: int = APID_PORT, timeout: float = REACH_TIMEOUT) -> Reach:
    """Open (and close at once) a TCP connection to ``host:port`` within ``timeout`` seconds.

    Nothing is sent: the connection is closed as soon as it is up. Refused, unreachable, a
    name that does not resolve and no answer in time are all "not reached".
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return Reach(host, port, reached=True)
    except TimeoutError:
        return Reach(host, port, reached=False, why=f"no answer within {timeout:g}s")
    except socket.gaierror as exc:
        return Reach(host, port, reached=False, why=f"name not resolved: {exc.strerror}")
    except OSError as exc:
        why = _WHY.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
        return Reach(host, port, reached=False, why=why)
