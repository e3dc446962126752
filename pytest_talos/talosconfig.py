"""Find, load and validate a talosconfig the way talosctl does.

Lookup (first match wins; nothing is ever merged)::

    explicit path  ->  $TALOSCONFIG  ->  $TALOS_HOME/config (if absolute) or ~/.talos/config
                   ->  /var/run/secrets/talos.dev/config (read-only, inside pods)

An explicit path or ``$TALOSCONFIG`` is taken at its word: if it does not exist that is an
error, rather than a silent fall-through to some other cluster's config.

Every problem is a :class:`~pytest_talos.errors.ConfigError` that names the file and the key
path (``contexts[prod].crt``) and says what to fix. Private key material never appears in a
message, ``repr`` or ``describe()``, and is never kept on disk: talosctl's
``ED25519 PRIVATE KEY`` PEM is relabelled in memory, and :func:`load_client_identity` hands
the key to :mod:`ssl` through a memory-only file (``memfd_create``), or where the platform
has none (macOS) through a 0600 file in a private directory removed right after loading.

Nor does key material appear in a traceback: from the moment the file is read, its bytes,
the base64 ``key`` values and the decoded PEM are held in :class:`SecretBytes` /
:class:`SecretStr`, whose ``repr`` and ``str`` say only ``<secret: N bytes>``, so that
``pytest -l`` (at any verbosity) and JUnit XML show no key from any frame.

A context without endpoints (``endpoints: []``, as GenerateClientConfiguration writes it)
loads: it is usable wherever an endpoint is named (``--talos-endpoint``), and raises the
ConfigError that says how to set one when its endpoints are used.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import os
import re
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn
from urllib.parse import urlsplit

import yaml
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from pytest_talos.errors import ConfigError
from pytest_talos.keyfile import SecretBytes, load_chain
from pytest_talos.talos_api import APID_PORT, certificate_roles, split_host_port

__all__ = [
    "DEFAULT_API_PORT",
    "EXPIRY_WARNING_WINDOW",
    "IN_POD_PATH",
    "SCAN_BASELINE_KEY",
    "TIME_SCALE_KEY",
    "Context",
    "KeyType",
    "SecretBytes",
    "SecretStr",
    "TalosConfig",
    "load_client_identity",
    "load_talosconfig",
    "normalize_endpoint",
    "relabel_pkcs8_key",
    "resolve_talosconfig_path",
]

KeyType = Literal["ed25519", "ecdsa", "rsa"]
_PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

DEFAULT_API_PORT = APID_PORT
_HTTPS_PORT = 443
EXPIRY_WARNING_WINDOW = dt.timedelta(days=7)
IN_POD_PATH = Path("/var/run/secrets/talos.dev/config")

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")
_ED25519_LABEL = re.compile(rb"-----(BEGIN|END) ED25519 PRIVATE KEY-----")
_KEY_LABELS = frozenset({"PRIVATE KEY", "ED25519 PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"})
_HOSTNAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)
_ENDPOINT_FORMS = "use host, host:port, [ipv6]:port or https://host[:port]"
# A context key only the pytest-talos emulator writes: how many times faster than real time
# its nodes' clock runs. talosctl decodes the file without KnownFields, so it ignores the key
# (pkg/machinery/client/config/config.go ReadFrom); a real cluster's talosconfig has none.
TIME_SCALE_KEY = "x-pytest-talos-time-scale"
# Also written only by the emulator: an address of its /24 where no node lives. Ports open
# there are the host's own wildcard listeners, so the port scan leaves them out (scan baseline).
SCAN_BASELINE_KEY = "x-pytest-talos-scan-baseline"


# --------------------------------------------------------------------------- secrets


class SecretStr(str):
    """A string holding key material (base64 of a key): ``repr`` never shows the content."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<secret: {len(self)} characters>"


def _hide_keys(doc: Any) -> Any:
    """The parsed talosconfig with every context's ``key`` wrapped in :class:`SecretStr`."""
    contexts = doc.get("contexts") if isinstance(doc, dict) else None
    for body in contexts.values() if isinstance(contexts, dict) else ():
        if isinstance(body, dict) and isinstance(body.get("key"), str):
            body["key"] = SecretStr(body["key"])
    return doc


class _NoEndpoints(tuple[str, ...]):
    """An empty endpoint list: falsy and printable, but using it raises why it is empty."""

    error: ConfigError

    def __new__(cls, error: ConfigError) -> _NoEndpoints:
        empty = super().__new__(cls, ())
        empty.error = error
        return empty

    def __iter__(self) -> Iterator[str]:
        raise self.error

    def __getitem__(self, index: Any) -> Any:
        raise self.error


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Context:
    """One talosconfig context. ``key_pem`` is PKCS#8 ``PRIVATE KEY`` PEM and never shown."""

    name: str
    endpoints: tuple[str, ...]  # normalized host:port
    nodes: tuple[str, ...]
    cluster: str | None
    ca_pem: bytes
    crt_pem: bytes
    key_pem: bytes = field(repr=False)
    time_scale: float = 1.0  # the nodes' clock rate the talosconfig advertises (emulator only)
    scan_baseline: str | None = None  # an address where no node lives (emulator only)

    def __repr__(self) -> str:
        return (
            f"Context(name={self.name!r}, endpoints={self.endpoints!r}, nodes={self.nodes!r}, "
            f"cluster={self.cluster!r}, key=<hidden>)"
        )


@dataclass(frozen=True)
class TalosConfig:
    """A loaded, validated talosconfig with the selected context and client-cert facts."""

    path: Path
    source: str  # how the path was found, e.g. "$TALOSCONFIG"
    context_name: str
    contexts: tuple[str, ...]
    context: Context
    roles: tuple[str, ...]  # the client cert's Subject Organization values
    not_before: dt.datetime
    not_after: dt.datetime
    key_type: KeyType
    expiry_warning: str | None

    def describe(self) -> str:
        """A one-line summary safe for report headers (no key material)."""
        parts = [
            f"talosconfig {self.path} ({self.source}), context {self.context_name!r}",
            f"endpoints {', '.join(self.context.endpoints)}"
            if self.context.endpoints
            else "endpoints (none: name one)",
        ]
        if self.context.nodes:
            parts.append(f"nodes {', '.join(self.context.nodes)}")
        parts.append(f"roles {', '.join(self.roles) or '(none)'}")
        parts.append(f"{self.key_type} client cert valid until {_when(self.not_after)}")
        if self.context.time_scale != 1:
            parts.append(f"emulated clock {self.context.time_scale:g}x")
        if self.expiry_warning:
            parts.append(f"WARNING: {self.expiry_warning}")
        return "; ".join(parts)


# --------------------------------------------------------------------------- lookup


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def _expand_user(text: str, env: Mapping[str, str]) -> Path:
    if text == "~" or text.startswith("~/"):
        return _home(env) / text[2:]
    return Path(text)


def _candidates(explicit: str | None, env: Mapping[str, str]) -> list[tuple[Path, str]]:
    if explicit:
        return [(_expand_user(explicit, env), "given explicitly")]
    if env.get("TALOSCONFIG"):
        return [(_expand_user(env["TALOSCONFIG"], env), "$TALOSCONFIG")]
    talos_home = env.get("TALOS_HOME", "")
    if talos_home and Path(talos_home).is_absolute():
        home_config = (Path(talos_home) / "config", "$TALOS_HOME/config")
    else:
        home_config = (_home(env) / ".talos" / "config", "~/.talos/config")
    return [home_config, (IN_POD_PATH, "in-pod mount, read-only")]


def resolve_talosconfig_path(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str]
) -> tuple[Path, str]:
    """The talosconfig to use and how it was found, in talosctl's lookup order.

    Raises ConfigError listing every place looked at, in order, when none exists.
    """
    candidates = _candidates(os.fspath(explicit) if explicit else None, env)
    for path, source in candidates:
        if path.exists():
            return path, source
    if len(candidates) == 1:
        path, source = candidates[0]
        raise ConfigError(
            f"talosconfig not found ({source}); fix the path or point $TALOSCONFIG at an "
            "existing talosconfig",
            path=str(path),
        )
    looked = ", then ".join(f"{path} ({source})" for path, source in candidates)
    raise ConfigError(
        f"no talosconfig found; looked at {looked}. Set $TALOSCONFIG or pass the path of a "
        "talosconfig (talosctl gen config writes one; talosctl config merge installs it)"
    )


# --------------------------------------------------------------------------- endpoints


class _BadEndpoint(ValueError):
    pass


def _parse_port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _BadEndpoint(f"port {text!r} is not a number between 1 and 65535")
    return int(text)


def _parse_ipv6(text: str) -> str:
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        raise _BadEndpoint(f"{text!r} is not a valid IPv6 address") from None


def _check_host(host: str) -> str:
    if not host:
        raise _BadEndpoint("the host is empty")
    if re.fullmatch(r"[0-9.]+", host):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise _BadEndpoint(f"{host!r} is not a valid IPv4 address") from None
    if not _HOSTNAME.fullmatch(host):
        raise _BadEndpoint(f"{host!r} is not a valid host name")
    return host


def _host_port(text: str, default_port: int) -> str:
    try:
        host, port_text = split_host_port(text)
    except ValueError as exc:
        raise _BadEndpoint(str(exc)) from None
    port = _parse_port(port_text) if port_text is not None else default_port
    if text.startswith("[") or ":" in host:  # bracketed, or a bare IPv6 address (no port)
        return f"[{_parse_ipv6(host)}]:{port}"
    return f"{_check_host(host)}:{port}"


def _from_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme.lower() != "https":
        raise _BadEndpoint(f"scheme {parts.scheme!r} is not supported (only https://)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise _BadEndpoint("a URL endpoint may hold only https://host[:port]")
    return _host_port(parts.netloc, _HTTPS_PORT)


def _normalize(text: str) -> str:
    text = text.strip()
    if not text:
        raise _BadEndpoint("it is empty")
    return _from_url(text) if "://" in text else _host_port(text, DEFAULT_API_PORT)


def normalize_endpoint(text: str, *, path: str | None = None, key: str | None = None) -> str:
    """``host[:port]`` with the default port 50000, IPv6 in brackets, ``https://h`` -> ``h:443``."""
    try:
        return _normalize(text)
    except _BadEndpoint as exc:
        reason = str(exc)
    raise ConfigError(
        f"{text!r} is not a valid endpoint: {reason}; {_ENDPOINT_FORMS}", path=path, key=key
    )


# --------------------------------------------------------------------------- keys & TLS


def relabel_pkcs8_key(pem: bytes) -> bytes:
    """Turn talosctl's ``ED25519 PRIVATE KEY`` PEM into standard ``PRIVATE KEY`` PEM.

    The DER inside is already PKCS#8; only the label differs. Other PEM is returned as is.
    Works purely in memory.
    """
    return SecretBytes(_ED25519_LABEL.sub(rb"-----\1 PRIVATE KEY-----", pem))


def _refuse_password() -> bytes:
    raise ConfigError("the client private key is encrypted; talosconfig keys must be unencrypted")


def load_client_identity(ctx: ssl.SSLContext, crt_pem: bytes, key_pem: bytes) -> None:
    """Load a certificate chain and its key into ``ctx`` without leaving the key on disk.

    ``ssl`` only loads keys from a path: :func:`pytest_talos.keyfile.load_chain` hands it an
    anonymous memory-backed file (Linux ``memfd_create``) or, where there is none (macOS), a
    0600 file in a private 0700 temporary directory removed as soon as the key is loaded.
    """
    key_pem = SecretBytes(key_pem)  # a caller's plain bytes never sit in this frame
    try:
        load_chain(
            ctx,
            crt_pem,
            relabel_pkcs8_key(key_pem),
            password=_refuse_password,
            name="pytest-talos-identity",
        )
    except ssl.SSLError as exc:
        raise ConfigError(
            f"the TLS library rejected the client certificate and key ({exc.reason or exc.args[0]})"
            "; check that crt and key belong together"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot hand the client key to the TLS library ({exc.strerror}); "
            "check that /proc is mounted or that $TMPDIR is writable"
        ) from None


# --------------------------------------------------------------------------- parsing


# Errors are raised *outside* ``except`` blocks on purpose: a chained exception (PyYAML's
# quotes the offending line) could carry key material into a traceback.


class _Where:
    """The file and key path an error points at."""

    def __init__(self, path: Path, key: str | None = None):
        self.path = path
        self.key = key

    def at(self, key: str) -> _Where:
        return _Where(self.path, key)

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(message, path=str(self.path), key=self.key) from None


def _read(where: _Where) -> bytes:
    if where.path.is_dir():
        where.fail("is a directory, not a talosconfig file")
    data, reason = _read_bytes(where.path)
    if data is None:
        where.fail(f"cannot read the talosconfig ({reason}); check its permissions")
    return data


def _read_bytes(path: Path) -> tuple[bytes | None, str]:
    try:
        return SecretBytes(path.read_bytes()), ""  # the whole file holds the key
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__


def _safe_load(data: bytes) -> tuple[Any, str | None]:
    """The YAML document, or None and a description of where it is broken."""
    try:
        return _hide_keys(yaml.safe_load(data)), None
    except yaml.YAMLError as exc:
        # Never str(exc): PyYAML quotes the offending line, which may hold key material.
        return None, _yaml_location(exc)


def _parse_yaml(where: _Where, data: bytes) -> dict[Any, Any]:
    if not data.strip():
        where.fail("talos config file is empty")
    doc, broken_at = _safe_load(data)
    if broken_at is not None:
        where.fail(f"not valid YAML{broken_at}; fix the syntax or regenerate the file")
    if not isinstance(doc, dict):
        where.fail("not a talosconfig: the top level must be a mapping with context and contexts")
    return doc


def _yaml_location(exc: yaml.YAMLError) -> str:
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return ""
    mark = exc.problem_mark
    problem = f": {exc.problem}" if exc.problem else ""
    return f" (line {mark.line + 1}, column {mark.column + 1}{problem})"


def _select_context(
    where: _Where, doc: dict[Any, Any], requested: str | None
) -> tuple[str, dict[Any, Any], tuple[str, ...]]:
    raw_contexts = doc.get("contexts")
    if not isinstance(raw_contexts, dict) or not raw_contexts:
        where.at("contexts").fail(
            "no contexts defined; use a talosconfig written by talosctl gen config "
            "(or add one with talosctl config merge)"
        )
    contexts = {str(name): value for name, value in raw_contexts.items()}
    names = tuple(sorted(contexts))
    chosen = requested or doc.get("context")
    available = ", ".join(names)
    if not chosen:
        where.at("context").fail(
            f"no context selected; choose one of {available} "
            "(talosctl config context NAME, or pass the context explicitly)"
        )
    chosen = str(chosen)
    if chosen not in contexts:
        key = "contexts" if requested else "context"
        where.at(key).fail(f"context {chosen!r} not found; available contexts: {available}")
    body = contexts[chosen]
    if not isinstance(body, dict):
        where.at(f"contexts[{chosen}]").fail("must be a mapping with endpoints, ca, crt and key")
    return chosen, body, names


def _string_list(where: _Where, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        where.fail("must be a list of strings, e.g. [10.5.0.2]")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            where.at(f"{where.key}[{index}]").fail("must be a non-empty string")
    return [item.strip() for item in value]


def _endpoints(where: _Where, body: dict[Any, Any]) -> tuple[str, ...]:
    endpoints = _string_list(where, body.get("endpoints"))
    if not endpoints:  # fine while the caller names an endpoint (--talos-endpoint)
        return _NoEndpoints(
            ConfigError(
                "no endpoints; set them with talosctl config endpoint <ip> [<ip> ...] "
                "(the control-plane node addresses), or name one (--talos-endpoint)",
                path=str(where.path),
                key=where.key,
            )
        )
    return tuple(
        normalize_endpoint(text, path=str(where.path), key=f"{where.key}[{index}]")
        for index, text in enumerate(endpoints)
    )


def _decode_b64(where: _Where, body: dict[Any, Any], name: str) -> bytes:
    value = body.get(name)
    if value is None or value == "":
        where.fail("missing; the context needs ca, crt and key (base64 of PEM)")
    if not isinstance(value, str):
        where.fail("must be a base64 string")
    decoded = _b64decode("".join(value.split()))
    if decoded is None:
        hint = " (it looks like raw PEM; the file must hold base64 of the PEM)"
        hint = hint if "-----BEGIN" in value else ""
        where.fail(f"not valid base64{hint}; regenerate the talosconfig")
    return SecretBytes(decoded) if isinstance(value, SecretStr) else decoded


def _b64decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _pem_labels(data: bytes) -> list[str]:
    return [label.decode("ascii") for label in _PEM_BLOCK.findall(data)]


def _require_pem(where: _Where, data: bytes, wanted: frozenset[str], kind: str) -> None:
    labels = _pem_labels(data)
    if not labels:
        where.fail(f"not PEM: expected base64 of a -----BEGIN {kind}----- block")
    if wanted.intersection(labels):
        return
    if "ENCRYPTED PRIVATE KEY" in labels:
        where.fail("the private key is encrypted; talosconfig keys must be unencrypted")
    where.fail(f"PEM of the wrong kind: found {', '.join(labels)}, expected {kind}")


def _certificates(where: _Where, data: bytes) -> list[x509.Certificate]:
    _require_pem(where, data, frozenset({"CERTIFICATE"}), "CERTIFICATE")
    certificates = _load_certificates(data)
    if not certificates:
        where.fail("the CERTIFICATE block is not a valid X.509 certificate; regenerate it")
    return certificates


def _load_certificates(data: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        return []


def _private_key(where: _Where, data: bytes) -> _PrivateKey:
    _require_pem(where, data, _KEY_LABELS, "PRIVATE KEY")
    key, problem = _load_key(data)
    if problem:
        where.fail(problem)
    if not isinstance(
        key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    ):
        where.fail(f"unsupported key type {type(key).__name__}; use Ed25519, ECDSA or RSA")
    return key


def _load_key(data: bytes) -> tuple[object, str | None]:
    # cryptography's own message is dropped: it adds nothing a user can act on.
    try:
        return serialization.load_pem_private_key(relabel_pkcs8_key(data), password=None), None
    except TypeError:
        return None, "the private key is encrypted; talosconfig keys must be unencrypted"
    except (ValueError, UnsupportedAlgorithm):
        return None, "the PRIVATE KEY block is not a valid private key; regenerate it"


def _key_type(key: _PrivateKey) -> KeyType:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "ed25519"
    return "ecdsa" if isinstance(key, ec.EllipticCurvePrivateKey) else "rsa"


def _spki(public_key: Any) -> bytes:
    return bytes(
        public_key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(delta: dt.timedelta) -> str:
    days, hours = delta.days, delta.seconds // 3600
    return f"{days}d {hours}h" if days else f"{hours}h {delta.seconds % 3600 // 60}m"


def _check_validity(where: _Where, cert: x509.Certificate, now: dt.datetime) -> str | None:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < start:
        where.fail(
            f"the client certificate is not valid before {_when(start)}; "
            "check this machine's clock or issue a new certificate"
        )
    if now >= end:
        where.fail(
            f"the client certificate expired on {_when(end)} ({_span(now - end)} ago); "
            "get a new talosconfig (talosctl config new, or regenerate it from the "
            "cluster secrets)"
        )
    if end - now <= EXPIRY_WARNING_WINDOW:
        return (
            f"the client certificate in {where.path} ({where.key}) expires on {_when(end)}, "
            f"in {_span(end - now)}; renew it with talosctl config new"
        )
    return None


@dataclass(frozen=True)
class _Credentials:
    ca_pem: bytes
    crt_pem: bytes
    key_pem: bytes = field(repr=False)
    leaf: x509.Certificate
    key_type: KeyType


def _credentials(where: _Where, body: dict[Any, Any]) -> _Credentials:
    if "crt" not in body and "key" not in body and isinstance(body.get("auth"), dict):
        where.fail(
            "uses auth (e.g. Omni auth.siderov1) instead of a client certificate; "
            "pytest-talos needs a talosconfig with ca, crt and key"
        )
    base = where.key
    ca_pem = _decode_b64(where.at(f"{base}.ca"), body, "ca")
    _certificates(where.at(f"{base}.ca"), ca_pem)
    crt_pem = _decode_b64(where.at(f"{base}.crt"), body, "crt")
    leaf = _certificates(where.at(f"{base}.crt"), crt_pem)[0]
    key_where = where.at(f"{base}.key")
    key = _private_key(key_where, _decode_b64(key_where, body, "key"))
    if _spki(key.public_key()) != _spki(leaf.public_key()):
        key_where.fail(
            f"the private key does not belong to the client certificate in {base}.crt; "
            "use the crt and key issued together"
        )
    key_pem = SecretBytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return _Credentials(ca_pem, crt_pem, key_pem, leaf, _key_type(key))


def _optional_str(where: _Where, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        where.fail("must be a string")
    return value


def _time_scale(where: _Where, value: Any) -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        where.fail("must be a positive number (how many times faster the emulated clock runs)")
    return float(value)


def _scan_baseline(where: _Where, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or _ip_address(value) is None:
        where.fail("must be an IP address (where no node of the cluster lives)")
    return value


def _ip_address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def load_talosconfig(
    path: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    env: Mapping[str, str] = os.environ,
    now: dt.datetime | None = None,
) -> TalosConfig:
    """Find (see :func:`resolve_talosconfig_path`), parse and validate a talosconfig.

    ``context`` overrides the file's current context. Raises ConfigError on any problem.
    """
    found, source = resolve_talosconfig_path(path, env)
    where = _Where(found)
    doc = _parse_yaml(where, _read(where))
    name, body, names = _select_context(where, doc, context)
    in_context = where.at(f"contexts[{name}]")
    endpoints = _endpoints(in_context.at(f"contexts[{name}].endpoints"), body)
    nodes = _string_list(in_context.at(f"contexts[{name}].nodes"), body.get("nodes"))
    cluster = _optional_str(in_context.at(f"contexts[{name}].cluster"), body.get("cluster"))
    creds = _credentials(in_context, body)
    scale = _time_scale(
        in_context.at(f"contexts[{name}].{TIME_SCALE_KEY}"), body.get(TIME_SCALE_KEY)
    )
    baseline = _scan_baseline(
        in_context.at(f"contexts[{name}].{SCAN_BASELINE_KEY}"), body.get(SCAN_BASELINE_KEY)
    )
    moment = now or dt.datetime.now(dt.UTC)
    warning = _check_validity(in_context.at(f"contexts[{name}].crt"), creds.leaf, moment)
    selected = Context(
        name=name,
        endpoints=endpoints,
        nodes=tuple(nodes),
        cluster=cluster,
        ca_pem=creds.ca_pem,
        crt_pem=creds.crt_pem,
        key_pem=creds.key_pem,
        time_scale=scale,
        scan_baseline=baseline,
    )
    return TalosConfig(
        path=found,
        source=source,
        context_name=name,
        contexts=names,
        context=selected,
        roles=certificate_roles(creds.leaf),
        not_before=creds.leaf.not_valid_before_utc,
        not_after=creds.leaf.not_valid_after_utc,
        key_type=creds.key_type,
        expiry_warning=warning,
    )
