"""The ``talos-portscan`` / ``python -m pytest_talos.ports`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from pytest_talos.errors import ConfigError, ConnectError
from pytest_talos.ports.scanner import (
    DEFAULT_CONCURRENCY,
    DEFAULT_PORTS,
    DEFAULT_TIMEOUT,
    scan,
)

_PROG = "python -m pytest_talos.ports"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block; main() prints it and exits 2.
        raise _UsageError(message)


def _build_parser() -> _Parser:
    parser = _Parser(
        prog=_PROG,
        description="TCP connect scan of one host; prints the open ports, one per line.",
    )
    parser.add_argument("host", help="IPv4/IPv6 address (brackets allowed) or host name")
    parser.add_argument(
        "--ports", default=DEFAULT_PORTS, help="ports and ranges, e.g. 22,80,6443 or 1-1024"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per probe")
    parser.add_argument(
        "--concurrency", type=int, default=DEFAULT_CONCURRENCY, help="probes in flight at most"
    )
    parser.add_argument(
        "--baseline",
        metavar="HOST",
        help="an address where no node lives; ports open there too are not the host's",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        args = _build_parser().parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    try:
        result = scan(
            args.host,
            args.ports,
            timeout=args.timeout,
            concurrency=args.concurrency,
            baseline_host=args.baseline,
        )
    except (ConfigError, ConnectError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return 130
    for port in result.open_ports:
        print(port)
    print(result.summary(), file=sys.stderr)
    return 0


def _fail(message: str) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return 2
