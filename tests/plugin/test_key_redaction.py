"""No traceback mode shows key material: ``pytest -l -vv`` and JUnit XML of failing tests
whose frames run through load_talosconfig, build_ssl_context and the client constructors."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_talos import pki

Run = Callable[..., pytest.RunResult]

FAILING_TESTS = """
import datetime as dt
import pytest
from pytest_talos.client import TalosClient
from pytest_talos import pki
from pytest_talos.talosconfig import load_talosconfig
from pytest_talos.transport import build_ssl_context

CONFIG = {config!r}
EXPIRED = {expired!r}


def test_ssl_context_with_a_foreign_certificate():
    ctx = load_talosconfig(CONFIG).context
    other = pki.issue_client_cert(pki.CertificateAuthority.generate(), roles=["os:admin"])
    build_ssl_context(ctx.ca_pem, other.cert_pem, ctx.key_pem)


def test_client_constructor_with_a_bad_endpoint():
    TalosClient.from_talosconfig(CONFIG, endpoint="not a host!")


def test_talosconfig_with_an_expired_certificate():
    load_talosconfig(EXPIRED)


def test_a_test_holding_the_key():
    key = load_talosconfig(CONFIG).context.key_pem
    assert key == b"something else"
"""


def _secrets(client: pki.CertAndKey) -> list[str]:
    body = "".join(line for line in client.key_pem.decode().splitlines() if "-----" not in line)
    forms = [
        body,
        base64.b64encode(client.key_pem).decode(),
        base64.b64encode(client.key_pem_talos).decode(),
    ]
    return forms + [form[i : i + 24] for form in forms for i in range(0, len(form) - 24, 12)]


@pytest.mark.parametrize("style", ["long", "auto", "short", "native"])
def test_no_key_in_any_traceback_or_junit_report(
    run: Run, pytester: pytest.Pytester, tmp_path: Path, style: str
) -> None:
    ca = pki.CertificateAuthority.generate()
    admin = pki.issue_client_cert(ca, roles=["os:admin"])
    config = tmp_path / "talosconfig"
    pki.write_talosconfig(
        config, context="prod", endpoints=["127.0.0.1"], ca_pem=ca.cert_pem, client=admin
    )
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    stale = pki.issue_client_cert(
        ca,
        roles=["os:admin"],
        not_before=now - dt.timedelta(days=9),
        not_after=now - dt.timedelta(days=1),
    )
    expired = tmp_path / "expired"
    pki.write_talosconfig(
        expired, context="prod", endpoints=["127.0.0.1"], ca_pem=ca.cert_pem, client=stale
    )
    pytester.makepyfile(FAILING_TESTS.format(config=str(config), expired=str(expired)))
    junit = tmp_path / "report.xml"
    result = run("-l", "-vv", f"--tb={style}", f"--junitxml={junit}", "-rA")
    result.assert_outcomes(failed=4)
    shown = result.stdout.str() + result.stderr.str() + junit.read_text()
    if style in ("long", "auto"):
        assert "<secret: " in shown  # the locals are there, redacted
    for client in (admin, stale):
        for secret in _secrets(client):
            assert secret not in shown
