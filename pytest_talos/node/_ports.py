"""The TCP ports a healthy Talos node opens on its address, by role and machine config."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_talos import models
from pytest_talos.errors import PermissionDenied, TalosError
from pytest_talos.releases import Release, release_of
from pytest_talos.talos_api import APID_PORT, TRUSTD_PORT

if TYPE_CHECKING:
    from pytest_talos.node._node import TalosNode

__all__ = [
    "default_expected_ports",
    "dig",
    "expected_ports_for",
    "node_release",
    "v1alpha1_document",
]

KUBELET_PORT = 10250
KUBE_APISERVER_PORT = 6443
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
KUBE_PROXY_HEALTHZ_PORT = 10256
# The secure ports of kube-controller-manager and kube-scheduler (Kubernetes' defaults; Talos
# probes them there: controllers/k8s/control_plane_static_pod.go, intstr.FromInt(10257/10259)).
CONTROLLER_MANAGER_PORT, SCHEDULER_PORT = 10257, 10259


def default_expected_ports(
    role: str | None,
    config: models.MachineConfig | None = None,
    release: Release | None = None,
) -> frozenset[int]:
    """The TCP ports a healthy Talos node of ``role`` opens on its address, given its active
    machine ``config`` (``None``: assume Talos's defaults).

    Every node: apid 50000 (``controllers/runtime/api_service_config.go``), kubelet 10250
    (``controllers/k8s/kubelet_spec.go``) and kube-proxy's health check 10256, which the
    hostNetwork kube-proxy DaemonSet serves on all addresses unless ``cluster.proxy.disabled``
    (``controllers/k8s/internal/k8stemplates/kube-proxy.go``; Talos passes no
    ``--healthz-bind-address``, Kubernetes' default is ``0.0.0.0:10256``). Control planes add
    trustd 50001, etcd 2379/2380 (and the listeners the node's ``release`` adds: etcd's
    client HTTP 2383 on v1.14, :attr:`~pytest_talos.releases.Release.etcd_extra_ports`;
    ``None``: none) and the API server (``cluster.controlPlane.localAPIServerPort``, 6443).
    The loopback-only ports (kubelet 10248, KubePrism 7445, kube-proxy metrics 10249,
    controller-manager 10257, scheduler 10259, host DNS 53) are not reachable from outside
    and not listed. A
    ``healthz-bind-address`` or ``metrics-bind-address`` in ``cluster.proxy.extraArgs`` moves
    or exposes those ports; other CNIs (Cilium) add theirs through the
    ``pytest_talos_expected_ports`` hook. Metrics exposed through ``extraArgs`` are read from
    the config as well (:func:`_metrics_ports`).
    """
    main = v1alpha1_document(config)
    ports = {APID_PORT, KUBELET_PORT}
    proxy = dig(main, "cluster", "proxy")
    if not (isinstance(proxy, dict) and proxy.get("disabled") is True):
        extra = proxy.get("extraArgs") if isinstance(proxy, dict) else None
        args = extra if isinstance(extra, dict) else {}
        ports |= _bound_port(args.get("healthz-bind-address"), KUBE_PROXY_HEALTHZ_PORT)
        ports |= _bound_port(args.get("metrics-bind-address"), None)
    if role in ("controlplane", "init"):
        api = dig(main, "cluster", "controlPlane", "localAPIServerPort")
        api_port = api if isinstance(api, int) and not isinstance(api, bool) and api > 0 else None
        ports |= {TRUSTD_PORT, api_port or KUBE_APISERVER_PORT, ETCD_CLIENT_PORT, ETCD_PEER_PORT}
        ports |= release.etcd_extra_ports if release is not None else frozenset()
        ports |= _control_plane_metrics_ports(main)
    ports |= _kubelet_ports(main)
    return frozenset(ports)


def _extra_args(main: dict[str, Any], *path: str) -> dict[str, Any]:
    args = dig(main, *path, "extraArgs")
    return args if isinstance(args, dict) else {}


def _control_plane_metrics_ports(main: dict[str, Any]) -> set[int]:
    """Ports a control plane's ``extraArgs`` expose on the node's addresses.

    * etcd's ``listen-metrics-urls`` (``cluster.etcd.extraArgs``): not on Talos's deny list,
      so it reaches etcd's command line (``system/services/etcd.go`` argsForControlPlane);
      each URL listens on its host and port.
    * kube-controller-manager and kube-scheduler: Talos binds them to ``127.0.0.1``, and a
      ``bind-address`` in ``cluster.controllerManager.extraArgs`` /
      ``cluster.scheduler.extraArgs`` overrides it
      (``controllers/k8s/control_plane_static_pod.go``: not MergeDenied); the secure port is
      ``secure-port`` when given, else 10257 / 10259.
    """
    ports: set[int] = set()
    for url in _values(_extra_args(main, "cluster", "etcd").get("listen-metrics-urls")):
        ports |= _url_port(url)
    for section, default in (
        ("controllerManager", CONTROLLER_MANAGER_PORT),
        ("scheduler", SCHEDULER_PORT),
    ):
        args = _extra_args(main, "cluster", section)
        bind = _last(args.get("bind-address"))
        if bind is None or _is_loopback_host(bind):
            continue
        port = _port_number(_last(args.get("secure-port")), default)
        if port:
            ports.add(port)
    return ports


def _kubelet_ports(main: dict[str, Any]) -> set[int]:
    """kubelet's read-only port, when the config turns it on: ``read-only-port`` in
    ``machine.kubelet.extraArgs`` (a flag wins over the config file), else ``readOnlyPort``
    in ``machine.kubelet.extraConfig`` (``controllers/k8s/kubelet_spec.go`` merges it into
    KubeletConfiguration; its ``port`` is always 10250 there). It listens on ``address``,
    which Talos sets to 0.0.0.0."""
    args = _extra_args(main, "machine", "kubelet")
    flag = _last(args.get("read-only-port"))
    if flag is not None:
        port = _port_number(flag, 0)
    else:
        extra = dig(main, "machine", "kubelet", "extraConfig")
        value = extra.get("readOnlyPort") if isinstance(extra, dict) else None
        port = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return {port} if 0 < port < 65536 else set()


def _values(value: Any) -> list[str]:
    """An extraArgs value as its comma-separated items (a list: every item)."""
    items = value if isinstance(value, list) else [value] if value is not None else []
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def _last(value: Any) -> str | None:
    if isinstance(value, list):  # extraArgs values may be lists; the last one wins
        value = value[-1] if value else None
    return None if value is None else str(value).strip()


def _port_number(text: str | None, default: int) -> int:
    return int(text) if text is not None and text.isdigit() else default


def _is_loopback_host(host: str) -> bool:
    host = host.strip("[]")
    return host.startswith("127.") or host in ("::1", "localhost")


def _url_port(url: str) -> set[int]:
    """The port of a listen URL (``http://0.0.0.0:2381``) when it is off loopback."""
    rest = url.partition("://")[2] or url
    hostport = rest.split("/", 1)[0]
    host, _, port_text = hostport.rpartition(":")
    if not port_text.isdigit() or _is_loopback_host(host):
        return set()
    port = int(port_text)
    return {port} if 0 < port < 65536 else set()


def expected_ports_for(node: TalosNode) -> frozenset[int]:
    """:func:`default_expected_ports` for ``node``'s role and its active machine config.

    Reading the config needs os:admin (it is a sensitive resource); without it Talos's
    defaults are assumed (kube-proxy enabled), which never fails a healthy node. The
    release is the one the node's Version names (:func:`~pytest_talos.releases.release_of`:
    the nearest known one for a release the kit does not know); a Version that fails: the
    newest known release, whose extra ports are a superset (never fails a healthy node).
    """
    try:
        config: models.MachineConfig | None = node.machine_config
    except PermissionDenied:
        config = None
    return default_expected_ports(node.role, config, node_release(node))


def node_release(node: TalosNode) -> Release:
    """The release-table entry ``node`` is judged by (from its Version reply)."""
    try:
        tag = node.version.tag
    except TalosError:
        tag = ""
    return release_of(tag).release


def v1alpha1_document(config: models.MachineConfig | None) -> dict[str, Any]:
    """The ``v1alpha1`` document of a machine config (empty if there is none)."""
    for document in config.documents if config is not None else ():
        if isinstance(document, dict) and document.get("version") == "v1alpha1":
            return document
    return {}


def dig(document: Any, *path: str) -> Any:
    """``document[path[0]][path[1]]...``, or None where a level is missing or not a mapping."""
    for key in path:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def _bound_port(value: Any, default: int | None) -> set[int]:
    """The port a kube-proxy ``*-bind-address`` flag exposes on the node's addresses.

    Unset: ``default``. Empty or port 0: off. A loopback host: not reachable from outside.
    A value we cannot parse keeps ``default`` (never fail a healthy node on our parsing).
    """
    if isinstance(value, list):  # extraArgs values may be lists; the last one wins
        value = value[-1] if value else None
    if value is None:
        return {default} if default else set()
    text = str(value).strip()
    if not text:
        return set()
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not port_text.isdigit():
        return {default} if default else set()
    port = int(port_text)
    if port == 0 or host.startswith("127.") or host in ("::1", "localhost"):
        return set()
    return {port}
