"""A minimal, read-only Kubernetes API server for an emulated control plane (port 6443).

Enough of the API for the official ``kubernetes`` Python client (and ``kubectl get``):
``/version``, discovery (``/api``, ``/api/v1``, ``/apis``), Nodes (get, list, watch) and
Pods (list, watch, get), over HTTP/1.1 with keep-alive and chunked watch streams, behind TLS
that requires a client certificate from the cluster's Kubernetes CA.

The server holds no objects of its own: a :class:`KubeProvider` hands it the current Nodes
and Pods. The server notices changes by comparing what the provider returns (on every
request, on :meth:`KubeAPIServer.notify` and about once a second while a watch is open) and
stamps each changed object with the next value of its own ``resourceVersion`` counter, so
lists and watches agree with each other whatever version the provider wrote.

Where it falls short of a real kube-apiserver is listed in :data:`LIMITS` (the emulator
docs page prints that list).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import hashlib
import json
import os
import ssl
import tempfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

__all__ = [
    "LIMITS",
    "READ_ONLY_MESSAGE",
    "KubeAPIServer",
    "KubeProvider",
    "make_node_object",
    "make_pod_object",
    "render_kubeconfig",
    "server_ssl_context",
    "version_info",
]

Object = dict[str, Any]

LIMITS: tuple[str, ...] = (
    "Read-only: every method but GET is answered 405 `the emulated API server is read-only` "
    "(a Status object, reason MethodNotAllowed).",
    "Only `/version`, `/api`, `/api/v1`, `/apis`, Nodes (get, list, watch) and Pods (get, "
    "list, watch; per namespace or all) exist; anything else is a 404 Status.",
    "Label selectors support `k=v`, `k==v`, `k!=v`, `k` and `!k` (set-based ones are a 400); "
    "field selectors `path=value` and `path!=value` on dotted object paths.",
    "Lists are never paged (`limit`/`continue` are ignored) and always answered as JSON.",
    "`resourceVersion` is the server's own counter, bumped whenever an object the cluster "
    "state reports has changed; an object that stops matching a watch's selector is not "
    "reported as DELETED; watches remember the last 1000 changes per resource (older "
    "versions get a 410 Expired event) and end after at most 300 s.",
    "HTTP/1.1 only (ALPN `http/1.1`); a client certificate from the cluster's Kubernetes CA "
    "is required but carries no authorization: any such client may read everything.",
)

READ_ONLY_MESSAGE = "the emulated API server is read-only"
_HISTORY = 1000  # watch events remembered per collection
_MAX_WATCH_SECONDS = 300.0  # a watch ends after this even if the client asked for longer
_IDLE_SECONDS = 60.0  # an idle keep-alive connection is closed after this
_RESYNC_SECONDS = 1.0  # a watch re-reads the provider this often even without notify()
_MAX_HEADER_LINES = 100
_MAX_BODY = 1 << 20


class KubeProvider(Protocol):
    """Where the API server reads its objects from (the emulated cluster's state)."""

    def nodes(self) -> list[Object]:
        """Every Node, as full ``v1`` Node objects (see :func:`make_node_object`)."""
        ...

    def pods(self, namespace: str | None) -> list[Object]:
        """Pods of ``namespace``, or of every namespace when ``None``."""
        ...

    def version(self) -> Object:
        """The ``/version`` document (see :func:`version_info`)."""
        ...


# --------------------------------------------------------------------------- object builders


def _timestamp(value: dt.datetime | str) -> str:
    if isinstance(value, str):
        return value
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(*parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _condition(
    kind: str, status: bool, reason: str, message: str, when: str
) -> dict[str, str]:
    return {
        "type": kind, "status": "True" if status else "False", "reason": reason,
        "message": message, "lastHeartbeatTime": when, "lastTransitionTime": when,
    }


def _node_addresses(name: str, addresses: Sequence[str | tuple[str, str]]) -> list[Object]:
    result = [
        {"type": "InternalIP", "address": item} if isinstance(item, str)
        else {"type": item[0], "address": item[1]}
        for item in addresses
    ]
    if not any(entry["type"] == "Hostname" for entry in result):
        result.append({"type": "Hostname", "address": name})
    return result


def make_node_object(
    name: str,
    *,
    labels: Mapping[str, str],
    ready: bool,
    addresses: Sequence[str | tuple[str, str]],
    kubelet_version: str,
    pod_cidr: str,
    resource_version: str | int,
    creation_ts: dt.datetime | str,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready_reason: str = "",
    ready_message: str = "",
    heartbeat_ts: dt.datetime | str | None = None,
    annotations: Mapping[str, str] | None = None,
    os_image: str = "Talos (v1.13.9)",
    kernel_version: str = "6.18.24-talos",
    container_runtime_version: str = "containerd://2.2.3",
    architecture: str = "amd64",
) -> Object:
    """A ``v1`` Node as a Talos 1.13 kubelet reports it.

    ``addresses`` are InternalIPs (plain strings) or ``(type, address)`` pairs; a
    ``Hostname`` address is added when missing. ``labels`` are merged over the labels
    kubelet always sets (arch, os, hostname). ``taints`` are ``{key, value?, effect}``.
    :class:`KubeAPIServer` replaces ``resourceVersion`` with its own counter when serving.
    """
    version = kubelet_version if kubelet_version.startswith("v") else f"v{kubelet_version}"
    created = _timestamp(creation_ts)
    beat = _timestamp(heartbeat_ts) if heartbeat_ts is not None else created
    base_labels = {
        "beta.kubernetes.io/arch": architecture, "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": architecture, "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
    }
    spec: Object = {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}
    if taints:
        spec["taints"] = [dict(taint) for taint in taints]
    if unschedulable:
        spec["unschedulable"] = True
    ready_condition = _condition(
        "Ready", ready,
        ready_reason or ("KubeletReady" if ready else "KubeletNotReady"),
        ready_message or ("kubelet is posting ready status" if ready else
                          "container runtime network not ready: NetworkReady=false"),
        beat,
    )
    capacity = {"cpu": "2", "ephemeral-storage": "10218772Ki", "hugepages-2Mi": "0",
                "memory": "2048Mi", "pods": "110"}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": _uid("node", name),
            "resourceVersion": str(resource_version),
            "creationTimestamp": created,
            "labels": {**base_labels, **labels},
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **(annotations or {}),
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "memory": "1848Mi"},
            "conditions": [
                _condition("MemoryPressure", False, "KubeletHasSufficientMemory",
                           "kubelet has sufficient memory available", beat),
                _condition("DiskPressure", False, "KubeletHasNoDiskPressure",
                           "kubelet has no disk pressure", beat),
                _condition("PIDPressure", False, "KubeletHasSufficientPID",
                           "kubelet has sufficient PID available", beat),
                ready_condition,
            ],
            "addresses": _node_addresses(name, addresses),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _uid("machine-id", name).replace("-", ""),
                "systemUUID": _uid("system-uuid", name),
                "bootID": _uid("boot-id", name),
                "kernelVersion": kernel_version,
                "osImage": os_image,
                "containerRuntimeVersion": container_runtime_version,
                "kubeletVersion": version,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": architecture,
            },
        },
    }


def make_pod_object(
    name: str,
    namespace: str,
    *,
    node_name: str,
    image: str,
    resource_version: str | int,
    creation_ts: dt.datetime | str,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    host_ip: str = "",
    pod_ip: str = "",
    host_network: bool = False,
    restart_count: int = 0,
    container_name: str = "",
) -> Object:
    """A running (or not ready) one-container ``v1`` Pod, e.g. a kube-system static pod.

    The container is named ``container_name``, or the pod name without a ``-<node>``
    suffix (``kube-apiserver-cp-1`` on ``cp-1`` runs container ``kube-apiserver``).
    """
    created = _timestamp(creation_ts)
    container = container_name or name.removesuffix(f"-{node_name}")
    status_word = "True" if ready else "False"
    pod_ips = [{"ip": pod_ip}] if pod_ip else []
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": namespace, "uid": _uid("pod", namespace, name),
            "resourceVersion": str(resource_version), "creationTimestamp": created,
            "labels": dict(labels or {}),
        },
        "spec": {
            "nodeName": node_name, "hostNetwork": host_network, "restartPolicy": "Always",
            "containers": [{"name": container, "image": image}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": kind, "status": "True" if kind == "PodScheduled" else status_word,
                 "lastTransitionTime": created}
                for kind in ("PodReadyToStartContainers", "Initialized", "Ready",
                             "ContainersReady", "PodScheduled")
            ],
            "hostIP": host_ip, "podIP": pod_ip, "podIPs": pod_ips, "startTime": created,
            "containerStatuses": [{
                "name": container, "image": image, "imageID": "", "ready": ready,
                "started": ready, "restartCount": restart_count,
                "containerID": f"containerd://{hashlib.sha256(name.encode()).hexdigest()}",
                "state": {"running": {"startedAt": created}},
            }],
            "qosClass": "Burstable",
        },
    }


def version_info(
    kubernetes_version: str = "1.36.0",
    *,
    git_commit: str = "",
    build_date: str = "2026-04-22T00:00:00Z",
    go_version: str = "go1.25.9",
    platform: str = "linux/amd64",
) -> Object:
    """The ``/version`` document of a kube-apiserver of ``kubernetes_version``."""
    version = kubernetes_version.removeprefix("v")
    major, minor = version.split(".")[:2]
    commit = git_commit or hashlib.sha1(version.encode(), usedforsecurity=False).hexdigest()
    return {
        "major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
        "minCompatibilityMajor": major, "minCompatibilityMinor": str(max(int(minor) - 1, 0)),
        "gitVersion": f"v{version}", "gitCommit": commit, "gitTreeState": "clean",
        "buildDate": build_date, "goVersion": go_version, "compiler": "gc",
        "platform": platform,
    }


def render_kubeconfig(
    *, cluster_name: str, server: str, ca_pem: bytes, client_cert_pem: bytes,
    client_key_pem: bytes, namespace: str = "default",
) -> bytes:
    """An admin kubeconfig as Talos hands it out (context ``admin@<cluster>``).

    It carries the client key by design (it is a credential, like a talosconfig); the
    caller decides where it goes.
    """
    user = f"admin@{cluster_name}"

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {
            "server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(client_cert_pem),
            "client-key-data": b64(client_key_pem)}}],
        "contexts": [{"context": {"cluster": cluster_name, "namespace": namespace,
                                  "user": user}, "name": user}],
        "current-context": user,
    }
    return yaml.safe_dump(document, sort_keys=False, width=1 << 16).encode("utf-8")


def _write_private(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def server_ssl_context(*, cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes) -> ssl.SSLContext:
    """A TLS server context that requires a client certificate signed by ``client_ca_pem``.

    Python's ``ssl`` loads keys only from files: the key goes through an anonymous in-memory
    file where the platform has one (Linux ``memfd``), otherwise through a private temporary
    directory removed at once.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=client_ca_pem.decode("ascii"))
    context.set_alpn_protocols(["http/1.1"])  # no HTTP/2 here: Go clients must not try it
    chain = cert_pem + b"\n" + key_pem
    if _load_chain_from_memory(context, chain):
        return context
    with tempfile.TemporaryDirectory() as directory:
        context.load_cert_chain(_write_private(directory, "server.pem", chain))
    return context


def _load_chain_from_memory(context: ssl.SSLContext, chain: bytes) -> bool:
    if not hasattr(os, "memfd_create"):
        return False
    fd = os.memfd_create("kubeapi-server-cert", os.MFD_CLOEXEC)
    try:
        os.write(fd, chain)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    except FileNotFoundError:  # no /proc: fall back to a private temporary file
        return False
    finally:
        os.close(fd)
    return True


# --------------------------------------------------------------------------- change tracking


class _Clock:
    """The server-wide resourceVersion counter (etcd's revision, in a real cluster)."""

    def __init__(self) -> None:
        self.value = 0

    def tick(self) -> int:
        self.value += 1
        return self.value


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
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
class _Event:
    version: int
    kind: str  # ADDED / MODIFIED / DELETED
    obj: Object


class _Collection:
    """One resource (nodes, pods): the current objects and the recent change history."""

    def __init__(self, fetch: Callable[[], list[Object]], clock: _Clock) -> None:
        self._fetch, self._clock = fetch, clock
        self._current: dict[tuple[str, str], tuple[str, Object]] = {}
        self.history: deque[_Event] = deque(maxlen=_HISTORY)
        self.oldest = 0  # events at or below this version may have been forgotten

    def sync(self) -> bool:
        """Read the provider and record what changed; True if anything did."""
        fresh = {_key(obj): obj for obj in self._fetch()}
        changed = False
        for key, obj in fresh.items():
            fingerprint = _fingerprint(obj)
            known = self._current.get(key)
            if known is None or known[0] != fingerprint:
                self._record("ADDED" if known is None else "MODIFIED", key, fingerprint, obj)
                changed = True
        for key in [key for key in self._current if key not in fresh]:
            _, last = self._current.pop(key)
            self._append(_Event(self._clock.tick(), "DELETED", _stamped(last, self._clock.value)))
            changed = True
        return changed

    def _record(self, kind: str, key: tuple[str, str], fingerprint: str, obj: Object) -> None:
        stamped = _stamped(obj, self._clock.tick())
        self._current[key] = (fingerprint, stamped)
        self._append(_Event(self._clock.value, kind, stamped))

    def _append(self, event: _Event) -> None:
        if len(self.history) == self.history.maxlen:
            self.oldest = self.history[0].version
        self.history.append(event)

    def objects(self) -> list[Object]:
        return [obj for _, obj in sorted(self._current.values(), key=lambda v: _key(v[1]))]

    def get(self, key: tuple[str, str]) -> Object | None:
        known = self._current.get(key)
        return known[1] if known else None

    def events_after(self, version: int) -> list[_Event] | None:
        """Changes newer than ``version``; ``None`` when that history is already gone."""
        if version < self.oldest:
            return None
        return [event for event in self.history if event.version > version]


# --------------------------------------------------------------------------- selectors


class _BadRequest(Exception):
    pass


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
        raise _BadRequest(f"unable to parse requirement: {term!r} (the emulated API server "
                          "supports k=v, k==v, k!=v, k and !k)")
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
    raise _BadRequest(f"invalid field selector: {term!r}")


def _selector(labels: str, fields: str) -> Matcher:
    terms = [_label_term(t.strip()) for t in labels.split(",") if t.strip()]
    terms += [_field_term(t.strip()) for t in fields.split(",") if t.strip()]
    return lambda obj: all(term(obj) for term in terms)


# --------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    query: dict[str, str]
    keep_alive: bool


def _status(code: int, message: str, reason: str, details: Object | None = None) -> Object:
    status: Object = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    }
    if details is not None:
        status["details"] = details
    return status


def _not_found(resource: str, name: str) -> tuple[int, Object]:
    return 404, _status(404, f'{resource} "{name}" not found', "NotFound",
                        {"name": name, "kind": resource})


_NO_ROUTE = (404, _status(404, "the server could not find the requested resource", "NotFound",
                          {}))


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    line = await reader.readline()
    if not line:
        return None
    try:
        method, target, version = line.decode("latin-1").split()
    except ValueError:
        raise _BadRequest("malformed request line") from None
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADER_LINES):
        raw = (await reader.readline()).decode("latin-1").strip()
        if not raw:
            break
        name, _, value = raw.partition(":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise _BadRequest("too many header lines")
    await _skip_body(reader, headers)
    split = urlsplit(target)
    query = {key: values[-1] for key, values in parse_qs(split.query).items()}
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    return _Request(method.upper(), unquote(split.path), query, keep_alive)


async def _skip_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise _BadRequest("chunked request bodies are not supported")
    length = int(headers.get("content-length", "0") or 0)
    if length > _MAX_BODY:
        raise _BadRequest("request body too large")
    if length:
        await reader.readexactly(length)


def _head(code: int, extra: Sequence[tuple[str, str]], keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {code} {HTTPStatus(code).phrase}", "Cache-Control: no-cache, private",
             "Content-Type: application/json"]
    lines += [f"{name}: {value}" for name, value in extra]
    lines.append(f"Connection: {'keep-alive' if keep_alive else 'close'}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send_json(
    writer: asyncio.StreamWriter, code: int, body: Object, keep_alive: bool
) -> None:
    payload = json.dumps(body).encode("utf-8")
    writer.write(_head(code, [("Content-Length", str(len(payload)))], keep_alive) + payload)
    await writer.drain()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n"


# --------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class _Route:
    collection: str  # "nodes" or "pods"
    namespace: str | None
    name: str | None


def _route(path: str) -> _Route | None:
    parts = [part for part in path.split("/") if part]
    if parts[:2] != ["api", "v1"]:
        return None
    rest = parts[2:]
    if rest and rest[0] in ("nodes", "pods") and len(rest) <= 2:
        return _Route(rest[0], None, rest[1] if len(rest) == 2 else None)
    if len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] == "pods":
        return _Route("pods", rest[1], rest[3] if len(rest) == 4 else None)
    return None


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


class KubeAPIServer:
    """The emulated kube-apiserver of one control-plane node.

    Runs on the caller's asyncio loop; :meth:`notify` may be called from any thread.
    """

    def __init__(
        self, host: str, port: int, *, server_ssl: ssl.SSLContext, provider: KubeProvider
    ) -> None:
        self.host, self._requested_port = host, port
        self._ssl, self._provider = server_ssl, provider
        clock = _Clock()
        self._collections = {
            "nodes": _Collection(provider.nodes, clock),
            "pods": _Collection(lambda: provider.pods(None), clock),
        }
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port (useful after asking for port 0)."""
        if self._server is None or not self._server.sockets:
            return self._requested_port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    async def start(self) -> None:
        """Bind and serve; returns once the socket listens."""
        self._loop = asyncio.get_running_loop()
        self._sync()
        self._server = await asyncio.start_server(
            self._handle, self.host, self._requested_port, ssl=self._ssl,
            ssl_handshake_timeout=10.0, reuse_address=True,
        )

    async def stop(self) -> None:
        """Stop listening and end every open connection (watches included)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def notify(self) -> None:
        """The provider's objects may have changed: re-read them and wake the watchers."""
        if self._loop is None or self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._sync()
        else:
            self._loop.call_soon_threadsafe(self._sync)

    def _sync(self) -> None:
        changed = [collection.sync() for collection in self._collections.values()]
        if any(changed):
            self._changed.set()
            self._changed = asyncio.Event()

    # ----------------------------------------------------------------- connection handling

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve_connection(reader, writer)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, _BadRequest):
            pass  # a broken or idle client: just drop the connection
        except asyncio.CancelledError:
            writer.transport.abort()  # stopping: no TLS goodbye with an idle client
            raise
        finally:
            if task is not None:
                self._handlers.discard(task)
            if not writer.transport.is_closing():
                writer.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), 2.0)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            try:
                request = await asyncio.wait_for(_read_request(reader), _IDLE_SECONDS)
            except _BadRequest as exc:
                await _send_json(writer, 400, _status(400, str(exc), "BadRequest"), False)
                return
            if request is None:
                return
            await self._respond(request, writer)
            if not request.keep_alive:
                return

    async def _respond(self, request: _Request, writer: asyncio.StreamWriter) -> None:
        if request.method != "GET":
            body = _status(405, READ_ONLY_MESSAGE, "MethodNotAllowed")
            await _send_json(writer, 405, body, request.keep_alive)
            return
        self._sync()
        route = _route(request.path)
        if route is not None and route.name is None and _truthy(request.query.get("watch")):
            try:
                matcher = self._matcher(request, route)
                _resource_version(request.query.get("resourceVersion"))
            except _BadRequest as exc:
                body = _status(400, str(exc), "BadRequest")
                await _send_json(writer, 400, body, request.keep_alive)
                return
            await self._watch(writer, route, matcher, request)
            return
        try:
            code, body = self._get(request, route)
        except _BadRequest as exc:
            code, body = 400, _status(400, str(exc), "BadRequest")
        await _send_json(writer, code, body, request.keep_alive)

    def _get(self, request: _Request, route: _Route | None) -> tuple[int, Object]:
        path = request.path.rstrip("/") or "/"
        static = {
            "/version": lambda: self._provider.version(),
            "/api": self._api_versions,
            "/apis": lambda: {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
            "/api/v1": _api_resources,
        }.get(path)
        if static is not None:
            return 200, static()
        if route is None:
            return _NO_ROUTE
        if route.name is not None:
            return self._get_one(route)
        return 200, self._list(route, self._matcher(request, route))

    def _api_versions(self) -> Object:
        return {
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
            ],
        }

    def _get_one(self, route: _Route) -> tuple[int, Object]:
        assert route.name is not None
        obj = self._collections[route.collection].get((route.namespace or "", route.name))
        if obj is None:
            return _not_found(route.collection, route.name)
        return 200, obj

    def _matcher(self, request: _Request, route: _Route) -> Matcher:
        base = _selector(request.query.get("labelSelector", ""),
                         request.query.get("fieldSelector", ""))
        if route.namespace is None:
            return base
        namespace = route.namespace
        return lambda obj: _key(obj)[0] == namespace and base(obj)

    def _list(self, route: _Route, matcher: Matcher) -> Object:
        kind = "NodeList" if route.collection == "nodes" else "PodList"
        items = [
            {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
            for obj in self._collections[route.collection].objects() if matcher(obj)
        ]
        return {"kind": kind, "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._clock.value)}, "items": items}

    # ----------------------------------------------------------------- watch

    async def _watch(
        self, writer: asyncio.StreamWriter, route: _Route, matcher: Matcher, request: _Request
    ) -> None:
        collection = self._collections[route.collection]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _watch_seconds(request.query.get("timeoutSeconds"))
        since = _resource_version(request.query.get("resourceVersion"))
        writer.write(_head(200, [("Transfer-Encoding", "chunked")], request.keep_alive))
        if since is None:
            backlog: list[_Event] | None = [
                _Event(self._clock.value, "ADDED", obj) for obj in collection.objects()
            ]
        else:
            backlog = collection.events_after(since)
        cursor = self._clock.value
        if backlog is None:
            await self._send_events(writer, [_gone(since or 0)])
        else:
            await self._send_events(writer, _frames(backlog, matcher))
            while (remaining := deadline - loop.time()) > 0:
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(remaining, _RESYNC_SECONDS))
                self._sync()
                fresh = collection.events_after(cursor)
                cursor = self._clock.value
                if fresh is None:
                    await self._send_events(writer, [_gone(cursor)])
                    break
                await self._send_events(writer, _frames(fresh, matcher))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    async def _send_events(writer: asyncio.StreamWriter, frames: Sequence[Object]) -> None:
        for frame in frames:
            writer.write(_chunk(json.dumps(frame).encode("utf-8") + b"\n"))
        await writer.drain()


def _frames(events: Sequence[_Event], matcher: Matcher) -> list[Object]:
    return [{"type": event.kind, "object": event.obj} for event in events if matcher(event.obj)]


def _gone(version: int) -> Object:
    message = f"too old resource version: {version}"
    return {"type": "ERROR", "object": _status(410, message, "Expired")}


def _resource_version(text: str | None) -> int | None:
    """A watch's starting point; ``None`` (or ``0``) means "send the current state first"."""
    if not text or text == "0":
        return None
    try:
        return int(text)
    except ValueError:
        raise _BadRequest(f"invalid resourceVersion {text!r}") from None


def _watch_seconds(text: str | None) -> float:
    try:
        seconds = float(text) if text else _MAX_WATCH_SECONDS
    except ValueError:
        seconds = _MAX_WATCH_SECONDS
    return max(0.0, min(seconds, _MAX_WATCH_SECONDS))


def _api_resources() -> Object:
    def resource(name: str, kind: str, namespaced: bool) -> Object:
        return {"name": name, "singularName": kind.lower(), "namespaced": namespaced,
                "kind": kind, "verbs": ["get", "list", "watch"]}

    return {"kind": "APIResourceList", "groupVersion": "v1",
            "resources": [resource("nodes", "Node", False), resource("pods", "Pod", True)]}
