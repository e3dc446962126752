"""A fork server for the suite runs of the project's tests.

The tests run the conformance suite about 190 times, each in a new process
(:func:`tests.conformance.suite_runner.run_suite`). A fresh ``python -m pytest`` spends
0.6-1 s of CPU importing pytest, the Kubernetes client, cryptography, grpclib and protobuf
before it runs a check: on 2 cores, about a fifth of the tests' CPU time (measured: 185
runs, 467 CPU seconds).

This server imports those libraries, and the kit, once, then forks a child for each run. The
child is a new process, as with ``subprocess``:

- it takes the run's working directory, environment, ``sys.argv`` and output files;
- it runs ``pytest.main`` as ``python -m pytest`` does;
- it ends through the interpreter's normal exit, atexit handlers included;
- it reaches the emulator over real TCP and real mutual TLS.

pytest-talos itself is preloaded too (0.2 s of CPU a run). pytest rewrites the asserts of a
plugin distribution's modules as it imports them; imported earlier, they are not rewritten,
and pytest warns "Module already imported so cannot be rewritten". The kit's asserts are
internal invariants only (``x is not None``, ``isinstance``): a check's verdict and message
come from its own code, never from an assert of the kit, so nothing a run reports changes.
The forked run is given ``-W ignore::pytest.PytestAssertRewriteWarning`` for that warning
(its ``sys.argv`` stays the run's own).

Not preloaded, so each run imports it fresh as a new process would:

- the suite (``conformance/``), whose asserts are the checks' own and must be rewritten;
- the other pytest plugins of installed distributions (pytest-xdist, hypothesis).

:func:`usable` says when a plain subprocess is used instead:

- the platform has no ``fork`` (only Linux is used: macOS libraries are not fork-safe);
- ``PYTEST_TALOS_TESTS_FORK=0`` is set;
- the run's environment changes what the interpreter reads at start (a ``PYTHON*``
  variable, e.g. ``PYTHONHASHSEED``), which a forked child could not honour.

Protocol, one Unix-socket connection a run:

1. The client sends one JSON line: argv, cwd, env, and the stdout and stderr paths.
2. The child answers ``pid N``, and ``exit N CPU`` once ``pytest.main`` returns (its exit
   status and the CPU seconds it and its subprocesses used).
3. The connection ends when the child process ends.

The client kills the child (SIGKILL, by that pid) when the run's deadline passes. The server
ends when its stdin closes: the test process that started it has ended.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import pkgutil
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["PRELOAD", "EndedRun", "run_forked", "usable"]

# Heavy third-party modules a suite run imports (found with -X importtime and a dump of
# sys.modules after a run). None is a pytest plugin distribution's: see the module docstring.
PRELOAD = (
    "pytest",
    "_pytest.assertion.rewrite",
    "_pytest.capture",
    "_pytest.debugging",
    "_pytest.doctest",
    "_pytest.fixtures",
    "_pytest.junitxml",
    "_pytest.logging",
    "_pytest.main",
    "_pytest.python",
    "_pytest.runner",
    "_pytest.skipping",
    "_pytest.terminal",
    "_pytest.warnings",
    "cryptography.hazmat.primitives.asymmetric.ed25519",
    "cryptography.hazmat.primitives.serialization",
    "cryptography.x509",
    "dateutil.parser",
    "google.protobuf.descriptor_pool",
    "google.protobuf.json_format",
    "google.protobuf.message",
    "grpclib.client",
    "grpclib.events",
    "grpclib.server",
    "h2.connection",
    "kubernetes.client",
    "kubernetes.client.api.core_v1_api",  # loaded on first use of CoreV1Api: 0.6 s, 250 models
    "kubernetes.client.api_client",
    "kubernetes.client.configuration",
    "kubernetes.config",
    "kubernetes.stream",
    "kubernetes.watch",
    "multidict",
    "pydantic",
    "pygments.formatters.terminal",
    "pygments.lexers.python",
    "requests",
    "yaml",
)
# Given to every forked run ahead of its own arguments: see the module docstring.
_FORKED_RUN_ARGS = ("-W", "ignore::pytest.PytestAssertRewriteWarning")
OFF_SWITCH = "PYTEST_TALOS_TESTS_FORK"
START_TIMEOUT = 60.0  # the server's imports, on a loaded machine
_KILLED_GRACE = 10.0  # after SIGKILL, until the child's connection ends


@dataclass(frozen=True)
class EndedRun:
    """How a suite run ended, forked or (tests/conformance/suite_runner.py) a subprocess."""

    returncode: int  # -9 when the deadline passed and the child was killed
    stdout: str
    stderr: str
    timed_out: bool
    cpu_seconds: float | None = None  # the child's (and its subprocesses'), as it reported


def usable(env: Mapping[str, str]) -> bool:
    """Whether a run with this environment may be forked from the server (else: subprocess)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    if os.environ.get(OFF_SWITCH) == "0" or env.get(OFF_SWITCH) == "0":
        return False
    return _interpreter_settings(env) == _interpreter_settings(_server_env())


def _interpreter_settings(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def _server_env() -> dict[str, str]:
    from tests.conformance.suite_runner import subprocess_env

    return subprocess_env(None)


# --- the client side (in the test process) ------------------------------------------------


class _Server:
    """One server a test process, started on first use, stopped when the process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        atexit.register(self.stop)

    def socket_path(self) -> Path:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            assert self._dir is not None
            return self._dir / "socket"

    def _start(self) -> None:
        if self._dir is not None:  # a server that died: its directory goes with it
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = Path(tempfile.mkdtemp(prefix="pytest-talos-fork-"))  # 0700
        path = self._dir / "socket"
        repo = Path(__file__).resolve().parents[2]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.conformance.forkserver", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=repo,
            env=_server_env(),
        )
        assert self._proc.stdout is not None
        ready = _read_line(self._proc.stdout.fileno(), START_TIMEOUT)
        if ready != "ready":
            self._proc.kill()
            raise RuntimeError(f"the suite-run fork server did not start (said {ready!r})")

    def stop(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                assert proc.stdin is not None
                proc.stdin.close()  # the server's signal to end
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


_SERVER = _Server()


def _read_line(fd: int, timeout: float) -> str:
    """One line from a pipe, within ``timeout`` seconds ("" at end of file or timeout)."""
    deadline = time.monotonic() + timeout
    data = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return ""
            chunk = os.read(fd, 1)
            if not chunk:
                return ""
            data += chunk
    return data.decode().strip()


def run_forked(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
) -> EndedRun:
    """``python -m pytest <argv>`` in a child forked from the server, within ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="pytest-talos-run-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        request = {"argv": list(argv), "cwd": str(cwd), "env": dict(env)}
        request |= {"stdout": str(out), "stderr": str(err)}
        code, cpu, timed_out = _request(request, timeout)
        return EndedRun(code, _text(out), _text(err), timed_out, cpu)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _request(request: dict[str, Any], timeout: float) -> tuple[int, float | None, bool]:
    """(exit status, the child's CPU seconds if it said, whether it was killed at the deadline)"""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(START_TIMEOUT)
        conn.connect(str(_SERVER.socket_path()))
        conn.sendall(json.dumps(request).encode() + b"\n")
        lines = _Lines(conn)
        pid_line = lines.next(deadline)
        if not pid_line.startswith("pid "):
            raise RuntimeError(f"the suite-run fork server did not fork (said {pid_line!r})")
        pid = int(pid_line.split()[1])
        try:
            status = lines.next(deadline)
            if status.startswith("exit ") and lines.until_closed(deadline):
                _, code, cpu = status.split()
                return int(code), float(cpu), False  # after its atexit handlers, as a process
            if status == "" and time.monotonic() < deadline:
                return -1, None, False  # ended without reporting: killed by a signal, or crashed
        except BaseException:
            _kill(pid, lines)  # as subprocess.run does when interrupted (Ctrl-C, a test timeout)
            raise
        _kill(pid, lines)  # the connection is open, so the child still runs: past its deadline
        return -signal.SIGKILL, None, True


def _kill(pid: int, lines: _Lines) -> None:
    """SIGKILL a child whose connection is still open (so the pid is still the child's)."""
    lines.until_closed(time.monotonic() + 0.01)  # an end already there: nothing to kill
    if lines.closed:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    lines.until_closed(time.monotonic() + _KILLED_GRACE)


class _Lines:
    """Lines from the child's connection, each awaited until a deadline ("" on EOF or
    once the deadline passed)."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._buffer = b""
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def next(self, deadline: float) -> str:
        while b"\n" not in self._buffer:
            if not self._receive(deadline):
                return ""
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def until_closed(self, deadline: float) -> bool:
        """Wait for the end of the connection: whether it ended before the deadline."""
        while self._receive(deadline):
            pass
        return self._closed

    def _receive(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if self._closed or left <= 0:
            return False
        self._conn.settimeout(left)
        try:
            chunk = self._conn.recv(4096)
        except TimeoutError:
            return False
        if not chunk:
            self._closed = True
            return False
        self._buffer += chunk
        return True


# --- the server side (python -m tests.conformance.forkserver SOCKET) ----------------------


def serve(path: str) -> None:
    """Preload, then fork a child for each connection until stdin closes. A child never
    returns from here: it leaves by SystemExit, so nothing below runs in it."""
    gc.disable()  # no collection while preloading: what is imported stays
    for name in (*PRELOAD, *_kit_modules()):
        importlib.import_module(name)
    # The preloaded objects live as long as the server: out of the collector's sight, so a
    # child's collections neither walk them nor touch (and so copy) their pages.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the runs, not for this
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    while True:
        ready = {key.fd for key, _ in sel.select()}
        if sys.stdin.fileno() in ready and not os.read(sys.stdin.fileno(), 1):
            break  # the test process has ended
        if listener.fileno() not in ready:
            continue
        conn, _ = listener.accept()
        request = _receive_request(conn)
        if request is None:
            conn.close()
            continue
        if os.fork() == 0:
            sel.close()
            listener.close()
            _child(conn, request)
        conn.close()
    listener.close()
    os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))  # the client's private directory, if it has not yet


def _kit_modules() -> list[str]:
    """Every module of pytest-talos but the ``__main__`` ones (command lines)."""
    import pytest_talos

    found = pkgutil.walk_packages(pytest_talos.__path__, "pytest_talos.")
    return [module.name for module in found if not module.name.endswith(".__main__")]


def _receive_request(conn: socket.socket) -> dict[str, Any] | None:
    conn.settimeout(10)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    conn.settimeout(None)
    request: dict[str, Any] = json.loads(data)
    return request


def _child(conn: socket.socket, request: dict[str, Any]) -> NoReturn:
    """Become the run: ``python -m pytest`` in the request's directory and environment."""
    gc.enable()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the run waits for its own subprocesses
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has
    _redirect(0, os.devnull, os.O_RDONLY)
    _redirect(1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import pytest

    # As `python -m pytest`: the working directory first on sys.path, argv[0] pytest's.
    sys.path[0] = request["cwd"]
    sys.argv = [str(Path(pytest.__file__).with_name("__main__.py")), *request["argv"]]
    conn.sendall(f"pid {os.getpid()}\n".encode())
    try:
        code = int(pytest.main([*_FORKED_RUN_ARGS, *request["argv"]]))
    except BaseException:  # as the interpreter would: a traceback, exit status 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError):
        conn.sendall(f"exit {code} {_cpu_seconds():.3f}\n".encode())
    # The connection stays open until the process has ended: a bare duplicate of its fd is
    # closed by the kernel at the exit itself, after the atexit handlers (the socket object
    # may be freed before them, as the SystemExit unwinds this frame).
    os.dup(conn.fileno())
    raise SystemExit(code)


def _cpu_seconds() -> float:
    """This child's CPU time and its subprocesses' (a forked child's count starts at 0)."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _redirect(fd: int, path: str, flags: int) -> None:
    target = os.open(path, flags, 0o600)
    os.dup2(target, fd)
    os.close(target)


if __name__ == "__main__":
    serve(sys.argv[1])
