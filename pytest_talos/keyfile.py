"""Load a certificate chain and its private key into an :class:`ssl.SSLContext` from memory.

A leaf module: it imports nothing from pytest_talos except :mod:`pytest_talos.errors`, so the
client side (:mod:`pytest_talos.talosconfig`) and the emulator share one loader.

Python's :mod:`ssl` reads keys only from a path. Where the platform has ``os.memfd_create``
(Linux) the PEM goes into an anonymous memory-backed file opened through ``/proc/self/fd``,
and never touches a disk. Elsewhere (macOS, or where memfd or ``/proc`` is unavailable) it is
written to a ``0600`` file in a private ``0700`` directory (:func:`tempfile.mkdtemp`) that is
removed, file and directory, as soon as OpenSSL has read it, whether loading worked or not.

:func:`load_client_identity` is the client's use of it (talosctl's ``ED25519 PRIVATE KEY``
label relabelled in memory); it lives here, not in :mod:`pytest_talos.talosconfig`, so the
transport needs no talosconfig import.

Key material is held in :class:`SecretBytes`, whose ``repr`` and ``str`` say only
``<secret: N bytes>``, so no frame local that ``pytest -l`` shows carries a key.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import tempfile
from collections.abc import Callable

from pytest_talos.errors import ConfigError

__all__ = ["SecretBytes", "load_chain", "load_client_identity", "relabel_pkcs8_key"]

# Tests set this to False to take the temporary-file path on Linux too.
USE_MEMFD = True

_Password = Callable[[], bytes] | None


class SecretBytes(bytes):
    """Bytes holding key material: ``repr``, ``str`` and formatting never show the content."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<secret: {len(self)} bytes>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)


def load_chain(
    ctx: ssl.SSLContext,
    cert_pem: bytes,
    key_pem: bytes,
    *,
    password: _Password = None,
    name: str = "pytest-talos-key",
) -> None:
    """Load ``cert_pem`` (leaf first) and ``key_pem`` into ``ctx``; the key is never kept on disk.

    Raises :class:`ssl.SSLError` when OpenSSL rejects the pair, and :class:`ConfigError`
    when neither an in-memory file nor a private temporary file can be made.
    """
    chain = SecretBytes(cert_pem.rstrip(b"\n") + b"\n" + key_pem)
    if _load_from_memory(ctx, chain, password, name):
        return
    _load_from_private_file(ctx, chain, password)


def _load_from_memory(
    ctx: ssl.SSLContext, chain: SecretBytes, password: _Password, name: str
) -> bool:
    memfd_create = getattr(os, "memfd_create", None)
    if not USE_MEMFD or memfd_create is None:
        return False
    try:
        fd: int = memfd_create(name, getattr(os, "MFD_CLOEXEC", 0))
    except OSError:  # e.g. a seccomp profile that refuses memfd_create
        return False
    try:
        _write_all(fd, chain)
        ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=password)
    except (FileNotFoundError, NotADirectoryError):  # no /proc: use a private file
        return False
    finally:
        os.close(fd)
    return True


def _load_from_private_file(ctx: ssl.SSLContext, chain: SecretBytes, password: _Password) -> None:
    try:
        directory = tempfile.mkdtemp(prefix="pytest-talos-")  # mode 0700
    except OSError as exc:
        raise ConfigError(
            f"cannot create a private temporary directory for loading a key ({exc.strerror}); "
            "check $TMPDIR"
        ) from None
    try:
        path = os.path.join(directory, "chain.pem")
        _write_private(path, chain)
        ctx.load_cert_chain(path, password=password)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _write_private(path: str, data: bytes) -> None:
    """Write ``data`` to a new file at ``path`` that only this user can read (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# --------------------------------------------------------------------------- the client identity

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
