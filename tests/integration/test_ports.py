"""The TCP connect scanner against real listeners on loopback addresses (127.0.0.0/8, ::1).

Every port a test expects to be closed is *reserved*: a socket is bound to it without
listening, so nothing else can listen there and a connect is refused. Tests never scan
wide ranges on a shared address without the baseline, so listeners of other processes on
the machine cannot change the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_talos.errors import ConfigError, ConnectError
from pytest_talos.ports import (
    PortResult,
    ScanResult,
    filelimit,
    main,
    parse_ports,
    scan,
    scan_async,
    scan_many,
    scan_many_async,
    sweep,
    targets,
)
from pytest_talos.ports import scanner as scanner_module
from pytest_talos.ports.sweep import Sweep
from tests.integration.silent_ports import (
    SilentPortsUnavailable,
    make_silent_port,
    why_no_silent_ports,
)

PROG = "python -m pytest_talos.ports"
BASELINE = "127.0.0.254"

Listen = Callable[..., int]
Reserve = Callable[..., int]


# --------------------------------------------------------------------------- helpers


def _socket_for(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.socket(family, socket.SOCK_STREAM)


@pytest.fixture
def listen() -> Iterator[Listen]:
    """Open a listening socket on ``host`` (``port`` 0 = any free one); returns its port."""
    opened: list[socket.socket] = []

    def _listen(host: str, port: int = 0, backlog: int = 16) -> int:
        sock = _socket_for(host)
        opened.append(sock)
        sock.bind((host, port))
        sock.listen(backlog)
        return int(sock.getsockname()[1])

    yield _listen
    for sock in opened:
        sock.close()


@pytest.fixture
def reserve() -> Iterator[Reserve]:
    """Bind ``host:port`` without listening, so a connect there is refused for sure."""
    opened: list[socket.socket] = []

    def _reserve(host: str, port: int = 0) -> int:
        sock = _socket_for(host)
        opened.append(sock)
        sock.bind((host, port))
        return int(sock.getsockname()[1])

    yield _reserve
    for sock in opened:
        sock.close()


def _ipv6_loopback_works() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def unanswered() -> Iterator[Callable[[int], tuple[str, list[int]]]]:
    """Make ports whose SYNs are dropped (tests/integration/silent_ports.py)."""
    why_not = why_no_silent_ports()
    if why_not:
        pytest.skip(why_not)
    host = "127.0.0.23"
    opened: list[socket.socket] = []

    def _make(count: int) -> tuple[str, list[int]]:
        try:
            return host, [make_silent_port(host, opened) for _ in range(count)]
        except SilentPortsUnavailable as exc:
            pytest.skip(str(exc))

    yield _make
    for sock in opened:
        sock.close()


def _low_limit_report(script: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run ``script`` (which lowers its own RLIMIT_NOFILE) in a subprocess, so this process's
    limit is never touched, and read the JSON report it prints."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
        cwd=tmp_path,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return report


# --------------------------------------------------------------------------- parse_ports


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("22", [22]),
        ("22,80,6443", [22, 80, 6443]),
        ("1-3,50000-50001", [1, 2, 3, 50000, 50001]),
        (" 80 , 22 ,80, 20-23 ", [20, 21, 22, 23, 80]),
        ("-3", [1, 2, 3]),
        ("65534-", [65534, 65535]),
        ("7-7", [7]),
    ],
)
def test_parse_ports_reads_lists_and_ranges(spec: str, expected: list[int]) -> None:
    assert parse_ports(spec) == expected


@pytest.mark.parametrize("spec", ["1-65535", "-"])
def test_parse_ports_full_range(spec: str) -> None:
    assert parse_ports(spec) == list(range(1, 65536))


@pytest.mark.parametrize(
    ("spec", "token", "why"),
    [
        ("abc", "'abc'", "not a port number"),
        ("22,http", "'http'", "not a port number"),
        ("22,,80", "''", "empty entry"),
        ("22,", "''", "empty entry"),
        ("0", "'0'", "outside 1-65535"),
        ("65536", "'65536'", "outside 1-65535"),
        ("1-70000", "'70000'", "outside 1-65535"),
        ("80-22", "'80-22'", "runs backwards; write 22-80"),
        ("1-2-3", "'2-3'", "not a port number"),
        ("+22", "'+22'", "not a port number"),
        ("\uff12\uff12", "'\uff12\uff12'", "not a port number"),
    ],
)
def test_parse_ports_names_the_bad_token(spec: str, token: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_ports(spec)
    message = str(caught.value)
    assert f"bad port entry {token} in {spec!r}" in message
    assert why in message
    assert not isinstance(caught.value, ValueError)


@pytest.mark.parametrize("spec", ["", "   "])
def test_parse_ports_rejects_an_empty_list(spec: str) -> None:
    with pytest.raises(ConfigError, match="the port list is empty"):
        parse_ports(spec)


# --------------------------------------------------------------------------- open / closed


def test_open_and_closed_on_127_0_0_1(listen: Listen, reserve: Reserve) -> None:
    open_port = listen("127.0.0.1")
    closed_port = reserve("127.0.0.1")

    result = scan("127.0.0.1", [closed_port, open_port], timeout=2)

    assert result.host == "127.0.0.1"
    assert result.address == "127.0.0.1"
    assert result.results == tuple(
        sorted(
            [PortResult(open_port, "open"), PortResult(closed_port, "closed")],
            key=lambda r: r.port,
        )
    )
    assert result.open_ports == (open_port,)
    assert result.closed == (closed_port,)
    assert result.filtered == ()
    assert result.shared == ()
    assert result.elapsed >= 0


@pytest.mark.parametrize("host", ["127.0.0.2", "127.0.0.3", "127.0.0.44"])
def test_each_loopback_address_answers_for_its_own_listener(
    host: str, listen: Listen, reserve: Reserve
) -> None:
    port = listen(host)
    reserve("127.0.0.45", port)  # the same port on another address: nobody there

    assert scan(host, [port]).state_of(port) == "open"
    assert scan("127.0.0.45", [port]).state_of(port) == "closed"


def test_port_spec_strings_are_accepted(listen: Listen, reserve: Reserve) -> None:
    open_port = listen("127.0.0.2")
    closed_port = reserve("127.0.0.2")

    result = scan("127.0.0.2", f"{open_port},{closed_port}")

    assert result.open_ports == (open_port,)
    assert result.closed == (closed_port,)


@pytest.mark.parametrize("linux_connect", [True, False], ids=["reuse-sockets", "portable"])
def test_a_window_of_thousands_of_ports_with_low_concurrency(
    linux_connect: bool, listen: Listen, reserve: Reserve, monkeypatch: pytest.MonkeyPatch
) -> None:
    if linux_connect and not sys.platform.startswith("linux"):
        pytest.skip("the socket-reusing path is used on Linux only")
    monkeypatch.setattr(sweep, "LINUX_CONNECT", linux_connect)
    host = "127.0.0.61"
    port = listen(host)
    reserve(BASELINE, port)
    low = max(1025, port - 2000)
    window = range(low, min(65535, low + 4000) + 1)

    # The baseline cancels any wildcard listener of another process inside the window.
    # In this process: the monkeypatch does not reach a worker's.
    result = scan(host, window, concurrency=7, baseline_host=BASELINE, in_worker=False)

    assert len(result.results) == len(window)
    assert [r.port for r in result.results] == list(window)
    assert result.open_ports == (port,)
    assert result.filtered == ()
    assert len(repr(result)) < 600  # short repr, even for thousands of results


def test_open_ports_are_reset_so_nothing_is_left_in_time_wait() -> None:
    host = "127.0.0.62"
    with socket.socket() as listener:
        listener.bind((host, 0))
        listener.listen(4)
        port = int(listener.getsockname()[1])

        assert scan(host, [port]).open_ports == (port,)

        listener.settimeout(5)
        accepted, _peer = listener.accept()
        with accepted, pytest.raises(ConnectionResetError):
            accepted.recv(16)  # SO_LINGER 0: the scanner's close was a reset, not a FIN


def test_a_connection_to_itself_is_not_an_open_port() -> None:
    # The kernel can join a socket to itself (simultaneous open) when the destination is
    # the socket's own address and port; nobody listens there.
    with socket.socket() as sock:
        sock.bind(("127.0.0.63", 0))
        sock.settimeout(5)
        sock.connect(sock.getsockname())
        assert sweep.connected_code(sock) == sweep.SELF_CONNECTED
    assert sweep.state_for(sweep.SELF_CONNECTED) == "closed"


def test_a_spare_socket_the_kernel_did_not_take_back_turns_reuse_off(
    listen: Listen, reserve: Reserve
) -> None:
    host = "127.0.0.64"
    open_port = listen(host)
    closed_port = reserve(host)
    stuck = socket.socket()
    stuck.connect((host, open_port))  # connected: a connect() on it now says EISCONN

    async def run_sweep() -> tuple[dict[int, str], bool]:
        target = await targets.resolve(host)
        run = sweep.Sweep(asyncio.get_running_loop(), target, timeout=2, concurrency=8)
        run._linux = True
        run._spares.append(stuck)
        states = await run.run([closed_port, open_port])
        return dict(states), run._linux

    states, still_reusing = asyncio.run(run_sweep())

    assert states == {closed_port: "closed", open_port: "open"}
    assert still_reusing is False
    assert stuck.fileno() == -1  # closed by the sweep


# --------------------------------------------------------------------------- filtered


Unanswered = Callable[[int], tuple[str, list[int]]]


def test_a_port_that_never_answers_is_filtered(unanswered: Unanswered) -> None:
    host, (port,) = unanswered(1)

    result = scan(host, [port], timeout=0.2)

    assert result.results == (PortResult(port, "filtered"),)
    assert result.filtered == (port,)
    assert result.open_ports == ()


def test_unanswered_ports_beyond_the_concurrency_wait_their_turn(
    unanswered: Unanswered, reserve: Reserve
) -> None:
    host, silent = unanswered(7)
    refused = reserve(host)
    before = _open_fds()

    # Two probes in flight at most: the sweep must wait for timeouts to free a slot.
    result = scan(host, [*silent, refused], timeout=0.05, concurrency=2)

    assert result.filtered == tuple(sorted(silent))
    assert result.closed == (refused,)
    assert _open_fds() == before


def test_cancelling_a_scan_closes_its_sockets(unanswered: Unanswered) -> None:
    host, silent = unanswered(3)

    async def scan_then_cancel() -> None:
        task = asyncio.create_task(scan_async(host, silent, timeout=30))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    before = _open_fds()
    asyncio.run(scan_then_cancel())
    assert _open_fds() == before


# --------------------------------------------------------------------------- IPv6 and names


@pytest.mark.skipif(not _ipv6_loopback_works(), reason="IPv6 loopback (::1) is not available")
@pytest.mark.parametrize("host", ["::1", "[::1]", " [::1] "])
def test_ipv6_loopback(host: str, listen: Listen, reserve: Reserve) -> None:
    open_port = listen("::1")
    closed_port = reserve("::1")

    result = scan(host, [open_port, closed_port])

    assert result.host == "::1"
    assert result.address == "::1"
    assert result.open_ports == (open_port,)
    assert result.closed == (closed_port,)


def test_a_host_name_is_resolved_once_up_front(listen: Listen) -> None:
    # localhost comes from /etc/hosts: no DNS traffic leaves the machine.
    _family, *_rest, sockaddr = socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)[0]
    port = listen(str(sockaddr[0]))

    result = scan("localhost", [port])

    assert result.host == "localhost"
    assert result.address == sockaddr[0]
    assert result.open_ports == (port,)
    assert f"localhost ({sockaddr[0]})" in result.summary()


def test_an_unresolvable_name_is_a_connect_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # A real lookup of a made-up name would ask the configured DNS server (off this
    # machine), so the resolver's answer is stood in for; the mapping is what is tested.
    def no_such_name(*_args: object, **_kwargs: object) -> list[object]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)

    with pytest.raises(ConnectError) as caught:
        scan("node-7.example", [50000])
    message = str(caught.value)
    assert "cannot resolve host 'node-7.example'" in message
    assert "Name or service not known" in message
    assert "give an IP address" in message


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"timeout": 0}, "bad timeout 0: it must be a positive number"),
        ({"timeout": -1.5}, "bad timeout -1.5"),
        ({"timeout": float("nan")}, "bad timeout nan"),
        ({"concurrency": 0}, "bad concurrency 0"),
        ({"concurrency": True}, "bad concurrency True"),
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        scan("127.0.0.1", [1], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("port_list", "match"),
    [
        ([0], "bad port 0: outside 1-65535"),
        ([70000], "bad port 70000"),
        (["22"], "bad port '22': ports must be integers"),
        ([], "no ports to scan"),
    ],
)
def test_bad_port_iterables_are_config_errors(port_list: list[object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        scan("127.0.0.1", port_list)  # type: ignore[arg-type]


@pytest.mark.parametrize("host", ["", "  ", "[]"])
def test_an_empty_host_is_a_config_error(host: str) -> None:
    with pytest.raises(ConfigError, match="no host given"):
        scan(host, [1])


# --------------------------------------------------------------------------- baseline mode


def test_baseline_separates_wildcard_listeners_from_the_node(
    listen: Listen, reserve: Reserve
) -> None:
    node = "127.0.0.71"
    wildcard_port = listen("0.0.0.0")  # answers on every 127.0.0.N, the node's or not
    node_port = listen(node)
    reserve(BASELINE, node_port)

    plain = scan(node, [wildcard_port, node_port])
    proven = scan(node, [wildcard_port, node_port], baseline_host=BASELINE)

    assert plain.open_ports == tuple(sorted([wildcard_port, node_port]))
    assert proven.open_ports == (node_port,)
    assert proven.shared == (wildcard_port,)
    assert proven.state_of(wildcard_port) == "closed"
    assert proven.baseline_host == BASELINE
    assert f"open on baseline {BASELINE} too, so not the host's: {wildcard_port}" in (
        proven.summary()
    )


def test_a_wildcard_listener_that_came_and_went_is_not_the_nodes(
    listen: Listen, reserve: Reserve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program's listener on 0.0.0.0, on a port the kernel picked, open while the
    node was swept and closed before the baseline was probed: the node's address answered
    alone. Probed once more it is closed there too, so it is not counted as the node's."""
    node = "127.0.0.74"
    node_port = listen(node)
    reserve(BASELINE, node_port)
    passing = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    passing.bind(("0.0.0.0", 0))
    passing.listen(4)
    port = int(passing.getsockname()[1])

    class ListenerGoesAfterTheNodesSweep(Sweep):
        async def run(self, ports: Any) -> Any:
            found = await super().run(ports)
            passing.close()  # between the node's sweep and the baseline's
            return found

    monkeypatch.setattr(scanner_module, "Sweep", ListenerGoesAfterTheNodesSweep)
    try:
        result = scan(node, [port, node_port], baseline_host=BASELINE, in_worker=False)
    finally:
        passing.close()

    assert result.passing == (port,)
    assert result.open_ports == (node_port,)  # the node's own stays open
    assert result.shared == ()
    assert result.state_of(port) == "closed"
    assert f"then on neither (a listener here that came and went): {port}" in result.summary()


def test_a_listener_open_on_the_node_alone_stays_open_when_probed_again(
    listen: Listen, reserve: Reserve
) -> None:
    node_port = listen("127.0.0.75")
    reserve(BASELINE, node_port)
    result = scan("127.0.0.75", [node_port], baseline_host=BASELINE, in_worker=False)
    assert result.open_ports == (node_port,)
    assert result.passing == ()


def test_baseline_with_nothing_shared(listen: Listen, reserve: Reserve) -> None:
    node_port = listen("127.0.0.72")
    reserve(BASELINE, node_port)

    result = scan("127.0.0.72", [node_port], baseline_host=BASELINE)

    assert result.open_ports == (node_port,)
    assert result.shared == ()
    assert "so not the host's: none" in result.summary()


@pytest.mark.parametrize(
    ("baseline", "match"),
    [
        ("127.0.0.73", "is the scanned address itself"),
        ("::1", "different address families"),
    ],
)
def test_a_useless_baseline_is_a_config_error(baseline: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        scan("127.0.0.73", [1], baseline_host=baseline)


# --------------------------------------------------------------------------- sync/async


def test_scan_async_in_a_loop(listen: Listen) -> None:
    port = listen("127.0.0.81")
    result = asyncio.run(scan_async("127.0.0.81", [port]))
    assert isinstance(result, ScanResult)
    assert result.open_ports == (port,)


def test_scan_works_while_a_loop_runs_in_this_thread(listen: Listen) -> None:
    port = listen("127.0.0.82")

    async def synchronous_caller() -> ScanResult:
        return scan("127.0.0.82", [port])  # blocks this loop; runs on a private thread

    assert asyncio.run(synchronous_caller()).open_ports == (port,)


def test_concurrency_stays_below_the_file_descriptor_limit_and_the_limit_is_put_back() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        low = min(soft, 512)
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

        with filelimit.file_limit_for(1_000_000) as allowed:
            inside, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            assert inside >= low
            if hard != resource.RLIM_INFINITY:
                assert inside == hard  # raised as far as it goes
            assert 1 <= allowed <= inside - _open_fds()

        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (low, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def soft_limit_512() -> Iterator[int]:
    """The soft RLIMIT_NOFILE at 512 for the test (the hard one, returned, is left alone),
    and put back afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _room_above(hard: int, needed: int, what: str) -> None:
    if hard != resource.RLIM_INFINITY and hard <= needed:
        pytest.skip(f"the hard file limit leaves no room {what}")


def test_the_limit_stays_raised_until_the_last_of_overlapping_scans_ends(
    soft_limit_512: int,
) -> None:
    hard = soft_limit_512
    _room_above(hard, 512, "to raise the soft one")
    with filelimit.file_limit_for(4096):
        raised, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert raised > 512
        with filelimit.file_limit_for(4096):
            pass
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= raised  # still raised
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (512, hard)


def test_overlapping_scans_are_granted_room_beside_each_other(soft_limit_512: int) -> None:
    """Two scans at once (say on two threads): the second is granted room beside all the
    first may still open, its probes and its kept sockets."""
    hard = soft_limit_512
    _room_above(hard, 8192, "for two scans of 3000")
    with filelimit.file_limit_for(3000) as first, filelimit.file_limit_for(3000) as second:
        assert first == second == 3000
        inside, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert inside - _open_fds() >= first + second + 2 * sweep.BATCH
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (512, hard)


def test_a_limit_someone_else_moved_during_the_scan_is_left_alone(soft_limit_512: int) -> None:
    hard = soft_limit_512
    _room_above(hard, 600, "to raise the soft one")
    with filelimit.file_limit_for(4096):
        resource.setrlimit(resource.RLIMIT_NOFILE, (600, hard))  # the caller's own move
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (600, hard)


_LOW_LIMIT_SCAN = """
import json, resource, socket, sys, threading
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from pytest_talos.ports import scan
host, baseline = sys.argv[1], sys.argv[2]
listeners = []
for _ in range(5):
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, 0))
    sock.listen(64)
    listeners.append(sock)
before = resource.getrlimit(resource.RLIMIT_NOFILE)
found = {}
def run(name):
    found[name] = list(scan(host, "1-65535", baseline_host=baseline, in_worker=False).open_ports)
threads = [threading.Thread(target=run, args=(n,)) for n in ("first", "second")]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({
    "listening": sorted(s.getsockname()[1] for s in listeners),
    "found": found,
    "before": before,
    "after": resource.getrlimit(resource.RLIMIT_NOFILE),
}))
"""


def test_a_full_scan_under_a_file_limit_of_1024_is_correct_and_leaves_the_limit_as_it_was(
    tmp_path: Path,
) -> None:
    """Two full scans at once, in a process whose soft RLIMIT_NOFILE is 1024 (set in a
    subprocess, so this process's limit is never touched)."""
    report = _low_limit_report(_LOW_LIMIT_SCAN, tmp_path, "127.0.0.94", BASELINE)

    assert report["before"][0] == 1024
    assert report["after"] == report["before"]
    assert report["found"] == {"first": report["listening"], "second": report["listening"]}


# --------------------------------------------------------------------------- several hosts


def test_scan_many_finds_each_hosts_listeners_in_the_order_given(
    listen: Listen, reserve: Reserve
) -> None:
    hosts = [f"127.0.0.{n}" for n in (105, 103, 104, 106, 102)]
    wildcard = listen("0.0.0.0")
    own = {host: sorted([listen(host), listen(host)]) for host in hosts}
    refused = {host: reserve(host) for host in hosts}
    spec = sorted({wildcard, *refused.values(), *(p for ports in own.values() for p in ports)})

    results = scan_many(hosts, spec, baseline_host=BASELINE, hosts_at_once=2)

    assert [result.host for result in results] == hosts
    for host, result in zip(hosts, results, strict=True):
        assert list(result.open_ports) == own[host]
        assert refused[host] in result.closed
        assert result.shared == (wildcard,)
        assert result.baseline_host == BASELINE


def test_scan_many_full_range_equals_one_scan_after_another(listen: Listen) -> None:
    hosts = [f"127.0.0.{n}" for n in range(107, 109)]
    for host in hosts:
        listen(host)
        listen(host)

    together = scan_many(hosts, "1-65535", baseline_host=BASELINE)
    alone = [scan(host, "1-65535", baseline_host=BASELINE) for host in hosts]

    assert [r.results for r in together] == [r.results for r in alone]
    assert all(len(r.open_ports) == 2 for r in together)


def test_scan_many_shares_one_bound_on_probes_in_flight(unanswered: Unanswered) -> None:
    """Three scans at once of 20 ports that never answer, 8 probes in flight in all: the
    process never holds more than 8 probe sockets (no refused ones are kept, nothing
    answers), and it does hold 8 at a time (the budget is used, not serialised)."""
    host, silent = unanswered(20)
    before = _open_fds()
    most = 0

    async def scan_while_counting() -> list[ScanResult]:
        nonlocal most
        scanning = asyncio.ensure_future(
            scan_many_async([host] * 3, silent, timeout=0.1, concurrency=8, hosts_at_once=3)
        )
        while not scanning.done():
            most = max(most, _open_fds() - before)
            await asyncio.sleep(0.005)
        return await scanning

    results = asyncio.run(scan_while_counting())

    assert [r.filtered for r in results] == [tuple(sorted(silent))] * 3
    assert 8 <= most <= 8 + 4  # the probes, and the loop's own few descriptors
    assert _open_fds() == before


def test_scan_many_bad_host_raises_what_one_scan_would_and_scans_nothing(
    listen: Listen,
) -> None:
    for bad in ("[]", "::1"):
        with pytest.raises(ConfigError) as alone:
            scan(bad, [1], baseline_host=BASELINE)
        with pytest.raises(ConfigError) as together:
            scan_many(["127.0.0.111", bad], [1], baseline_host=BASELINE)
        assert str(together.value) == str(alone.value)
        assert "\n" not in str(together.value)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hosts_at_once": 0}, "bad hosts_at_once 0"),
        ({"hosts_at_once": True}, "bad hosts_at_once True"),
        ({"concurrency": 0}, "bad concurrency 0"),
        ({"timeout": -1}, "bad timeout -1"),
    ],
)
def test_scan_many_bad_settings_are_config_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        scan_many(["127.0.0.1"], [1], **kwargs)


def test_scan_many_of_no_hosts_is_empty_and_works_inside_a_loop(listen: Listen) -> None:
    port = listen("127.0.0.112")

    async def synchronous_caller() -> list[ScanResult]:
        return scan_many(["127.0.0.112"], [port])  # blocks this loop; runs on a thread

    assert scan_many([], "1-1024") == []
    assert [r.open_ports for r in asyncio.run(synchronous_caller())] == [(port,)]


_LOW_LIMIT_SCAN_MANY = """
import json, resource, socket, sys
from pytest_talos.ports import scan_many
hosts, baseline = sys.argv[1].split(","), sys.argv[2]
listeners = {}
for host in hosts:
    for _ in range(3):
        sock = socket.socket()
        sock.bind((host, 0))
        sock.listen(64)
        listeners.setdefault(host, []).append(sock)
expected = [sorted(s.getsockname()[1] for s in listeners[h]) for h in hosts]
report = {"expected": expected}
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
for name, limit in (("soft 1024", (1024, hard)), ("soft and hard 1024", (1024, 1024))):
    resource.setrlimit(resource.RLIMIT_NOFILE, limit)
    found = [list(r.open_ports) for r in scan_many(hosts, "1-65535", baseline_host=baseline)]
    report[name] = {"found": found, "after": list(resource.getrlimit(resource.RLIMIT_NOFILE))}
print(json.dumps(report))
"""


@pytest.mark.slow  # full scans of several addresses: 8 s alone, 44 s on 2 busy CPUs
def test_scan_many_under_a_file_limit_of_1024_is_correct_and_leaves_the_limit_as_it_was(
    tmp_path: Path,
) -> None:
    """Four full scans at once in a process whose soft RLIMIT_NOFILE is 1024, then whose
    hard limit is 1024 too (so it cannot be raised: the spares are shared out); in a
    subprocess, so this process's limit is never touched."""
    hosts = ",".join(f"127.0.0.{n}" for n in range(113, 117))
    report = _low_limit_report(_LOW_LIMIT_SCAN_MANY, tmp_path, hosts, BASELINE)

    assert report["soft 1024"]["found"] == report["expected"]
    assert report["soft 1024"]["after"][0] == 1024
    assert report["soft and hard 1024"]["found"] == report["expected"]
    assert report["soft and hard 1024"]["after"] == [1024, 1024]


# --------------------------------------------------------------------------- CLI


def test_cli_prints_open_ports_sorted_and_a_summary(
    listen: Listen, reserve: Reserve, capsys: pytest.CaptureFixture[str]
) -> None:
    host = "127.0.0.91"
    open_ports = sorted([listen(host), listen(host)])
    closed_port = reserve(host)
    spec = ",".join(map(str, [open_ports[1], closed_port, open_ports[0]]))

    assert main([host, "--ports", spec, "--timeout", "2", "--concurrency", "64"]) == 0

    out, err = capsys.readouterr()
    assert out == "".join(f"{port}\n" for port in open_ports)
    assert err.count("\n") == 1
    assert err.startswith(f"{host}: 2 open, 1 closed, 0 filtered of 3 ports in ")


def test_cli_baseline_leaves_out_wildcard_listeners(
    listen: Listen, reserve: Reserve, capsys: pytest.CaptureFixture[str]
) -> None:
    node = "127.0.0.92"
    wildcard_port = listen("0.0.0.0")
    node_port = listen(node)
    reserve(BASELINE, node_port)

    code = main([node, "--ports", f"{wildcard_port},{node_port}", "--baseline", BASELINE])

    out, err = capsys.readouterr()
    assert code == 0
    assert out == f"{node_port}\n"
    assert f"so not the host's: {wildcard_port}" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["127.0.0.1", "--ports", "22,x"], "bad port entry 'x' in '22,x'"),
        ([], "the following arguments are required: host"),
        (["127.0.0.1", "--timeout", "soon"], "argument --timeout: invalid float value: 'soon'"),
        (["127.0.0.1", "--timeout", "0"], "bad timeout 0.0"),
        (["127.0.0.1", "--concurrency", "0"], "bad concurrency 0"),
        (["127.0.0.1", "--bogus"], "unrecognized arguments: --bogus"),
        (["127.0.0.1", "--baseline", "127.0.0.1"], "is the scanned address itself"),
        (["[]"], "no host given"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"{PROG}: error: ")
    assert message in err


def test_cli_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out, _err = capsys.readouterr()
    assert out.startswith(f"usage: {PROG} ")
    assert "--baseline HOST" in out
