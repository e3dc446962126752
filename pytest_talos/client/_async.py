"""AsyncTalosClient: the typed Talos API client on asyncio (the sync client wraps it)."""

from __future__ import annotations

import builtins
import datetime as dt
import functools
import inspect
import os
import warnings
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from google.protobuf.message import Message

from pytest_talos import models
from pytest_talos._proto.cluster import cluster_pb2
from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos._proto.v1alpha1 import state_pb2
from pytest_talos.client import _convert as convert
from pytest_talos.client import _resources as res
from pytest_talos.client import _rpcs as rpcs
from pytest_talos.client._calls import (
    FANOUT,
    LIST_TYPES,
    REBOOT_MODES,
    WIPE_MODES,
    Converter,
    FanoutCall,
    choice,
    netstat_request,
    untar_kubeconfig,
)
from pytest_talos.client._gate import ChangeGate
from pytest_talos.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NodeError,
    NotFound,
    TalosError,
    TransportError,
)
from pytest_talos.talosconfig import load_talosconfig
from pytest_talos.transport import (
    DEFAULT_STREAM_TIMEOUT,
    DEFAULT_TIMEOUT,
    NO_TARGET,
    Rpc,
    Target,
    Transport,
    build_ssl_context,
    certificate_roles,
    node_error,
)

__all__ = [
    "DEFAULT_WATCH_TIMEOUT",
    "AsyncTalosClient",
    "FanoutCall",
    "OpenedStream",
    "TalosConfigWarning",
]

DEFAULT_WATCH_TIMEOUT = 60.0  # seconds a watch / event stream may stay open by default

T = TypeVar("T")
P = ParamSpec("P")


class OpenedStream(AsyncIterator[T]):
    """A server stream the server has confirmed by sending its first message.

    Talos answers a subscription with a message first (Events: the empty hello event;
    COSI Watch: an empty reply; HealthCheck: its first progress line), so once that has
    arrived nothing that happens later can be missed. Whatever the first message carried
    is handed out first; the hello and the empty reply carry nothing.
    """

    def __init__(
        self, messages: AsyncGenerator[Any, None], convert: Callable[[Any], Iterable[T]]
    ) -> None:
        self._messages = messages
        self._convert = convert
        self._ready: deque[T] = deque()
        self._deferred: TalosError | None = None

    async def receive_first(self) -> None:
        """Send the request and wait for the server's first message (or the stream's end)."""
        try:
            first = await anext(self._messages)
        except StopAsyncIteration:
            return
        self._ready.extend(self._convert(first))

    def fail_later(self, error: TalosError) -> None:
        """Raise ``error`` on the next ``__anext__`` instead of now."""
        self._deferred = error

    async def __anext__(self) -> T:
        while not self._ready:
            if self._deferred is not None:
                error, self._deferred = self._deferred, None
                raise error
            self._ready.extend(self._convert(await anext(self._messages)))
        return self._ready.popleft()

    async def aclose(self) -> None:
        """End the call: the server's stream is reset (cancelled); idempotent."""
        self._deferred = None
        self._ready.clear()
        await self._messages.aclose()


# An ``_open_<name>`` method: sets a stream up and returns it once the server confirmed it.
StreamOpener = Callable[Concatenate["AsyncTalosClient", P], Coroutine[Any, Any, OpenedStream[T]]]


def present_as(
    wrapper: Callable[..., Any], opener: Callable[..., Any], owner: str, returns: str
) -> None:
    """Name ``wrapper`` after the public method an opener stands behind (``_open_events``
    -> ``owner.events``); its signature is the opener's, returning ``returns``."""
    wrapper.__name__ = opener.__name__.removeprefix("_open_")
    wrapper.__qualname__ = f"{owner}.{wrapper.__name__}"
    signature = inspect.signature(opener)
    item = str(signature.return_annotation).removeprefix("OpenedStream[").removesuffix("]")
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        return_annotation=returns.format(item)
    )


def _iterated(
    opener: StreamOpener[P, T],
) -> Callable[Concatenate[AsyncTalosClient, P], AsyncGenerator[T, None]]:
    """The async-generator method over an opener: the stream opens at the first ``anext``.

    (The sync client calls the opener itself, so its streams are open when the call returns.)
    """

    @functools.wraps(opener)
    async def iterate(
        self: AsyncTalosClient, /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncGenerator[T, None]:
        stream = await opener(self, *args, **kwargs)
        try:
            async for item in stream:
                yield item
        finally:
            await stream.aclose()

    present_as(iterate, opener, "AsyncTalosClient", "AsyncGenerator[{}, None]")
    return iterate


class TalosConfigWarning(UserWarning):
    """The talosconfig works but needs attention soon (e.g. the client cert expires)."""


@dataclass
class _Shared:
    """What every client derived with ``with_node`` shares: connection and type cache."""

    transport: Transport
    definitions: dict[str | None, list[models.ResourceDefinitionSpec]] = field(default_factory=dict)
    gate: ChangeGate | None = None  # None: every call is sent (see ChangeGate)


class AsyncTalosClient:
    """A Talos API client for asyncio code; every method returns models, never protobuf.

    Targets: ``node`` sends every call to that node through the endpoint (one-to-one);
    ``nodes`` is the default list for :meth:`fanout`; single-node calls with several
    ``nodes`` need :meth:`with_node`. Without either, calls go to the endpoint's own node.
    """

    def __init__(
        self,
        endpoint: str,
        ca_pem: bytes,
        crt_pem: bytes,
        key_pem: bytes,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        node: str | None = None,
        nodes: Sequence[str] | None = None,
        cluster: str | None = None,
        server_hostname: str | None = None,
        stream_timeout: float = DEFAULT_STREAM_TIMEOUT,
        roles: Sequence[str] | None = None,
    ) -> None:
        transport = Transport(
            endpoint,
            build_ssl_context(ca_pem, crt_pem, key_pem),
            server_hostname=server_hostname,
            cluster=cluster,
            client_roles=tuple(roles) if roles is not None else certificate_roles(crt_pem),
            timeout=timeout,
            stream_timeout=stream_timeout,
        )
        self._setup(_Shared(transport), node, tuple(nodes or ()))

    def _setup(self, shared: _Shared, node: str | None, nodes: tuple[str, ...]) -> None:
        self._shared = shared
        self._transport = shared.transport
        self._node = node
        self._nodes = nodes
        # The target of single-node calls, worked out once (None: ambiguous, see _target).
        self._single: Target | None = None
        if node is not None:
            self._single = Target(node=node)
        elif len(nodes) == 1:
            self._single = Target(node=nodes[0])
        elif not nodes:
            self._single = NO_TARGET

    @classmethod
    def from_transport(
        cls,
        transport: Transport,
        *,
        node: str | None = None,
        nodes: Sequence[str] | None = None,
    ) -> AsyncTalosClient:
        """A client on a transport built elsewhere, e.g. a
        :class:`~pytest_talos.transport.FakeTransport` in a unit test (no socket)."""
        client = object.__new__(cls)
        client._setup(_Shared(transport), node, tuple(nodes or ()))
        return client

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
    ) -> AsyncTalosClient:
        """Load a talosconfig as talosctl does; use its first endpoint unless one is given."""
        config = load_talosconfig(path, context=context, env=env)
        if config.expiry_warning:
            warnings.warn(config.expiry_warning, TalosConfigWarning, stacklevel=2)
        ctx = config.context
        return cls(
            endpoint or ctx.endpoints[0],
            ctx.ca_pem,
            ctx.crt_pem,
            ctx.key_pem,
            timeout=timeout,
            node=node,
            nodes=None if node else ctx.nodes,
            cluster=ctx.cluster,
            roles=config.roles,
        )

    def with_node(self, node: str) -> AsyncTalosClient:
        """A client for another node through the same endpoint and connection."""
        derived = object.__new__(type(self))
        derived._setup(self._shared, node, ())
        return derived

    def __repr__(self) -> str:
        target = self._node or ",".join(self._nodes) or "(endpoint)"
        return f"{type(self).__name__}(endpoint={self.endpoint!r}, node={target!r})"

    @property
    def endpoint(self) -> str:
        return self._transport.endpoint

    @property
    def node(self) -> str | None:
        return self._node

    @property
    def nodes(self) -> tuple[str, ...]:
        return self._nodes

    @property
    def roles(self) -> tuple[str, ...]:
        return self._transport.client_roles

    @property
    def timeout(self) -> float:
        return self._transport.timeout

    @property
    def change_gate(self) -> ChangeGate | None:
        """The gate every client sharing this connection checks before a changing call."""
        return self._shared.gate

    @change_gate.setter
    def change_gate(self, gate: ChangeGate | None) -> None:
        self._shared.gate = gate

    @property
    def peer_certificate(self) -> bytes | None:
        """DER of the endpoint's TLS certificate (apid's), once a call has connected."""
        return self._transport.peer_certificate

    async def close(self) -> None:
        """Close the shared connection (also for clients made with ``with_node``)."""
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncTalosClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ plumbing

    def _target(self, method: str) -> Target:
        if self._single is not None:
            return self._single
        raise InvalidArgument(
            f"this client targets {len(self._nodes)} nodes ({', '.join(self._nodes)}) and "
            "this call reaches one node: use client.with_node(<node>), or fanout() for "
            "calls that support several nodes",
            method=method,
        )

    def _fanout_target(self, nodes: Sequence[str] | None) -> Target:
        chosen = tuple(nodes) if nodes else self._nodes or ((self._node,) if self._node else ())
        if not chosen:
            raise InvalidArgument(
                "fanout needs nodes: pass nodes=[...] or create the client with nodes"
            )
        return Target(nodes=chosen)

    def _gate_check(self, rpc: Rpc[Any, Any], request: Message, target: Target) -> None:
        gate = self._shared.gate
        if gate is not None:
            gate.check(rpc.path, request, target.label or self._transport.host)

    def _check(self, message: Any, rpc: Rpc[Any, Any], target: Target) -> None:
        """Raise the NodeError a reply element carries in its metadata, if any."""
        if message.HasField("metadata"):
            info = self._transport.call_info(rpc, target, self._transport.timeout)
            error = node_error(message.metadata, info, fallback_node=target.node)
            if error is not None:
                raise error

    async def _unary(
        self,
        rpc: Rpc[Any, Any],
        request: Message,
        converter: Converter[T],
        *,
        timeout: float | None = None,
    ) -> T:
        """One node, one reply element, converted."""
        target = self._target(rpc.path)
        self._gate_check(rpc, request, target)
        reply = await self._transport.unary(rpc, request, target, timeout=timeout)
        if not reply.messages:
            info = self._transport.call_info(rpc, target, self._transport.timeout)
            raise TransportError("the reply holds no message", node=info.node, method=rpc.path)
        message = reply.messages[0]
        self._check(message, rpc, target)
        return converter(message, target.node)

    async def _stream(
        self,
        rpc: Rpc[Any, Any],
        request: Message,
        *,
        target: Target | None = None,
        idle_timeout: float | None = None,
        total_timeout: float | None = None,
        enveloped: bool = True,
    ) -> AsyncGenerator[Any, None]:
        chosen = target if target is not None else self._target(rpc.path)
        self._gate_check(rpc, request, chosen)
        stream = self._transport.stream(
            rpc,
            request,
            chosen,
            idle_timeout=idle_timeout,
            total_timeout=total_timeout,
        )
        try:
            async for message in stream:
                if enveloped:
                    self._check(message, rpc, chosen)
                yield message
        finally:
            await stream.aclose()

    async def _open(
        self,
        rpc: Rpc[Any, Any],
        request: Message,
        target: Target,
        convert_each: Callable[[Any], Iterable[T]],
        *,
        total_timeout: float,
        enveloped: bool = True,
    ) -> OpenedStream[T]:
        """Start a server stream and wait, within its deadline, for the server's first message.

        Errors of the set-up (refused, unauthorized, connection failures) are raised here.
        Only a deadline that passes on a working connection while the server stays silent
        is left to the first ``anext``: that is how such a stream would have ended anyway.
        """
        messages = self._stream(
            rpc, request, target=target, total_timeout=total_timeout, enveloped=enveloped
        )
        stream = OpenedStream(messages, convert_each)
        try:
            await stream.receive_first()
        except DeadlineExceeded as exc:
            if self._transport.call_info(rpc, target, total_timeout).phase != "ready":
                raise  # the connection itself was not made in time
            stream.fail_later(exc)
        return stream

    async def _data(self, rpc: Rpc[Any, Any], request: Message) -> bytes:
        """Concatenate a finite common.Data stream (idle gap bounded by the unary timeout)."""
        chunks = [
            message.bytes async for message in self._stream(rpc, request, idle_timeout=self.timeout)
        ]
        return b"".join(chunks)

    # ------------------------------------------------------------------ machine API

    async def version(self) -> models.Version:
        return await self._unary(rpcs.VERSION, rpcs.Empty(), convert.version)

    async def hostname(self) -> str:
        return await self._unary(rpcs.HOSTNAME, rpcs.Empty(), convert.hostname)

    async def services(self) -> builtins.list[models.ServiceInfo]:
        return await self._unary(rpcs.SERVICE_LIST, rpcs.Empty(), convert.services)

    async def service(self, service_id: str) -> models.ServiceInfo:
        """One service from ServiceList; NotFound if the node does not run it."""
        for info in await self.services():
            if info.id == service_id:
                return info
        raise NotFound(
            f'service "{service_id}" not defined', node=self._node, method=rpcs.SERVICE_LIST.path
        )

    async def service_start(self, service_id: str) -> str:
        request = m.ServiceStartRequest(id=service_id)
        return await self._unary(rpcs.SERVICE_START, request, lambda msg, _: msg.resp)

    async def service_stop(self, service_id: str) -> str:
        request = m.ServiceStopRequest(id=service_id)
        return await self._unary(rpcs.SERVICE_STOP, request, lambda msg, _: msg.resp)

    async def service_restart(self, service_id: str) -> str:
        request = m.ServiceRestartRequest(id=service_id)
        return await self._unary(rpcs.SERVICE_RESTART, request, lambda msg, _: msg.resp)

    async def apply_configuration(
        self,
        data: bytes | str,
        mode: models.ApplyMode = "no-reboot",
        *,
        dry_run: bool = False,
        try_timeout: float | dt.timedelta | None = None,
    ) -> models.ApplyResult:
        """Apply a machine config; ``try_timeout`` (try mode) defaults to the server's 1m."""
        request = m.ApplyConfigurationRequest(
            data=data.encode() if isinstance(data, str) else data,
            mode=choice("apply mode", mode, convert.APPLY_MODES),  # type: ignore[arg-type]
            dry_run=dry_run,
        )
        if try_timeout is not None:
            request.try_mode_timeout.CopyFrom(convert.seconds_to_duration(try_timeout))
        return await self._unary(rpcs.APPLY_CONFIGURATION, request, convert.apply_result)

    def _logs_request(self, service_id: str, tail: int, kubernetes: bool) -> m.LogsRequest:
        return m.LogsRequest(
            namespace="k8s.io" if kubernetes else "system",
            id=service_id,
            driver=common_pb2.CRI if kubernetes else common_pb2.CONTAINERD,
            follow=False,
            tail_lines=tail,
        )

    async def logs_bytes(
        self, service_id: str, tail: int = -1, *, kubernetes: bool = False
    ) -> bytes:
        """A service's log; ``tail`` = last N lines (negative: all)."""
        return await self._data(rpcs.LOGS, self._logs_request(service_id, tail, kubernetes))

    async def logs(self, service_id: str, tail: int = -1, *, kubernetes: bool = False) -> str:
        """A service's log as text (invalid UTF-8 replaced)."""
        raw = await self.logs_bytes(service_id, tail, kubernetes=kubernetes)
        return raw.decode("utf-8", errors="replace")

    async def logs_containers(self) -> builtins.list[str]:
        return await self._unary(rpcs.LOGS_CONTAINERS, rpcs.Empty(), convert.logs_containers)

    async def _open_events(
        self,
        *,
        tail_events: int = 0,
        tail_id: str | None = None,
        tail_seconds: int = 0,
        actor_id: str | None = None,
        timeout: float = DEFAULT_WATCH_TIMEOUT,
    ) -> OpenedStream[models.Event]:
        """Runtime events as they happen (``tail_events=-1``: all buffered ones first).

        The stream is subscribed once the node's empty hello event has arrived (the sync
        client returns only then, so with ``tail_events=0`` nothing caused afterwards is
        missed). The hello and payload types this client does not know are skipped. The
        stream ends with DeadlineExceeded after ``timeout`` seconds.
        """
        request = m.EventsRequest(
            tail_events=tail_events,
            tail_id=tail_id or "",
            tail_seconds=tail_seconds,
            with_actor_id=actor_id or "",
        )
        target = self._target(rpcs.EVENTS.path)

        def events_of(message: m.Event) -> builtins.list[models.Event]:
            event = convert.event(message, target.node)
            return [event] if event is not None else []

        return await self._open(rpcs.EVENTS, request, target, events_of, total_timeout=timeout)

    events = _iterated(_open_events)

    async def list(
        self,
        path: str = "/",
        recurse: bool = False,
        depth: int = 0,
        types: Sequence[Literal["regular", "directory", "symlink"]] | None = None,
    ) -> builtins.list[models.FileInfo]:
        """Directory entries under ``path`` (``recurse`` with ``depth`` 0: unlimited)."""
        request = m.ListRequest(
            root=path,
            recurse=recurse,
            recursion_depth=depth,
            types=[choice("file type", t, LIST_TYPES) for t in types or ()],  # type: ignore[misc]
        )
        node = self._target(rpcs.LIST.path).node
        return [
            convert.file_info(message, node)
            async for message in self._stream(rpcs.LIST, request, idle_timeout=self.timeout)
        ]

    async def read(self, path: str) -> bytes:
        """A regular file's content."""
        return await self._data(rpcs.READ, m.ReadRequest(path=path))

    async def kubeconfig(self) -> bytes:
        """The admin kubeconfig (control-plane nodes), unpacked from its .tar.gz."""
        return untar_kubeconfig(await self._data(rpcs.KUBECONFIG, rpcs.Empty()))

    async def netstat(self, listening: bool = True) -> builtins.list[models.ConnectRecord]:
        """TCP/UDP sockets (v4 and v6) of the host network namespace, with processes."""
        return await self._unary(rpcs.NETSTAT, netstat_request(listening), convert.netstat)

    async def processes(self) -> builtins.list[models.ProcessInfo]:
        return await self._unary(rpcs.PROCESSES, rpcs.Empty(), convert.processes)

    async def memory(self) -> models.MemInfo:
        return await self._unary(rpcs.MEMORY, rpcs.Empty(), convert.memory)

    async def mounts(self) -> builtins.list[models.MountStat]:
        return await self._unary(rpcs.MOUNTS, rpcs.Empty(), convert.mounts)

    async def reboot(self, mode: Literal["default", "powercycle", "force"] = "default") -> str:
        """Reboot; returns the actor id the reboot sequence's events carry."""
        request = m.RebootRequest(mode=choice("reboot mode", mode, REBOOT_MODES))  # type: ignore[arg-type]
        return await self._unary(rpcs.REBOOT, request, lambda msg, _: msg.actor_id)

    async def shutdown(self, force: bool = False) -> str:
        request = m.ShutdownRequest(force=force)
        return await self._unary(rpcs.SHUTDOWN, request, lambda msg, _: msg.actor_id)

    async def reset(
        self,
        *,
        graceful: bool = True,
        reboot: bool = False,
        mode: Literal["all", "system-disk", "user-disks"] = "all",
        system_partitions_to_wipe: Sequence[str] = (),
        user_disks_to_wipe: Sequence[str] = (),
    ) -> str:
        """Reset (wipe) the node; returns the actor id."""
        request = m.ResetRequest(
            graceful=graceful,
            reboot=reboot,
            mode=choice("wipe mode", mode, WIPE_MODES),  # type: ignore[arg-type]
            system_partitions_to_wipe=[
                m.ResetPartitionSpec(label=label, wipe=True) for label in system_partitions_to_wipe
            ],
            user_disks_to_wipe=list(user_disks_to_wipe),
        )
        return await self._unary(rpcs.RESET, request, lambda msg, _: msg.actor_id)

    async def upgrade(
        self,
        image: str,
        *,
        preserve: bool = False,
        stage: bool = False,
        force: bool = False,
        reboot_mode: Literal["default", "powercycle"] = "default",
    ) -> models.UpgradeResult:
        request = m.UpgradeRequest(
            image=image,
            preserve=preserve,
            stage=stage,
            force=force,
            reboot_mode=choice("reboot mode", reboot_mode, REBOOT_MODES),  # type: ignore[arg-type]
        )
        return await self._unary(rpcs.UPGRADE, request, convert.upgrade_result)

    async def rollback(self) -> None:
        await self._unary(rpcs.ROLLBACK, m.RollbackRequest(), lambda msg, _: None)

    async def etcd_members(self, *, query_local: bool = False) -> builtins.list[models.EtcdMember]:
        request = m.EtcdMemberListRequest(query_local=query_local)
        return await self._unary(rpcs.ETCD_MEMBER_LIST, request, convert.etcd_members)

    async def generate_client_configuration(
        self, roles: Sequence[str], ttl: float | dt.timedelta
    ) -> models.ClientConfiguration:
        request = m.GenerateClientConfigurationRequest(
            roles=list(roles), crt_ttl=convert.seconds_to_duration(ttl)
        )
        return await self._unary(
            rpcs.GENERATE_CLIENT_CONFIGURATION, request, convert.client_configuration
        )

    async def _open_health_check(
        self,
        *,
        wait_timeout: float | dt.timedelta = 600.0,
        control_plane_nodes: Sequence[str] = (),
        worker_nodes: Sequence[str] = (),
        force_endpoint: str = "",
        timeout: float | None = None,
    ) -> OpenedStream[models.HealthProgress]:
        """Server-side ``talosctl health``: progress lines until every check passed.

        The stream may take up to ``wait_timeout``; ``timeout`` (default: wait_timeout
        plus the unary timeout) bounds it on the client side. The sync client returns once
        the first progress line is there, so a refusal (e.g. on a worker) is raised by the
        call itself.
        """
        wait = convert.seconds_to_duration(wait_timeout)
        request = cluster_pb2.HealthCheckRequest(
            wait_timeout=wait,
            cluster_info=cluster_pb2.ClusterInfo(
                control_plane_nodes=list(control_plane_nodes),
                worker_nodes=list(worker_nodes),
                force_endpoint=force_endpoint,
            ),
        )
        limit = timeout or wait.ToTimedelta().total_seconds() + self.timeout
        target = self._target(rpcs.HEALTH_CHECK.path)

        def progress_of(
            message: cluster_pb2.HealthCheckProgress,
        ) -> builtins.list[models.HealthProgress]:
            return [convert.health_progress(message, target.node)]

        return await self._open(
            rpcs.HEALTH_CHECK, request, target, progress_of, total_timeout=limit
        )

    health_check = _iterated(_open_health_check)

    # ------------------------------------------------------------------ fan-out

    async def fanout(self, call: FanoutCall, nodes: Sequence[str] | None = None) -> dict[str, Any]:
        """Run one read-only call on several nodes at once (``nodes`` metadata).

        Returns ``{node: result | NodeError}``: a failing node does not hide the others.
        """
        if call not in FANOUT:
            raise ValueError(f"fanout supports {', '.join(FANOUT)}, not {call!r}")
        rpc, make_request, converter = FANOUT[call]
        target = self._fanout_target(nodes)
        reply = await self._transport.unary(rpc, make_request(), target)
        return self._per_node(reply.messages, rpc, target, converter)

    def _per_node(
        self,
        messages: Sequence[Any],
        rpc: Rpc[Any, Any],
        target: Target,
        converter: Converter[Any],
    ) -> dict[str, Any]:
        info = self._transport.call_info(rpc, target, self._transport.timeout)
        lone = target.nodes[0] if len(target.nodes) == 1 else self._transport.host
        results: dict[str, Any] = {}
        for message in messages:
            node = message.metadata.hostname or lone
            error = node_error(message.metadata, info, fallback_node=node)
            results[node] = error if error is not None else converter(message, node)
        for node in target.nodes:
            if node not in results:
                results[node] = NodeError(node, "no reply from this node", method=rpc.path)
        return results

    async def fanout_version(
        self, nodes: Sequence[str] | None = None
    ) -> dict[str, models.Version | NodeError]:
        """Version of several nodes: ``{node: Version | NodeError}``."""
        return await self.fanout("version", nodes)

    # ------------------------------------------------------------------ resources (COSI)

    def _cosi_target(self, method: str) -> Target:
        # COSI is one-to-one only: talosctl loops over nodes with `node` metadata.
        return self._target(method)

    async def _list_raw(
        self, resource_type: str, namespace: str, target: Target
    ) -> builtins.list[models.Resource]:
        request = state_pb2.ListRequest(namespace=namespace, type=resource_type)
        stream = self._stream(
            rpcs.COSI_LIST, request, target=target, idle_timeout=self.timeout, enveloped=False
        )
        return [res.resource(message.resource, target.node) async for message in stream]

    async def resource_definitions(
        self, *, refresh: bool = False
    ) -> builtins.list[models.ResourceDefinitionSpec]:
        """Every resource type the node serves (cached per node; ``refresh`` to reload)."""
        target = self._cosi_target(rpcs.COSI_LIST.path)
        cache = self._shared.definitions
        if refresh or target.node not in cache:
            found = await self._list_raw(res.RD_TYPE, res.META_NAMESPACE, target)
            definitions = [res.definition_of(item) for item in found]
            cache[target.node] = [d for d in definitions if d is not None]
        return cache[target.node]

    async def resolve_type(self, name: str) -> models.ResourceDefinitionSpec:
        """The definition a type name or alias (``mc``, ``members``, ...) refers to."""
        where = {"node": self._target(rpcs.COSI_GET.path).node, "method": rpcs.COSI_LIST.path}
        try:
            return res.resolve(name, await self.resource_definitions(), **where)
        except NotFound:  # maybe registered since the cache was filled
            return res.resolve(name, await self.resource_definitions(refresh=True), **where)

    async def get(self, type: str, id: str, namespace: str | None = None) -> models.Resource:
        """One resource, e.g. ``get("mc", "v1alpha1")`` or ``get("members", "n1")``."""
        definition = await self.resolve_type(type)
        return await self._get_raw(
            definition.resource_type, id, namespace or definition.default_namespace
        )

    async def _get_raw(self, resource_type: str, id: str, namespace: str) -> models.Resource:
        request = state_pb2.GetRequest(namespace=namespace, type=resource_type, id=id)
        target = self._cosi_target(rpcs.COSI_GET.path)
        reply = await self._transport.unary(rpcs.COSI_GET, request, target)
        return res.resource(reply.resource, target.node)

    async def list_resources(
        self, type: str, namespace: str | None = None
    ) -> builtins.list[models.Resource]:
        """All resources of a type (``talosctl get <type>``)."""
        definition = await self.resolve_type(type)
        target = self._cosi_target(rpcs.COSI_LIST.path)
        ns = namespace or definition.default_namespace
        return await self._list_raw(definition.resource_type, ns, target)

    async def _open_watch(
        self,
        type: str,
        id: str | None = None,
        namespace: str | None = None,
        *,
        bootstrap: bool = True,
        timeout: float = DEFAULT_WATCH_TIMEOUT,
    ) -> OpenedStream[models.ResourceEvent]:
        """Changes of one resource (``id``) or of a whole type, as they happen.

        The watch is set up once the server's first, empty reply has arrived (the sync
        client returns only then, so no later change is missed). A watch of one resource
        starts with its current state (``created``, or ``destroyed`` if absent); a type
        watch with ``bootstrap`` lists the existing resources as ``created`` followed by
        one ``bootstrapped``. Ends with DeadlineExceeded after ``timeout`` seconds.
        """
        definition = await self.resolve_type(type)
        request = state_pb2.WatchRequest(
            namespace=namespace or definition.default_namespace,
            type=definition.resource_type,
            options=state_pb2.WatchOptions(bootstrap_contents=bootstrap and id is None),
            api_version=1,
        )
        if id is not None:
            request.id = id
        target = self._cosi_target(rpcs.COSI_WATCH.path)

        def changes_of(reply: state_pb2.WatchResponse) -> builtins.list[models.ResourceEvent]:
            return [res.resource_event(event, target.node) for event in reply.event]

        return await self._open(
            rpcs.COSI_WATCH, request, target, changes_of, total_timeout=timeout, enveloped=False
        )

    watch = _iterated(_open_watch)

    async def machine_config(self) -> models.MachineConfig:
        """The active machine config (``MachineConfigs`` ``v1alpha1``; needs os:admin)."""
        found = await self._get_raw(
            res.MACHINE_CONFIG_TYPE, res.ACTIVE_MACHINE_CONFIG, res.MACHINE_CONFIG_NAMESPACE
        )
        return res.machine_config(found)
