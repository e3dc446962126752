"""The emulated clock's rate, advertised in the talosconfig the emulator writes.

The emulator adds one context key (``x-pytest-talos-time-scale``) when its clock runs faster
than real time; pytest-talos reads it back, talosctl ignores it. A real cluster's talosconfig
has no such key: its rate is 1.
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


def _write(tmp_path: Path, ca: pki.CertificateAuthority, time_scale: float = 1.0) -> Path:
    path = tmp_path / "talosconfig"
    pki.write_talosconfig(
        path,
        context="emu",
        endpoints=["127.0.0.1"],
        ca_pem=ca.cert_pem,
        client=pki.issue_client_cert(ca, roles=["os:admin"]),
        time_scale=time_scale,
    )
    return path


def test_both_sides_name_the_same_key() -> None:
    assert pki.TIME_SCALE_KEY == talosconfig.TIME_SCALE_KEY == "x-pytest-talos-time-scale"


def test_a_faster_clock_is_advertised_in_the_context_and_read_back(
    tmp_path: Path, ca: pki.CertificateAuthority
) -> None:
    path = _write(tmp_path, ca, time_scale=20)
    doc = yaml.safe_load(path.read_text())
    assert doc["contexts"]["emu"][talosconfig.TIME_SCALE_KEY] == 20.0
    # Everything talosctl reads is where it always was.
    assert set(doc["contexts"]["emu"]) == {
        "endpoints",
        "ca",
        "crt",
        "key",
        talosconfig.TIME_SCALE_KEY,
    }
    loaded = talosconfig.load_talosconfig(path, env={})
    assert loaded.context.time_scale == 20.0
    assert "emulated clock 20x" in loaded.describe()


def test_real_time_writes_no_key_and_reads_as_one(
    tmp_path: Path, ca: pki.CertificateAuthority
) -> None:
    path = _write(tmp_path, ca)
    assert talosconfig.TIME_SCALE_KEY not in path.read_text()
    loaded = talosconfig.load_talosconfig(path, env={})
    assert loaded.context.time_scale == 1.0
    assert "emulated clock" not in loaded.describe()


@pytest.mark.parametrize("value", [0, -2, "fast", True, [20]])
def test_a_bad_rate_names_the_key(
    tmp_path: Path, ca: pki.CertificateAuthority, value: object
) -> None:
    path = _write(tmp_path, ca, time_scale=20)
    doc = yaml.safe_load(path.read_text())
    doc["contexts"]["emu"][talosconfig.TIME_SCALE_KEY] = value
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as caught:
        talosconfig.load_talosconfig(path, env={})
    message = str(caught.value)
    assert f"contexts[emu].{talosconfig.TIME_SCALE_KEY}" in message
    assert "must be a positive number" in message
