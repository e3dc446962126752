"""Change tracking: the server's own resourceVersion counter and each resource's history."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_talos.emulator.kubeapi.objects import Object

_HISTORY = 1000  # watch events remembered per collection


class Clock:
    """The server-wide resourceVersion counter (etcd's revision, in a real cluster)."""

    def __init__(self) -> None:
        self.value = 0

    def tick(self) -> int:
        self.value += 1
        return self.value


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _fingerprint(obj: Mapping[str, Any]) -> str:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    return json.dumps({**obj, "metadata": meta}, sort_keys=True, default=str)


def _stamped(obj: Mapping[str, Any], version: int) -> Object:
    copy: Object = json.loads(json.dumps(obj, default=str))
    copy.setdefault("metadata", {})["resourceVersion"] = str(version)
    return copy


@dataclass(frozen=True)
class WatchEvent:
    version: int
    kind: str  # ADDED / MODIFIED / DELETED
    obj: Object


class Collection:
    """One resource (nodes, pods): the current objects and the recent change history."""

    def __init__(self, fetch: Callable[[], list[Object]], clock: Clock) -> None:
        self._fetch, self._clock = fetch, clock
        self._current: dict[tuple[str, str], tuple[str, Object]] = {}
        self.history: deque[WatchEvent] = deque(maxlen=_HISTORY)
        self.oldest = 0  # events at or below this version may have been forgotten

    def sync(self) -> bool:
        """Read the provider and record what changed; True if anything did."""
        fresh = {object_key(obj): obj for obj in self._fetch()}
        changed = False
        for key, obj in fresh.items():
            fingerprint = _fingerprint(obj)
            known = self._current.get(key)
            if known is None or known[0] != fingerprint:
                self._record("ADDED" if known is None else "MODIFIED", key, fingerprint, obj)
                changed = True
        for key in [key for key in self._current if key not in fresh]:
            _, last = self._current.pop(key)
            self._append(
                WatchEvent(self._clock.tick(), "DELETED", _stamped(last, self._clock.value))
            )
            changed = True
        return changed

    def _record(self, kind: str, key: tuple[str, str], fingerprint: str, obj: Object) -> None:
        stamped = _stamped(obj, self._clock.tick())
        self._current[key] = (fingerprint, stamped)
        self._append(WatchEvent(self._clock.value, kind, stamped))

    def _append(self, event: WatchEvent) -> None:
        if len(self.history) == self.history.maxlen:
            self.oldest = self.history[0].version
        self.history.append(event)

    def objects(self) -> list[Object]:
        return [obj for _, obj in sorted(self._current.values(), key=lambda v: object_key(v[1]))]

    def get(self, key: tuple[str, str]) -> Object | None:
        known = self._current.get(key)
        return known[1] if known else None

    def events_after(self, version: int) -> list[WatchEvent] | None:
        """Changes newer than ``version``; ``None`` when that history is already gone."""
        if version < self.oldest:
            return None
        return [event for event in self.history if event.version > version]
