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

Layout: ``lookup`` (which file), ``document`` (reading it, keys hidden), ``endpoints``,
``credentials`` (ca, crt and key checked), ``keys`` (the key handed to :mod:`ssl`),
``model`` (:class:`TalosConfig`, :class:`Context`), ``loading`` (:func:`load_talosconfig`).
"""

from pytest_talos.keyfile import SecretBytes
from pytest_talos.talosconfig.credentials import EXPIRY_WARNING_WINDOW
from pytest_talos.talosconfig.document import SecretStr
from pytest_talos.talosconfig.endpoints import DEFAULT_API_PORT, normalize_endpoint
from pytest_talos.talosconfig.keys import load_client_identity, relabel_pkcs8_key
from pytest_talos.talosconfig.loading import SCAN_BASELINE_KEY, TIME_SCALE_KEY, load_talosconfig
from pytest_talos.talosconfig.lookup import IN_POD_PATH, resolve_talosconfig_path
from pytest_talos.talosconfig.model import Context, KeyType, TalosConfig

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
