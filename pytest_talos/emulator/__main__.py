"""``python -m pytest_talos.emulator``: run an emulated Talos cluster in the foreground.

Writes the talosconfig (and with ``--write-desired`` the desired state the nodes were made
from), prints ``<hostname> <role> <address>:50000`` per node once every
node serves, and stops cleanly on SIGINT/SIGTERM. ``--list-faults`` lists the fault profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence

from pytest_talos.emulator.apid.latency import parse_latency
from pytest_talos.emulator.errors import EmulatorError
from pytest_talos.emulator.faults import describe_faults, fault_names
from pytest_talos.emulator.faults.variants import describe_variants, variant_names
from pytest_talos.errors import TalosError

__all__ = ["main"]


def _prog() -> str:
    """``talos-emulator`` when run as the console script, else the ``-m`` form."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return (
        "talos-emulator" if name.startswith("talos-emulator") else "python -m pytest_talos.emulator"
    )


def _latency(text: str) -> float:
    try:
        return parse_latency(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(),
        usage="%(prog)s --talosconfig PATH [options]",
        description="Run an emulated Talos cluster (v1.12, v1.13 or v1.14) on loopback "
        "addresses. "
        "--talosconfig PATH is required (except with --list-faults or --list-variants).",
    )
    parser.add_argument("--controlplanes", type=int, default=1, metavar="N")
    parser.add_argument("--workers", type=int, default=1, metavar="M")
    parser.add_argument(
        "--talosconfig",
        metavar="PATH",
        help="required: where to write the admin talosconfig of the emulated cluster",
    )
    parser.add_argument(
        "--write-desired",
        metavar="DIR",
        help="also write the desired state the nodes were generated from (base configs, "
        "patches, talos-desired.yaml) into DIR, for --talos-desired",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME",
        choices=fault_names(),
        help="activate a fault profile (repeatable; see --list-faults)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="run timers (try window, crash loop) X times faster",
    )
    parser.add_argument(
        "--latency",
        type=_latency,
        default=0.0,
        metavar="RTT",
        help="add this round-trip time per network hop, as to a remote site (e.g. 20ms; "
        "default 0): each call to a node, each forwarded call, each new apid connection",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME",
        choices=variant_names(),
        help="run as a healthy variant (repeatable; see --list-variants)",
    )
    parser.add_argument(
        "--domain", default="", metavar="NAME", help="give every node this DNS domain"
    )
    parser.add_argument("--platform", choices=("container", "metal"), default="container")
    parser.add_argument(
        "--talos-version",
        default="v1.13.9",
        metavar="VERSION",
        help="the Talos release the nodes run: v1.12.x, v1.13.x or v1.14.x (or a full tag "
        "of one, e.g. v1.12.11); default v1.13.9",
    )
    parser.add_argument(
        "--subnet", metavar="CIDR", help="the /24 for node addresses (default: a free 127.A.B.0/24)"
    )
    parser.add_argument(
        "--list-faults", action="store_true", help="print the fault profiles and exit"
    )
    parser.add_argument(
        "--list-variants", action="store_true", help="print the healthy variants and exit"
    )
    return parser


async def _serve(args: argparse.Namespace) -> None:
    from pytest_talos.emulator.cluster.emulated import EmulatedCluster

    cluster = EmulatedCluster(
        controlplanes=args.controlplanes,
        workers=args.workers,
        faults=args.fault,
        variants=args.variant,
        domain=args.domain,
        time_scale=args.time_scale,
        latency=args.latency,
        platform=args.platform,
        subnet=args.subnet,
        talosconfig_path=args.talosconfig,
        talos_version=args.talos_version,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await cluster.start()
    try:
        if args.write_desired:
            print(f"desired state: {cluster.write_desired(args.write_desired)}", flush=True)
        for node in cluster.nodes:
            print(f"{node.hostname} {node.role} {node.address}:50000", flush=True)
        await stop.wait()
    finally:
        await cluster.stop()
    # benchmarks/fleet_cpu.py divides the emulator's CPU by this
    print(f"served {cluster.call_log_store.total} calls", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list_faults:
        print(describe_faults())
        return 0
    if args.list_variants:
        print(describe_variants())
        return 0
    if not args.talosconfig:
        print(
            "error: --talosconfig PATH is required (where the admin talosconfig goes)",
            file=sys.stderr,
        )
        return 2
    try:
        asyncio.run(_serve(args))
    except (TalosError, EmulatorError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
