"""A machine config as Talos 1.13 generates it for ``talosctl cluster create``.

The generator is ``pkg/machinery/config/generate`` (``init.go`` for control planes,
``worker.go``, ``network.go``) under the v1.13 version contract
(``pkg/machinery/config/contract.go``); Talos pins its output in
``pkg/machinery/config/types/v1alpha1/testdata/stability/v1.13/base-{controlplane,worker}.yaml``.
``talosctl cluster create`` (``cmd/talosctl/cmd/mgmt/cluster/create/clusterops/configmaker``)
gives every node of a role the same config: no hostname is written, a ``HostnameConfig``
document says ``auto: stable``, and the platform names the node (docker: the container's
``/etc/hostname``, ``runtime/v1alpha1/platform/container``; qemu: DHCP), which outranks the
automatic name. So one template per role serves a whole cluster.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any, Literal

from pytest_talos.emulator.machineconfig.common import (
    DEFAULT_POD_SUBNETS,
    DEFAULT_SERVICE_SUBNETS,
)
from pytest_talos.emulator.machineconfig.render import render_yaml

# Documentation comments talosctl writes next to (scalars) or above (sections) a field.
_DOCS = {
    "version": "Indicates the schema used to decode the contents.",
    "debug": "Enable verbose logging to the console.",
    "persist": "Indicates whether to pull the machine config upon every boot.",
    "machine": "Provides machine specific configuration options.",
    "machine.type": "Defines the role of the machine within the cluster.",
    "machine.token": "The `token` is used by a machine to join the PKI of the cluster.",
    "machine.ca": "The root certificate authority of the PKI.",
    "machine.certSANs": (
        "Extra certificate subject alternative names for the machine's certificate."
    ),
    "machine.kubelet": "Used to provide additional options to the kubelet.",
    "machine.kubelet.image": (
        "The `image` field is an optional reference to an alternative kubelet image."
    ),
    "machine.kubelet.defaultRuntimeSeccompProfileEnabled": (
        "Enable container runtime default Seccomp profile."
    ),
    "machine.kubelet.disableManifestsDirectory": (
        "The `disableManifestsDirectory` field configures the kubelet to get static pod "
        "manifests from the /etc/kubernetes/manifests directory."
    ),
    "machine.install": "Used to provide instructions for installations.",
    "machine.install.disk": "The disk used for installations.",
    "machine.install.image": "Allows for supplying the image used to perform the installation.",
    "machine.install.wipe": (
        "Indicates if the installation disk should be wiped at installation time."
    ),
    "machine.features": (
        "Features describe individual Talos features that can be switched on or off."
    ),
    "machine.features.diskQuotaSupport": (
        "Enable XFS project quota support for EPHEMERAL partition and user disks."
    ),
    "machine.features.kubePrism": (
        "KubePrism - local proxy/load balancer on defined port that will distribute"
    ),
    "machine.features.hostDNS": "Configures host DNS caching resolver.",
    "machine.nodeLabels": "Configures the node labels for the machine.",
    "cluster": "Provides cluster specific configuration options.",
    "cluster.id": "Globally unique identifier for this cluster (base64 encoded random 32 bytes).",
    "cluster.secret": "Shared secret of cluster (base64 encoded random 32 bytes).",
    "cluster.controlPlane": "Provides control plane specific configuration options.",
    "cluster.controlPlane.endpoint": (
        "Endpoint is the canonical controlplane endpoint, which can be an IP address or a DNS "
        "hostname."
    ),
    "cluster.clusterName": "Configures the cluster's name.",
    "cluster.network": "Provides cluster specific network configuration options.",
    "cluster.network.dnsDomain": "The domain used by Kubernetes DNS.",
    "cluster.network.podSubnets": "The pod subnet CIDR.",
    "cluster.network.serviceSubnets": "The service subnet CIDR.",
    "cluster.token": (
        "The [bootstrap token](https://kubernetes.io/docs/reference/access-authn-authz/"
        "bootstrap-tokens/) used to join the cluster."
    ),
    "cluster.ca": "The base64 encoded root certificate authority used by Kubernetes.",
    "cluster.aggregatorCA": (
        "The base64 encoded aggregator certificate authority used by Kubernetes for "
        "front-proxy certificate generation."
    ),
    "cluster.apiServer": "API server specific configuration options.",
    "cluster.controllerManager": "Controller manager server specific configuration options.",
    "cluster.proxy": "Kube-proxy server-specific configuration options",
    "cluster.scheduler": "Scheduler server specific configuration options.",
    "cluster.discovery": "Configures cluster member discovery.",
    "cluster.etcd": "Etcd specific configuration options.",
}
_HOSTNAME_DOCS = {"auto": "A method to automatically generate a hostname for the machine."}
SECURITY_PROFILE_KIND = "SecurityProfileConfig"  # types/runtime/security_profile_config.go
_SECURITY_PROFILE_DOCS = {
    "workloadIsolation": "Enable workload isolation (run the container plane inside the "
    "sandbox namespace)."
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


def _key(what: str, cluster: str) -> str:
    """Where Talos writes a private key: a placeholder that is no key (see INFERRED)."""
    return base64.b64encode(f"emulated {what} for cluster {cluster}: not a key".encode()).decode()


def _install(image: str | None, disk: str | None) -> dict[str, Any]:
    # v1alpha1.InstallConfig field order; GrubUseUKICmdlineDefault() holds for 1.13.
    install: dict[str, Any] = {}
    if disk:
        install["disk"] = disk
    if image:
        install["image"] = image
    install.update({"wipe": False, "grubUseUKICmdline": True})
    return install


def _machine_section(
    *,
    role: str,
    cluster: str,
    kubelet_version: str,
    install: dict[str, Any],
    cert_sans_list: Sequence[str],
    ca_crt: str,
) -> dict[str, Any]:
    # 1.13 hides rbac/apidCheckExtKeyUsage (HideRBACAndKeyUsage) and, with multi-document
    # network config, writes neither `machine.network: {}` nor `stableHostname`.
    control_plane = role == "controlplane"
    machine: dict[str, Any] = {
        "type": role,
        "token": _token("machine-token", cluster),
        # A worker gets the Talos CA certificate only: its key is written empty.
        "ca": {"crt": ca_crt, "key": _key("Talos CA key", cluster) if control_plane else ""},
        "certSANs": list(cert_sans_list),
        "kubelet": {
            "image": f"ghcr.io/siderolabs/kubelet:v{kubelet_version}",
            "defaultRuntimeSeccompProfileEnabled": True,
            "disableManifestsDirectory": True,
        },
        "install": install,
        "features": {
            "diskQuotaSupport": True,
            "kubePrism": {"enabled": True, "port": 7445},
            "hostDNS": {"enabled": True, "forwardKubeDNSToHost": True},
        },
    }
    if control_plane:  # AddExcludeFromExternalLoadBalancer(), init.go only
        machine["nodeLabels"] = {"node.kubernetes.io/exclude-from-external-load-balancers": ""}
    return machine


def _pod_security() -> dict[str, Any]:
    return {
        "name": "PodSecurity",
        "configuration": {
            "apiVersion": "pod-security.admission.config.k8s.io/v1alpha1",
            "defaults": {
                "audit": "restricted",
                "audit-version": "latest",
                "enforce": "baseline",
                "enforce-version": "latest",
                "warn": "restricted",
                "warn-version": "latest",
            },
            "exemptions": {"namespaces": ["kube-system"], "runtimeClasses": [], "usernames": []},
            "kind": "PodSecurityConfiguration",
        },
    }


def _control_plane_components(version: str, cert_sans_list: Sequence[str]) -> dict[str, Any]:
    # 1.13: apiServer.certSANs holds only the extra SANs (PopulateClusterSANsFromEndpoint is
    # off) and is left out when empty; disablePodSecurityPolicy is hidden (HideDisablePSP).
    api_server: dict[str, Any] = {"image": f"registry.k8s.io/kube-apiserver:v{version}"}
    if cert_sans_list:
        api_server["certSANs"] = list(cert_sans_list)
    api_server["admissionControl"] = [_pod_security()]
    api_server["auditPolicy"] = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "rules": [{"level": "Metadata"}],
    }
    return {
        "apiServer": api_server,
        "controllerManager": {"image": f"registry.k8s.io/kube-controller-manager:v{version}"},
        "proxy": {"image": f"registry.k8s.io/kube-proxy:v{version}"},
        "scheduler": {"image": f"registry.k8s.io/kube-scheduler:v{version}"},
    }


def _cluster_section(
    *,
    role: str,
    cluster: str,
    endpoint: str,
    version: str,
    pods: Sequence[str],
    services: Sequence[str],
    k8s_ca_crt: str,
    cert_sans_list: Sequence[str],
) -> dict[str, Any]:
    control_plane = role == "controlplane"
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
    }
    if control_plane:
        section["secretboxEncryptionSecret"] = _b64_32("secretbox-encryption-secret", cluster)
    section["ca"] = {
        "crt": k8s_ca_crt,
        "key": _key("Kubernetes CA key", cluster) if control_plane else "",
    }
    if control_plane:
        section["aggregatorCA"] = {
            "crt": _crt(None, "aggregator CA certificate", cluster),
            "key": _key("aggregator CA key", cluster),
        }
        section["serviceAccount"] = {"key": _key("service account key", cluster)}
        section.update(_control_plane_components(version, cert_sans_list))
    section["discovery"] = {
        "enabled": True,
        "registries": {"kubernetes": {"disabled": True}, "service": {}},
    }
    if control_plane:
        section["etcd"] = {
            "ca": {
                "crt": _crt(None, "etcd CA certificate", cluster),
                "key": _key("etcd CA key", cluster),
            }
        }
    return section


def generate_config(
    *,
    cluster_name: str,
    role: Literal["controlplane", "worker"],
    endpoint: str,
    hostname: str | None = None,
    address: str | None = None,
    pod_subnets: Sequence[str] = DEFAULT_POD_SUBNETS,
    service_subnets: Sequence[str] = DEFAULT_SERVICE_SUBNETS,
    kubernetes_version: str = "1.36.0",
    install_image: str | None = None,
    install_disk: str | None = None,
    extra_documents: bool = True,
    cert_sans: Sequence[str] = (),
    ca_crt_pem: bytes | None = None,
    kubernetes_ca_crt_pem: bytes | None = None,
    security_profile: bool = False,
) -> bytes:
    """A machine config for ``role`` as Talos 1.13 generates it (see the module docstring).

    ``endpoint`` is the Kubernetes control-plane URL (``https://10.5.0.2:6443``).
    ``hostname`` and ``address`` are accepted for the callers' convenience but written
    nowhere: the cluster tooling gives all nodes of a role one config, and Talos learns its
    name from the platform and its addresses at runtime. ``install_image`` and
    ``install_disk`` are left out unless given (docker clusters set neither; qemu ones set
    the image). ``extra_documents=False`` leaves out the ``HostnameConfig`` document (a
    single-document config, as JSON6902 patches need). ``security_profile`` adds the
    ``SecurityProfileConfig`` document with ``workloadIsolation: true`` that Talos 1.14
    generates (v1.14.0-rc.1 pkg/machinery/config/generate/security_profile.go, when the
    version contract has WorkloadIsolationEnabledByDefault). The result is the same for the same
    inputs and holds no private keys (see :data:`INFERRED`).
    """
    del hostname, address  # not part of a generated config (see above)
    if role not in ("controlplane", "worker"):
        raise ValueError(f"role must be 'controlplane' or 'worker', not {role!r}")
    version = kubernetes_version.removeprefix("v")
    config = {
        "version": "v1alpha1",
        "debug": False,
        "persist": True,
        "machine": _machine_section(
            role=role,
            cluster=cluster_name,
            kubelet_version=version,
            install=_install(install_image, install_disk),
            cert_sans_list=cert_sans,
            ca_crt=_crt(ca_crt_pem, "Talos OS CA certificate", cluster_name),
        ),
        "cluster": _cluster_section(
            role=role,
            cluster=cluster_name,
            endpoint=endpoint,
            version=version,
            pods=pod_subnets,
            services=service_subnets,
            k8s_ca_crt=_crt(kubernetes_ca_crt_pem, "Kubernetes CA certificate", cluster_name),
            cert_sans_list=cert_sans,
        ),
    }
    text = render_yaml(config, _DOCS)
    if extra_documents:  # network.go: MultidocNetworkConfigSupported() adds HostnameConfig
        hostname_doc = {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "stable"}
        text += "---\n" + render_yaml(hostname_doc, _HOSTNAME_DOCS)
    if extra_documents and security_profile:
        profile = {
            "apiVersion": "v1alpha1",
            "kind": SECURITY_PROFILE_KIND,
            "workloadIsolation": True,
        }
        text += "---\n" + render_yaml(profile, _SECURITY_PROFILE_DOCS)
    return text.encode("utf-8")
