"""The certificates of an emulated cluster: its Talos and Kubernetes CAs, the admin clients,
the kube-apiserver serving certificates, and the client configurations it hands out
(``pkg/machinery/config/generate/secrets``, ``v1alpha1_server.go``
GenerateClientConfiguration). This is the CERTIFICATES seam of the fault profiles."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from pytest_talos import pki
from pytest_talos.emulator import kubeapi
from pytest_talos.emulator.apid.servicers import ClientConfiguration
from pytest_talos.emulator.node.identity import NodeIdentity

__all__ = ["ClusterPKI", "serial_of"]


def serial_of(cert: pki.CertAndKey) -> str:
    """A certificate's serial, as lower-case hex (what the call log records)."""
    return format(cert.cert.serial_number, "x")


class ClusterPKI:
    """The CAs and the long-lived client certificates of one cluster."""

    def __init__(self, *, client_expiring: bool) -> None:
        # pkg/machinery/config/generate/secrets/ca.go NewTalosCA: Ed25519
        self.ca = pki.CertificateAuthority.generate(organization="talos")
        # fault client-cert-expiring: the admin certificate expires within days
        validity = pki.EXPIRING_CLIENT_VALIDITY if client_expiring else pki.DEFAULT_CLIENT_VALIDITY
        self.admin = pki.issue_client_cert(self.ca, roles=["os:admin"], validity=validity)
        # pkg/machinery/config/generate/secrets: the Kubernetes CA is ECDSA P-256.
        self.kube_ca = pki.CertificateAuthority.generate(
            organization="kubernetes", key_type="ecdsa"
        )
        self.kube_admin = pki.issue_kubeconfig_client_cert(self.kube_ca)

    def kube_apiserver_cert(
        self, ident: NodeIdentity, *, expired: bool, extra_ips: Sequence[str] = ()
    ) -> pki.CertAndKey:
        return pki.issue_kube_apiserver_cert(
            self.kube_ca,
            hostname=ident.hostname,
            fqdn=ident.fqdn,
            ips=[ident.address, *extra_ips],  # accumulative-no-k8s: WireGuard links' too
            endpoint_host=ident.address,  # the server of kubeconfig()
            expired=expired,
        )

    def kubeconfig(self, *, cluster_name: str, server: str) -> bytes:
        return kubeapi.render_kubeconfig(
            cluster_name=cluster_name,
            server=server,
            ca_pem=self.kube_ca.cert_pem,
            client_cert_pem=self.kube_admin.cert_pem,
            client_key_pem=self.kube_admin.key_pem_talos,
        )

    def client_configuration(
        self, roles: Sequence[str], ttl: float, *, cluster_name: str
    ) -> ClientConfiguration:
        cert = pki.issue_client_cert(self.ca, roles=list(roles), validity=dt.timedelta(seconds=ttl))
        # v1alpha1_server.go GenerateClientConfiguration: context `<role without os:>@<cluster>`
        # for one role; no endpoints.
        context = (
            f"{roles[0].removeprefix('os:')}@{cluster_name}" if len(roles) == 1 else cluster_name
        )
        talosconfig = pki.write_talosconfig(
            None, context=context, endpoints=[], ca_pem=self.ca.cert_pem, client=cert
        )
        return ClientConfiguration(self.ca.cert_pem, cert.cert_pem, cert.key_pem_talos, talosconfig)
