"""machine.MachineService, the half that changes things or hands out credentials:
ApplyConfiguration, Bootstrap, etcd members, Kubeconfig, client configuration and the
lifecycle calls (handlers in internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go;
container mode: internal/app/machined/pkg/runtime/v1alpha1/platform/container)."""

from __future__ import annotations

import gzip
import tarfile
import time
from collections.abc import AsyncIterator

from google.protobuf import empty_pb2

from pytest_talos._proto.common import common_pb2
from pytest_talos._proto.machine import machine_pb2 as m
from pytest_talos.emulator.apid.servicers import Call, RPCFailure, require_control_plane
from pytest_talos.emulator.faults import MachineApiQuirk
from pytest_talos.emulator.node.apply import ApplyRequest
from pytest_talos.emulator.node.identity import etcd_member_id
from pytest_talos.errors import StatusCode

__all__ = ["MachineOpsServicer", "kubeconfig_archive"]

CHUNK = 64 * 1024


def kubeconfig_archive(kubeconfig: bytes | None) -> bytes:
    """The Kubeconfig reply: a .tar.gz holding one regular file ``kubeconfig``, mode 0600,
    as machined writes it (v1alpha1_server.go Kubeconfig): the tar writer is never closed,
    only the gzip one, so the stream ends right after the file's bytes, with no padding to
    a 512-byte block and no end-of-archive blocks. INFERRED: the header's format (Go picks
    one by the header's fields; USTAR here)."""
    if kubeconfig is None:  # quirk KUBECONFIG_WITHHELD: a whole archive with no file
        return gzip.compress(bytes(2 * tarfile.BLOCKSIZE))
    info = tarfile.TarInfo("kubeconfig")
    info.size, info.mode, info.mtime = len(kubeconfig), 0o600, int(time.time())
    return gzip.compress(info.tobuf(tarfile.USTAR_FORMAT) + kubeconfig)


class MachineOpsServicer:
    """ApplyConfiguration, Bootstrap, EtcdMemberList, Kubeconfig, client config, lifecycle."""

    async def ApplyConfiguration(
        self, request: m.ApplyConfigurationRequest, call: Call
    ) -> m.ApplyConfigurationResponse:
        timeout = None  # absent: the node's default; present (even 0s): used as sent
        if request.HasField("try_mode_timeout"):
            timeout = request.try_mode_timeout.ToTimedelta().total_seconds()
        result = call.state.apply_configuration(
            ApplyRequest(
                data=request.data,
                mode=m.ApplyConfigurationRequest.Mode.Name(request.mode),
                dry_run=request.dry_run,
                try_timeout=timeout,
                admin=call.admin,
            )
        )
        reply = m.ApplyConfiguration(
            warnings=result.warnings,
            mode=result.mode,
            mode_details=result.mode_details,
        )
        return m.ApplyConfigurationResponse(messages=[reply])

    async def Bootstrap(self, request: m.BootstrapRequest, call: Call) -> m.BootstrapResponse:
        require_control_plane(call)
        # The emulated cluster is bootstrapped when it starts (the etcd error text).
        raise RPCFailure(StatusCode.ALREADY_EXISTS, "etcd data directory is not empty")

    async def EtcdMemberList(
        self, request: m.EtcdMemberListRequest, call: Call
    ) -> m.EtcdMemberListResponse:
        require_control_plane(call)
        members = [
            m.EtcdMember(
                id=etcd_member_id(peer.hostname),
                hostname=peer.hostname,
                peer_urls=[f"https://{peer.address}:2380"],
                client_urls=[f"https://{peer.address}:2379"],
                is_learner=False,
            )
            for peer in call.state.etcd_members()
        ]
        return m.EtcdMemberListResponse(messages=[m.EtcdMembers(members=members)])

    async def Kubeconfig(
        self, request: empty_pb2.Empty, call: Call
    ) -> AsyncIterator[common_pb2.Data]:
        require_control_plane(call)
        state = call.state
        withheld = state.quirk(MachineApiQuirk.KUBECONFIG_WITHHELD)
        archive = kubeconfig_archive(None if withheld else call.node.kubeconfig())
        for start in range(0, len(archive), CHUNK):
            yield common_pb2.Data(bytes=archive[start : start + CHUNK])

    async def GenerateClientConfiguration(
        self, request: m.GenerateClientConfigurationRequest, call: Call
    ) -> m.GenerateClientConfigurationResponse:
        require_control_plane(call)
        ttl = request.crt_ttl.ToTimedelta().total_seconds()
        if ttl <= 0:
            raise RPCFailure(StatusCode.INVALID_ARGUMENT, "crt_ttl should be positive")
        generated = call.node.client_configuration(list(request.roles), ttl)
        reply = m.GenerateClientConfiguration(
            ca=generated.ca,
            crt=generated.crt,
            key=generated.key,
            talosconfig=generated.talosconfig,
        )
        return m.GenerateClientConfigurationResponse(messages=[reply])

    # ---- lifecycle: FailedPrecondition in container mode (runtime/v1alpha1/platform mode) -

    async def Reboot(self, request: m.RebootRequest, call: Call) -> m.RebootResponse:
        actor = call.state.reboot()
        return m.RebootResponse(messages=[m.Reboot(actor_id=actor)])

    async def Shutdown(self, request: m.ShutdownRequest, call: Call) -> m.ShutdownResponse:
        actor = call.state.lifecycle.shutdown()
        return m.ShutdownResponse(messages=[m.Shutdown(actor_id=actor)])

    async def Reset(self, request: m.ResetRequest, call: Call) -> m.ResetResponse:
        actor = call.state.lifecycle.reset()
        return m.ResetResponse(messages=[m.Reset(actor_id=actor)])

    async def Upgrade(self, request: m.UpgradeRequest, call: Call) -> m.UpgradeResponse:
        actor = call.state.upgrade(request.image)
        reply = m.Upgrade(ack="Upgrade request received", actor_id=actor)
        return m.UpgradeResponse(messages=[reply])

    async def Rollback(self, request: m.RollbackRequest, call: Call) -> m.RollbackResponse:
        call.state.rollback()
        return m.RollbackResponse(messages=[m.Rollback()])
