"""A call served by this node itself: the method's presence, the role rules, then the servicer.

A method the node's release does not serve is answered as its machined's grpc-go server
answers one, Unimplemented ``unknown service S`` or ``unknown method M for service S``, for
every caller: grpc-go answers before any interceptor, so before the authorizer
(:meth:`pytest_talos.releases.Release.unknown_method`). The rules are the release's
(:meth:`pytest_talos.releases.Release.allowed_roles`: v1.13.9's
:data:`~.servicers.ROLE_RULES` where the release table lists no difference;
``internal/app/machined/pkg/system/services/machined.go`` at each tag; a refusal is
``PermissionDenied`` ``not authorized``, ``pkg/grpc/middleware/authz``); some faults widen
them (``FaultProfile.reader_grants``, ``AuthorizationQuirk.READER_REAL_APPLY_RUNS_AS_ADMIN``).

The dispatcher completes the method table it is given with the methods outside the proto
subset (:mod:`.unmodelled`), so the listener and the router, which share that
table, serve them too: a real node's authorizer answers every method of its API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from grpclib.const import Handler, Status
from grpclib.exceptions import GRPCError

from pytest_talos.emulator.apid.servicers import Call, NodeContext
from pytest_talos.emulator.apid.status import as_grpc_error
from pytest_talos.emulator.apid.unmodelled import complete_method_table
from pytest_talos.emulator.errors import ConfigRejected, RPCFailure, ServiceRefused
from pytest_talos.emulator.faults import AuthorizationQuirk
from pytest_talos.talos_api import ADMIN, READER

__all__ = ["LocalDispatcher", "MethodTable"]

MethodTable = dict[str, tuple[Handler, Any]]  # path -> (generated handler spec, servicer method)

_M = "/machine.MachineService/"


class LocalDispatcher:
    """Runs a call on this node's servicers, once the caller's roles allow it."""

    def __init__(self, context: NodeContext, table: MethodTable) -> None:
        self.context = context
        complete_method_table(table)  # shared with the listener and the router
        self._table = table

    async def serve(
        self, path: str, request: Any, roles: frozenset[str], md: Mapping[str, list[str]]
    ) -> AsyncIterator[Any]:
        release = self.context.state.release  # an upgrade changes it
        unknown = release.unknown_method(path)
        if unknown is not None:  # grpc-go answers before any interceptor (releases.py)
            raise GRPCError(Status.UNIMPLEMENTED, unknown)
        if not roles & (release.allowed_roles(path) | self._fault_grants(path)):
            raise GRPCError(Status.PERMISSION_DENIED, "not authorized")  # pkg/grpc/middleware/authz
        if self._reader_applies(path, request, roles):
            roles = roles | {ADMIN}
        spec, method = self._table[path]
        call = Call(path, roles, self.context, md)
        try:
            if spec.cardinality.server_streaming:
                async for reply in method(request, call):
                    yield reply
            else:
                yield await method(request, call)
        except (RPCFailure, ConfigRejected, ServiceRefused) as exc:
            raise as_grpc_error(exc) from None

    def _fault_grants(self, path: str) -> frozenset[str]:
        """Roles a fault adds to a method's rule (healthy: none): os:reader, for the methods
        its rule (servicers.ROLE_RULES) keeps for os:admin that a profile grants it."""
        profiles = self.context.state.fault_profiles()
        if any(path in profile.reader_grants for profile in profiles):
            return frozenset({READER})
        return frozenset()

    def _reader_applies(self, path: str, request: Any, roles: frozenset[str]) -> bool:
        """Quirk READER_REAL_APPLY_RUNS_AS_ADMIN: the handler's admin-only rule (v1alpha1_server.go
        ApplyConfiguration) is kept for dry runs but not for real applies."""
        state = self.context.state
        return (
            path == _M + "ApplyConfiguration"
            and READER in roles
            and ADMIN not in roles
            and not getattr(request, "dry_run", True)
            and state.quirk(AuthorizationQuirk.READER_REAL_APPLY_RUNS_AS_ADMIN)
        )
