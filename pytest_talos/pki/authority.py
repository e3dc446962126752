"""The certificate and key pair a holder keeps, and the CA that signs them."""

from __future__ import annotations

import datetime as dt
import ssl
from dataclasses import dataclass, field
from typing import cast

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import NameOID

from pytest_talos.errors import ConfigError
from pytest_talos.keyfile import load_chain
from pytest_talos.pki.keys import (
    KeyType,
    PrivateKey,
    generate_key,
    key_type_of,
    new_serial,
    pkcs8_pem,
    signature_hash,
    talos_key_pem,
    utc_now,
)

__all__ = ["DEFAULT_CA_VALIDITY", "CertAndKey", "CertificateAuthority", "key_usage"]

DEFAULT_CA_VALIDITY = dt.timedelta(days=3650)  # NewTalosCA: 87600h


@dataclass(frozen=True)
class CertAndKey:
    """A PEM certificate and its private key. ``repr`` never shows the key."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)  # PKCS#8 "PRIVATE KEY", loadable by any TLS stack
    key_pem_talos: bytes = field(repr=False)  # as talosctl writes it (Ed25519 label etc.)

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def key_type(self) -> KeyType:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        return key_type_of(cast(PrivateKey, key))

    def __repr__(self) -> str:
        cert = self.cert
        return (
            f"CertAndKey(subject={cert.subject.rfc4514_string()!r}, "
            f"not_after={cert.not_valid_after_utc.isoformat()}, key=<hidden>)"
        )

    def load_into(self, ctx: ssl.SSLContext) -> None:
        """Load this certificate and key into ``ctx`` (e.g. an emulated apid's server side).

        ``ssl`` reads keys only from a path: :func:`pytest_talos.keyfile.load_chain` gives it
        an anonymous in-memory file (Linux ``memfd_create``), or elsewhere a 0600 file in a
        private directory removed right after loading.
        """
        try:
            load_chain(ctx, self.cert_pem, self.key_pem, name="pytest-talos-pki")
        except ssl.SSLError as exc:
            raise ConfigError(f"ssl rejected the certificate and key ({exc.reason})") from None

    @classmethod
    def from_key(cls, cert: x509.Certificate, key: PrivateKey) -> CertAndKey:
        return cls(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=pkcs8_pem(key),
            key_pem_talos=talos_key_pem(key),
        )


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that can sign certificates. ``repr`` never shows the key."""

    cert: x509.Certificate
    private_key: PrivateKey = field(repr=False)

    @classmethod
    def generate(
        cls,
        organization: str = "talos",
        validity: dt.timedelta = DEFAULT_CA_VALIDITY,
        key_type: KeyType = "ed25519",
    ) -> CertificateAuthority:
        key = generate_key(key_type)
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)])
        not_before = utc_now()  # secrets/ca.go NewTalosCA: NotBefore(currentTime)
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(new_serial())
            .not_valid_before(not_before)
            .not_valid_after(not_before + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(key_usage(cert_sign=True), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, signature_hash(key))
        )
        return cls(cert=cert, private_key=key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_type(self) -> KeyType:
        return key_type_of(self.private_key)

    def as_cert_and_key(self) -> CertAndKey:
        return CertAndKey.from_key(self.cert, self.private_key)

    def sign(self, builder: x509.CertificateBuilder) -> x509.Certificate:
        """Sign a leaf builder that already has subject, key, validity and extensions."""
        issuer_key: CertificateIssuerPrivateKeyTypes = self.private_key
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(self.private_key.public_key())
        return (
            builder.issuer_name(self.cert.subject)
            .serial_number(new_serial())
            .add_extension(aki, critical=False)
            .sign(issuer_key, signature_hash(self.private_key))
        )

    def __repr__(self) -> str:
        return (
            f"CertificateAuthority(subject={self.cert.subject.rfc4514_string()!r}, "
            f"key_type={self.key_type!r}, key=<hidden>)"
        )


def key_usage(*, cert_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
