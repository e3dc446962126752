"""The client key in memory: the loader lives in :mod:`pytest_talos.keyfile` (a leaf the
transport imports too); these names stay importable from here."""

from __future__ import annotations

from pytest_talos.keyfile import load_client_identity, relabel_pkcs8_key

__all__ = ["load_client_identity", "relabel_pkcs8_key"]
