"""The client key in memory: relabelling talosctl's PEM, handing it to :mod:`ssl`."""

from __future__ import annotations

import re
import ssl

from pytest_talos.errors import ConfigError
from pytest_talos.keyfile import SecretBytes, load_chain

_ED25519_LABEL = re.compile(rb"-----(BEGIN|END) ED25519 PRIVATE KEY-----")


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
