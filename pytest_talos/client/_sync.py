"""TalosClient: the synchronous client. Calls run on a private event loop thread.

Every method of :class:`AsyncTalosClient` exists here with the same arguments, blocking
until the result is there; streaming methods return a :class:`StreamIterator` once the
server has confirmed the stream (so a subscription misses nothing that happens later).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from pytest_talos.client._async import AsyncTalosClient, talosconfig_arguments
from pytest_talos.client._gate import ChangeGate
from pytest_talos.client._streams import OpenedStream, StreamOpener, present_as
from pytest_talos.endpoint import Endpoint
from pytest_talos.errors import TransportError
from pytest_talos.transport import DEFAULT_STREAM_TIMEOUT, DEFAULT_TIMEOUT, Transport

__all__ = ["StreamIterator", "TalosClient"]

P = ParamSpec("P")
T = TypeVar("T")
_JOIN_TIMEOUT = 5.0  # seconds to wait for the loop thread when closing
_CANCEL_TIMEOUT = 2.0  # seconds for the calls still running at close to end


class _LoopThread:
    """An event loop running forever on a daemon thread; ``run`` blocks on a coroutine."""

    def __init__(self, endpoint: str = "") -> None:
        self.endpoint = endpoint  # named in the error of a call after close
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="pytest-talos-client", daemon=True)
        self._thread.start()
        self.stopped = False
        self._stopping = threading.Lock()  # no call is scheduled once stop() began

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("TalosClient was called from its own event loop thread")
        with self._stopping:
            if self.stopped:
                coro.close()
                raise TransportError(
                    "the Talos client is closed",
                    node=self.endpoint or None,
                    method=getattr(coro, "__qualname__", "").split(".")[-1] or None,
                )
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if not self.stopped:
                raise
            # closed (the run ended) while another thread's call ran: an error, not a hang
            raise TransportError(
                "the Talos client was closed while this call ran",
                node=self.endpoint or None,
                method=getattr(coro, "__qualname__", "").split(".")[-1] or None,
            ) from None
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt while waiting
            raise

    def stop(self) -> None:
        with self._stopping:
            if self.stopped:
                return
            self.stopped = True
        if threading.current_thread() is not self._thread:
            # Calls other threads still wait on (a fan-out's reads when a run is stopped)
            # are cancelled while the loop runs, so that those threads wake with an error;
            # a loop stopped under them would leave them waiting forever (and the
            # interpreter, which joins them, with them).
            pending = asyncio.run_coroutine_threadsafe(_cancel_pending(), self.loop)
            with contextlib.suppress(Exception):
                pending.result(_CANCEL_TIMEOUT + 1)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(_JOIN_TIMEOUT)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_pending() -> None:
    """Cancel every other task on this loop and give them up to _CANCEL_TIMEOUT s to end."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=_CANCEL_TIMEOUT)


async def _next(stream: OpenedStream[T]) -> T:
    return await stream.__anext__()


async def _aclose(stream: OpenedStream[Any]) -> None:
    await stream.aclose()


class StreamIterator(Generic[T], Iterator[T]):
    """A blocking iterator over a server stream that is already set up.

    ``close()`` (or leaving a ``with`` block, or dropping the iterator) ends the call:
    the server's stream is cancelled.
    """

    def __init__(self, runner: _LoopThread, stream: OpenedStream[T]) -> None:
        self._runner = runner
        self._stream = stream
        self._done = False

    def __iter__(self) -> StreamIterator[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        try:
            return self._runner.run(_next(self._stream))
        except StopAsyncIteration:
            self._done = True
            raise StopIteration from None
        except BaseException:
            self._done = True  # an async generator that raised is finished
            raise

    def close(self) -> None:
        if self._done:
            return
        self._done = True
        if not self._runner.stopped:
            self._runner.run(_aclose(self._stream))

    def __enter__(self) -> StreamIterator[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._done and not self._runner.stopped:
            # Not waiting here: __del__ may run on any thread, even the loop's own.
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                asyncio.run_coroutine_threadsafe(_aclose(self._stream), self._runner.loop)


def _blocking(
    method: Callable[Concatenate[AsyncTalosClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[TalosClient, P], T]:
    @functools.wraps(method)
    def call(self: TalosClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._runner.run(method(self._core, *args, **kwargs))

    return call


def _streaming(
    opener: StreamOpener[P, T],
) -> Callable[Concatenate[TalosClient, P], StreamIterator[T]]:
    """A blocking method that returns the stream only once it is set up (errors raise here)."""

    @functools.wraps(opener)
    def call(self: TalosClient, /, *args: P.args, **kwargs: P.kwargs) -> StreamIterator[T]:
        return StreamIterator(self._runner, self._runner.run(opener(self._core, *args, **kwargs)))

    present_as(call, opener, "TalosClient", "StreamIterator[{}]")
    return call


def _shutdown(runner: _LoopThread, core: AsyncTalosClient) -> None:
    if not runner.stopped:
        try:
            runner.run(core.close())
        finally:
            runner.stop()


class TalosClient:
    """A synchronous Talos API client; see :class:`AsyncTalosClient` for the targeting rules.

    Use it as a context manager or call :meth:`close` (idempotent). Clients made with
    :meth:`with_node` share the connection; closing them does nothing, closing the
    client they came from closes them all.
    """

    _core: AsyncTalosClient
    _runner: _LoopThread
    _owner: bool  # False for with_node's clients: the parent closes the connection

    def __init__(
        self,
        endpoint: str | Endpoint | None = None,
        ca_pem: bytes | None = None,
        crt_pem: bytes | None = None,
        key_pem: bytes | None = None,
        *,
        transport: Transport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        node: str | None = None,
        nodes: Sequence[str] | None = None,
        cluster: str | None = None,
        server_hostname: str | None = None,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
        roles: Sequence[str] | None = None,
        _parent: TalosClient | None = None,
    ) -> None:
        """As :class:`AsyncTalosClient`: credentials, or ``transport=``. Every way of making
        a client ends here (``_parent`` is :meth:`with_node`'s: it shares the parent's
        connection and loop thread, and closing the derived client does nothing)."""
        if _parent is not None and node is not None:
            self._core = _parent._core.with_node(node)
            self._runner = _parent._runner
            self._owner = False
            return
        self._core = AsyncTalosClient(
            endpoint,
            ca_pem,
            crt_pem,
            key_pem,
            transport=transport,
            timeout=timeout,
            node=node,
            nodes=nodes,
            cluster=cluster,
            server_hostname=server_hostname,
            stream_timeout=stream_timeout,
            roles=roles,
        )
        self._runner = _LoopThread(self._core.endpoint)
        self._owner = True
        self._finalizer = weakref.finalize(self, _shutdown, self._runner, self._core)

    @classmethod
    def from_transport(
        cls,
        transport: Transport,
        *,
        node: str | None = None,
        nodes: Sequence[str] | None = None,
        cluster: str | None = None,
        roles: Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
    ) -> TalosClient:
        """A client on a transport built elsewhere; the documented seam for unit tests::

            client = TalosClient.from_transport(FakeTransport(handler))

        (see :class:`~pytest_talos.transport.FakeTransport`). Closing the client closes it.
        """
        return cls(
            transport=transport,
            node=node,
            nodes=nodes,
            cluster=cluster,
            roles=roles,
            timeout=timeout,
            stream_timeout=stream_timeout,
        )

    @classmethod
    def from_talosconfig(
        cls,
        path: str | os.PathLike[str] | None = None,
        context: str | None = None,
        endpoint: str | None = None,
        node: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        env: Mapping[str, str] = os.environ,
    ) -> TalosClient:
        """Load a talosconfig the way talosctl does (path, $TALOSCONFIG, ~/.talos/config)."""
        return cls(**talosconfig_arguments(path, context, endpoint, node, timeout, env))

    def with_node(self, node: str) -> TalosClient:
        """A client for another node through the same endpoint and connection."""
        return type(self)(node=node, _parent=self)

    @property
    def async_client(self) -> AsyncTalosClient:
        """The asyncio core (its coroutines must run on this client's loop)."""
        return self._core

    @property
    def endpoint(self) -> str:
        return self._core.endpoint

    @property
    def node(self) -> str | None:
        return self._core.node

    @property
    def nodes(self) -> tuple[str, ...]:
        return self._core.nodes

    @property
    def roles(self) -> tuple[str, ...]:
        return self._core.roles

    @property
    def timeout(self) -> float:
        return self._core.timeout

    @property
    def change_gate(self) -> ChangeGate | None:
        """The gate every client sharing this connection checks before a changing call."""
        return self._core.change_gate

    @change_gate.setter
    def change_gate(self, gate: ChangeGate | None) -> None:
        self._core.change_gate = gate

    @property
    def peer_certificate(self) -> bytes | None:
        """DER of the endpoint's TLS certificate (apid's), once a call has connected."""
        return self._core.peer_certificate

    @property
    def closed(self) -> bool:
        return self._runner.stopped

    def __repr__(self) -> str:
        return repr(self._core).replace("AsyncTalosClient", type(self).__name__, 1)

    def close(self) -> None:
        """Close the connection and stop the loop thread; idempotent."""
        if self._owner:
            self._finalizer()

    def __enter__(self) -> TalosClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # machine API
    version = _blocking(AsyncTalosClient.version)
    hostname = _blocking(AsyncTalosClient.hostname)
    services = _blocking(AsyncTalosClient.services)
    service = _blocking(AsyncTalosClient.service)
    service_start = _blocking(AsyncTalosClient.service_start)
    service_stop = _blocking(AsyncTalosClient.service_stop)
    service_restart = _blocking(AsyncTalosClient.service_restart)
    apply_configuration = _blocking(AsyncTalosClient.apply_configuration)
    logs = _blocking(AsyncTalosClient.logs)
    logs_bytes = _blocking(AsyncTalosClient.logs_bytes)
    logs_containers = _blocking(AsyncTalosClient.logs_containers)
    events = _streaming(AsyncTalosClient._open_events)
    list = _blocking(AsyncTalosClient.list)
    read = _blocking(AsyncTalosClient.read)
    kubeconfig = _blocking(AsyncTalosClient.kubeconfig)
    netstat = _blocking(AsyncTalosClient.netstat)
    processes = _blocking(AsyncTalosClient.processes)
    memory = _blocking(AsyncTalosClient.memory)
    mounts = _blocking(AsyncTalosClient.mounts)
    reboot = _blocking(AsyncTalosClient.reboot)
    shutdown = _blocking(AsyncTalosClient.shutdown)
    reset = _blocking(AsyncTalosClient.reset)
    upgrade = _blocking(AsyncTalosClient.upgrade)
    rollback = _blocking(AsyncTalosClient.rollback)
    etcd_members = _blocking(AsyncTalosClient.etcd_members)
    generate_client_configuration = _blocking(AsyncTalosClient.generate_client_configuration)
    health_check = _streaming(AsyncTalosClient._open_health_check)
    fanout = _blocking(AsyncTalosClient.fanout)
    fanout_version = _blocking(AsyncTalosClient.fanout_version)
    # resources (COSI)
    resource_definitions = _blocking(AsyncTalosClient.resource_definitions)
    resolve_type = _blocking(AsyncTalosClient.resolve_type)
    get = _blocking(AsyncTalosClient.get)
    list_resources = _blocking(AsyncTalosClient.list_resources)
    list_each = _blocking(AsyncTalosClient.list_each)
    watch = _streaming(AsyncTalosClient._open_watch)
    machine_config = _blocking(AsyncTalosClient.machine_config)
