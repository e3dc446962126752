"""The emulator's scan baseline, advertised in the talosconfig it writes.

The key ``x-pytest-talos-scan-baseline`` names an address of the emulated /24 where no node
lives; pytest-talos reads it back into the context, talosctl ignores it. A real cluster's
talosconfig has none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pytest_talos import pki, talosconfig
from pytest_talos.errors import ConfigError


@pytest.fixture(scope="module")
def ca() -> pki.CertificateAuthority:
    return pki.CertificateAuthority.generate()


def _write(tmp_path: Path, ca: pki.CertificateAuthority, baseline: str | None) -> Path:
    path = tmp_path / "talosconfig"
    pki.write_talosconfig(
        path,
        context="emu",
        endpoints=["127.0.0.1"],
        ca_pem=ca.cert_pem,
        client=pki.issue_client_cert(ca, roles=["os:admin"]),
        scan_baseline=baseline,
    )
    return path


def test_both_sides_name_the_same_key() -> None:
    assert pki.SCAN_BASELINE_KEY == talosconfig.SCAN_BASELINE_KEY
    assert talosconfig.SCAN_BASELINE_KEY == "x-pytest-talos-scan-baseline"


def test_the_baseline_is_written_and_read_back(
    tmp_path: Path, ca: pki.CertificateAuthority
) -> None:
    path = _write(tmp_path, ca, "127.31.7.1")
    doc = yaml.safe_load(path.read_text())
    assert doc["contexts"]["emu"][talosconfig.SCAN_BASELINE_KEY] == "127.31.7.1"
    loaded = talosconfig.load_talosconfig(path, env={})
    assert loaded.context.scan_baseline == "127.31.7.1"


def test_a_talosconfig_without_the_key_has_no_baseline(
    tmp_path: Path, ca: pki.CertificateAuthority
) -> None:
    path = _write(tmp_path, ca, None)
    assert talosconfig.SCAN_BASELINE_KEY not in path.read_text()
    assert talosconfig.load_talosconfig(path, env={}).context.scan_baseline is None


@pytest.mark.parametrize("bad", ["not-an-address", 7, ["127.0.0.1"]])
def test_a_bad_baseline_names_the_key(
    tmp_path: Path, ca: pki.CertificateAuthority, bad: object
) -> None:
    path = _write(tmp_path, ca, None)
    doc = yaml.safe_load(path.read_text())
    doc["contexts"]["emu"][talosconfig.SCAN_BASELINE_KEY] = bad
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"contexts\[emu\]\.x-pytest-talos-scan-baseline"):
        talosconfig.load_talosconfig(path, env={})
