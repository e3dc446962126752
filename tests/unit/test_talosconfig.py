"""Loading a talosconfig: lookup, validation, clear errors, and keys that never leak."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import os
import socket
import ssl
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from pytest_talos import pki
from pytest_talos.errors import ConfigError
from pytest_talos.talosconfig import (
    TalosConfig,
    load_client_identity,
    load_talosconfig,
    lookup,
    normalize_endpoint,
    relabel_pkcs8_key,
    resolve_talosconfig_path,
)

Doc = dict[str, Any]
NOW = dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module")
def ca() -> pki.CertificateAuthority:
    return pki.CertificateAuthority.generate()


@pytest.fixture(scope="module")
def admin(ca: pki.CertificateAuthority) -> pki.CertAndKey:
    return pki.issue_client_cert(ca, roles=["os:admin"])


@pytest.fixture(autouse=True)
def _no_in_pod_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The real /var/run/secrets path must never influence these tests.
    monkeypatch.setattr(lookup, "IN_POD_PATH", tmp_path / "pod" / "config")


def _doc(ca: pki.CertificateAuthority, client: pki.CertAndKey, context: str = "prod") -> Doc:
    data = pki.write_talosconfig(
        None, context=context, endpoints=["10.5.0.2"], ca_pem=ca.cert_pem, client=client
    )
    doc: Doc = yaml.safe_load(data)
    return doc


def _write(path: Path, doc: Doc | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _key_body(pem: bytes) -> str:
    return "".join(line for line in pem.decode().splitlines() if not line.startswith("-----"))


def _secrets(client: pki.CertAndKey) -> list[str]:
    """Every form in which the client key could leak."""
    forms = [_key_body(client.key_pem), _b64(client.key_pem), _b64(client.key_pem_talos)]
    # Also any 24-character slice, so a truncated quote is caught too.
    return forms + [form[i : i + 24] for form in forms for i in range(0, len(form) - 24, 12)]


def _all_text(exc: BaseException) -> str:
    return "\n".join([str(exc), repr(exc), *map(str, exc.args), *traceback.format_exception(exc)])


def _assert_no_key(text: str, client: pki.CertAndKey) -> None:
    for secret in _secrets(client):
        assert secret not in text


# --------------------------------------------------------------------------- lookup


def test_explicit_path_wins_over_everything(tmp_path: Path) -> None:
    explicit = _write(tmp_path / "explicit", "x")
    _write(tmp_path / "env", "x")
    _write(tmp_path / "home" / ".talos" / "config", "x")
    env = {"TALOSCONFIG": str(tmp_path / "env"), "HOME": str(tmp_path / "home")}
    assert resolve_talosconfig_path(str(explicit), env) == (explicit, "given explicitly")


def test_talosconfig_env_wins_over_home(tmp_path: Path) -> None:
    from_env = _write(tmp_path / "env", "x")
    _write(tmp_path / "home" / ".talos" / "config", "x")
    env = {"TALOSCONFIG": str(from_env), "HOME": str(tmp_path / "home")}
    assert resolve_talosconfig_path(None, env) == (from_env, "$TALOSCONFIG")


def test_absolute_talos_home_wins_over_home(tmp_path: Path) -> None:
    talos_home = _write(tmp_path / "th" / "config", "x")
    _write(tmp_path / "home" / ".talos" / "config", "x")
    env = {"TALOS_HOME": str(tmp_path / "th"), "HOME": str(tmp_path / "home")}
    assert resolve_talosconfig_path(None, env) == (talos_home, "$TALOS_HOME/config")


def test_relative_talos_home_is_ignored(tmp_path: Path) -> None:
    home_config = _write(tmp_path / "home" / ".talos" / "config", "x")
    env = {"TALOS_HOME": "relative/dir", "HOME": str(tmp_path / "home"), "TALOSCONFIG": ""}
    assert resolve_talosconfig_path(None, env) == (home_config, "~/.talos/config")


def test_tilde_in_explicit_path_uses_the_given_home(tmp_path: Path) -> None:
    target = _write(tmp_path / "cfg", "x")
    assert resolve_talosconfig_path("~/cfg", {"HOME": str(tmp_path)})[0] == target


def test_in_pod_config_is_the_last_resort(tmp_path: Path) -> None:
    pod = _write(lookup.IN_POD_PATH, "x")
    path, source = resolve_talosconfig_path(None, {"HOME": str(tmp_path / "home")})
    assert path == pod
    assert "in-pod" in source


def test_missing_talosconfig_env_does_not_fall_through(tmp_path: Path) -> None:
    _write(tmp_path / "home" / ".talos" / "config", "x")
    env = {"TALOSCONFIG": str(tmp_path / "typo"), "HOME": str(tmp_path / "home")}
    with pytest.raises(ConfigError) as info:
        resolve_talosconfig_path(None, env)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'typo'}: talosconfig not found ($TALOSCONFIG)")
    assert "fix the path" in message


def test_missing_explicit_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="talosconfig not found \\(given explicitly\\)") as info:
        load_talosconfig(tmp_path / "nope", env={})
    assert info.value.path == str(tmp_path / "nope")


def test_nothing_found_lists_where_it_looked_in_order(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_talosconfig(env={"HOME": str(tmp_path)})
    message = str(info.value)
    home = f"{tmp_path / '.talos' / 'config'} (~/.talos/config)"
    assert message.startswith(f"no talosconfig found; looked at {home}, then ")
    assert message.index(home) < message.index(str(lookup.IN_POD_PATH))
    assert "Set $TALOSCONFIG" in message


def test_a_directory_is_not_a_talosconfig(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory, not a talosconfig file"):
        load_talosconfig(tmp_path, env={})


# --------------------------------------------------------------------------- happy paths


def test_loads_the_current_context(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    doc = _doc(ca, admin)
    doc["contexts"]["prod"].update(nodes=["10.5.0.2", "10.5.0.3"], cluster="prod-cluster")
    path = _write(tmp_path / "config", doc)
    config = load_talosconfig(env={"TALOSCONFIG": str(path)})
    assert config.path == path
    assert config.source == "$TALOSCONFIG"
    assert config.context_name == "prod"
    assert config.contexts == ("prod",)
    assert config.context.endpoints == ("10.5.0.2:50000",)
    assert config.context.nodes == ("10.5.0.2", "10.5.0.3")
    assert config.context.cluster == "prod-cluster"
    assert config.roles == ("os:admin",)
    assert config.not_after == admin.cert.not_valid_after_utc
    assert config.not_before == admin.cert.not_valid_before_utc
    assert config.expiry_warning is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.context_name = "other"  # type: ignore[misc]


def test_context_argument_overrides_the_file(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    doc = _doc(ca, admin)
    staging = dict(doc["contexts"]["prod"], endpoints=["10.6.0.2:50001"])
    doc["contexts"]["staging"] = staging
    config = load_talosconfig(_write(tmp_path / "c", doc), context="staging", env={})
    assert config.context_name == "staging"
    assert config.contexts == ("prod", "staging")
    assert config.context.endpoints == ("10.6.0.2:50001",)


@pytest.mark.parametrize(
    "roles",
    [["os:reader"], ["os:operator", "os:etcd:backup"], ["os:admin", "x:future-role"], []],
)
def test_roles_come_from_the_subject_organization(
    tmp_path: Path, ca: pki.CertificateAuthority, roles: list[str]
) -> None:
    client = pki.issue_client_cert(ca, roles=roles, common_name="someone")
    config = load_talosconfig(_write(tmp_path / "c", _doc(ca, client)), env={})
    assert config.roles == tuple(roles)


@pytest.mark.parametrize("key_type", ["ed25519", "ecdsa", "rsa"])
@pytest.mark.parametrize("talos_form", [True, False])
def test_key_types_round_trip(
    tmp_path: Path, ca: pki.CertificateAuthority, key_type: pki.KeyType, talos_form: bool
) -> None:
    client = pki.issue_client_cert(ca, roles=["os:admin"], key_type=key_type)
    doc = _doc(ca, client)
    if not talos_form:
        doc["contexts"]["prod"]["key"] = _b64(client.key_pem)
    config = load_talosconfig(_write(tmp_path / "c", doc), env={})
    assert config.key_type == key_type
    # Always handed on as standard PKCS#8, whatever the file used.
    assert config.context.key_pem == client.key_pem
    assert config.context.key_pem.startswith(b"-----" + b"BEGIN PRIVATE KEY-----")


def test_describe_is_one_safe_line(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    doc = _doc(ca, admin)
    doc["contexts"]["prod"]["nodes"] = ["10.5.0.2"]
    path = _write(tmp_path / "c", doc)
    config = load_talosconfig(path, env={})
    line = config.describe()
    assert "\n" not in line
    assert line.startswith(f"talosconfig {path} (given explicitly), context 'prod'; ")
    assert "endpoints 10.5.0.2:50000; nodes 10.5.0.2; roles os:admin; " in line
    assert "ed25519 client cert valid until " in line
    assert config.not_after.strftime("%Y-%m-%d") in line
    _assert_no_key(line, admin)
    for text in (repr(config), str(config), repr(config.context), str(config.context)):
        assert "key=<hidden>" in text
        _assert_no_key(text, admin)


def test_expiry_within_seven_days_warns(tmp_path: Path, ca: pki.CertificateAuthority) -> None:
    soon = pki.issue_client_cert(
        ca, roles=["os:admin"], not_after=NOW + dt.timedelta(days=3, hours=1)
    )
    config = load_talosconfig(_write(tmp_path / "c", _doc(ca, soon)), env={})
    assert config.expiry_warning is not None
    assert "the client certificate in" in config.expiry_warning
    assert "(contexts[prod].crt) expires on" in config.expiry_warning
    assert ", in 3d " in config.expiry_warning
    assert "talosctl config new" in config.expiry_warning
    assert config.describe().endswith(f"WARNING: {config.expiry_warning}")


def test_expiry_beyond_seven_days_does_not_warn(
    tmp_path: Path, ca: pki.CertificateAuthority
) -> None:
    later = pki.issue_client_cert(ca, roles=["os:admin"], not_after=NOW + dt.timedelta(days=8))
    config = load_talosconfig(_write(tmp_path / "c", _doc(ca, later)), env={})
    assert config.expiry_warning is None
    assert "WARNING" not in config.describe()


# --------------------------------------------------------------------------- errors


def _ctx(doc: Doc) -> Doc:
    body: Doc = doc["contexts"]["prod"]
    return body


def _other_key(doc: Doc, ca: pki.CertificateAuthority, admin: pki.CertAndKey) -> None:
    _ctx(doc)["key"] = _b64(pki.issue_client_cert(ca, roles=["os:admin"]).key_pem_talos)


def _expired(doc: Doc, ca: pki.CertificateAuthority, admin: pki.CertAndKey) -> None:
    old = pki.issue_client_cert(
        ca,
        roles=["os:admin"],
        not_before=NOW - dt.timedelta(days=30),
        not_after=NOW - dt.timedelta(days=2),
    )
    _ctx(doc).update(crt=_b64(old.cert_pem), key=_b64(old.key_pem_talos))


def _future(doc: Doc, ca: pki.CertificateAuthority, admin: pki.CertAndKey) -> None:
    new = pki.issue_client_cert(ca, roles=["os:admin"], not_before=NOW + dt.timedelta(days=1))
    _ctx(doc).update(crt=_b64(new.cert_pem), key=_b64(new.key_pem_talos))


def _omni(doc: Doc, ca: pki.CertificateAuthority, admin: pki.CertAndKey) -> None:
    body = _ctx(doc)
    del body["crt"], body["key"]
    body["auth"] = {"siderov1": {"identity": "someone@example.com"}}


def _encrypted(doc: Doc, ca: pki.CertificateAuthority, admin: pki.CertAndKey) -> None:
    key = serialization.load_pem_private_key(admin.key_pem, password=None)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    _ctx(doc)["key"] = _b64(pem)


Mutation = Callable[[Doc, pki.CertificateAuthority, pki.CertAndKey], Any]
# (id, mutation of a valid document, expected message fragment). Every case also proves
# the key never leaks.
ERROR_CASES: list[tuple[str, Mutation, str]] = [
    ("no-contexts", lambda d, c, a: d.pop("contexts"), "contexts: no contexts defined"),
    ("empty-contexts", lambda d, c, a: d.update(contexts={}), "contexts: no contexts defined"),
    (
        "context-not-found",
        lambda d, c, a: d.update(context="dev"),
        "context: context 'dev' not found; available contexts: prod",
    ),
    (
        "no-context-selected",
        lambda d, c, a: d.pop("context"),
        "context: no context selected; choose one of prod (talosctl config context NAME",
    ),
    (
        "context-not-mapping",
        lambda d, c, a: d["contexts"].update(prod=["x"]),
        "contexts[prod]: must be a mapping with endpoints, ca, crt and key",
    ),
    # No endpoints at all is not an error until they are used: tests/unit/test_secrets.py
    (
        "endpoints-not-list",
        lambda d, c, a: _ctx(d).update(endpoints="10.5.0.2"),
        "contexts[prod].endpoints: must be a list of strings",
    ),
    (
        "bad-endpoint",
        lambda d, c, a: _ctx(d).update(endpoints=["10.5.0.2", "10.5.0.3:http"]),
        "contexts[prod].endpoints[1]: '10.5.0.3:http' is not a valid endpoint: port 'http'",
    ),
    (
        "endpoint-not-string",
        lambda d, c, a: _ctx(d).update(endpoints=[50000]),
        "contexts[prod].endpoints[0]: must be a non-empty string",
    ),
    (
        "node-not-string",
        lambda d, c, a: _ctx(d).update(nodes=["10.5.0.2", None]),
        "contexts[prod].nodes[1]: must be a non-empty string",
    ),
    (
        "cluster-not-string",
        lambda d, c, a: _ctx(d).update(cluster=["a"]),
        "contexts[prod].cluster: must be a string",
    ),
    (
        "missing-ca",
        lambda d, c, a: _ctx(d).pop("ca"),
        "contexts[prod].ca: missing; the context needs ca, crt and key",
    ),
    (
        "missing-key",
        lambda d, c, a: _ctx(d).pop("key"),
        "contexts[prod].key: missing; the context needs ca, crt and key",
    ),
    (
        "omni-auth",
        _omni,
        "contexts[prod]: uses auth (e.g. Omni auth.siderov1) instead of a client certificate",
    ),
    (
        "crt-not-base64",
        lambda d, c, a: _ctx(d).update(crt="not*base64!"),
        "contexts[prod].crt: not valid base64; regenerate the talosconfig",
    ),
    (
        "crt-raw-pem",
        lambda d, c, a: _ctx(d).update(crt=a.cert_pem.decode()),
        "contexts[prod].crt: not valid base64 (it looks like raw PEM",
    ),
    (
        "key-raw-pem",
        lambda d, c, a: _ctx(d).update(key=a.key_pem_talos.decode()),
        "contexts[prod].key: not valid base64 (it looks like raw PEM",
    ),
    (
        "key-truncated-base64",
        lambda d, c, a: _ctx(d).update(key=_ctx(d)["key"][:-3]),
        "contexts[prod].key: not valid base64",
    ),
    (
        "ca-not-pem",
        lambda d, c, a: _ctx(d).update(ca=_b64(b"\x30\x82 just some DER-ish bytes")),
        "contexts[prod].ca: not PEM: expected base64 of a -----BEGIN CERTIFICATE----- block",
    ),
    (
        "key-not-pem",
        lambda d, c, a: _ctx(d).update(key=_b64(b"hello")),
        "contexts[prod].key: not PEM: expected base64 of a -----" + "BEGIN PRIVATE KEY----- block",
    ),
    (
        "key-in-crt",
        lambda d, c, a: _ctx(d).update(crt=_ctx(d)["key"]),
        "contexts[prod].crt: PEM of the wrong kind: found ED25519 PRIVATE KEY, expected "
        "CERTIFICATE",
    ),
    (
        "cert-in-key",
        lambda d, c, a: _ctx(d).update(key=_ctx(d)["crt"]),
        "contexts[prod].key: PEM of the wrong kind: found CERTIFICATE, expected PRIVATE KEY",
    ),
    (
        "broken-certificate",
        lambda d, c, a: _ctx(d).update(
            crt=_b64(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
        ),
        "contexts[prod].crt: the CERTIFICATE block is not a valid X.509 certificate",
    ),
    (
        "broken-key",
        lambda d, c, a: _ctx(d).update(
            key=_b64(b"-----" + b"BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        ),
        "contexts[prod].key: the PRIVATE KEY block is not a valid private key",
    ),
    (
        "encrypted-key",
        _encrypted,
        "contexts[prod].key: the private key is encrypted; talosconfig keys must be unencrypted",
    ),
    (
        "key-does-not-match",
        _other_key,
        "contexts[prod].key: the private key does not belong to the client certificate in "
        "contexts[prod].crt",
    ),
    (
        "expired",
        _expired,
        "contexts[prod].crt: the client certificate expired on ",
    ),
    (
        "not-yet-valid",
        _future,
        "contexts[prod].crt: the client certificate is not valid before ",
    ),
]


@pytest.fixture
def broken(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    ca: pki.CertificateAuthority,
    admin: pki.CertAndKey,
) -> tuple[Path, str]:
    _, mutate, expected = request.param
    doc = _doc(ca, admin)
    mutate(doc, ca, admin)
    return _write(tmp_path / "config", doc), expected


@pytest.mark.parametrize("broken", ERROR_CASES, ids=[c[0] for c in ERROR_CASES], indirect=True)
def test_error_names_file_key_and_fix(broken: tuple[Path, str], admin: pki.CertAndKey) -> None:
    path, expected = broken
    with pytest.raises(ConfigError) as info:
        load_talosconfig(path, env={})
    message = str(info.value)
    assert message.startswith(f"{path}: {expected}")
    assert "\n" not in message
    # Nothing chained: a chained exception could carry the offending text along.
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    _assert_no_key(_all_text(info.value), admin)


def test_expired_error_says_how_long_ago(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    doc = _doc(ca, admin)
    _expired(doc, ca, admin)
    with pytest.raises(ConfigError, match=r"\(2d 0h ago\); get a new talosconfig"):
        load_talosconfig(_write(tmp_path / "c", doc), env={})


def test_requested_context_not_found(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    doc = _doc(ca, admin)
    doc["contexts"]["dev"] = doc["contexts"]["prod"]
    with pytest.raises(ConfigError) as info:
        load_talosconfig(_write(tmp_path / "c", doc), context="qa", env={})
    assert str(info.value).endswith(
        "contexts: context 'qa' not found; available contexts: dev, prod"
    )
    assert info.value.key == "contexts"


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_empty_file(tmp_path: Path, content: str) -> None:
    path = _write(tmp_path / "config", content)
    with pytest.raises(ConfigError) as info:
        load_talosconfig(path, env={})
    assert str(info.value) == f"{path}: talos config file is empty"


def test_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the top level must be a mapping with context"):
        load_talosconfig(_write(tmp_path / "c", "- a\n- b\n"), env={})


def test_invalid_yaml_gives_the_location_but_never_the_line(
    tmp_path: Path, ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    text = pki.write_talosconfig(
        None, context="prod", endpoints=["10.5.0.2"], ca_pem=ca.cert_pem, client=admin
    ).decode()
    # Break the key line itself: PyYAML would quote this line in its own message.
    broken = text.replace("    key: ", "    key: [", 1)
    with pytest.raises(ConfigError) as info:
        load_talosconfig(_write(tmp_path / "c", broken), env={})
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'c'}: not valid YAML (line ")
    assert message.endswith("fix the syntax or regenerate the file")
    assert info.value.__context__ is None
    _assert_no_key(_all_text(info.value), admin)


# --------------------------------------------------------------------------- endpoints


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("10.5.0.2", "10.5.0.2:50000"),
        (" 10.5.0.2 ", "10.5.0.2:50000"),
        ("10.5.0.2:50001", "10.5.0.2:50001"),
        ("[::1]:50000", "[::1]:50000"),
        ("[::1]", "[::1]:50000"),
        ("::1", "[::1]:50000"),
        ("fd00:0:0::0002", "[fd00::2]:50000"),
        ("[fd00::2]:6443", "[fd00::2]:6443"),
        ("cp-1", "cp-1:50000"),
        ("cp-1.lab.example.com:50001", "cp-1.lab.example.com:50001"),
        ("https://omni.example.com", "omni.example.com:443"),
        ("https://omni.example.com/", "omni.example.com:443"),
        ("HTTPS://h.example:8443", "h.example:8443"),
        ("https://[::1]", "[::1]:443"),
    ],
)
def test_endpoint_normalization(given: str, normalized: str) -> None:
    assert normalize_endpoint(given) == normalized


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("", "it is empty"),
        ("h:0", "port '0' is not a number between 1 and 65535"),
        ("h:65536", "port '65536' is not a number between 1 and 65535"),
        ("h:", "port '' is not a number"),
        ("[::1", "'[' without a closing ']'"),
        ("[::1]50000", "unexpected '50000' after ']'"),
        ("[10.5.0.2]:50000", "'10.5.0.2' is not a valid IPv6 address"),
        ("1:2:3", "'1:2:3' is not a valid IPv6 address"),
        ("10.5.0.256", "'10.5.0.256' is not a valid IPv4 address"),
        ("bad host", "'bad host' is not a valid host name"),
        ("-leading.dash", "is not a valid host name"),
        ("http://h", "scheme 'http' is not supported (only https://)"),
        ("https://h/v1", "a URL endpoint may hold only https://host[:port]"),
        ("https://", "the host is empty"),
    ],
)
def test_bad_endpoints_say_why(given: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        normalize_endpoint(given)
    message = str(info.value)
    assert message.startswith(f"{given!r} is not a valid endpoint: ")
    assert reason in message
    assert message.endswith("use host, host:port, [ipv6]:port or https://host[:port]")


# --------------------------------------------------------------------------- keys


def test_relabel_turns_talos_ed25519_pem_into_standard_pkcs8(admin: pki.CertAndKey) -> None:
    with pytest.raises(ValueError):  # why relabelling exists at all
        serialization.load_pem_private_key(admin.key_pem_talos, password=None)
    relabelled = relabel_pkcs8_key(admin.key_pem_talos)
    assert relabelled == admin.key_pem
    assert serialization.load_pem_private_key(relabelled, password=None).public_key() == (
        admin.cert.public_key()
    )


def test_relabel_leaves_other_pem_alone(ca: pki.CertificateAuthority) -> None:
    ec_pair = pki.issue_client_cert(ca, roles=[], key_type="ecdsa")
    assert relabel_pkcs8_key(ec_pair.key_pem_talos) == ec_pair.key_pem_talos
    assert relabel_pkcs8_key(ec_pair.key_pem) == ec_pair.key_pem


# --------------------------------------------------------------------------- TLS identity


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _handshake(
    ca: pki.CertificateAuthority,
    config: TalosConfig,
    version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3,
) -> tuple[str, dict[str, Any]]:
    """A real mutual-TLS handshake over a local socket pair; returns (version, client cert)."""
    server_pair = pki.issue_server_cert(ca, hostname="cp-1", ips=["10.5.0.2"])
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.minimum_version = server_ctx.maximum_version = version
    server_ctx.load_verify_locations(cadata=ca.cert_pem.decode())
    server_pair.load_into(server_ctx)  # the emulator's way; the client uses talosconfig's

    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cadata=config.context.ca_pem.decode())
    load_client_identity(client_ctx, config.context.crt_pem, config.context.key_pem)

    seen: dict[str, Any] = {}
    server_sock, client_sock = socket.socketpair()
    for sock in (server_sock, client_sock):
        sock.settimeout(10)  # a deadline for every blocking step

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(server_sock, server_side=True) as tls:
                seen["peer"] = tls.getpeercert()
                tls.sendall(b"ok")
        except (OSError, ssl.SSLError) as exc:  # reported by the main thread
            seen["error"] = exc

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with client_ctx.wrap_socket(client_sock, server_hostname="127.0.0.1") as tls:
        assert tls.recv(2) == b"ok"
        negotiated = tls.version() or ""
    thread.join(timeout=10)
    assert "error" not in seen, seen.get("error")
    return negotiated, seen["peer"]


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])
def test_ed25519_identity_completes_a_mutual_tls_handshake(
    tmp_path: Path,
    ca: pki.CertificateAuthority,
    admin: pki.CertAndKey,
    version: ssl.TLSVersion,
) -> None:
    config = load_talosconfig(_write(tmp_path / "c", _doc(ca, admin)), env={})
    negotiated, peer = _handshake(ca, config, version)
    assert (
        negotiated
        == {ssl.TLSVersion.TLSv1_3: "TLSv1.3", ssl.TLSVersion.TLSv1_2: "TLSv1.2"}[version]
    )
    assert peer["subject"] == ((("organizationName", "os:admin"),),)


def test_loading_an_identity_leaves_no_file_descriptor(admin: pki.CertAndKey) -> None:
    before = _open_fds()
    for _ in range(3):
        load_client_identity(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), admin.cert_pem, admin.key_pem)
    assert _open_fds() == before


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_other_key_types_complete_a_handshake(
    tmp_path: Path, ca: pki.CertificateAuthority, key_type: pki.KeyType
) -> None:
    pair = pki.issue_client_cert(ca, roles=["os:reader"], key_type=key_type)
    config = load_talosconfig(_write(tmp_path / "c", _doc(ca, pair)), env={})
    negotiated, peer = _handshake(ca, config)
    assert negotiated == "TLSv1.3"
    assert peer["subject"] == ((("organizationName", "os:reader"),),)


def test_identity_with_a_foreign_key_is_rejected(
    ca: pki.CertificateAuthority, admin: pki.CertAndKey
) -> None:
    other = pki.issue_client_cert(ca, roles=["os:admin"])
    with pytest.raises(
        ConfigError, match=r"KEY_VALUES_MISMATCH.*crt and key belong together"
    ) as info:
        load_client_identity(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), admin.cert_pem, other.key_pem)
    _assert_no_key(_all_text(info.value), other)


def test_identity_with_an_encrypted_key_is_rejected(admin: pki.CertAndKey) -> None:
    key = serialization.load_pem_private_key(admin.key_pem, password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    with pytest.raises(ConfigError, match="the client private key is encrypted"):
        load_client_identity(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), admin.cert_pem, encrypted)


def test_without_memfd_the_key_loads_and_leaves_no_file(
    monkeypatch: pytest.MonkeyPatch, admin: pki.CertAndKey, tmp_path: Path
) -> None:
    # macOS has no memfd: a private temporary file is used and removed at once
    # (tests/integration/test_keyfile_fallback.py checks its modes).
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    load_client_identity(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), admin.cert_pem, admin.key_pem)
    assert list(tmp_path.iterdir()) == []
