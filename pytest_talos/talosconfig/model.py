"""The loaded talosconfig: :class:`TalosConfig` and its selected :class:`Context`."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

KeyType = Literal["ed25519", "ecdsa", "rsa"]


@dataclass(frozen=True)
class Context:
    """One talosconfig context. ``key_pem`` is PKCS#8 ``PRIVATE KEY`` PEM and never shown."""

    name: str
    endpoints: tuple[str, ...]  # normalized host:port
    nodes: tuple[str, ...]
    cluster: str | None
    ca_pem: bytes
    crt_pem: bytes
    key_pem: bytes = field(repr=False)
    time_scale: float = 1.0  # the nodes' clock rate the talosconfig advertises (emulator only)
    scan_baseline: str | None = None  # an address where no node lives (emulator only)

    def __repr__(self) -> str:
        return (
            f"Context(name={self.name!r}, endpoints={self.endpoints!r}, nodes={self.nodes!r}, "
            f"cluster={self.cluster!r}, key=<hidden>)"
        )


@dataclass(frozen=True)
class TalosConfig:
    """A loaded, validated talosconfig with the selected context and client-cert facts."""

    path: Path
    source: str  # how the path was found, e.g. "$TALOSCONFIG"
    context_name: str
    contexts: tuple[str, ...]
    context: Context
    roles: tuple[str, ...]  # the client cert's Subject Organization values
    not_before: dt.datetime
    not_after: dt.datetime
    key_type: KeyType
    expiry_warning: str | None

    def describe(self) -> str:
        """A one-line summary safe for report headers (no key material)."""
        parts = [
            f"talosconfig {self.path} ({self.source}), context {self.context_name!r}",
            f"endpoints {', '.join(self.context.endpoints)}"
            if self.context.endpoints
            else "endpoints (none: name one)",
        ]
        if self.context.nodes:
            parts.append(f"nodes {', '.join(self.context.nodes)}")
        parts.append(f"roles {', '.join(self.roles) or '(none)'}")
        parts.append(f"{self.key_type} client cert valid until {format_utc(self.not_after)}")
        if self.context.time_scale != 1:
            parts.append(f"emulated clock {self.context.time_scale:g}x")
        if self.expiry_warning:
            parts.append(f"WARNING: {self.expiry_warning}")
        return "; ".join(parts)


def format_utc(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
