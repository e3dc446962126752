"""cosi.resource.State of an emulated node: Get, List, Watch; writes refused.

Talos serves cosi's own State server (cosi-project/runtime v1.14.1
pkg/state/protobuf/server) over a state wrapped in its access filter
(``internal/app/resources/access.go``): a write is decoded first (:mod:`..cosidecode`), then
refused by the filter.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator, Iterable, Mapping

from pytest_talos._proto.v1alpha1 import resource_pb2 as r
from pytest_talos._proto.v1alpha1 import state_pb2 as s
from pytest_talos.emulator.apid.servicers import Call, RPCFailure
from pytest_talos.emulator.apid.servicers.messages import timestamp
from pytest_talos.emulator.cosi.decode import decode_written
from pytest_talos.emulator.cosi.registry import NAMESPACES, ResourceDefinition, definitions_on
from pytest_talos.emulator.cosi.store import RawSpec, Resource, StoreEvent
from pytest_talos.emulator.faults import CosiQuirk
from pytest_talos.errors import StatusCode
from pytest_talos.releases import Release

__all__ = ["StateServicer", "encode_resource", "matches_label_query"]

_EVENT_TYPES = {"created": s.CREATED, "updated": s.UPDATED, "destroyed": s.DESTROYED}


def encode_resource(resource: Resource) -> r.Resource:
    metadata = r.Metadata(
        namespace=resource.namespace,
        type=resource.type,
        id=resource.id,
        version=str(resource.version),
        owner=resource.owner,
        phase=resource.phase,
        created=timestamp(resource.created.timestamp()),
        updated=timestamp(resource.updated.timestamp()),
        labels=dict(resource.labels),
        annotations=dict(resource.annotations),
    )
    spec = r.Spec(proto_spec=resource.proto_spec, yaml_spec=resource.yaml_spec)
    return r.Resource(metadata=metadata, spec=spec)


def _tombstone(namespace: str, type_: str, id_: str) -> r.Resource:
    # INFERRED: a tombstone carries only the resource pointer.
    return r.Resource(metadata=r.Metadata(namespace=namespace, type=type_, id=id_, phase="running"))


def _term_matches(term: r.LabelTerm, labels: Mapping[str, str]) -> bool:
    value = labels.get(term.key)
    wanted = list(term.value)
    op = term.op
    if op == r.LabelTerm.EXISTS:
        result = value is not None
    elif op == r.LabelTerm.NOT_EXISTS:
        result = value is None
    elif value is None:
        result = False
    elif op == r.LabelTerm.EQUAL:
        result = bool(wanted) and value == wanted[0]
    elif op == r.LabelTerm.IN:
        result = value in wanted
    elif op in (r.LabelTerm.LT, r.LabelTerm.LTE):
        result = bool(wanted) and (
            value < wanted[0] or (op == r.LabelTerm.LTE and value == wanted[0])
        )
    else:
        result = _numeric_compare(value, wanted, inclusive=op == r.LabelTerm.LTE_NUMERIC)
    return result != term.invert


def _numeric_compare(value: str, wanted: list[str], *, inclusive: bool) -> bool:
    try:
        left, right = int(value), int(wanted[0])
    except (ValueError, IndexError):
        return False
    return left <= right if inclusive else left < right


def matches_label_query(queries: Iterable[r.LabelQuery], labels: Mapping[str, str]) -> bool:
    return all(all(_term_matches(t, labels) for t in query.terms) for query in queries)


def _matches(resource: Resource, queries: Iterable[r.LabelQuery], id_regexp: str) -> bool:
    if id_regexp and not re.search(id_regexp, resource.id):
        return False
    return matches_label_query(queries, resource.labels)


UNLISTABLE_TYPE = "HostnameStatuses.net.talos.dev"  # CosiQuirk.COSI_HOSTNAME_STATUS_UNLISTABLE


def _not_found(namespace: str, type_: str, id_: str) -> RPCFailure:
    # INFERRED wording of cosi's not-found error.
    return RPCFailure(
        StatusCode.NOT_FOUND, f"resource {type_}({namespace}/{id_}@undefined) doesn't exist"
    )


@functools.cache
def _definitions_by_id(release: Release) -> Mapping[str, ResourceDefinition]:
    """The node release's definitions by id (the lower-cased type), as access.go looks up."""
    return {definition.id: definition for definition in definitions_on(release).values()}


# CosiQuirk.COSI_SERVES_UNLISTED_SECRETS: a type served although no ResourceDefinition lists it
# (so the sensitivity rule, which reads the definition, never applies). Healthy Talos refuses
# a type without a definition (access.go: resource type ... is not supported).
_UNLISTED = {
    d.id: d
    for d in (ResourceDefinition("OSRootSecrets.secrets.talos.dev", "OSRootSecret", "secrets"),)
}


class StateServicer:
    """The COSI resource API, read-only as Talos's access filter makes it."""

    @staticmethod
    def _check_access(
        call: Call, namespace: str, type_: str, *, write: bool = False, watch: bool = False
    ) -> ResourceDefinition:
        """Talos's AccessPolicy (internal/app/resources/access.go), in its order: a write is
        refused first; then the type must have a ResourceDefinition (looked up by the
        lower-cased type, the definition's id); a sensitive type needs os:admin; last the
        namespace must exist."""
        state = call.state
        if write and not state.quirk(CosiQuirk.COSI_ACCEPTS_WRITES):
            raise RPCFailure(StatusCode.PERMISSION_DENIED, "write access is not allowed")
        definition = _definitions_by_id(state.release).get(type_.lower())
        if definition is None and state.quirk(CosiQuirk.COSI_SERVES_UNLISTED_SECRETS):
            definition = _UNLISTED.get(type_.lower())
        if definition is None:
            raise RPCFailure(
                StatusCode.PERMISSION_DENIED, f'resource type "{type_}" is not supported'
            )
        leaky = state.quirk(CosiQuirk.COSI_SHOWS_SENSITIVE_TO_READERS)
        # only Watch forgets the sensitivity rule
        leaky = leaky or (watch and state.quirk(CosiQuirk.COSI_WATCH_SHOWS_SENSITIVE_TO_READERS))
        if definition.sensitive and not call.admin and not leaky:
            raise RPCFailure(StatusCode.PERMISSION_DENIED, "not authorized")
        if namespace not in NAMESPACES:
            raise RPCFailure(
                StatusCode.PERMISSION_DENIED, f'namespace "{namespace}" is not supported'
            )
        return definition

    async def Get(self, request: s.GetRequest, call: Call) -> s.GetResponse:
        self._check_access(call, request.namespace, request.type)
        found = call.state.store.get(request.namespace, request.type, request.id)
        if found is None:
            raise _not_found(request.namespace, request.type, request.id)
        return s.GetResponse(resource=encode_resource(found))

    async def List(self, request: s.ListRequest, call: Call) -> AsyncIterator[s.ListResponse]:
        self._check_access(call, request.namespace, request.type)
        state = call.state
        broken = state.quirk(CosiQuirk.COSI_HOSTNAME_STATUS_UNLISTABLE)
        if broken and request.type == UNLISTABLE_TYPE:
            raise RPCFailure(
                StatusCode.INTERNAL, f"failed to list {request.type}: controller not running"
            )
        options = request.options
        for resource in call.state.store.list(request.namespace, request.type):
            if _matches(resource, options.label_query, options.id_query.regexp):
                yield s.ListResponse(resource=encode_resource(resource))

    # ---- writes: refused unless CosiQuirk.COSI_ACCEPTS_WRITES ---------------------------------

    # cosi's State server decodes the written resource first (cosidecode), then calls the
    # state that Talos's access filter wraps: a resource that does not decode is answered
    # Unknown before the policy is asked.

    async def Create(self, request: s.CreateRequest, call: Call) -> s.CreateResponse:
        decode_written(request.resource, present=request.HasField("resource"))
        md = request.resource.metadata
        state = call.state
        if state.quirk(CosiQuirk.COSI_CREATE_WRITES_THEN_DENIES):
            # the write goes through, the reply says it was refused
            self._store_raw(call, request.resource)
            raise RPCFailure(StatusCode.PERMISSION_DENIED, "write access is not allowed")
        self._check_write(call, md.namespace, md.type, request.resource.spec)
        created = self._store_raw(call, request.resource)
        return s.CreateResponse(resource=encode_resource(created))

    async def Update(self, request: s.UpdateRequest, call: Call) -> s.UpdateResponse:
        decode_written(request.new_resource, present=request.HasField("new_resource"))
        md = request.new_resource.metadata
        self._check_write(call, md.namespace, md.type, request.new_resource.spec)
        if call.state.store.get(md.namespace, md.type, md.id) is None:
            raise _not_found(md.namespace, md.type, md.id)
        updated = self._store_raw(call, request.new_resource)
        return s.UpdateResponse(resource=encode_resource(updated))

    def _check_write(self, call: Call, namespace: str, type_: str, spec: r.Spec) -> None:
        """The access policy of a decoded write. Fault ``cosi-write-accepted-after-decoding``
        turns away only a write whose spec is empty, so a well-formed one goes through."""
        if call.state.quirk(CosiQuirk.COSI_REFUSES_ONLY_EMPTY_WRITES):
            if not spec.proto_spec:
                raise RPCFailure(StatusCode.PERMISSION_DENIED, "write access is not allowed")
            self._check_access(call, namespace, type_)  # type, sensitivity, namespace only
            return
        self._check_access(call, namespace, type_, write=True)

    async def Destroy(self, request: s.DestroyRequest, call: Call) -> s.DestroyResponse:
        # Destroy carries a pointer only: nothing to decode (server.go Destroy)
        self._check_access(call, request.namespace, request.type, write=True)
        if call.state.store.destroy(request.namespace, request.type, request.id) is None:
            raise _not_found(request.namespace, request.type, request.id)
        return s.DestroyResponse()

    @staticmethod
    def _store_raw(call: Call, resource: r.Resource) -> Resource:
        md = resource.metadata
        spec = RawSpec(resource.spec.yaml_spec, resource.spec.proto_spec)
        return call.state.store.put(
            md.namespace,
            md.type,
            md.id,
            spec,
            owner=md.owner,
            labels=dict(md.labels),
            always_bump=True,
        )

    # ---- watch --------------------------------------------------------------------------

    async def Watch(self, request: s.WatchRequest, call: Call) -> AsyncIterator[s.WatchResponse]:
        self._check_access(call, request.namespace, request.type, watch=True)
        options = request.options
        single = request.HasField("id")
        if single and (options.bootstrap_contents or len(options.label_query)):
            raise RPCFailure(  # cosi pkg/state/protobuf/server (wording INFERRED)
                StatusCode.UNIMPLEMENTED,
                "bootstrap contents and label queries are not supported for single resource watch",
            )
        if options.HasField("start_from_bookmark"):
            raise RPCFailure(StatusCode.FAILED_PRECONDITION, "invalid bookmark")  # cosi server
        store = call.state.store
        queue: asyncio.Queue[StoreEvent] = asyncio.Queue()
        unsubscribe = store.subscribe(queue.put_nowait)
        try:
            yield s.WatchResponse()  # cosi server: an empty response once the watch is set up
            for batch in self._initial(call, request, options):
                yield batch
            while True:
                event = await queue.get()
                encoded = self._follow(event, request, options)
                if encoded is not None:
                    yield s.WatchResponse(event=[encoded])
        finally:
            unsubscribe()

    def _initial(
        self, call: Call, request: s.WatchRequest, options: s.WatchOptions
    ) -> list[s.WatchResponse]:
        store = call.state.store
        if request.HasField("id"):
            # cosi server: a single-resource watch emits the current state at once.
            found = store.get(request.namespace, request.type, request.id)
            if found is None:
                tomb = _tombstone(request.namespace, request.type, request.id)
                return [s.WatchResponse(event=[s.Event(resource=tomb, event_type=s.DESTROYED)])]
            return [
                s.WatchResponse(
                    event=[s.Event(resource=encode_resource(found), event_type=s.CREATED)]
                )
            ]
        if not options.bootstrap_contents:
            return []
        events = [
            s.Event(resource=encode_resource(resource), event_type=s.CREATED)
            for resource in store.list(request.namespace, request.type)
            if _matches(resource, options.label_query, options.id_query.regexp)
        ]
        if request.api_version >= 1:  # cosi server: BOOTSTRAPPED only for api_version >= 1
            events.append(s.Event(event_type=s.BOOTSTRAPPED))
        if options.aggregated:
            return [s.WatchResponse(event=events)] if events else []
        return [s.WatchResponse(event=[event]) for event in events]

    @staticmethod
    def _follow(
        event: StoreEvent, request: s.WatchRequest, options: s.WatchOptions
    ) -> s.Event | None:
        resource = event.resource
        if (resource.namespace, resource.type) != (request.namespace, request.type):
            return None
        if request.HasField("id"):
            if resource.id != request.id:
                return None
        elif not _matches(resource, options.label_query, options.id_query.regexp):
            return None
        encoded = s.Event(resource=encode_resource(resource), event_type=_EVENT_TYPES[event.kind])
        if event.kind == "updated" and event.old is not None:
            encoded.old.CopyFrom(encode_resource(event.old))
        return encoded
