"""TalosCluster: the target nodes, their roles, and a Kubernetes client on demand.

Nodes come from (first that applies): the addresses given, the talosconfig context's
``nodes``, the cluster's ``Members`` resources (discovery), else the endpoint's node itself,
addressed by one of its own addresses (the endpoint may be a DNS name, a load balancer or a
NAT address, which a worker would not serve and a control plane would forward through). Each
node's hostname and role are read once (``Hostname`` and ``MachineTypes``); nodes are kept
sorted by hostname so every process (pytest-xdist workers too) sees the same order.

The Kubernetes client is built lazily from the admin kubeconfig that a control plane hands
out through the Talos API. Its CA, certificate and key go straight into an SSL context through
:mod:`pytest_talos.keyfile` (an in-memory file on Linux, elsewhere a 0600 file in a private
directory removed as soon as it is read), which the client's connection pool uses.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

import yaml

from pytest_talos import models
from pytest_talos.client import DEFAULT_TIMEOUT, TalosClient
from pytest_talos.errors import (
    NotFound,
    PermissionDenied,
    TalosError,
    TransportError,
)
from pytest_talos.keyfile import SecretBytes, load_chain
from pytest_talos.node import TalosNode
from pytest_talos.talos_api import ResourceType, split_host_port
from pytest_talos.talosconfig import TalosConfig, load_talosconfig

__all__ = [
    "MEMBERS_TYPE",
    "KubernetesAccess",
    "TalosCluster",
    "kubernetes_client_errors",
    "read_each",
]

MEMBERS_TYPE = (ResourceType.MEMBERS, "cluster")

T = TypeVar("T")
R = TypeVar("R")


class TalosCluster:
    """The target nodes of a run, their roles, and cluster-wide helpers.

    ``client`` talks to the endpoint; every node gets a ``with_node`` view of it.
    Closing the cluster closes the client and the Kubernetes client.
    """

    def __init__(self, client: TalosClient, nodes: Iterable[TalosNode]) -> None:
        self.client = client
        self._nodes = sorted(nodes, key=lambda node: (node.name, node.address))
        self._kubernetes: KubernetesAccess | None = None
        self.talosconfig: TalosConfig | None = None  # set by connect()

    @classmethod
    def connect(
        cls,
        talosconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        endpoints: Sequence[str] = (),
        nodes: Sequence[str] = (),
        timeout: float = DEFAULT_TIMEOUT,
        scan_baseline: str | None = None,
        env: Mapping[str, str] = os.environ,
    ) -> TalosCluster:
        """Connect through the first endpoint that answers and find the target nodes.

        ``talosconfig`` and ``context`` are looked up as talosctl does; ``endpoints`` and
        ``nodes`` default to the context's, and ``scan_baseline`` to the one an emulator's
        talosconfig names (``x-pytest-talos-scan-baseline``).
        """
        config = load_talosconfig(talosconfig, context=context, env=env)
        scan_baseline = scan_baseline or config.context.scan_baseline
        client = _first_reachable(
            config, list(endpoints) or list(config.context.endpoints), timeout
        )
        try:
            addresses = list(nodes) or list(config.context.nodes) or _discover(client)
            found = _describe_nodes(client, addresses, scan_baseline)
        except BaseException:
            client.close()
            raise
        cluster = cls(client, found)
        cluster.talosconfig = config
        return cluster

    # ------------------------------------------------------------------ nodes

    @property
    def nodes(self) -> list[TalosNode]:
        """Every target node, sorted by hostname."""
        return list(self._nodes)

    @property
    def reachable(self) -> list[TalosNode]:
        """The target nodes that answered when the cluster was built."""
        return [node for node in self._nodes if node.reachable]

    def node(self, name: str) -> TalosNode:
        """A node by hostname or address."""
        for node in self._nodes:
            if name in (node.name, node.address, node.host):
                return node
        known = ", ".join(f"{node.name} ({node.address})" for node in self._nodes)
        raise TalosError(f"no target node is called {name!r}; the targets are {known}")

    def select(self, names: Iterable[str]) -> TalosCluster:
        """The same cluster (same connection) narrowed to some nodes."""
        narrowed = TalosCluster(self.client, [self.node(name) for name in names])
        narrowed._kubernetes, narrowed.talosconfig = self._kubernetes, self.talosconfig
        return narrowed

    def with_nodes(self, nodes: Iterable[TalosNode]) -> TalosCluster:
        replaced = TalosCluster(self.client, nodes)
        replaced._kubernetes, replaced.talosconfig = self._kubernetes, self.talosconfig
        return replaced

    @property
    def roles(self) -> dict[str, str]:
        """``{hostname: role}``."""
        return {node.name: node.role for node in self._nodes}

    @property
    def controlplanes(self) -> list[TalosNode]:
        return [node for node in self.reachable if node.role == "controlplane"]

    @property
    def workers(self) -> list[TalosNode]:
        return [node for node in self.reachable if node.role == "worker"]

    def controlplane(self, index: int = 0) -> TalosNode:
        """The ``index``-th control plane (by hostname)."""
        return self._pick(self.controlplanes, "control plane", index)

    def controlplane_client(self) -> TalosClient:
        """A client for the calls only a control plane serves (Kubeconfig,
        GenerateClientConfiguration): the first control plane among the targets, else the
        endpoint itself, asked with no node metadata so that its apid answers as itself (a
        talosconfig's endpoints are the control planes, or a load balancer in front of
        them). A run that targets only workers still reaches Kubernetes."""
        controlplanes = self.controlplanes
        return controlplanes[0].client if controlplanes else self.client

    def worker(self, index: int = 0) -> TalosNode:
        """The ``index``-th worker (by hostname)."""
        return self._pick(self.workers, "worker", index)

    def _pick(self, candidates: list[TalosNode], what: str, index: int) -> TalosNode:
        if index < len(candidates):
            return candidates[index]
        targets = ", ".join(f"{n.name} ({n.role})" for n in self._nodes) or "none"
        raise TalosError(
            f"no {what} #{index + 1} among the target nodes ({targets}); add one with "
            "--talos-nodes or pick another role"
        )

    # ------------------------------------------------------------------ Kubernetes

    def kubeconfig(self) -> bytes:
        """The admin kubeconfig from the first control plane, or the endpoint when no
        target is one (holds a client key)."""
        return self.controlplane_client().kubeconfig()

    @property
    def kubernetes(self) -> KubernetesAccess:
        """A Kubernetes client for this cluster, built on first use."""
        if self._kubernetes is None:
            self._kubernetes = KubernetesAccess(self.kubeconfig())
        return self._kubernetes

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        if self._kubernetes is not None:
            self._kubernetes.close()
            self._kubernetes = None
        self.client.close()

    def __enter__(self) -> TalosCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        listed = ", ".join(f"{n.name}={n.role}" for n in self._nodes)
        return f"TalosCluster(endpoint={self.client.endpoint!r}, nodes=[{listed}])"


# --------------------------------------------------------------------------- discovery


def _first_reachable(config: TalosConfig, endpoints: Sequence[str], timeout: float) -> TalosClient:
    """A client on the first endpoint whose apid answers Version (talosctl tries in turn)."""
    ctx = config.context
    failures: list[TransportError] = []
    for endpoint in endpoints:
        client = TalosClient(
            endpoint,
            ctx.ca_pem,
            ctx.crt_pem,
            ctx.key_pem,
            timeout=timeout,
            cluster=ctx.cluster,
            roles=config.roles,
        )
        try:
            client.version()
        except TransportError as exc:
            client.close()
            failures.append(exc)
            continue
        except BaseException:
            client.close()
            raise
        return client
    if len(failures) == 1:
        raise failures[0]  # it names its node and method already
    raise TransportError(
        "no endpoint answered: " + "; ".join(map(str, failures)),
        node=", ".join(endpoints),
        method=failures[-1].method or "/machine.MachineService/Version",
    )


def _discover(client: TalosClient) -> list[str]:
    """Node addresses from the cluster's Members, else just the endpoint's node."""
    kind, namespace = MEMBERS_TYPE
    try:
        members = client.list_resources(kind, namespace)
    except NotFound:
        members = []
    addresses = [_member_address(member) for member in members]
    found = [address for address in addresses if address]
    return found or [_endpoint_node(client)]


# NodeAddresses the endpoint's node is asked for, in turn, when it is the only target: its
# routed addresses without the Kubernetes ones (what discovery publishes, controllers/
# cluster/local_affiliate.go), then all its current ones (controllers/network/node_address.go)
_OWN_ADDRESSES = ("routed-no-k8s", "current")


def _endpoint_node(client: TalosClient) -> str:
    """The address to target the endpoint's own node by: the endpoint's host when it is one
    of the node's addresses, else the node's first address (asked without node metadata,
    so the endpoint's apid answers itself). apid serves a target locally only when it is
    one of the node's own addresses or names (internal/app/apid/pkg/director/
    local_address.go); a control plane forwards any other over the network
    (director.go, backend/apid.go)."""
    host = _endpoint_host(client.endpoint)
    for ident in _OWN_ADDRESSES:
        try:
            spec = client.get(ResourceType.NODE_ADDRESSES, ident, "network").typed_spec
        except TalosError:
            continue
        own = [a.split("/", 1)[0] for a in getattr(spec, "addresses", ())]
        if own:
            return host if host in own else own[0]
    return host


def _member_address(member: models.Resource) -> str | None:
    spec = member.typed_spec
    if isinstance(spec, models.MemberSpec) and spec.addresses:
        return spec.addresses[0]
    return None


def _endpoint_host(endpoint: str) -> str:
    try:
        return split_host_port(endpoint)[0] or endpoint
    except ValueError:  # a malformed bracket: the text as given
        return endpoint


# Nodes described at once when connecting: each takes two calls, the first to a node also
# sets up apid's way to it, so a fleet read one node after another waits on each in turn
# (100 emulated nodes, a fresh connection: 2.9 s one at a time, 1.2 s sixteen at a time).
DESCRIBE_AT_ONCE = 16


def read_each(
    items: Sequence[T], read: Callable[[T], R], at_once: int = DESCRIBE_AT_ONCE
) -> list[R]:
    """``[read(item) for item in items]``, ``at_once`` of them at a time: a read of every
    node pays one node's round trips, not the fleet's. The results keep their order; the
    first item's error, in that order, is raised. The threads only wait: the client's
    calls all run on its one event loop."""
    if len(items) <= 1:
        return [read(item) for item in items]
    with ThreadPoolExecutor(min(at_once, len(items)), thread_name_prefix="talos-each") as pool:
        return list(pool.map(read, items))


def _describe_nodes(
    client: TalosClient, addresses: Sequence[str], scan_baseline: str | None
) -> list[TalosNode]:
    """Every node described (:func:`_describe_node`), several at once, in the given order."""
    return read_each(addresses, lambda a: _describe_node(client, a, scan_baseline))


def _describe_node(client: TalosClient, address: str, scan_baseline: str | None) -> TalosNode:
    """A node with hostname and role read up front (they are needed to sort and select)."""
    node = TalosNode(client, address, scan_baseline=scan_baseline)
    try:
        hostname, role = node.hostname, node.role
    except TalosError as exc:
        return TalosNode(client, address, role="unknown", unreachable=_explained(exc))
    return TalosNode(client, address, hostname=hostname, role=role, scan_baseline=scan_baseline)


# internal/app/apid/pkg/director/director.go: what an apid that cannot forward answers (a
# worker's: it has no client certificate, controllers/secrets/api.go, apid/service.go)
NO_FORWARDING = "no request forwarding"
WORKER_ENDPOINT = "this endpoint is a worker; use a control-plane endpoint"


def _explained(exc: TalosError) -> TalosError:
    """A node's error, saying what to do when it is the endpoint that cannot forward."""
    if isinstance(exc, PermissionDenied) and exc.details == NO_FORWARDING:
        return PermissionDenied(
            f"{NO_FORWARDING}: {WORKER_ENDPOINT} (a worker's apid serves only itself)",
            node=exc.node,
            method=exc.method,
        )
    return exc


# --------------------------------------------------------------------------- Kubernetes


def kubernetes_client_errors() -> tuple[type[Exception], ...]:
    """The Kubernetes client's own error class (``ApiException``), for an ``except`` clause,
    without importing the client: it is only raised where :class:`KubernetesAccess` loaded
    the client, and importing it to catch it would cost a run that never talks to Kubernetes
    (``--talos-record-profile`` against nodes without a kubeconfig) 0.3 s of CPU."""
    module = sys.modules.get("kubernetes.client.exceptions")
    return () if module is None else (module.ApiException,)


class KubernetesAccess:
    """A ``kubernetes`` API client whose credentials live only in memory.

    ``api_client`` is a ``kubernetes.client.ApiClient``; :attr:`core_v1` a ``CoreV1Api``.
    Supports kubeconfigs with inline certificate data or a bearer token (what Talos hands
    out). Close it to release its connections.

    The kubernetes client (its ``CoreV1Api`` alone loads some 250 model modules and pydantic,
    about 0.6 s of CPU) is imported on first use of :attr:`api_client` or :attr:`core_v1`, on
    whichever thread uses it first: a Ready watch started in the background pays it there,
    not the check that created the access.
    """

    def __init__(self, kubeconfig: bytes, *, request_timeout: float = 10.0) -> None:
        self.request_timeout = request_timeout
        self._lock = threading.Lock()
        self._clients: tuple[Any, Any] | None = None
        settings = _kube_settings(kubeconfig)
        self.host: str = settings["server"]
        self._tls = _kube_tls_context(settings)
        self._token: bytes | None = settings.get("token")

    def _build(self) -> tuple[Any, Any]:
        # imported late, and only the parts used: kubernetes is slow to import
        from kubernetes.client.api.core_v1_api import CoreV1Api
        from kubernetes.client.api_client import ApiClient
        from kubernetes.client.configuration import Configuration

        configuration = Configuration()
        configuration.host = self.host
        configuration.verify_ssl = True
        if self._token is not None:
            configuration.api_key = {"authorization": "Bearer " + self._token.decode()}
        api_client = ApiClient(configuration)
        # The CA and the client key are already in an SSL context (keyfile: memfd, or a 0600
        # file removed once read); urllib3 takes that context for every connection it makes,
        # so the kubernetes client never reads a key from a path.
        api_client.rest_client.pool_manager.connection_pool_kw["ssl_context"] = self._tls
        return api_client, CoreV1Api(api_client)

    def _built(self) -> tuple[Any, Any]:
        with self._lock:
            if self._clients is None:
                self._clients = self._build()
            return self._clients

    @property
    def api_client(self) -> Any:
        return self._built()[0]

    @property
    def core_v1(self) -> Any:
        return self._built()[1]

    def node(self, name: str) -> Any:
        """The Kubernetes Node object called ``name``."""
        return self.core_v1.read_node(name, _request_timeout=self.request_timeout)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, None
        if clients is not None:
            clients[0].close()

    def __repr__(self) -> str:
        return f"KubernetesAccess(host={self.host!r})"


def _kube_tls_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    """The kubeconfig's CA (else the system's) and client certificate, loaded from memory."""
    ca = settings.get("ca")
    context = ssl.create_default_context(cadata=ca.decode("ascii") if ca else None)
    if "crt" in settings:
        load_chain(context, settings["crt"], settings["key"], name="pytest-talos-kube")
    return context


def _kube_settings(kubeconfig: bytes) -> dict[str, Any]:
    """Server, CA and credentials of the kubeconfig's current context."""
    try:
        doc = yaml.safe_load(kubeconfig)
    except yaml.YAMLError:
        raise TalosError("the kubeconfig from the Talos API is not valid YAML") from None
    if not isinstance(doc, dict):
        raise TalosError("the kubeconfig from the Talos API is not a mapping")
    context = _named(doc, "contexts", doc.get("current-context"), "context")
    cluster = _named(doc, "clusters", context.get("cluster"), "cluster")
    user = _named(doc, "users", context.get("user"), "user")
    settings: dict[str, Any] = {"server": _required(cluster, "server")}
    if cluster.get("certificate-authority-data"):
        settings["ca"] = _b64(cluster["certificate-authority-data"], "certificate-authority-data")
    if user.get("client-certificate-data") and user.get("client-key-data"):
        settings["crt"] = _b64(user["client-certificate-data"], "client-certificate-data")
        settings["key"] = SecretBytes(_b64(user["client-key-data"], "client-key-data"))
    elif user.get("token"):
        settings["token"] = str(user["token"]).encode()
    else:
        raise TalosError(
            "the kubeconfig's user has neither inline client certificate data nor a token; "
            "pytest-talos supports only those (as Talos hands out)"
        )
    return settings


def _named(doc: dict[str, Any], section: str, name: Any, key: str) -> dict[str, Any]:
    entries = doc.get(section) or []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(key)
            if isinstance(body, dict):
                return body
    raise TalosError(f"the kubeconfig has no {key} named {name!r} in {section}")


def _required(section: dict[str, Any], key: str) -> str:
    value = section.get(key)
    if not isinstance(value, str) or not value:
        raise TalosError(f"the kubeconfig's cluster has no {key}")
    return value


def _b64(value: Any, key: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise TalosError(f"the kubeconfig's {key} is not valid base64") from None
