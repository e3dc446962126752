"""The emulated Kubernetes API server, driven by the official ``kubernetes`` client.

Real TCP and real mutual TLS on 127.0.0.1 with an ECDSA P-256 Kubernetes CA (as Talos
issues it); the server runs on an asyncio loop in a background thread because the client
is synchronous. Every request carries a timeout.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import ssl
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import pytest
import urllib3
import yaml

from pytest_talos.emulator import kubeapi
from pytest_talos.emulator.kubeapi import (
    READ_ONLY_MESSAGE,
    KubeAPIServer,
    make_node_object,
    make_pod_object,
    render_kubeconfig,
    server_ssl_context,
    version_info,
)
from pytest_talos.keyfile import load_chain
from pytest_talos.pki import (
    CertAndKey,
    CertificateAuthority,
    issue_client_cert,
    issue_server_cert,
)

# The client's generated models make every field Optional; the tests read them untyped.
k8s: Any = kubernetes.client
k8s_config: Any = kubernetes.config
k8s_watch: Any = kubernetes.watch

T = TypeVar("T")
TIMEOUT = 5.0
CREATED = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)


# --------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class KubePKI:
    ca: CertificateAuthority
    server: CertAndKey
    admin: CertAndKey


@pytest.fixture(scope="module")
def pki() -> KubePKI:
    ca = CertificateAuthority.generate(organization="kubernetes", key_type="ecdsa")
    server = issue_server_cert(
        ca, hostname="kube-apiserver", ips=["127.0.0.1"], dns=["kubernetes"], key_type="ecdsa"
    )
    admin = issue_client_cert(ca, roles=["system:masters"], common_name="admin", key_type="ecdsa")
    return KubePKI(ca, server, admin)


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    address: str = "10.5.0.2",
) -> dict[str, Any]:
    return make_node_object(
        name,
        labels=labels or {},
        ready=ready,
        addresses=[address],
        kubelet_version="1.36.0",
        pod_cidr="10.244.0.0/24",
        resource_version=1,
        creation_ts=CREATED,
    )


def pod(name: str, namespace: str, node_name: str) -> dict[str, Any]:
    return make_pod_object(
        name,
        namespace,
        node_name=node_name,
        image="registry.k8s.io/kube-apiserver:v1.36.0",
        resource_version=1,
        creation_ts=CREATED,
        labels={"tier": "control-plane"},
        host_ip="10.5.0.2",
        pod_ip="10.5.0.2",
        host_network=True,
    )


class FakeProvider:
    """Holds Nodes and Pods the way the emulator's state would; safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes = {
            "cp-1": node("cp-1", labels={"node-role.kubernetes.io/control-plane": ""}),
            "worker-1": node("worker-1", labels={"tier": "batch"}, address="10.5.0.3"),
        }
        self._pods = [
            pod("kube-apiserver-cp-1", "kube-system", "cp-1"),
            pod("web-1", "default", "worker-1"),
        ]

    def nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._nodes.values())

    def pods(self, namespace: str | None) -> list[dict[str, Any]]:
        with self._lock:
            return [p for p in self._pods if namespace in (None, p["metadata"]["namespace"])]

    def version(self) -> dict[str, Any]:
        return version_info("1.36.0")

    def put_node(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self._nodes[obj["metadata"]["name"]] = obj

    def delete_node(self, name: str) -> None:
        with self._lock:
            del self._nodes[name]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, daemon=True)
    thread.start()
    yield event_loop
    event_loop.call_soon_threadsafe(event_loop.stop)
    thread.join(TIMEOUT)
    event_loop.close()


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, loop).result(TIMEOUT)


@dataclass
class Running:
    server: KubeAPIServer
    provider: FakeProvider
    kubeconfig: Path
    api: Any  # kubernetes.client.ApiClient

    @property
    def core(self) -> Any:  # kubernetes.client.CoreV1Api
        return k8s.CoreV1Api(self.api)


def start_server(
    loop: asyncio.AbstractEventLoop, pki: KubePKI, provider: FakeProvider
) -> KubeAPIServer:
    context = server_ssl_context(
        cert_pem=pki.server.cert_pem, key_pem=pki.server.key_pem, client_ca_pem=pki.ca.cert_pem
    )

    async def create() -> KubeAPIServer:
        server = KubeAPIServer("127.0.0.1", 0, server_ssl=context, provider=provider)
        await server.start()
        return server

    return run(loop, create())


@pytest.fixture
def running(loop: asyncio.AbstractEventLoop, pki: KubePKI, tmp_path: Path) -> Iterator[Running]:
    provider = FakeProvider()
    server = start_server(loop, pki, provider)
    path = tmp_path / "kubeconfig"
    path.write_bytes(
        render_kubeconfig(
            cluster_name="talos-default",
            server=server.url,
            ca_pem=pki.ca.cert_pem,
            client_cert_pem=pki.admin.cert_pem,
            client_key_pem=pki.admin.key_pem,
        )
    )
    api = k8s_config.new_client_from_config(config_file=str(path))
    try:
        yield Running(server, provider, path, api)
    finally:
        api.rest_client.pool_manager.clear()
        api.close()
        run(loop, server.stop())


def status_of(exc: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


# --------------------------------------------------------------------------- reads


def test_version_endpoint(running: Running) -> None:
    info = k8s.VersionApi(running.api).get_code(_request_timeout=TIMEOUT)
    assert info.git_version == "v1.36.0"
    assert (info.major, info.minor) == ("1", "36")
    assert info.platform == "linux/amd64"


def test_kubeconfig_names_the_talos_admin_context(running: Running) -> None:
    document = yaml.safe_load(running.kubeconfig.read_text())
    assert document["current-context"] == "admin@talos-default"
    assert document["clusters"][0]["cluster"]["server"] == running.server.url


def test_list_nodes_returns_realistic_nodes(running: Running) -> None:
    nodes = running.core.list_node(_request_timeout=TIMEOUT)
    assert [n.metadata.name for n in nodes.items] == ["cp-1", "worker-1"]
    assert int(nodes.metadata.resource_version) >= 2
    cp = nodes.items[0]
    assert cp.metadata.labels["node-role.kubernetes.io/control-plane"] == ""
    assert cp.metadata.labels["kubernetes.io/hostname"] == "cp-1"
    conditions = {c.type: c for c in cp.status.conditions}
    assert set(conditions) == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}
    assert conditions["Ready"].status == "True"
    assert conditions["Ready"].reason == "KubeletReady"
    info = cp.status.node_info
    assert (info.os_image, info.kubelet_version) == ("Talos (v1.13.9)", "v1.36.0")
    assert info.container_runtime_version == "containerd://2.2.3"
    assert info.kernel_version == "6.18.24-talos"
    assert {(a.type, a.address) for a in cp.status.addresses} == {
        ("InternalIP", "10.5.0.2"),
        ("Hostname", "cp-1"),
    }
    assert cp.spec.pod_cidr == "10.244.0.0/24"


def test_list_nodes_with_label_selectors(running: Running) -> None:
    def names(selector: str) -> list[str]:
        found = running.core.list_node(label_selector=selector, _request_timeout=TIMEOUT)
        return [n.metadata.name for n in found.items]

    assert names("tier=batch") == ["worker-1"]
    assert names("tier==batch,kubernetes.io/os=linux") == ["worker-1"]
    assert names("tier!=batch") == ["cp-1"]
    assert names("node-role.kubernetes.io/control-plane") == ["cp-1"]
    assert names("!node-role.kubernetes.io/control-plane") == ["worker-1"]


def test_unsupported_label_selector_is_a_bad_request(running: Running) -> None:
    with pytest.raises(k8s.ApiException) as caught:
        running.core.list_node(label_selector="tier in (a,b)", _request_timeout=TIMEOUT)
    assert caught.value.status == 400
    assert "unable to parse requirement" in status_of(caught.value)["message"]


def test_list_nodes_with_field_selector(running: Running) -> None:
    found = running.core.list_node(field_selector="metadata.name=cp-1", _request_timeout=TIMEOUT)
    assert [n.metadata.name for n in found.items] == ["cp-1"]


def test_read_node(running: Running) -> None:
    worker = running.core.read_node("worker-1", _request_timeout=TIMEOUT)
    assert worker.metadata.labels["tier"] == "batch"
    assert worker.kind == "Node"


def test_read_missing_node_is_a_not_found_status(running: Running) -> None:
    with pytest.raises(k8s.ApiException) as caught:
        running.core.read_node("nope", _request_timeout=TIMEOUT)
    assert caught.value.status == 404
    status = status_of(caught.value)
    assert status["kind"] == "Status"
    assert status["reason"] == "NotFound"
    assert status["message"] == 'nodes "nope" not found'


def test_list_pods(running: Running) -> None:
    system = running.core.list_namespaced_pod("kube-system", _request_timeout=TIMEOUT)
    assert [p.metadata.name for p in system.items] == ["kube-apiserver-cp-1"]
    apiserver = system.items[0]
    assert apiserver.status.phase == "Running"
    assert apiserver.spec.node_name == "cp-1"
    assert apiserver.spec.containers[0].name == "kube-apiserver"
    assert apiserver.status.container_statuses[0].ready is True
    everything = running.core.list_pod_for_all_namespaces(_request_timeout=TIMEOUT)
    assert sorted(p.metadata.name for p in everything.items) == ["kube-apiserver-cp-1", "web-1"]
    by_node = running.core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=worker-1", _request_timeout=TIMEOUT
    )
    assert [p.metadata.name for p in by_node.items] == ["web-1"]


def test_read_pod(running: Running) -> None:
    found = running.core.read_namespaced_pod("web-1", "default", _request_timeout=TIMEOUT)
    assert found.metadata.namespace == "default"
    with pytest.raises(k8s.ApiException) as caught:
        running.core.read_namespaced_pod("web-1", "kube-system", _request_timeout=TIMEOUT)
    assert caught.value.status == 404


def test_discovery_documents(running: Running) -> None:
    versions = k8s.CoreApi(running.api).get_api_versions(_request_timeout=TIMEOUT)
    assert versions.versions == ["v1"]
    resources = running.core.get_api_resources(_request_timeout=TIMEOUT)
    assert {r.name for r in resources.resources} == {"nodes", "pods"}
    groups = k8s.ApisApi(running.api).get_api_versions(_request_timeout=TIMEOUT)
    assert groups.groups == []


# --------------------------------------------------------------------------- errors


def raw_get(running: Running, path: str, method: str = "GET") -> urllib3.BaseHTTPResponse:
    pool: urllib3.PoolManager = running.api.rest_client.pool_manager
    return pool.request(method, running.server.url + path, timeout=TIMEOUT, retries=False)


def test_unknown_path_is_a_not_found_status(running: Running) -> None:
    response = raw_get(running, "/apis/apps/v1/deployments")
    assert response.status == 404
    body = json.loads(response.data)
    assert body["message"] == "the server could not find the requested resource"


def test_writes_are_refused(running: Running) -> None:
    with pytest.raises(k8s.ApiException) as caught:
        running.core.delete_node("worker-1", _request_timeout=TIMEOUT)
    assert caught.value.status == 405
    assert status_of(caught.value)["message"] == READ_ONLY_MESSAGE
    assert status_of(caught.value)["reason"] == "MethodNotAllowed"
    assert raw_get(running, "/api/v1/nodes", method="POST").status == 405


def test_keep_alive_serves_several_requests_on_one_connection(running: Running) -> None:
    pool = urllib3.connectionpool.connection_from_url(
        running.server.url, **running.api.rest_client.pool_manager.connection_pool_kw
    )
    try:
        for _ in range(3):
            assert pool.request("GET", "/version", timeout=TIMEOUT, retries=False).status == 200
        assert pool.num_connections == 1
    finally:
        pool.close()


def raw_exchange(running: Running, pki: KubePKI, request: bytes) -> bytes:
    """Send ``request`` as bytes over the admin's mTLS connection; everything the server sends
    until it closes the connection."""
    context = ssl.create_default_context(cadata=pki.ca.cert_pem.decode("ascii"))
    load_chain(context, pki.admin.cert_pem, pki.admin.key_pem, name="test-admin")
    with (
        socket.create_connection(("127.0.0.1", running.server.port), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname="kubernetes") as tls,
    ):
        tls.sendall(request)
        received = b""
        while chunk := tls.recv(65536):
            received += chunk
    return received


def test_malformed_request_line_is_a_bad_request_and_closes(running: Running, pki: KubePKI) -> None:
    reply = raw_exchange(running, pki, b"NOT-HTTP\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert json.loads(body)["reason"] == "BadRequest"


def test_pipelined_requests_are_answered_in_order_and_close_is_honoured(
    running: Running, pki: KubePKI
) -> None:
    request = b"GET /version HTTP/1.1\r\nHost: k\r\n\r\n"
    closing = b"GET /api HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n"
    reply = raw_exchange(running, pki, request + closing)  # returns: the server closed
    assert reply.count(b"HTTP/1.1 200 ") == 2
    assert reply.index(b'"gitVersion"') < reply.index(b'"APIVersions"')


def test_a_write_with_a_chunked_body_is_refused_as_read_only(
    running: Running, pki: KubePKI
) -> None:
    request = (
        b"POST /api/v1/nodes HTTP/1.1\r\nHost: k\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    )
    head, _, body = raw_exchange(running, pki, request).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405 ")
    assert json.loads(body)["message"] == READ_ONLY_MESSAGE


def test_client_without_certificate_is_refused(
    running: Running, pki: KubePKI, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(pki.ca.cert_pem)
    pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(ca_file))
    # TLS 1.3: the client's handshake ends first; the server then rejects the missing
    # certificate and drops the connection before any HTTP is exchanged.
    with pytest.raises((urllib3.exceptions.ProtocolError, urllib3.exceptions.SSLError)):
        pool.request("GET", running.server.url + "/version", timeout=TIMEOUT, retries=False)


def test_client_from_another_ca_is_refused(running: Running, pki: KubePKI, tmp_path: Path) -> None:
    other = CertificateAuthority.generate(organization="kubernetes", key_type="ecdsa")
    stranger = issue_client_cert(other, roles=["system:masters"], key_type="ecdsa")
    path = tmp_path / "stranger"
    path.write_bytes(
        render_kubeconfig(
            cluster_name="x",
            server=running.server.url,
            ca_pem=pki.ca.cert_pem,
            client_cert_pem=stranger.cert_pem,
            client_key_pem=stranger.key_pem,
        )
    )
    api = k8s_config.new_client_from_config(config_file=str(path))
    api.configuration.retries = 0
    try:
        with pytest.raises(urllib3.exceptions.HTTPError):
            k8s.VersionApi(api).get_code(_request_timeout=TIMEOUT)
    finally:
        api.close()


# --------------------------------------------------------------------------- watch


def relabel(running: Running, name: str, labels: dict[str, str]) -> None:
    running.provider.put_node(node(name, labels=labels))
    running.server.notify()


def test_watch_sends_current_nodes_then_changes(running: Running) -> None:
    watcher = k8s_watch.Watch()
    seen: list[tuple[str, str]] = []
    for event in watcher.stream(
        running.core.list_node, timeout_seconds=10, _request_timeout=TIMEOUT + 10
    ):
        obj = event["object"]
        seen.append((event["type"], obj.metadata.name))
        if len(seen) == 2:
            relabel(running, "worker-1", {"tier": "web"})
        if event["type"] == "MODIFIED":
            assert obj.metadata.labels["tier"] == "web"
            watcher.stop()
    assert seen == [("ADDED", "cp-1"), ("ADDED", "worker-1"), ("MODIFIED", "worker-1")]


def test_watch_from_a_resource_version_sends_only_later_changes(running: Running) -> None:
    listed = running.core.list_node(_request_timeout=TIMEOUT)
    relabel(running, "cp-1", {"zone": "a"})
    running.provider.delete_node("worker-1")
    running.server.notify()
    watcher = k8s_watch.Watch()
    seen = []
    for event in watcher.stream(
        running.core.list_node,
        timeout_seconds=10,
        resource_version=listed.metadata.resource_version,
        _request_timeout=TIMEOUT + 10,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            watcher.stop()
    assert seen == [("MODIFIED", "cp-1"), ("DELETED", "worker-1")]
    modified_rv = int(
        running.core.read_node("cp-1", _request_timeout=TIMEOUT).metadata.resource_version
    )
    assert modified_rv > int(listed.metadata.resource_version)


def test_watch_honours_selectors(running: Running) -> None:
    watcher = k8s_watch.Watch()
    seen = []
    for event in watcher.stream(
        running.core.list_node,
        label_selector="tier",
        timeout_seconds=10,
        _request_timeout=TIMEOUT + 10,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            relabel(running, "cp-1", {"other": "x"})  # does not match: not reported
            relabel(running, "worker-1", {"tier": "db"})
        if event["type"] == "MODIFIED":
            watcher.stop()
    assert seen == [("ADDED", "worker-1"), ("MODIFIED", "worker-1")]


def test_notify_from_the_server_loop_is_seen_at_once(
    running: Running, loop: asyncio.AbstractEventLoop
) -> None:
    async def change() -> None:
        running.provider.put_node(node("worker-1", labels={"tier": "edge"}))
        running.server.notify()

    run(loop, change())
    worker = running.core.read_node("worker-1", _request_timeout=TIMEOUT)
    assert worker.metadata.labels["tier"] == "edge"


def test_watch_ends_when_its_timeout_passes(running: Running) -> None:
    events = list(
        k8s_watch.Watch().stream(
            running.core.list_namespaced_pod,
            "kube-system",
            timeout_seconds=1,
            _request_timeout=TIMEOUT,
        )
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "kube-apiserver-cp-1")
    ]


def test_watch_from_a_forgotten_version_is_gone(
    loop: asyncio.AbstractEventLoop,
    pki: KubePKI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kubeapi.tracking, "_HISTORY", 2)
    provider = FakeProvider()
    server = start_server(loop, pki, provider)
    path = tmp_path / "kubeconfig"
    path.write_bytes(
        render_kubeconfig(
            cluster_name="c",
            server=server.url,
            ca_pem=pki.ca.cert_pem,
            client_cert_pem=pki.admin.cert_pem,
            client_key_pem=pki.admin.key_pem,
        )
    )
    api = k8s_config.new_client_from_config(config_file=str(path))
    try:
        core = k8s.CoreV1Api(api)
        for tier in ("a", "b", "c"):
            provider.put_node(node("worker-1", labels={"tier": tier}))
            core.list_node(_request_timeout=TIMEOUT)  # every request re-reads the provider
        with pytest.raises(k8s.ApiException) as caught:
            for _ in k8s_watch.Watch().stream(
                core.list_node,
                resource_version="1",
                timeout_seconds=5,
                _request_timeout=TIMEOUT + 5,
            ):
                pass
        assert caught.value.status == 410
        assert "too old resource version" in str(caught.value.reason)
    finally:
        api.close()
        run(loop, server.stop())


def test_stop_ends_an_open_watch(running: Running, loop: asyncio.AbstractEventLoop) -> None:
    received: list[str] = []
    done = threading.Event()

    def consume() -> None:
        try:
            for event in k8s_watch.Watch().stream(
                running.core.list_node, timeout_seconds=60, _request_timeout=TIMEOUT + 60
            ):
                received.append(event["type"])
        except Exception:  # the connection is cut under the client: any error is fine here
            pass
        finally:
            done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    for _ in range(100):
        if len(received) == 2:
            break
        done.wait(0.05)
    run(loop, running.server.stop())
    assert done.wait(TIMEOUT)
    assert received == ["ADDED", "ADDED"]


# --------------------------------------------------------------------------- builders


def test_make_node_object_for_a_cordoned_not_ready_node() -> None:
    obj = make_node_object(
        "w",
        labels={"kubernetes.io/os": "linux", "x": "y"},
        ready=False,
        addresses=[("InternalIP", "10.5.0.3"), ("Hostname", "w.example")],
        kubelet_version="v1.36.0",
        pod_cidr="10.244.1.0/24",
        resource_version=7,
        creation_ts="2026-05-01T00:00:00Z",
        taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
        unschedulable=True,
        ready_message="PLEG is not healthy",
    )
    assert obj["metadata"]["resourceVersion"] == "7"
    assert obj["metadata"]["labels"]["x"] == "y"
    assert obj["spec"]["unschedulable"] is True
    assert obj["spec"]["taints"][0]["effect"] == "NoSchedule"
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready == {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "PLEG is not healthy",
        "lastHeartbeatTime": "2026-05-01T00:00:00Z",
        "lastTransitionTime": "2026-05-01T00:00:00Z",
    }
    assert obj["status"]["addresses"] == [
        {"type": "InternalIP", "address": "10.5.0.3"},
        {"type": "Hostname", "address": "w.example"},
    ]
    assert obj["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.0"


def test_make_node_object_is_deterministic() -> None:
    assert node("a") == node("a")
    assert node("a")["metadata"]["uid"] != node("b")["metadata"]["uid"]


def test_version_info_is_complete() -> None:
    info = version_info("v1.35.2")
    assert info["gitVersion"] == "v1.35.2"
    assert (info["major"], info["minor"]) == ("1", "35")
    assert {
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    } <= info.keys()


def test_emulator_limits_are_documented() -> None:
    assert any(READ_ONLY_MESSAGE in limit for limit in kubeapi.LIMITS)
    assert all(isinstance(limit, str) and limit for limit in kubeapi.LIMITS)
