"""The api checks' helper probes that need no cluster: CA keys from a machine config, the
Kubernetes-CA certificate from a kubeconfig."""

from __future__ import annotations

import base64

import yaml
from cryptography.x509.oid import ExtendedKeyUsageOID

from conformance._support import probes
from pytest_talos.pki import CertificateAuthority, issue_client_cert


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _config(ca: CertificateAuthority, key: str) -> bytes:
    doc = {
        "version": "v1alpha1",
        "machine": {"type": "controlplane", "ca": {"crt": _b64(ca.cert_pem), "key": key}},
    }
    return b"---\n" + yaml.safe_dump(doc).encode() + b"---\napiVersion: v1alpha1\nkind: X\n"


def test_signer_from_a_control_plane_config_signs_like_the_ca() -> None:
    ca = CertificateAuthority.generate(organization="talos")
    talos_key = ca.as_cert_and_key().key_pem_talos
    assert b"ED25519 PRIVATE KEY" in talos_key  # as Talos writes it
    signer = probes.signer_from_config(_config(ca, _b64(talos_key)), "machine")
    assert signer is not None
    assert signer.cert == ca.cert
    cert = issue_client_cert(signer, roles=["os:reader"], ext_key_usage=())
    assert cert.cert.issuer == ca.cert.subject
    cert.cert.verify_directly_issued_by(ca.cert)


def test_signer_is_none_without_a_usable_key() -> None:
    ca = CertificateAuthority.generate(organization="talos")
    assert probes.signer_from_config(_config(ca, ""), "machine") is None
    assert probes.signer_from_config(_config(ca, _b64(b"not a key")), "machine") is None
    assert (
        probes.signer_from_config(_config(ca, _b64(ca.as_cert_and_key().key_pem)), "cluster")
        is None
    )


def test_kubeconfig_client_certificate_is_found() -> None:
    kube_ca = CertificateAuthority.generate(organization="kubernetes", key_type="ecdsa")
    cert = issue_client_cert(
        kube_ca,
        roles=["system:masters"],
        key_type="ecdsa",
        ext_key_usage=(ExtendedKeyUsageOID.CLIENT_AUTH,),
    )
    kubeconfig = yaml.safe_dump(
        {
            "users": [
                {
                    "name": "admin@c",
                    "user": {
                        "client-certificate-data": _b64(cert.cert_pem),
                        "client-key-data": _b64(cert.key_pem_talos),
                    },
                }
            ]
        }
    ).encode()
    assert probes._kubeconfig_client(kubeconfig) == (cert.cert_pem, cert.key_pem_talos)
    assert probes._kubeconfig_client(b"users: []\n") is None
