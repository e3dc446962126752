"""The smaller ways a run could hang or mislead: a stuck DNS lookup, a TLS endpoint that is
not apid, ``endpoints: []``, absurd deadlines, and errors that must say node and method."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from pytest_talos import pki
from pytest_talos.client import TalosClient
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import ConnectError, DeadlineExceeded, TalosError
from pytest_talos.talosconfig import load_client_identity
from tests.plugin.conftest import REPO, target_args

Run = Callable[..., pytest.RunResult]

STUCK_DNS = """
import socket, sys, time
real = socket.getaddrinfo

def stuck(host, *args, **kwargs):
    if host == "stuck.invalid":
        if kwargs.get("flags", 0) & socket.AI_NUMERICHOST:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        time.sleep(30)  # a resolver that retries an unreachable DNS server
    return real(host, *args, **kwargs)

socket.getaddrinfo = stuck
from pytest_talos.client import TalosClient
from pytest_talos.errors import DeadlineExceeded

client = TalosClient.from_talosconfig(sys.argv[1], endpoint="stuck.invalid",
                                      timeout=float(sys.argv[2]))
start = time.monotonic()
print("calling", flush=True)
try:
    client.version()
except DeadlineExceeded as exc:
    print(f"deadline after {time.monotonic() - start:.1f}s; node={exc.node}; "
          f"method={exc.method}; {exc}", flush=True)
"""


@pytest.fixture(scope="module")
def pki_setup() -> tuple[pki.CertificateAuthority, pki.CertAndKey]:
    ca = pki.CertificateAuthority.generate()
    return ca, pki.issue_client_cert(ca, roles=["os:admin"])


@pytest.fixture
def talosconfig(tmp_path: Path, pki_setup: tuple[pki.CertificateAuthority, pki.CertAndKey]) -> Path:
    ca, admin = pki_setup
    path = tmp_path / "talosconfig"
    pki.write_talosconfig(
        path, context="t", endpoints=["127.0.0.1"], ca_pem=ca.cert_pem, client=admin
    )
    return path


def _stuck_dns(talosconfig: Path, timeout: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", STUCK_DNS, str(talosconfig), str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def test_a_stuck_dns_lookup_ends_with_the_deadline_and_does_not_hold_the_exit(
    talosconfig: Path,
) -> None:
    started = time.monotonic()
    process = _stuck_dns(talosconfig, 1.0)
    output, _ = process.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert "deadline after 1." in output, output
    assert "node=stuck.invalid; method=/machine.MachineService/Version" in output
    assert "resolving the host of stuck.invalid:50000 took longer than 1s" in output
    assert process.returncode == 0
    assert elapsed < 8, f"the process took {elapsed:.1f}s to exit after a 1 s deadline"


def test_ctrl_c_during_a_stuck_dns_lookup_exits_at_once(talosconfig: Path) -> None:
    process = _stuck_dns(talosconfig, 25.0)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "calling"
    time.sleep(0.5)
    interrupted = time.monotonic()
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert "KeyboardInterrupt" in output
    assert time.monotonic() - interrupted < 4


class _TlsWithoutH2:
    """A TLS server whose certificate the client trusts, offering no ALPN protocol."""

    def __init__(self, ca: pki.CertificateAuthority, alpn: list[str] | None) -> None:
        server = pki.issue_server_cert(ca, hostname="not-apid", ips=["127.0.0.1"])
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        load_client_identity(self.context, server.cert_pem, server.key_pem)
        if alpn:
            self.context.set_alpn_protocols(alpn)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    tls.settimeout(2)
                    tls.recv(1024)
            except (OSError, ssl.SSLError):
                pass


@pytest.fixture(params=[None, ["http/1.1"]], ids=["no-alpn", "http1.1"])
def not_apid(
    request: pytest.FixtureRequest, pki_setup: tuple[pki.CertificateAuthority, pki.CertAndKey]
) -> Iterator[str]:
    server = _TlsWithoutH2(pki_setup[0], request.param)
    yield server.endpoint
    server.stop.set()
    server.thread.join(5)
    server.listener.close()


def test_a_tls_endpoint_without_h2_is_not_a_talos_api_endpoint(
    talosconfig: Path, not_apid: str
) -> None:
    with (
        TalosClient.from_talosconfig(talosconfig, endpoint=not_apid, timeout=5) as client,
        pytest.raises(ConnectError) as failure,
    ):
        client.version()
    message = str(failure.value)
    assert f"{not_apid} is not a Talos API endpoint (it speaks TLS but " in message
    assert "apid serves gRPC over HTTP/2, offered as h2 in the TLS handshake" in message
    assert "rebooting" not in message
    assert failure.value.node == "127.0.0.1"
    assert failure.value.method == "/machine.MachineService/Version"


def _refused() -> str:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize("endpoint", ["refused", "no-such-host.invalid", "silent"])
def test_connection_errors_carry_node_and_method(talosconfig: Path, endpoint: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0)) if endpoint == "silent" else None
    target = {
        "refused": _refused(),
        "silent": f"127.0.0.1:{listener.getsockname()[1]}" if listener else "",
    }.get(endpoint, endpoint)
    try:
        with TalosClient.from_talosconfig(
            talosconfig, endpoint=target, node="10.5.0.3", timeout=1
        ) as client:
            calls: list[Callable[[], object]] = [client.version]
            if endpoint != "silent":  # a stream's connect waits for its own, longer limit
                calls.append(lambda: list(client.list("/")))
            for call in calls:
                with pytest.raises(TalosError) as failure:
                    call()
                assert isinstance(failure.value, ConnectError | DeadlineExceeded)
                assert failure.value.node == "10.5.0.3"
                assert failure.value.method is not None
                assert failure.value.method.startswith("/machine.MachineService/")
    finally:
        if listener is not None:
            listener.close()


# --------------------------------------------------------------------------- plugin options


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        (["--talos-timeout=inf"], "'inf' is not a positive number of seconds"),
        (["--talos-timeout=nan"], "'nan' is not a positive number of seconds"),
        (["--talos-timeout=99999999999"], "'99999999999' is more than the most allowed, 86400"),
        (["--talos-timeout=-1"], "'-1' is not a positive number of seconds"),
        (["--talos-lock-timeout=inf"], "'inf' is not a positive number of seconds"),
    ],
)
def test_absurd_deadlines_are_usage_errors(run: Run, given: list[str], problem: str) -> None:
    result = run("--talos-emulator", *given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --talos-*: {problem}*"])


def test_absurd_deadline_from_the_environment(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALOS_TIMEOUT", "1e400")
    result = run("--talos-emulator")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: $TALOS_TIMEOUT: '1e400' is not a positive number*"])


def test_a_context_without_endpoints_works_with_talos_endpoint(
    run: Run, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    with EmulatedCluster(controlplanes=1, workers=1) as cluster:
        doc = yaml.safe_load(Path(cluster.talosconfig_path).read_text())
        for body in doc["contexts"].values():
            body["endpoints"] = []  # as GenerateClientConfiguration writes it
        bare = tmp_path / "bare-talosconfig"
        bare.write_text(yaml.safe_dump(doc))
        pytester.makepyfile("""
            def test_version(talos_node):
                assert talos_node.version.tag == "v1.13.9"
        """)
        config_arg, endpoint_arg = target_args(cluster)
        run(f"--talosconfig={bare}", endpoint_arg).assert_outcomes(passed=2)
        without = run(f"--talosconfig={bare}")
        without.stdout.fnmatch_lines(
            [
                "*.endpoints: no endpoints; set them with talosctl "
                "config endpoint*or name one (--talos-endpoint)*"
            ]
        )
        assert config_arg
