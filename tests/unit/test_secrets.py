"""Key material is never shown, and a context without endpoints loads (no sockets here)."""

from __future__ import annotations

import pprint
import reprlib
from pathlib import Path

import pytest
import yaml

from pytest_talos import pki, talosconfig
from pytest_talos.errors import ConfigError
from pytest_talos.talosconfig import SecretBytes, SecretStr, document, load_talosconfig


@pytest.fixture(scope="module")
def admin() -> tuple[pki.CertificateAuthority, pki.CertAndKey]:
    ca = pki.CertificateAuthority.generate()
    return ca, pki.issue_client_cert(ca, roles=["os:admin"])


def _config(
    tmp_path: Path, admin: tuple[pki.CertificateAuthority, pki.CertAndKey], **change: object
) -> Path:
    ca, client = admin
    doc = yaml.safe_load(
        pki.write_talosconfig(
            None, context="prod", endpoints=["10.5.0.2"], ca_pem=ca.cert_pem, client=client
        )
    )
    doc["contexts"]["prod"].update(change)
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    return path


FAKE_KEY = b"-----" + b"BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI\n"  # split: no key literal


def test_secret_bytes_never_show_their_content() -> None:
    secret = SecretBytes(FAKE_KEY)
    for shown in (
        repr(secret),
        str(secret),
        f"{secret}",
        f"{secret!r}",
        reprlib.repr(secret),
        pprint.pformat({"key": secret}),
        repr([secret]),
    ):
        assert "MC4CAQ" not in shown
        assert "<secret: 50 bytes>" in shown
    assert secret == FAKE_KEY  # still bytes
    assert isinstance(secret, bytes)


def test_secret_str_never_shows_its_content() -> None:
    secret = SecretStr("TUM0Q0FRQXdCUVlES")
    assert repr(secret) == "<secret: 17 characters>"
    assert "TUM0" not in pprint.pformat({"contexts": {"a": {"key": secret}}})
    assert "".join(secret.split()) == "TUM0Q0FRQXdCUVlES"


def test_loaded_keys_are_secrets(
    tmp_path: Path, admin: tuple[pki.CertificateAuthority, pki.CertAndKey]
) -> None:
    config = load_talosconfig(_config(tmp_path, admin), env={})
    assert isinstance(config.context.key_pem, SecretBytes)
    assert isinstance(talosconfig.relabel_pkcs8_key(admin[1].key_pem_talos), SecretBytes)
    data, _ = document.read_bytes(config.path)
    assert isinstance(data, SecretBytes)  # the whole file holds the key
    doc, _ = document.safe_load(data)
    assert isinstance(doc["contexts"]["prod"]["key"], SecretStr)


@pytest.mark.parametrize("endpoints", [[], None], ids=["empty-list", "missing"])
def test_a_context_without_endpoints_loads_and_fails_only_when_used(
    tmp_path: Path,
    admin: tuple[pki.CertificateAuthority, pki.CertAndKey],
    endpoints: list[str] | None,
) -> None:
    path = _config(tmp_path, admin, endpoints=endpoints)
    config = load_talosconfig(path, env={})
    assert not config.context.endpoints
    assert "endpoints (none: name one)" in config.describe()
    expected = (
        f"{path}: contexts[prod].endpoints: no endpoints; set them with talosctl config "
        "endpoint <ip> [<ip> ...] (the control-plane node addresses), or name one "
        "(--talos-endpoint)"
    )
    with pytest.raises(ConfigError) as used:
        list(config.context.endpoints)
    assert str(used.value) == expected
    with pytest.raises(ConfigError):
        config.context.endpoints[0]
