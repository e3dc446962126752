"""A machine config as ``talosctl gen config`` (Talos 1.13) plus a hostname patch writes it."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from pytest_talos.emulator.machineconfig.common import (
    DEFAULT_POD_SUBNETS,
    DEFAULT_SERVICE_SUBNETS,
)
from pytest_talos.emulator.machineconfig.render import _render_yaml

# Documentation comments talosctl writes next to (scalars) or above (sections) a field.
_DOCS = {
    "version": "Indicates the schema used to decode the contents.",
    "debug": "Enable verbose logging to the console.",
    "persist": "Indicates whether to pull the machine config upon every boot.",
    "machine": "Provides machine specific configuration options.",
    "machine.type": "Defines the role of the machine within the cluster.",
    "machine.token": "The `token` is used by a machine to join the PKI of the cluster.",
    "machine.ca": "The root certificate authority of the PKI.",
    "machine.certSANs": "Extra certificate subject alternative names for the machine's "
                        "certificate.",
    "machine.kubelet": "Used to provide additional options to the kubelet.",
    "machine.kubelet.image": "The `image` field is an optional reference to an alternative "
                             "kubelet image.",
    "machine.kubelet.defaultRuntimeSeccompProfileEnabled": "Enable container runtime default "
                                                           "Seccomp profile.",
    "machine.kubelet.disableManifestsDirectory": "The `disableManifestsDirectory` field "
                                                 "configures the kubelet to get static pod "
                                                 "manifests from the /etc/kubernetes/manifests "
                                                 "directory.",
    "machine.network": "Provides machine specific network configuration options.",
    "machine.install": "Used to provide instructions for installations.",
    "machine.install.disk": "The disk used for installations.",
    "machine.install.image": "Allows for supplying the image used to perform the installation.",
    "machine.install.wipe": "Indicates if the installation disk should be wiped at installation "
                            "time.",
    "machine.features": "Features describe individual Talos features that can be switched on "
                        "or off.",
    "machine.features.rbac": "Enable role-based access control (RBAC).",
    "machine.features.stableHostname": "Enable stable default hostname.",
    "machine.features.apidCheckExtKeyUsage": "Enable checks for extended key usage of client "
                                             "certificates in apid.",
    "machine.features.diskQuotaSupport": "Enable XFS project quota support for EPHEMERAL "
                                         "partition and user disks.",
    "machine.features.kubePrism": "KubePrism - local proxy/load balancer on defined port that "
                                  "will distribute",
    "machine.features.hostDNS": "Configures host DNS caching resolver.",
    "machine.nodeLabels": "Configures the node labels for the machine.",
    "cluster": "Provides cluster specific configuration options.",
    "cluster.id": "Globally unique identifier for this cluster (base64 encoded random 32 "
                  "bytes).",
    "cluster.secret": "Shared secret of cluster (base64 encoded random 32 bytes).",
    "cluster.controlPlane": "Provides control plane specific configuration options.",
    "cluster.controlPlane.endpoint": "Endpoint is the canonical controlplane endpoint, which "
                                     "can be an IP address or a DNS hostname.",
    "cluster.clusterName": "Configures the cluster's name.",
    "cluster.network": "Provides cluster specific network configuration options.",
    "cluster.network.dnsDomain": "The domain used by Kubernetes DNS.",
    "cluster.network.podSubnets": "The pod subnet CIDR.",
    "cluster.network.serviceSubnets": "The service subnet CIDR.",
    "cluster.token": "The [bootstrap token](https://kubernetes.io/docs/reference/access-authn-"
                     "authz/bootstrap-tokens/) used to join the cluster.",
    "cluster.ca": "The base64 encoded root certificate authority used by Kubernetes.",
    "cluster.aggregatorCA": "The base64 encoded aggregator certificate authority used by "
                            "Kubernetes for front-proxy certificate generation.",
    "cluster.apiServer": "API server specific configuration options.",
    "cluster.controllerManager": "Controller manager server specific configuration options.",
    "cluster.proxy": "Kube-proxy server-specific configuration options",
    "cluster.scheduler": "Scheduler server specific configuration options.",
    "cluster.discovery": "Configures cluster member discovery.",
    "cluster.etcd": "Etcd specific configuration options.",
    "cluster.extraManifests": "A list of urls that point to additional manifests.",
    "cluster.inlineManifests": "A list of inline Kubernetes manifests.",
}
_TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join(("pytest-talos-emulator", *parts)).encode()).digest()


def _token(*parts: str) -> str:
    """A kubeadm-style token ``[a-z0-9]{6}.[a-z0-9]{16}``, derived from ``parts``."""
    chars = "".join(_TOKEN_ALPHABET[b % len(_TOKEN_ALPHABET)] for b in _digest(*parts)[:22])
    return f"{chars[:6]}.{chars[6:]}"


def _b64_32(*parts: str) -> str:
    return base64.b64encode(_digest(*parts)).decode("ascii")


def _crt(pem: bytes | None, what: str, cluster: str) -> str:
    if pem is None:
        body = base64.b64encode(f"emulated {what} for cluster {cluster}".encode()).decode()
        pem = f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n".encode()
    return base64.b64encode(pem).decode("ascii")


def _machine_section(
    *, role: str, cluster: str, host: str, kubelet_version: str, install_image: str,
    cert_sans_list: Sequence[str], ca_crt: str, multidoc: bool,
) -> dict[str, Any]:
    features: dict[str, Any] = {"rbac": True}
    if not multidoc:
        features["stableHostname"] = True
    features.update({
        "apidCheckExtKeyUsage": True, "diskQuotaSupport": True,
        "kubePrism": {"enabled": True, "port": 7445},
        "hostDNS": {"enabled": True, "forwardKubeDNSToHost": True},
    })
    labels = {"node.kubernetes.io/exclude-from-external-load-balancers": ""}
    return {
        "type": role,
        "token": _token("machine-token", cluster),
        "ca": {"crt": ca_crt},
        "certSANs": list(cert_sans_list),
        "kubelet": {
            "image": f"ghcr.io/siderolabs/kubelet:v{kubelet_version}",
            "defaultRuntimeSeccompProfileEnabled": True,
            "disableManifestsDirectory": True,
        },
        "network": {} if multidoc else {"hostname": host},
        "install": {"disk": "/dev/sda", "image": install_image, "wipe": False},
        "features": features,
        "nodeLabels": labels if role == "controlplane" else {},
    }


def _control_plane_cluster_extras(
    version: str, endpoint_host: str, cluster: str
) -> dict[str, Any]:
    return {
        "aggregatorCA": {"crt": _crt(None, "aggregator CA certificate", cluster)},
        "apiServer": {
            "image": f"registry.k8s.io/kube-apiserver:v{version}",
            "certSANs": [endpoint_host],
            "disablePodSecurityPolicy": True,
            "admissionControl": [{
                "name": "PodSecurity",
                "configuration": {
                    "apiVersion": "pod-security.admission.config.k8s.io/v1alpha1",
                    "defaults": {
                        "audit": "restricted", "audit-version": "latest",
                        "enforce": "baseline", "enforce-version": "latest",
                        "warn": "restricted", "warn-version": "latest",
                    },
                    "exemptions": {"namespaces": ["kube-system"], "runtimeClasses": [],
                                   "usernames": []},
                    "kind": "PodSecurityConfiguration",
                },
            }],
            "auditPolicy": {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                            "rules": [{"level": "Metadata"}]},
        },
        "controllerManager": {"image": f"registry.k8s.io/kube-controller-manager:v{version}"},
        "proxy": {"image": f"registry.k8s.io/kube-proxy:v{version}"},
        "scheduler": {"image": f"registry.k8s.io/kube-scheduler:v{version}"},
    }


def _cluster_section(
    *, role: str, cluster: str, endpoint: str, version: str, pods: Sequence[str],
    services: Sequence[str], k8s_ca_crt: str,
) -> dict[str, Any]:
    section: dict[str, Any] = {
        "id": _b64_32("cluster-id", cluster),
        "secret": _b64_32("cluster-secret", cluster),
        "controlPlane": {"endpoint": endpoint},
        "clusterName": cluster,
        "network": {
            "dnsDomain": "cluster.local",
            "podSubnets": list(pods),
            "serviceSubnets": list(services),
        },
        "token": _token("bootstrap-token", cluster),
        "ca": {"crt": k8s_ca_crt},
    }
    if role == "controlplane":
        host = urlsplit(endpoint).hostname or endpoint
        section.update(_control_plane_cluster_extras(version, host, cluster))
    section["discovery"] = {
        "enabled": True,
        "registries": {"kubernetes": {"disabled": True}, "service": {}},
    }
    if role == "controlplane":
        section["etcd"] = {"ca": {"crt": _crt(None, "etcd CA certificate", cluster)}}
        section["extraManifests"] = []
        section["inlineManifests"] = []
    return section


def generate_config(
    *,
    cluster_name: str,
    hostname: str,
    role: Literal["controlplane", "worker"],
    address: str,
    endpoint: str,
    pod_subnets: Sequence[str] = DEFAULT_POD_SUBNETS,
    service_subnets: Sequence[str] = DEFAULT_SERVICE_SUBNETS,
    kubernetes_version: str = "1.36.0",
    install_image: str = "ghcr.io/siderolabs/installer:v1.13.9",
    extra_documents: bool = True,
    cert_sans: Sequence[str] = (),
    ca_crt_pem: bytes | None = None,
    kubernetes_ca_crt_pem: bytes | None = None,
) -> bytes:
    """A machine config as ``talosctl gen config`` (Talos 1.13) plus a hostname patch writes it.

    ``endpoint`` is the Kubernetes control-plane URL (``https://10.5.0.2:6443``). ``address``
    (the node's own address) is accepted for the callers' convenience but, as in gen config,
    written nowhere: Talos discovers node addresses at runtime. The result is the same for
    the same inputs and holds no private keys (see :data:`INFERRED`).
    """
    if role not in ("controlplane", "worker"):
        raise ValueError(f"role must be 'controlplane' or 'worker', not {role!r}")
    version = kubernetes_version.removeprefix("v")
    config = {
        "version": "v1alpha1",
        "debug": False,
        "persist": True,
        "machine": _machine_section(
            role=role, cluster=cluster_name, host=hostname, kubelet_version=version,
            install_image=install_image, cert_sans_list=cert_sans,
            ca_crt=_crt(ca_crt_pem, "Talos OS CA certificate", cluster_name),
            multidoc=extra_documents,
        ),
        "cluster": _cluster_section(
            role=role, cluster=cluster_name, endpoint=endpoint, version=version,
            pods=pod_subnets, services=service_subnets,
            k8s_ca_crt=_crt(kubernetes_ca_crt_pem, "Kubernetes CA certificate", cluster_name),
        ),
    }
    text = _render_yaml(config, _DOCS)
    if extra_documents:
        hostname_doc = {"apiVersion": "v1alpha1", "kind": "HostnameConfig",
                        "hostname": hostname, "auto": "off"}
        text += "---\n" + _render_yaml(hostname_doc, {
            "hostname": "A static hostname to set for the machine.",
            "auto": "A method to automatically generate a hostname for the machine.",
        })
    return text.encode("utf-8")
