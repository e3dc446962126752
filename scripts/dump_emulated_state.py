"""Dump what every emulated node holds, for every fault, variant and release, on a virtual clock.

A restructuring of the emulator (modules moved into folders, seams renamed) must not change
what a node is. This script builds each case through the public face only
(``pytest_talos.emulator.EmulatedCluster``), replaces the cluster's clock with a virtual one
before it starts, runs the node's own timers for a fixed span of emulated time in their
scheduled order, and prints every node's resources, events, processes, mounts, listeners and
root filesystem. Key material, random ids and the loopback subnet are masked, so two runs of
the same tree print the same bytes::

    python scripts/dump_emulated_state.py > before.txt
    # ... move modules ...
    python scripts/dump_emulated_state.py > after.txt && cmp before.txt after.txt

``--only NAME`` dumps the cases whose label contains NAME; ``--digest`` prints one SHA-256 per
case instead of the dump.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Iterator
from typing import Any

from pytest_talos.emulator import EmulatedCluster, fault_names
from pytest_talos.emulator.clock import ManualClock
from pytest_talos.releases import RELEASES

SUBNET = "127.77.0.0/24"
EMULATED_SPAN = 240.0  # seconds of emulated time run after the boot starts
EPOCH = 1_780_000_000.0  # the virtual clock's Unix time at creation

_MASKS = (
    (re.compile(r"-----BEGIN [A-Z ]+-----.*?-----END [A-Z ]+-----", re.S), "<pem>"),
    (re.compile(r"\b[A-Za-z0-9+/]{40,}={0,2}"), "<base64>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b[0-9a-v]{20}\b"), "<xid>"),
    (re.compile(r"\b[0-9a-f]{16,}\b"), "<hex>"),
    (re.compile(r"\b[0-9A-Za-z]{43}\b"), "<node-id>"),
    (re.compile(r"0x[0-9a-f]{6,}"), "<address>"),
)


def _mask(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _node_lines(state: Any) -> Iterator[str]:
    yield f"node {state.hostname} stage={state.stage} powered={state.powered}"
    yield f"  version {state.talos_version}"
    for resource in sorted(state.store, key=lambda r: (r.namespace, r.type, r.id)):
        yield f"  resource {resource.namespace}/{resource.type}/{resource.id}"
        for line in resource.yaml_spec.splitlines():
            yield f"    {line}"
    for event in state.events.snapshot():
        yield f"  event {type(event.payload).__name__} {event.payload!r}"
    for process in state.processes():
        yield f"  process {process!r}"
    for mount in state.mounts():
        yield f"  mount {mount!r}"
    for listener in state.listeners():
        yield f"  listener {listener!r}"
    for path, entry in sorted(state.rootfs.items()):
        yield f"  file {path} {entry!r}"
    yield f"  kube {state.kube_node()!r}"


def dump_case(label: str, **kwargs: Any) -> str:
    """Every node of one emulated cluster after EMULATED_SPAN of virtual time."""
    cluster = EmulatedCluster(subnet=SUBNET, **kwargs)
    clock = ManualClock(cluster.clock.time_scale, start=EPOCH)
    cluster.clock = clock
    lines = [f"== {label}"]
    with cluster:

        def collect() -> None:
            clock.advance(EMULATED_SPAN)
            for node in cluster.emulated_nodes:
                lines.extend(_node_lines(node.state))

        cluster.on_loop(collect)
    return _mask("\n".join(lines)) + "\n"


def cases() -> Iterator[tuple[str, dict[str, Any]]]:
    from pytest_talos.emulator.faults.variants import Variant

    yield "healthy", {}
    for release in RELEASES:
        yield f"release {release}", {"talos_version": release}
        yield f"release {release} metal", {"talos_version": release, "platform": "metal"}
    for variant in Variant:
        yield f"variant {variant.value}", {"variants": [variant.value]}
    for name in fault_names():
        yield f"fault {name} container", {"faults": [name]}
        yield f"fault {name} metal", {"faults": [name], "platform": "metal"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="dump only the cases whose label has this")
    parser.add_argument("--digest", action="store_true", help="one SHA-256 per case")
    args = parser.parse_args(argv)
    for label, kwargs in cases():
        if args.only not in label:
            continue
        try:
            text = dump_case(label, **kwargs)
        except Exception as exc:  # a case that cannot build is part of the dump, not a crash
            text = f"== {label}\n  cannot build: {type(exc).__name__}: {_mask(str(exc))}\n"
        if args.digest:
            sys.stdout.write(f"{hashlib.sha256(text.encode()).hexdigest()}  {label}\n")
        else:
            sys.stdout.write(text)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
