"""Keys load without memfd (macOS): a 0600 file in a private 0700 directory, removed at once.

The fallback is forced on Linux (``pytest_talos.keyfile.USE_MEMFD = False``, or a
``memfd_create`` that fails); the emulator's apid and the client both load their keys through
it, and an mTLS handshake against the emulator must still work.
"""

from __future__ import annotations

import os
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_talos import keyfile
from pytest_talos.client import TalosClient
from pytest_talos.cluster import KubernetesAccess
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import ConfigError
from pytest_talos.pki import CertificateAuthority, issue_client_cert
from pytest_talos.talosconfig import load_client_identity
from tests.integration.conftest import EMULATOR_TIME_SCALE


@dataclass(frozen=True)
class Written:
    path: Path
    file_mode: int
    dir_mode: int
    data_type: type


def _record_writes(monkeypatch: pytest.MonkeyPatch) -> list[Written]:
    written: list[Written] = []
    real = keyfile._write_private

    def recording(path: str, data: bytes) -> None:
        real(path, data)
        written.append(
            Written(
                Path(path),
                stat.S_IMODE(os.stat(path).st_mode),
                stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode),
                type(data),
            )
        )

    monkeypatch.setattr(keyfile, "_write_private", recording)
    return written


def _assert_private_and_gone(written: list[Written]) -> None:
    assert written, "the temporary-file path was not taken"
    for record in written:
        assert record.file_mode == 0o600, oct(record.file_mode)
        assert record.dir_mode == 0o700, oct(record.dir_mode)
        assert record.data_type is keyfile.SecretBytes  # no plain key bytes in any frame
        assert not record.path.exists()
        assert not record.path.parent.exists()


def test_tls_handshake_against_the_emulator_without_memfd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keyfile, "USE_MEMFD", False)
    written = _record_writes(monkeypatch)
    with EmulatedCluster(
        controlplanes=1, workers=0, time_scale=EMULATOR_TIME_SCALE, platform="container"
    ) as cluster:
        server_side = len(written)
        assert server_side, "the emulated apid did not load its key through the fallback"
        with TalosClient.from_talosconfig(
            cluster.talosconfig_path, endpoint=cluster.endpoint, env={}
        ) as client:
            version = client.version()
        assert len(written) > server_side, "the client did not load its key through the fallback"
    assert version
    _assert_private_and_gone(written)


def test_a_failing_memfd_create_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "memfd_create", refuse, raising=False)
    written = _record_writes(monkeypatch)
    ca = CertificateAuthority.generate()
    cert = issue_client_cert(ca, roles=["os:admin"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    load_client_identity(ctx, cert.cert_pem, cert.key_pem_talos)
    _assert_private_and_gone(written)


def test_no_memfd_attribute_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    written = _record_writes(monkeypatch)
    ca = CertificateAuthority.generate()
    cert = issue_client_cert(ca, roles=["os:admin"])
    keyfile.load_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert.cert_pem, cert.key_pem)
    _assert_private_and_gone(written)


def test_a_rejected_key_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyfile, "USE_MEMFD", False)
    written = _record_writes(monkeypatch)
    ca = CertificateAuthority.generate()
    cert = issue_client_cert(ca, roles=["os:admin"])
    other = issue_client_cert(ca, roles=["os:admin"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with pytest.raises(ConfigError, match="belong together"):
        load_client_identity(ctx, cert.cert_pem, other.key_pem_talos)
    _assert_private_and_gone(written)


def test_the_kubernetes_client_reads_nodes_without_memfd(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The admin kubeconfig's client key reaches the Kubernetes client through the same
    loader (it used to need memfd and refused elsewhere): the Node list is read over mTLS."""
    monkeypatch.setattr(keyfile, "USE_MEMFD", False)
    with EmulatedCluster(
        controlplanes=1, workers=1, time_scale=EMULATOR_TIME_SCALE, platform="container"
    ) as cluster:
        written = _record_writes(monkeypatch)
        controlplane = cluster.emulated_nodes[0]
        access = KubernetesAccess(cluster.kubeconfig_for(controlplane))
        try:
            nodes = access.core_v1.list_node(_request_timeout=10).items
        finally:
            access.close()
    assert sorted(node.metadata.name for node in nodes) == [
        "talos-default-controlplane-1",
        "talos-default-worker-1",
    ]
    _assert_private_and_gone(written)
