"""The COSI resources of an emulated node: a versioned store keyed by (namespace, type, id)
with cosi's version rules and synchronous change notifications (the COSI Watch servicer
turns them into a stream), and the YAML of a spec (``yaml_spec``)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import yaml

from pytest_talos.emulator.cosi.registry import DEFINITIONS, ResourceDefinition

__all__ = ["EventKind", "RawSpec", "Resource", "ResourceStore", "StoreEvent", "yaml_of"]


# ---- YAML of a spec -----------------------------------------------------------------------


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    # Go's YAML writes multi-line strings as literal blocks; the MachineConfig spec is one.
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


def _spec_dumper(base: type[Any]) -> type[Any]:
    dumper = type("_SpecDumper", (base,), {})
    dumper.add_representer(str, _represent_str)  # type: ignore[attr-defined]
    return dumper


# PyYAML's own emitter, and libyaml's (PyYAML's C extension, where it was built): the same
# text, PyYAML's being a port of libyaml's (tests/emulator/test_emulator_store_yaml.py
# compares them on every resource of a cluster), and libyaml's four times faster. A List
# or Watch marshals every spec it sends, so that is much of the emulator's time.
_PureSpecDumper = _spec_dumper(yaml.SafeDumper)
_SpecDumper = _spec_dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def yaml_of(spec: Any, *, dumper: type[Any] = _SpecDumper) -> str:
    """The ``yaml_spec`` text: cosi marshals the spec with Go's YAML (cosi-project/runtime
    pkg/resource/protobuf/resource.go)."""
    if isinstance(spec, bytes):
        # config/machine_config.go: the MachineConfig spec marshals as one string scalar
        # holding the whole config.
        spec = spec.decode("utf-8", errors="replace")
    if isinstance(spec, str):
        # A bare scalar (a MachineType, a MachineConfig): Go's YAML writes no `...` end
        # marker and indents a literal block by its default 4 spaces.
        text = yaml.dump(spec, Dumper=dumper, default_flow_style=False, indent=4)
        return text.removesuffix("...\n")
    return yaml.dump(spec, Dumper=dumper, sort_keys=False, default_flow_style=False)


@dataclass(frozen=True)
class RawSpec:
    """A spec written by a client (fault cosi-writable): kept exactly as sent."""

    yaml: str
    proto: bytes


# ---- the store ----------------------------------------------------------------------------

EventKind = Literal["created", "updated", "destroyed"]


_EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)


@dataclass(frozen=True)
class Resource:
    namespace: str
    type: str
    id: str
    version: int
    spec: Any
    owner: str = ""
    phase: str = "running"
    created: dt.datetime = _EPOCH
    updated: dt.datetime = _EPOCH
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def definition(self) -> ResourceDefinition:
        return DEFINITIONS[self.type]

    # Resources never change (an update makes a new one), so their encodings are computed
    # once: PyYAML is slow and COSI Get/List/Watch are hot paths.
    @functools.cached_property
    def yaml_spec(self) -> str:
        if isinstance(self.spec, RawSpec):
            return self.spec.yaml
        return yaml_of(self.spec)

    @functools.cached_property
    def proto_spec(self) -> bytes:
        if isinstance(self.spec, RawSpec):
            return self.spec.proto
        definition = DEFINITIONS.get(self.type)
        return definition.encode_proto(self.spec) if definition else b""


@dataclass(frozen=True)
class StoreEvent:
    kind: EventKind
    resource: Resource
    old: Resource | None = None


Listener = Callable[[StoreEvent], None]
Key = tuple[str, str, str]


class ResourceStore:
    """Resources keyed by (namespace, type, id), with cosi's version rules.

    ``put`` creates (version 1) or updates (version + 1). Controllers in Talos skip writes
    whose spec did not change, but machined's direct ``Update`` of the MachineConfig always
    bumps (``internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go`` SetConfig; cosi's
    in-memory Update has no equality short-cut): callers say which with ``always_bump``.
    """

    def __init__(self, now: Callable[[], dt.datetime]) -> None:
        self._now = now
        self._items: dict[Key, Resource] = {}
        self._listeners: list[Listener] = []

    def get(self, namespace: str, type_: str, id_: str) -> Resource | None:
        return self._items.get((namespace, type_, id_))

    def list(self, namespace: str, type_: str) -> list[Resource]:
        found = [r for (ns, t, _), r in self._items.items() if ns == namespace and t == type_]
        return sorted(found, key=lambda r: r.id)

    def __iter__(self) -> Iterator[Resource]:
        return iter(list(self._items.values()))

    def put(
        self,
        namespace: str,
        type_: str,
        id_: str,
        spec: Any,
        *,
        owner: str = "",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        always_bump: bool = False,
    ) -> Resource:
        key = (namespace, type_, id_)
        old = self._items.get(key)
        now = self._now()
        if old is None:
            new = Resource(
                namespace,
                type_,
                id_,
                1,
                spec,
                owner=owner,
                created=now,
                updated=now,
                labels=dict(labels or {}),
                annotations=dict(annotations or {}),
            )
            self._items[key] = new
            self._emit(StoreEvent("created", new))
            return new
        unchanged = old.spec == spec and (labels is None or dict(labels) == dict(old.labels))
        if unchanged and not always_bump:
            return old
        new = replace(
            old,
            version=old.version + 1,
            spec=spec,
            updated=now,
            labels=dict(labels) if labels is not None else old.labels,
        )
        self._items[key] = new
        self._emit(StoreEvent("updated", new, old))
        return new

    def bump(self, namespace: str, type_: str, id_: str) -> Resource | None:
        """An Update with the same spec: version + 1 (fault version-bump-on-reject)."""
        old = self.get(namespace, type_, id_)
        if old is None:
            return None
        return self.put(namespace, type_, id_, old.spec, owner=old.owner, always_bump=True)

    def destroy(self, namespace: str, type_: str, id_: str) -> Resource | None:
        old = self._items.pop((namespace, type_, id_), None)
        if old is not None:
            self._emit(StoreEvent("destroyed", replace(old, phase="tearingDown"), old))
        return old

    def clear(self) -> None:
        """Forget everything without notifications (a node reboot starts from scratch)."""
        self._items.clear()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _emit(self, event: StoreEvent) -> None:
        for listener in list(self._listeners):
            listener(event)
