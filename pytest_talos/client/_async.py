"""AsyncTalosClient: the typed Talos API client on asyncio (the sync client wraps it)."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime as dt
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, Literal

from pytest_talos import models
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.client import _convert as convert
from pytest_talos.client import _rpcs as rpcs
from pytest_talos.client._caller import Caller, Shared
from pytest_talos.client._calls import (
    FANOUT,
    REBOOT_MODES,
    FanoutCall,
    apply_request,
    choice,
    events_request,
    health_check_request,
    list_request,
    logs_request,
    netstat_request,
    reset_request,
    untar_kubeconfig,
    upgrade_request,
)
from pytest_talos.client._connection import Connection
from pytest_talos.client._cosi import Resources
from pytest_talos.client._gate import ChangeGate
from pytest_talos.client._streams import OpenedStream, iterated
from pytest_talos.client._subscriptions import open_events, open_health_check
from pytest_talos.endpoint import Endpoint
from pytest_talos.errors import APIError, NodeError, NotFound
from pytest_talos.talosconfig import load_talosconfig
from pytest_talos.transport import (
    DEFAULT_STREAM_TIMEOUT,
    DEFAULT_TIMEOUT,
    GrpcTransport,
    Transport,
    certificate_roles,
    shared_ssl_context,
)

__all__ = [
    "DEFAULT_WATCH_TIMEOUT",
    "AsyncTalosClient",
    "FanoutCall",
    "OpenedStream",
    "TalosConfigWarning",
]

DEFAULT_WATCH_TIMEOUT = 60.0  # seconds a watch / event stream may stay open by default
# Lists of list_each in flight at once, as HTTP/2 streams of the one connection.
LIST_STREAMS = 16
Listed = builtins.list[models.Resource] | APIError  # one list of list_each


# Seconds a one-to-many call may take at least (see AsyncTalosClient.fanout).
FANOUT_TIMEOUT = 25.0


class TalosConfigWarning(UserWarning):
    """The talosconfig works but needs attention soon (e.g. the client cert expires)."""


def _grpc_transport(
    endpoint: str | Endpoint | None,
    ca_pem: bytes | None,
    crt_pem: bytes | None,
    key_pem: bytes | None,
    server_hostname: str | None,
    roles: Sequence[str] | None,
) -> GrpcTransport:
    """The real transport for an endpoint and its credentials (the text is parsed here)."""
    if endpoint is None or ca_pem is None or crt_pem is None or key_pem is None:
        raise TypeError(
            "a Talos client needs endpoint, ca_pem, crt_pem and key_pem (or transport=)"
        )
    if not isinstance(endpoint, Endpoint):
        endpoint = Endpoint.parse(endpoint, server_name=server_hostname)
    elif server_hostname is not None:
        endpoint = replace(endpoint, server_name=server_hostname)
    return GrpcTransport(
        endpoint,
        shared_ssl_context(ca_pem, crt_pem, key_pem),
        client_roles=tuple(roles) if roles is not None else certificate_roles(crt_pem),
    )


def talosconfig_arguments(
    path: str | os.PathLike[str] | None,
    context: str | None,
    endpoint: str | None,
    node: str | None,
    timeout: float,
    env: Mapping[str, str],
) -> dict[str, Any]:
    """The client arguments a talosconfig gives (both clients' ``from_talosconfig``)."""
    config = load_talosconfig(path, context=context, env=env)
    if config.expiry_warning:
        # 3: the caller of from_talosconfig, through the classmethod
        warnings.warn(config.expiry_warning, TalosConfigWarning, stacklevel=3)
    ctx = config.context
    return {
        "endpoint": endpoint or ctx.endpoints[0],
        "ca_pem": ctx.ca_pem,
        "crt_pem": ctx.crt_pem,
        "key_pem": ctx.key_pem,
        "timeout": timeout,
        "node": node,
        "nodes": None if node else ctx.nodes,
        "cluster": ctx.cluster,
        "roles": config.roles,
    }


class AsyncTalosClient:
    """A Talos API client for asyncio code; every method returns models, never protobuf.

    Targets: ``node`` sends every call to that node through the endpoint (one-to-one);
    ``nodes`` is the default list for :meth:`fanout`; single-node calls with several
    ``nodes`` need :meth:`with_node`. Without either, calls go to the endpoint's own node.
    """

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
        _shared: Shared | None = None,
    ) -> None:
        """Connect to ``endpoint`` with the talosconfig credentials (``ca_pem``, ``crt_pem``,
        ``key_pem``), or run over ``transport`` instead (httpx's ``transport=``), e.g. a
        :class:`~pytest_talos.transport.FakeTransport`. Every way of making a client ends
        here (``_shared`` is :meth:`with_node`'s: the connection of the client it came from).
        """
        if _shared is None:
            if transport is None:
                transport = _grpc_transport(
                    endpoint, ca_pem, crt_pem, key_pem, server_hostname, roles
                )
            elif endpoint is not None or ca_pem or crt_pem or key_pem:
                raise ValueError("pass either endpoint and credentials, or transport=, not both")
            connection = Connection(
                transport,
                cluster=cluster,
                roles=roles,
                timeout=timeout,
                stream_timeout=stream_timeout,
            )
            _shared = Shared(connection)
        self._shared = _shared
        self._connection = _shared.connection
        self._transport = _shared.connection.transport  # the wire under it (tests look)
        self._node = node
        self._nodes = tuple(nodes or ())
        self._call = Caller(_shared, node, self._nodes)
        self._cosi = Resources(self._call)

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
    ) -> AsyncTalosClient:
        """A client on a transport built elsewhere, e.g. a
        :class:`~pytest_talos.transport.FakeTransport` in a unit test (no socket)."""
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
    ) -> AsyncTalosClient:
        """Load a talosconfig as talosctl does; use its first endpoint unless one is given."""
        return cls(**talosconfig_arguments(path, context, endpoint, node, timeout, env))

    def with_node(self, node: str) -> AsyncTalosClient:
        """A client for another node through the same endpoint and connection."""
        return type(self)(node=node, _shared=self._shared)

    def __repr__(self) -> str:
        target = self._node or ",".join(self._nodes) or "(endpoint)"
        return f"{type(self).__name__}(endpoint={self.endpoint!r}, node={target!r})"

    @property
    def endpoint(self) -> str:
        return self._connection.endpoint

    @property
    def node(self) -> str | None:
        return self._node

    @property
    def nodes(self) -> tuple[str, ...]:
        return self._nodes

    @property
    def roles(self) -> tuple[str, ...]:
        return self._connection.client_roles

    @property
    def timeout(self) -> float:
        return self._connection.timeout

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
        return self._connection.peer_certificate

    async def close(self) -> None:
        """Close the shared connection (also for clients made with ``with_node``)."""
        await self._connection.aclose()

    async def __aenter__(self) -> AsyncTalosClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ machine API

    async def version(self) -> models.Version:
        return await self._call.unary(rpcs.VERSION, rpcs.Empty(), convert.version)

    async def hostname(self) -> str:
        return await self._call.unary(rpcs.HOSTNAME, rpcs.Empty(), convert.hostname)

    async def services(self) -> builtins.list[models.ServiceInfo]:
        return await self._call.unary(rpcs.SERVICE_LIST, rpcs.Empty(), convert.services)

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
        return await self._call.unary(rpcs.SERVICE_START, request, lambda msg, _: msg.resp)

    async def service_stop(self, service_id: str) -> str:
        request = m.ServiceStopRequest(id=service_id)
        return await self._call.unary(rpcs.SERVICE_STOP, request, lambda msg, _: msg.resp)

    async def service_restart(self, service_id: str) -> str:
        request = m.ServiceRestartRequest(id=service_id)
        return await self._call.unary(rpcs.SERVICE_RESTART, request, lambda msg, _: msg.resp)

    async def apply_configuration(
        self,
        data: bytes | str,
        mode: models.ApplyMode = "no-reboot",
        *,
        dry_run: bool = False,
        try_timeout: float | dt.timedelta | None = None,
    ) -> models.ApplyResult:
        """Apply a machine config; ``try_timeout`` (try mode) defaults to the server's 1m."""
        request = apply_request(data, mode, dry_run, try_timeout)
        return await self._call.unary(rpcs.APPLY_CONFIGURATION, request, convert.apply_result)

    async def logs_bytes(
        self, service_id: str, tail: int = -1, *, kubernetes: bool = False
    ) -> bytes:
        """A service's log; ``tail`` = last N lines (negative: all)."""
        return await self._call.data(rpcs.LOGS, logs_request(service_id, tail, kubernetes))

    async def logs(self, service_id: str, tail: int = -1, *, kubernetes: bool = False) -> str:
        """A service's log as text (invalid UTF-8 replaced)."""
        raw = await self.logs_bytes(service_id, tail, kubernetes=kubernetes)
        return raw.decode("utf-8", errors="replace")

    async def logs_containers(self) -> builtins.list[str]:
        return await self._call.unary(rpcs.LOGS_CONTAINERS, rpcs.Empty(), convert.logs_containers)

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
        request = events_request(tail_events, tail_id, tail_seconds, actor_id)
        return await open_events(self._call, request, timeout)

    events = iterated(_open_events)

    async def list(
        self,
        path: str = "/",
        recurse: bool = False,
        depth: int = 0,
        types: Sequence[Literal["regular", "directory", "symlink"]] | None = None,
    ) -> builtins.list[models.FileInfo]:
        """Directory entries under ``path`` (``recurse`` with ``depth`` 0: unlimited)."""
        request = list_request(path, recurse, depth, types)
        node = self._call.target(rpcs.LIST.path).node
        return [
            convert.file_info(message, node)
            async for message in self._call.stream(rpcs.LIST, request, idle_timeout=self.timeout)
        ]

    async def read(self, path: str) -> bytes:
        """A regular file's content."""
        return await self._call.data(rpcs.READ, m.ReadRequest(path=path))

    async def kubeconfig(self) -> bytes:
        """The admin kubeconfig (control-plane nodes), unpacked from its .tar.gz."""
        return untar_kubeconfig(await self._call.data(rpcs.KUBECONFIG, rpcs.Empty()))

    async def netstat(self, listening: bool = True) -> builtins.list[models.ConnectRecord]:
        """TCP/UDP sockets (v4 and v6) of the host network namespace, with processes."""
        return await self._call.unary(rpcs.NETSTAT, netstat_request(listening), convert.netstat)

    async def processes(self) -> builtins.list[models.ProcessInfo]:
        return await self._call.unary(rpcs.PROCESSES, rpcs.Empty(), convert.processes)

    async def memory(self) -> models.MemInfo:
        return await self._call.unary(rpcs.MEMORY, rpcs.Empty(), convert.memory)

    async def mounts(self) -> builtins.list[models.MountStat]:
        return await self._call.unary(rpcs.MOUNTS, rpcs.Empty(), convert.mounts)

    async def reboot(self, mode: Literal["default", "powercycle", "force"] = "default") -> str:
        """Reboot; returns the actor id the reboot sequence's events carry."""
        request = m.RebootRequest(mode=choice("reboot mode", mode, REBOOT_MODES))  # type: ignore[arg-type]
        return await self._call.unary(rpcs.REBOOT, request, lambda msg, _: msg.actor_id)

    async def shutdown(self, force: bool = False) -> str:
        request = m.ShutdownRequest(force=force)
        return await self._call.unary(rpcs.SHUTDOWN, request, lambda msg, _: msg.actor_id)

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
        request = reset_request(
            graceful, reboot, mode, system_partitions_to_wipe, user_disks_to_wipe
        )
        return await self._call.unary(rpcs.RESET, request, lambda msg, _: msg.actor_id)

    async def upgrade(
        self,
        image: str,
        *,
        preserve: bool = False,
        stage: bool = False,
        force: bool = False,
        reboot_mode: Literal["default", "powercycle"] = "default",
    ) -> models.UpgradeResult:
        request = upgrade_request(image, preserve, stage, force, reboot_mode)
        return await self._call.unary(rpcs.UPGRADE, request, convert.upgrade_result)

    async def rollback(self) -> None:
        await self._call.unary(rpcs.ROLLBACK, m.RollbackRequest(), lambda msg, _: None)

    async def etcd_members(self, *, query_local: bool = False) -> builtins.list[models.EtcdMember]:
        request = m.EtcdMemberListRequest(query_local=query_local)
        return await self._call.unary(rpcs.ETCD_MEMBER_LIST, request, convert.etcd_members)

    async def generate_client_configuration(
        self, roles: Sequence[str], ttl: float | dt.timedelta
    ) -> models.ClientConfiguration:
        request = m.GenerateClientConfigurationRequest(
            roles=list(roles), crt_ttl=convert.seconds_to_duration(ttl)
        )
        return await self._call.unary(
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
        request = health_check_request(
            wait_timeout, control_plane_nodes, worker_nodes, force_endpoint
        )
        limit = timeout or request.wait_timeout.ToTimedelta().total_seconds() + self.timeout
        return await open_health_check(self._call, request, limit)

    health_check = iterated(_open_health_check)

    # ------------------------------------------------------------------ fan-out

    async def fanout(self, call: FanoutCall, nodes: Sequence[str] | None = None) -> dict[str, Any]:
        """Run one read-only call on several nodes at once (``nodes`` metadata).

        Returns ``{node: result | NodeError}``: a failing node does not hide the others.
        """
        if call not in FANOUT:
            raise ValueError(f"fanout supports {', '.join(FANOUT)}, not {call!r}")
        rpc, make_request, converter = FANOUT[call]
        target = self._call.fanout_target(nodes)
        # Long enough for apid to give up on a node that went silent and answer for the
        # others (its backend waits up to MinConnectTimeout, 20 s, to connect:
        # internal/app/apid/pkg/backend/apid.go), rather than fail the whole call.
        limit = max(self.timeout, FANOUT_TIMEOUT)
        reply = await self._connection.unary(rpc, make_request(), target, timeout=limit)
        return self._call.per_node(reply.messages, rpc, target, converter)

    async def fanout_version(
        self, nodes: Sequence[str] | None = None
    ) -> dict[str, models.Version | NodeError]:
        """Version of several nodes: ``{node: Version | NodeError}``."""
        return await self.fanout("version", nodes)

    # ------------------------------------------------------------------ resources (COSI)

    async def resource_definitions(
        self, *, refresh: bool = False
    ) -> builtins.list[models.ResourceDefinitionSpec]:
        """Every resource type the node serves (cached per node; ``refresh`` to reload)."""
        return await self._cosi.definitions(refresh=refresh)

    async def resolve_type(self, name: str) -> models.ResourceDefinitionSpec:
        """The definition a type name or alias (``mc``, ``members``, ...) refers to."""
        return await self._cosi.resolve_type(name)

    async def get(self, type: str, id: str, namespace: str | None = None) -> models.Resource:
        """One resource, e.g. ``get("mc", "v1alpha1")`` or ``get("members", "n1")``."""
        return await self._cosi.get(type, id, namespace)

    async def list_resources(
        self, type: str, namespace: str | None = None
    ) -> builtins.list[models.Resource]:
        """All resources of a type (``talosctl get <type>``)."""
        return await self._cosi.list_all(type, namespace)

    async def list_each(self, queries: Sequence[tuple[str, str | None]]) -> builtins.list[Listed]:
        """:meth:`list_resources` of every ``(type, namespace)`` at once (their round trips
        overlap), in order; a list the node answers with an error is that
        :class:`~pytest_talos.errors.APIError` in its place, so one refusal hides no other
        answer. A transport error (no connection, the deadline) still raises."""
        gate = asyncio.Semaphore(LIST_STREAMS)
        with contextlib.suppress(APIError):  # refused: each list then says so in its place
            await self.resource_definitions()  # the type cache filled once, not by every list

        async def one(kind: str, namespace: str | None) -> Listed:
            async with gate:
                try:
                    return await self.list_resources(kind, namespace)
                except APIError as exc:
                    return exc

        lists = [asyncio.ensure_future(one(k, n)) for k, n in queries]
        try:
            return builtins.list(await asyncio.gather(*lists))
        except BaseException:  # a transport error or a cancel: the other lists stop too
            for pending in lists:
                pending.cancel()
            raise

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
        return await self._cosi.open_watch(
            type, id, namespace, bootstrap=bootstrap, timeout=timeout
        )

    watch = iterated(_open_watch)

    async def machine_config(self) -> models.MachineConfig:
        """The active machine config (``MachineConfigs`` ``v1alpha1``; needs os:admin)."""
        return await self._cosi.machine_config()
