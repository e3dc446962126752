"""How cosi's State server decodes a written resource before anything else looks at it.

cosi-project/runtime v1.14.1 (the version Talos v1.13.9's go.mod names)
``pkg/state/protobuf/server/server.go``: Create and Update first turn the request into a
resource (``protobuf.Unmarshal``, then ``protobuf.UnmarshalResource``, the type's own
decoder), and only then call the state, which Talos wraps in its access filter
(``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`` Register:
``state.Filter(resourceState, resources.AccessPolicy(...))``). A resource that does not
decode is answered with the decoder's plain error, gRPC code Unknown, and the access policy
is never asked. Destroy carries only a pointer and decodes nothing.
"""

from __future__ import annotations

import yaml
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError

from pytest_talos._proto.resource.config import config_pb2
from pytest_talos._proto.v1alpha1 import resource_pb2 as r
from pytest_talos.emulator.errors import RPCFailure
from pytest_talos.errors import StatusCode

__all__ = ["decode_written"]

_PHASES = frozenset({"running", "tearingDown"})  # cosi pkg/resource/phase.go ParsePhase
_MACHINE_CONFIGS = "MachineConfigs.config.talos.dev"
# pkg/machinery/config/configloader/internal/decoder/decoder.go: these keys mark a v1alpha1
# document; any other document names its apiVersion and kind.
_V1ALPHA1_KEYS = frozenset({"machine", "cluster", "debug", "persist"})


def _unknown(message: str) -> RPCFailure:
    return RPCFailure(StatusCode.UNKNOWN, message)


def _metadata(resource: r.Resource, present: bool) -> None:
    """cosi pkg/resource/protobuf/resource.go Unmarshal and pkg/resource/metadata.go
    NewMetadataFromProto: metadata and spec must be there, version and phase must parse."""
    if not present or not resource.HasField("metadata"):
        raise _unknown("metadata is missing")
    if not resource.HasField("spec"):
        raise _unknown("spec is missing")
    version = resource.metadata.version
    if version != "undefined":
        try:
            int(version, 10)
        except ValueError:
            raise _unknown(
                f'error parsing version: strconv.ParseInt: parsing "{version}": invalid syntax'
            ) from None
    if resource.metadata.phase not in _PHASES:
        raise _unknown(f"unknown phase: {resource.metadata.phase}")


def _config_documents(raw: bytes) -> int:
    """The documents configloader.NewFromBytes finds (INFERRED beyond the count: the real
    loader also decodes each document strictly into its registered type)."""
    try:
        docs = [doc for doc in yaml.safe_load_all(raw) if doc is not None]
    except yaml.YAMLError as exc:
        raise _unknown(f"decode error: {exc}") from None
    for doc in docs:
        if not isinstance(doc, dict):
            raise _unknown("expected a YAML document")
        if not (_V1ALPHA1_KEYS & set(doc)) and not doc.get("kind"):
            raise _unknown("missing kind")
    return len(docs)


def _machine_config(proto_spec: bytes) -> None:
    """pkg/machinery/resources/config/machine_config.go UnmarshalProto: the spec's
    yaml_marshalled bytes go through configloader.NewFromBytes; no document is ErrNoConfig
    (configloader.go: "config not found")."""
    try:
        spec = config_pb2.MachineConfigSpec.FromString(proto_spec)
    except DecodeError as exc:
        raise _unknown(f"proto: cannot parse invalid wire-format data ({exc})") from None
    if _config_documents(spec.yaml_marshalled) == 0:
        raise _unknown("config not found")


def _protoenc(proto_spec: bytes) -> None:
    """The dynamic types' decoder (cosi pkg/resource/protobuf/registry.go RegisterDynamic:
    protoenc.Unmarshal into the spec struct): malformed wire data fails; an empty spec is a
    zero spec and decodes. Field wire types are not compared with each type's struct
    (INFERRED: not modelled)."""
    try:
        empty_pb2.Empty.FromString(proto_spec)  # keeps every field as unknown: wire check only
    except DecodeError as exc:
        raise _unknown(f"protoenc: cannot decode the spec ({exc})") from None


def decode_written(resource: r.Resource, *, present: bool = True) -> None:
    """Decode a Create's or Update's resource as cosi's State server does, raising the error
    (code Unknown) it answers when the resource does not decode. ``present``: whether the
    request carried a resource at all."""
    _metadata(resource, present)
    if resource.metadata.type == _MACHINE_CONFIGS:
        _machine_config(resource.spec.proto_spec)
    else:
        _protoenc(resource.spec.proto_spec)
