"""The COSI state API of AsyncTalosClient: resource types, get, list, watch.

COSI is one-to-one only: talosctl loops over nodes with ``node`` metadata, so every call
here goes to the client's single target.
"""

from __future__ import annotations

from pytest_talos import models
from pytest_talos._proto.v1alpha1 import state_pb2
from pytest_talos.client import _resources as res
from pytest_talos.client import _rpcs as rpcs
from pytest_talos.client._caller import Caller
from pytest_talos.client._streams import OpenedStream
from pytest_talos.errors import NotFound
from pytest_talos.transport import Target

__all__ = ["Resources"]


class Resources:
    """The resource calls of one client (the type cache is shared with ``with_node``)."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def list_raw(
        self, resource_type: str, namespace: str, target: Target
    ) -> list[models.Resource]:
        request = state_pb2.ListRequest(namespace=namespace, type=resource_type)
        stream = self._caller.stream(
            rpcs.COSI_LIST,
            request,
            target=target,
            idle_timeout=self._caller.connection.timeout,
            enveloped=False,
        )
        return [res.resource(message.resource, target.node) async for message in stream]

    async def definitions(self, *, refresh: bool = False) -> list[models.ResourceDefinitionSpec]:
        target = self._caller.target(rpcs.COSI_LIST.path)
        cache = self._caller.shared.definitions
        if refresh or target.node not in cache:
            found = await self.list_raw(res.RD_TYPE, res.META_NAMESPACE, target)
            definitions = [res.definition_of(item) for item in found]
            cache[target.node] = [d for d in definitions if d is not None]
        return cache[target.node]

    async def resolve_type(self, name: str) -> models.ResourceDefinitionSpec:
        where = {
            "node": self._caller.target(rpcs.COSI_GET.path).node,
            "method": rpcs.COSI_LIST.path,
        }
        try:
            return res.resolve(name, await self.definitions(), **where)
        except NotFound:  # maybe registered since the cache was filled
            return res.resolve(name, await self.definitions(refresh=True), **where)

    async def get(self, type: str, id: str, namespace: str | None = None) -> models.Resource:
        definition = await self.resolve_type(type)
        return await self.get_raw(
            definition.resource_type, id, namespace or definition.default_namespace
        )

    async def get_raw(self, resource_type: str, id: str, namespace: str) -> models.Resource:
        request = state_pb2.GetRequest(namespace=namespace, type=resource_type, id=id)
        target = self._caller.target(rpcs.COSI_GET.path)
        reply = await self._caller.connection.unary(rpcs.COSI_GET, request, target)
        return res.resource(reply.resource, target.node)

    async def list_all(self, type: str, namespace: str | None = None) -> list[models.Resource]:
        definition = await self.resolve_type(type)
        target = self._caller.target(rpcs.COSI_LIST.path)
        ns = namespace or definition.default_namespace
        return await self.list_raw(definition.resource_type, ns, target)

    async def open_watch(
        self,
        type: str,
        id: str | None,
        namespace: str | None,
        *,
        bootstrap: bool,
        timeout: float,
    ) -> OpenedStream[models.ResourceEvent]:
        definition = await self.resolve_type(type)
        request = state_pb2.WatchRequest(
            namespace=namespace or definition.default_namespace,
            type=definition.resource_type,
            options=state_pb2.WatchOptions(bootstrap_contents=bootstrap and id is None),
            api_version=1,
        )
        if id is not None:
            request.id = id
        target = self._caller.target(rpcs.COSI_WATCH.path)

        def changes_of(reply: state_pb2.WatchResponse) -> list[models.ResourceEvent]:
            return [res.resource_event(event, target.node) for event in reply.event]

        return await self._caller.open(
            rpcs.COSI_WATCH, request, target, changes_of, total_timeout=timeout, enveloped=False
        )

    async def machine_config(self) -> models.MachineConfig:
        found = await self.get_raw(
            res.MACHINE_CONFIG_TYPE, res.ACTIVE_MACHINE_CONFIG, res.MACHINE_CONFIG_NAMESPACE
        )
        return res.machine_config(found)
