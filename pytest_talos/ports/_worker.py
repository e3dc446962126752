"""A scan worker process (:mod:`pytest_talos.ports.workers`): one JSON request a line on
stdin, one JSON answer a line on stdout, until stdin closes."""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from pytest_talos.ports.scanner import scan_async
from pytest_talos.ports.workers import encode_failure, encode_result


def _answer(line: str) -> str:
    try:
        request = json.loads(line)
        result = asyncio.run(
            scan_async(
                request["host"],
                request["ports"],
                concurrency=int(request["concurrency"]),
                timeout=float(request["timeout"]),
                baseline_host=request["baseline_host"],
            )
        )
    except Exception as exc:  # every failure goes back to the caller, as its class and text
        return json.dumps(encode_failure(exc))
    return json.dumps(encode_result(result))


def main() -> None:
    # Ctrl-C reaches the whole process group: the process that started this worker decides
    # what a stop means, and closes stdin when it is done with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in sys.stdin:
        sys.stdout.write(_answer(line) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
