"""The node's own account of its sockets (Netstat), and how it meets a port scan.

Netstat lists each listener with the address it is bound to; a scan sees what answers on one
address. These helpers compare the two: whether a listener answers on a scanned address
(:func:`covers`), whether it can be reached from off the node at all (:func:`exposed`), which
listeners were there in two reads (:func:`stable_listeners`), and how to show a listener's
owner in a failure (:func:`listener_text`, :func:`netstat_text`, :func:`owner_text`).
"""

from __future__ import annotations

import ipaddress

from pytest_talos import models, ports
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode

__all__ = [
    "address_of",
    "covers",
    "exposed",
    "is_v6",
    "listener_text",
    "netstat_text",
    "normal_address",
    "owner_text",
    "same_ip",
    "scan_state",
    "stable_listeners",
]


def address_of(text: str) -> str:
    """``10.5.0.2/24``, ``[fd00::2]`` or ``fd00::2`` -> the bare address."""
    return text.strip().strip("[]").partition("/")[0].partition("%")[0]


def same_ip(left: str, right: str) -> bool:
    """Whether two addresses are the same IP (``::1`` and ``0:0::1`` are); else the same text."""
    try:
        return ipaddress.ip_address(left) == ipaddress.ip_address(right)
    except ValueError:
        return left == right


def normal_address(address: str) -> str:
    """An IP address in its canonical text form; anything else as it is."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def is_v6(address: str) -> bool:
    """Whether ``address`` (bare, see :func:`address_of`) is an IPv6 one."""
    return ":" in address


def covers(record: models.ConnectRecord, address: str) -> bool:
    """Whether a listener bound to ``record.local_ip`` answers on ``address``.

    ``::`` is taken as dual-stack (Go's listeners are; Linux's default bindv6only=0)."""
    bind = record.local_ip
    if bind in ("::", ""):
        return True
    if bind == "0.0.0.0":
        return not is_v6(address)
    return same_ip(bind, address)


def exposed(bind: str) -> bool:
    """Whether a socket bound to ``bind`` can be reached from off the node."""
    if bind in ("", "::", "0.0.0.0"):
        return True
    try:
        ip = ipaddress.ip_address(bind)
    except ValueError:
        return True
    return not (ip.is_loopback or ip.is_link_local)


def stable_listeners(
    first: list[models.ConnectRecord], second: list[models.ConnectRecord]
) -> list[models.ConnectRecord]:
    """The host-network listeners present in both Netstat reads."""
    seen = {(r.l4proto, r.local_ip, r.local_port) for r in first}
    return [r for r in second if not r.netns and (r.l4proto, r.local_ip, r.local_port) in seen]


def owner_text(record: models.ConnectRecord) -> str:
    """A listener and the process that owns it, as a failure shows it."""
    who = (
        f"pid {record.pid} ({record.process_name or '?'})"
        if record.pid is not None
        else "no process (a kernel socket)"
    )
    return f"{record.l4proto} {record.local_ip}:{record.local_port} {who}"


def scan_state(scan: ports.ScanResult, port: int) -> str:
    """What the scan found on ``port``, also saying when the baseline host answers there too."""
    if port in scan.shared:
        return "open (also on the baseline)"
    if port in scan.passing:
        return "open once, closed when probed again (on the baseline neither)"
    try:
        return scan.state_of(port)
    except KeyError:
        return "not scanned"


def netstat_text(port: int, records: list[models.ConnectRecord]) -> str:
    """The owners of ``port`` among ``records`` (a Netstat read), as a failure shows them."""
    matches = list(dict.fromkeys(owner_text(r) for r in records if r.local_port == port))
    return "; ".join(matches) or "no listener (something in front of the node answers?)"


def listener_text(
    node: TalosNode, port: int, listeners: list[models.ConnectRecord] | None = None
) -> str:
    """The TCP listeners of ``port`` in the node's Netstat (``listeners``, else read now) and
    their processes; a Netstat that fails is said, not raised."""
    try:
        records = listeners if listeners is not None else node.listeners
    except TalosError as exc:
        return f"Netstat failed: {exc}"
    matches = [r for r in records if r.local_port == port and r.l4proto.startswith("tcp")]
    if not matches:
        return "no listener in the node's Netstat (something in front of the node answers?)"
    return "; ".join(
        f"{r.l4proto} {r.local_ip}:{r.local_port} "
        + (f"pid {r.pid} ({r.process_name or '?'})" if r.pid is not None else "process unknown")
        for r in matches
    )
