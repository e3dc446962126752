"""A talosconfig file in the talosctl format, for the emulated cluster's clients."""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from pathlib import Path

import yaml

from pytest_talos.errors import ConfigError
from pytest_talos.pki.authority import CertAndKey

__all__ = ["SCAN_BASELINE_KEY", "TIME_SCALE_KEY", "render_talosconfig", "write_talosconfig"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# The emulated clock's rate, advertised to whoever connects with the file (the client side
# reads it as pytest_talos.talosconfig.TIME_SCALE_KEY). talosctl ignores keys it does not
# know: its decoder does not set KnownFields (pkg/machinery/client/config/config.go ReadFrom).
TIME_SCALE_KEY = "x-pytest-talos-time-scale"
# An address of the emulated cluster's /24 where no node lives: scanning it shows which ports
# the host itself listens on for every address (wildcard listeners), which the client side
# (pytest_talos.talosconfig.SCAN_BASELINE_KEY) then does not count as the node's. talosctl
# ignores it like the key above.
SCAN_BASELINE_KEY = "x-pytest-talos-scan-baseline"


def render_talosconfig(
    *,
    context: str,
    endpoints: Sequence[str],
    nodes: Sequence[str] = (),
    ca_pem: bytes,
    client: CertAndKey,
    cluster: str | None = None,
    time_scale: float = 1.0,
    scan_baseline: str | None = None,
) -> bytes:
    """The talosconfig YAML (talosctl layout; ca/crt/key are base64 of the PEM); a clock
    faster than real time is advertised under ``TIME_SCALE_KEY``."""
    entry: dict[str, object] = {"endpoints": list(endpoints)}
    if nodes:
        entry["nodes"] = list(nodes)
    if cluster:
        entry["cluster"] = cluster
    entry.update(ca=_b64(ca_pem), crt=_b64(client.cert_pem), key=_b64(client.key_pem_talos))
    if time_scale != 1:
        entry[TIME_SCALE_KEY] = float(time_scale)
    if scan_baseline:
        entry[SCAN_BASELINE_KEY] = scan_baseline
    document = {"context": context, "contexts": {context: entry}}
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=1 << 16)
    return text.encode("utf-8")


def write_talosconfig(
    path: str | os.PathLike[str] | None,
    *,
    context: str,
    endpoints: Sequence[str],
    nodes: Sequence[str] = (),
    ca_pem: bytes,
    client: CertAndKey,
    cluster: str | None = None,
    time_scale: float = 1.0,
    scan_baseline: str | None = None,
) -> bytes:
    """Render a talosconfig and, when ``path`` is given, write it with mode 0600.

    Returns the YAML bytes either way (``path=None`` only renders).
    """
    data = render_talosconfig(
        context=context,
        endpoints=endpoints,
        nodes=nodes,
        ca_pem=ca_pem,
        client=client,
        cluster=cluster,
        time_scale=time_scale,
        scan_baseline=scan_baseline,
    )
    if path is not None:
        _write_private_file(Path(path), data)
    return data


def _write_private_file(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Create with 0600 so the key is never readable by others, not even briefly.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o600)  # the file may have existed with wider permissions
            handle.write(data)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the talosconfig ({exc.strerror}); choose a writable path",
            path=str(path),
        ) from None
