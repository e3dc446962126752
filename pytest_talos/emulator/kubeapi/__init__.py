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

from pytest_talos.emulator.kubeapi.http import server_ssl_context
from pytest_talos.emulator.kubeapi.objects import Object as Object
from pytest_talos.emulator.kubeapi.objects import (
    make_node_object,
    make_pod_object,
    render_kubeconfig,
    version_info,
)
from pytest_talos.emulator.kubeapi.routes import Matcher as Matcher
from pytest_talos.emulator.kubeapi.server import (
    LIMITS,
    READ_ONLY_MESSAGE,
    KubeAPIServer,
    KubeProvider,
)

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
