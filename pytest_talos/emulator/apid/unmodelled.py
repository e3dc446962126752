"""Methods of the Talos API outside the emulator's proto subset, served for their refusals.

A real node serves every method of its API: machined's authorizer
(``internal/app/machined/pkg/system/services/machined.go``, a gRPC interceptor) refuses a
caller its rule does not admit before any handler runs, whatever the method. So an os:reader
asking for an etcd snapshot gets ``PermissionDenied`` ``not authorized``, never grpclib's
``Method not found``. These entries join the method table so that the authorizer of
:class:`~.dispatch.LocalDispatcher` answers them as machined does; the
handlers model the checks they make before touching anything:

* ``storage.StorageService/BlockDeviceWipe``: its rule admits os:reader "for maintenance
  only"; the handler refuses anyone but os:admin on a configured node, then validates and
  wipes each device of the request (``internal/app/storaged/server.go``), so a wipe of no
  device answers an empty success;
* ``EtcdSnapshot``, ``EtcdRemoveMemberByID``: control planes only
  (``machinehelper.CheckControlplane``: Unimplemented ``<api> is only available on control
  plane nodes``); removing a member id no member has answers NotFound with etcd's
  ``etcdserver: member not found`` (``v1alpha1_server.go`` EtcdRemoveMemberByID);
* ``PacketCapture``: an interface without a LinkStatus answers NotFound ``interface %q not
  found`` (``v1alpha1_server.go`` PacketCapture);
* ``machine.ImageService/Remove``: no image store is emulated;
* ``MetaWrite``, ``MetaDelete``: refused in container mode (``checkSupported(runtime.MetaKV)``:
  FailedPrecondition ``method is not supported in container mode``), then a key that is no
  uint8 is InvalidArgument ``key must be a uint8``
  (``internal/app/machined/internal/server/v1alpha1/v1alpha1_meta.go``); no META is emulated.

Which of them a node serves, and who may call them, is its release's
(:mod:`pytest_talos.releases`: v1.12 has no ImageService, and no os:meta:writer).

What these handlers do beyond that (stream a snapshot, capture packets, wipe a device, remove
a member or an image) is not emulated: the caller gets Unimplemented saying so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, MutableMapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2, message_factory
from google.protobuf.message import Message
from grpclib.const import Cardinality, Handler

from pytest_talos._proto.common import common_pb2
from pytest_talos.emulator.apid.servicers import Call
from pytest_talos.emulator.errors import RPCFailure
from pytest_talos.emulator.faults import AuthorizationQuirk
from pytest_talos.emulator.node.identity import etcd_member_id
from pytest_talos.errors import StatusCode
from pytest_talos.talos_api import ResourceType

__all__ = ["UNMODELLED_METHODS", "complete_method_table"]

_M = "/machine.MachineService/"
_WIPE = "/storage.StorageService/BlockDeviceWipe"

_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_UINT64 = descriptor_pb2.FieldDescriptorProto.TYPE_UINT64
_UINT32 = descriptor_pb2.FieldDescriptorProto.TYPE_UINT32
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# Wire-compatible subsets of the request and reply messages (field numbers of
# api/machine/machine.proto, api/machine/image.proto, api/storage/storage.proto); a nested
# message is read as its bytes, which is all the handlers need.
_SHAPES: dict[str, tuple[tuple[str, int, int, int], ...]] = {
    "PacketCaptureRequest": (("interface", 1, _STRING, _OPTIONAL),),
    "EtcdRemoveMemberByIDRequest": (("member_id", 1, _UINT64, _OPTIONAL),),
    "ImageServiceRemoveRequest": (("image_ref", 2, _STRING, _OPTIONAL),),
    "MetaWriteRequest": (("key", 1, _UINT32, _OPTIONAL), ("value", 2, _BYTES, _OPTIONAL)),
    "MetaDeleteRequest": (("key", 1, _UINT32, _OPTIONAL),),
    "BlockDeviceWipeRequest": (("devices", 1, _BYTES, _REPEATED),),
    "RepeatedMessages": (("messages", 1, _BYTES, _REPEATED),),  # every *Response
}


def _messages() -> dict[str, type[Message]]:
    proto = descriptor_pb2.FileDescriptorProto(
        name="pytest_talos_emulator_unmodelled.proto",
        package="pytest_talos.emulator.unmodelled",
        syntax="proto3",
    )
    for name, fields in _SHAPES.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label in fields:
            message.field.add(name=field_name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"pytest_talos.emulator.unmodelled.{name}")
        )
        for name in _SHAPES
    }


_MSG = _messages()


def _not_emulated(call: Call) -> RPCFailure:
    name = call.method.rsplit("/", 1)[-1]
    return RPCFailure(StatusCode.UNIMPLEMENTED, f"{name} is not emulated (pytest-talos emulator)")


def _control_plane_only(call: Call, api: str) -> None:
    """machinehelper.CheckControlplane, run by the handler after the authorizer."""
    if not call.state.identity.controlplane:
        raise RPCFailure(
            StatusCode.UNIMPLEMENTED, f"{api} is only available on control plane nodes"
        )


async def _etcd_snapshot(request: Any, call: Call) -> AsyncIterator[common_pb2.Data]:
    _control_plane_only(call, "etcd snapshot")
    raise _not_emulated(call)
    yield common_pb2.Data()  # pragma: no cover - makes this an async generator


async def _packet_capture(request: Any, call: Call) -> AsyncIterator[common_pb2.Data]:
    interface = str(request.interface)
    if call.state.store.get("network", ResourceType.LINK_STATUSES, interface) is None:
        raise RPCFailure(StatusCode.NOT_FOUND, f'interface "{interface}" not found')
    raise _not_emulated(call)
    yield common_pb2.Data()  # pragma: no cover - makes this an async generator


async def _etcd_remove_member(request: Any, call: Call) -> Message:
    _control_plane_only(call, "etcd remove member")
    members = {etcd_member_id(peer.hostname) for peer in call.state.etcd_members()}
    if int(request.member_id) not in members:
        raise RPCFailure(StatusCode.NOT_FOUND, "etcdserver: member not found")
    raise _not_emulated(call)


async def _image_remove(request: Any, call: Call) -> Message:
    raise _not_emulated(call)


async def _meta_key(request: Any, call: Call) -> Message:
    """v1alpha1_meta.go MetaWrite / MetaDelete, up to where META itself would be touched."""
    if call.state.container:
        raise RPCFailure(
            StatusCode.FAILED_PRECONDITION, "method is not supported in container mode"
        )
    if int(request.key) > 0xFF:
        raise RPCFailure(StatusCode.INVALID_ARGUMENT, "key must be a uint8")
    raise _not_emulated(call)


async def _block_device_wipe(request: Any, call: Call) -> Message:
    """storaged/server.go BlockDeviceWipe on a configured node: os:admin only (the rule's
    os:reader is for maintenance mode), then each device; no device: an empty success."""
    if not call.admin and not call.state.quirk(AuthorizationQuirk.BLOCK_WIPE_SKIPS_ROLE_CHECK):
        raise RPCFailure(StatusCode.PERMISSION_DENIED, "not authorized")
    if list(request.devices):
        raise _not_emulated(call)
    # one BlockDeviceWipe message, its metadata unset
    return _MSG["RepeatedMessages"](messages=[b""])


_Serve = Callable[[Any, Call], Any]

# path -> (cardinality, request type, reply type, handler)
UNMODELLED_METHODS: dict[str, tuple[Cardinality, type[Message], type[Message], _Serve]] = {
    _M + "EtcdSnapshot": (
        Cardinality.UNARY_STREAM,
        empty_pb2.Empty,
        common_pb2.Data,
        _etcd_snapshot,
    ),
    _M + "PacketCapture": (
        Cardinality.UNARY_STREAM,
        _MSG["PacketCaptureRequest"],
        common_pb2.Data,
        _packet_capture,
    ),
    _M + "EtcdRemoveMemberByID": (
        Cardinality.UNARY_UNARY,
        _MSG["EtcdRemoveMemberByIDRequest"],
        _MSG["RepeatedMessages"],
        _etcd_remove_member,
    ),
    "/machine.ImageService/Remove": (
        Cardinality.UNARY_UNARY,
        _MSG["ImageServiceRemoveRequest"],
        empty_pb2.Empty,
        _image_remove,
    ),
    _M + "MetaWrite": (
        Cardinality.UNARY_UNARY,
        _MSG["MetaWriteRequest"],
        _MSG["RepeatedMessages"],
        _meta_key,
    ),
    _M + "MetaDelete": (
        Cardinality.UNARY_UNARY,
        _MSG["MetaDeleteRequest"],
        _MSG["RepeatedMessages"],
        _meta_key,
    ),
    _WIPE: (
        Cardinality.UNARY_UNARY,
        _MSG["BlockDeviceWipeRequest"],
        _MSG["RepeatedMessages"],
        _block_device_wipe,
    ),
}


def complete_method_table(table: MutableMapping[str, tuple[Handler, Any]]) -> None:
    """Add :data:`UNMODELLED_METHODS` the table does not serve yet (the servicers win)."""
    for path, (cardinality, request_type, reply_type, serve) in UNMODELLED_METHODS.items():
        if path not in table:
            table[path] = (Handler(serve, cardinality, request_type, reply_type), serve)
