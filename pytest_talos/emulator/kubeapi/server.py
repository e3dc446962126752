"""The emulated kube-apiserver of one control-plane node and the provider it reads from."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Sequence
from typing import Protocol

import h11

from pytest_talos.emulator.apid.listeners import cannot_listen
from pytest_talos.emulator.kubeapi.http import BadRequest, Connection, Request, status_object
from pytest_talos.emulator.kubeapi.objects import Object
from pytest_talos.emulator.kubeapi.routes import (
    NO_ROUTE,
    Matcher,
    Route,
    api_resources,
    gone_event,
    not_found,
    parse_resource_version,
    parse_route,
    parse_selector,
    parse_watch_seconds,
    truthy,
    watch_frames,
)
from pytest_talos.emulator.kubeapi.tracking import Clock, Collection, WatchEvent, object_key

LIMITS: tuple[str, ...] = (
    "Read-only: every method but GET is answered 405 `the emulated API server is read-only` "
    "(a Status object, reason MethodNotAllowed).",
    "Only `/version`, `/api`, `/api/v1`, `/apis`, Nodes (get, list, watch) and Pods (get, "
    "list, watch; per namespace or all) exist; anything else is a 404 Status.",
    "Label selectors support `k=v`, `k==v`, `k!=v`, `k` and `!k` (set-based ones are a 400); "
    "field selectors `path=value` and `path!=value` on dotted object paths.",
    "Lists are never paged (`limit`/`continue` are ignored) and always answered as JSON.",
    "`resourceVersion` is the server's own counter, bumped whenever an object the cluster "
    "state reports has changed; an object that stops matching a watch's selector is not "
    "reported as DELETED; watches remember the last 1000 changes per resource (older "
    "versions get a 410 Expired event) and end after at most 300 s.",
    "HTTP/1.1 only (ALPN `http/1.1`); a client certificate from the cluster's Kubernetes CA "
    "is required but carries no authorization: any such client may read everything.",
)

READ_ONLY_MESSAGE = "the emulated API server is read-only"
_IDLE_SECONDS = 60.0  # an idle keep-alive connection is closed after this
_RESYNC_SECONDS = 1.0  # a watch re-reads the provider this often even without notify()


class KubeProvider(Protocol):
    """Where the API server reads its objects from (the emulated cluster's state)."""

    def nodes(self) -> list[Object]:
        """Every Node, as full ``v1`` Node objects (see :func:`make_node_object`)."""
        ...

    def pods(self, namespace: str | None) -> list[Object]:
        """Pods of ``namespace``, or of every namespace when ``None``."""
        ...

    def version(self) -> Object:
        """The ``/version`` document (see :func:`version_info`)."""
        ...


class KubeAPIServer:
    """The emulated kube-apiserver of one control-plane node.

    Runs on the caller's asyncio loop; :meth:`notify` may be called from any thread.
    """

    def __init__(
        self, host: str, port: int, *, server_ssl: ssl.SSLContext, provider: KubeProvider
    ) -> None:
        self.host, self._requested_port = host, port
        self._ssl, self._provider = server_ssl, provider
        clock = Clock()
        self._collections = {
            "nodes": Collection(provider.nodes, clock),
            "pods": Collection(lambda: provider.pods(None), clock),
        }
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port (useful after asking for port 0)."""
        if self._server is None or not self._server.sockets:
            return self._requested_port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    async def start(self) -> None:
        """Bind and serve; returns once the socket listens."""
        self._loop = asyncio.get_running_loop()
        self._sync()
        try:
            self._server = await asyncio.start_server(
                self._handle,
                self.host,
                self._requested_port,
                ssl=self._ssl,
                ssl_handshake_timeout=10.0,
                reuse_address=True,
            )
        except OSError as exc:
            raise cannot_listen(exc, self.host, self._requested_port, "kube-apiserver") from None

    async def stop(self) -> None:
        """Stop listening and end every open connection (watches included)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def notify(self) -> None:
        """The provider's objects may have changed: re-read them and wake the watchers."""
        if self._loop is None or self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._sync()
        else:
            self._loop.call_soon_threadsafe(self._sync)

    def _sync(self) -> None:
        changed = [collection.sync() for collection in self._collections.values()]
        if any(changed):
            self._changed.set()
            self._changed = asyncio.Event()

    # ----------------------------------------------------------------- connection handling

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve_connection(Connection(reader, writer))
        except (TimeoutError, OSError, ValueError, h11.ProtocolError):
            pass  # a broken or idle client: just drop the connection
        except asyncio.CancelledError:
            writer.transport.abort()  # stopping: no TLS goodbye with an idle client
            raise
        finally:
            if task is not None:
                self._handlers.discard(task)
            if not writer.transport.is_closing():
                writer.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), 2.0)

    async def _serve_connection(self, connection: Connection) -> None:
        while True:
            try:
                request = await asyncio.wait_for(connection.next_request(), _IDLE_SECONDS)
            except BadRequest as exc:
                if connection.can_reply:
                    await connection.send_json(400, status_object(400, str(exc), "BadRequest"))
                return
            if request is None:
                return
            await self._respond(request, connection)
            if not connection.keep_alive:
                return

    async def _respond(self, request: Request, connection: Connection) -> None:
        if request.method != "GET":
            await connection.send_json(
                405, status_object(405, READ_ONLY_MESSAGE, "MethodNotAllowed")
            )
            return
        self._sync()
        route = parse_route(request.path)
        if route is not None and route.name is None and truthy(request.query.get("watch")):
            try:
                matcher = self._matcher(request, route)
                parse_resource_version(request.query.get("resourceVersion"))
            except BadRequest as exc:
                await connection.send_json(400, status_object(400, str(exc), "BadRequest"))
                return
            await self._watch(connection, route, matcher, request)
            return
        try:
            code, body = self._get(request, route)
        except BadRequest as exc:
            code, body = 400, status_object(400, str(exc), "BadRequest")
        await connection.send_json(code, body)

    def _get(self, request: Request, route: Route | None) -> tuple[int, Object]:
        path = request.path.rstrip("/") or "/"
        static = {
            "/version": lambda: self._provider.version(),
            "/api": self._api_versions,
            "/apis": lambda: {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
            "/api/v1": api_resources,
        }.get(path)
        if static is not None:
            return 200, static()
        if route is None:
            return NO_ROUTE
        if route.name is not None:
            return self._get_one(route)
        return 200, self._list(route, self._matcher(request, route))

    def _api_versions(self) -> Object:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
            ],
        }

    def _get_one(self, route: Route) -> tuple[int, Object]:
        assert route.name is not None
        obj = self._collections[route.collection].get((route.namespace or "", route.name))
        if obj is None:
            return not_found(route.collection, route.name)
        return 200, obj

    def _matcher(self, request: Request, route: Route) -> Matcher:
        base = parse_selector(
            request.query.get("labelSelector", ""), request.query.get("fieldSelector", "")
        )
        if route.namespace is None:
            return base
        namespace = route.namespace
        return lambda obj: object_key(obj)[0] == namespace and base(obj)

    def _list(self, route: Route, matcher: Matcher) -> Object:
        kind = "NodeList" if route.collection == "nodes" else "PodList"
        items = [
            {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
            for obj in self._collections[route.collection].objects()
            if matcher(obj)
        ]
        return {
            "kind": kind,
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self._clock.value)},
            "items": items,
        }

    # ----------------------------------------------------------------- watch

    async def _watch(
        self, connection: Connection, route: Route, matcher: Matcher, request: Request
    ) -> None:
        collection = self._collections[route.collection]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + parse_watch_seconds(request.query.get("timeoutSeconds"))
        since = parse_resource_version(request.query.get("resourceVersion"))
        connection.start_stream(200)
        if since is None:
            backlog: list[WatchEvent] | None = [
                WatchEvent(self._clock.value, "ADDED", obj) for obj in collection.objects()
            ]
        else:
            backlog = collection.events_after(since)
        cursor = self._clock.value
        if backlog is None:
            await self._send_events(connection, [gone_event(since or 0)])
        else:
            await self._send_events(connection, watch_frames(backlog, matcher))
            while (remaining := deadline - loop.time()) > 0:
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(remaining, _RESYNC_SECONDS))
                self._sync()
                fresh = collection.events_after(cursor)
                cursor = self._clock.value
                if fresh is None:
                    await self._send_events(connection, [gone_event(cursor)])
                    break
                await self._send_events(connection, watch_frames(fresh, matcher))
        await connection.end_stream()

    @staticmethod
    async def _send_events(connection: Connection, frames: Sequence[Object]) -> None:
        chunks = [json.dumps(frame).encode("utf-8") + b"\n" for frame in frames]
        await connection.send_chunks(chunks)
