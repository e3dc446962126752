"""What a request asks for: the resource path, label/field selectors and watch parameters."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_talos.emulator.kubeapi.http import BadRequest, status_object
from pytest_talos.emulator.kubeapi.objects import Object
from pytest_talos.emulator.kubeapi.tracking import WatchEvent

_MAX_WATCH_SECONDS = 300.0  # a watch ends after this even if the client asked for longer


def _dig(obj: Mapping[str, Any], path: str) -> str | None:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return None if value is None else str(value)


Matcher = Callable[[Mapping[str, Any]], bool]


def _label_term(term: str) -> Matcher:
    for op in ("!=", "==", "="):
        if op in term:
            key, value = (part.strip() for part in term.split(op, 1))
            if op == "!=":
                return lambda obj: _labels(obj).get(key) != value
            return lambda obj: _labels(obj).get(key) == value
    if any(char in term for char in "()<> ") or not term:
        raise BadRequest(
            f"unable to parse requirement: {term!r} (the emulated API server "
            "supports k=v, k==v, k!=v, k and !k)"
        )
    if term.startswith("!"):
        return lambda obj: term[1:] not in _labels(obj)
    return lambda obj: term in _labels(obj)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _field_term(term: str) -> Matcher:
    for op in ("!=", "==", "="):
        if op in term:
            path, value = (part.strip() for part in term.split(op, 1))
            if op == "!=":
                return lambda obj: _dig(obj, path) != value
            return lambda obj: _dig(obj, path) == value
    raise BadRequest(f"invalid field selector: {term!r}")


def parse_selector(labels: str, fields: str) -> Matcher:
    terms = [_label_term(t.strip()) for t in labels.split(",") if t.strip()]
    terms += [_field_term(t.strip()) for t in fields.split(",") if t.strip()]
    return lambda obj: all(term(obj) for term in terms)


def not_found(resource: str, name: str) -> tuple[int, Object]:
    return 404, status_object(
        404, f'{resource} "{name}" not found', "NotFound", {"name": name, "kind": resource}
    )


NO_ROUTE = (
    404,
    status_object(404, "the server could not find the requested resource", "NotFound", {}),
)


@dataclass(frozen=True)
class Route:
    collection: str  # "nodes" or "pods"
    namespace: str | None
    name: str | None


def parse_route(path: str) -> Route | None:
    parts = [part for part in path.split("/") if part]
    if parts[:2] != ["api", "v1"]:
        return None
    rest = parts[2:]
    if rest and rest[0] in ("nodes", "pods") and len(rest) <= 2:
        return Route(rest[0], None, rest[1] if len(rest) == 2 else None)
    if len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] == "pods":
        return Route("pods", rest[1], rest[3] if len(rest) == 4 else None)
    return None


def truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


def watch_frames(events: Sequence[WatchEvent], matcher: Matcher) -> list[Object]:
    return [{"type": event.kind, "object": event.obj} for event in events if matcher(event.obj)]


def gone_event(version: int) -> Object:
    message = f"too old resource version: {version}"
    return {"type": "ERROR", "object": status_object(410, message, "Expired")}


def parse_resource_version(text: str | None) -> int | None:
    """A watch's starting point; ``None`` (or ``0``) means "send the current state first"."""
    if not text or text == "0":
        return None
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"invalid resourceVersion {text!r}") from None


def parse_watch_seconds(text: str | None) -> float:
    try:
        seconds = float(text) if text else _MAX_WATCH_SECONDS
    except ValueError:
        seconds = _MAX_WATCH_SECONDS
    return max(0.0, min(seconds, _MAX_WATCH_SECONDS))


def api_resources() -> Object:
    def resource(name: str, kind: str, namespaced: bool) -> Object:
        return {
            "name": name,
            "singularName": kind.lower(),
            "namespaced": namespaced,
            "kind": kind,
            "verbs": ["get", "list", "watch"],
        }

    return {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [resource("nodes", "Node", False), resource("pods", "Pod", True)],
    }
