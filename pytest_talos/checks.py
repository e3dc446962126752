"""Assertion helpers for Talos nodes, usable with or without pytest.

Each ``assert_*`` returns a :class:`CheckResult` (what was checked, with evidence) when the
node conforms, and raises :class:`~pytest_talos.errors.ConformanceFailure` (an
``AssertionError``) with the evidence when it does not. Problems reaching the node are
:class:`~pytest_talos.errors.TalosError` s, not failures.

Helpers that change a node go through a :class:`ConfigGuard` (:mod:`pytest_talos.guard`,
re-exported here): the one passed in, else the node's own guard (under pytest, the
``talos_config_guard`` fixture's), else a private guard that restores the node before the
helper returns::

    with ConfigGuard() as guard:            # restores every touched node on exit
        assert_service_healthy_after_patch(node, patch, guard=guard)
"""

from __future__ import annotations

import contextlib
import ipaddress
import posixpath
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_talos import models, ports
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import (
    APIError,
    ConfigRestoreError,
    ConformanceFailure,
    InvalidArgument,
    PermissionDenied,
    TalosError,
    WaitTimeout,
)
from pytest_talos.guard import ConfigGuard, _guarding
from pytest_talos.node import (
    TalosNode,
    _dig,
    _v1alpha1,
    default_expected_ports,
    expected_ports_for,
)
from pytest_talos.patches import PatchInput
from pytest_talos.talos_api import APID_PORT
from pytest_talos.wait import (
    StabilityReport,
    config_summary,
    wait_for_config,
    wait_service_stable,
    wait_until,
)

__all__ = [
    "DEFAULT_STABLE_FOR",
    "SHELL_DIRECTORIES",
    "SHELL_NAMES",
    "SHELL_PROCESSES",
    "CheckResult",
    "ConfigGuard",
    "ConfigRestoreError",
    "assert_config_unchanged_after_rejection",
    "assert_no_shell",
    "assert_node_ready",
    "assert_only_api_port",
    "assert_only_expected_ports",
    "assert_service_healthy_after_patch",
    "assert_try_reverts",
    "default_expected_ports",
    "expected_udp_ports_for",
    "pod_workload_pids",
]

# A crash-looping service is restarted every 5 s (internal/app/machined/pkg/system/runner/
# restart/restart.go); 12 s covers two periods.
DEFAULT_STABLE_FOR = 12.0
# The PATH Talos gives its processes (pkg/machinery/constants/environment.go: /usr/bin,
# /usr/local/sbin, /usr/local/bin and go-cni's /opt/cni/bin; EnvPathWithBin puts /bin first),
# the links of the usr-merged root (/sbin and /usr/sbin are usr/bin), helper directories
# that are not on PATH (/usr/libexec), and every add-on tree under /opt (``*`` is one
# directory level: /opt/containerd/bin, /opt/cni/bin, ...).
SHELL_DIRECTORIES = (
    "/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin",
    "/opt/cni/bin", "/usr/libexec", "/opt/*/bin",
)
SHELL_NAMES = frozenset({
    "sh", "ash", "bash", "rbash", "dash", "zsh", "ksh", "ksh93", "mksh", "lksh", "oksh",
    "pdksh", "posh", "yash", "hush", "sash", "fish", "csh", "tcsh", "elvish", "nu", "xonsh",
    "busybox", "toybox",
})
# Login and remote-access daemons: OpenSSH (and its per-session helpers since 9.8), Dropbear,
# telnet, getty, web terminals and terminal sharing.
REMOTE_ACCESS_PROCESSES = frozenset({
    "sshd", "sshd-session", "sshd-auth", "dropbear", "dropbearmulti", "telnetd", "in.telnetd",
    "utelnetd", "getty", "agetty", "mingetty", "ttyd", "gotty", "wetty", "shellinaboxd",
    "shellinabox", "tmate", "tmate-ssh-server",
})
SHELL_PROCESSES = SHELL_NAMES | REMOTE_ACCESS_PROCESSES
# Relays that hand a socket to whatever connects when they listen (``socat TCP-LISTEN:...
# EXEC:sh``, ``nc -l -e /bin/sh``).
_RELAYS = frozenset({"socat", "ncat", "nc", "netcat"})
# A program under another name: a build or architecture suffix (busybox.static,
# toybox-x86_64, apk.static), then a version (bash5, ksh93, bash5.2, dnf5).
_BUILD_SUFFIX = re.compile(
    r"[.-](?:static|dynamic|musl|glibc|minimal|x86_64|amd64|aarch64|arm64|armv7l|armhf|i686|"
    r"i386|riscv64|ppc64le|s390x)$"
)
_VERSION_SUFFIX = re.compile(r"(?<=[a-z])\d[\d.]*$")
SSH_PORT = 22
_EVENT_LINES = 8
_LOG_LINES = 30


@dataclass
class CheckResult:
    """A passed check: its name, the node, and what it saw."""

    check: str
    node: str
    evidence: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # parts skipped, and why


# --------------------------------------------------------------------------- ConfigGuard
# The guard lives in pytest_talos.guard; imported above and re-exported here.


# --------------------------------------------------------------------------- no shell


def assert_no_shell(
    node: TalosNode,
    *,
    directories: Iterable[str] = SHELL_DIRECTORIES,
    docker_container: str | None = None,
    scan_timeout: float = ports.DEFAULT_TIMEOUT,
) -> CheckResult:
    """No shell or busybox on disk, no shell or login process on the host, port 22 closed.

    Shells are looked for by name and by their well-known aliases (``busybox.static``,
    ``toybox-x86_64``, ``bash5``) in every directory on the PATH Talos gives its processes,
    in ``/usr/libexec`` and in each ``/opt/*/bin`` (see :func:`find_programs`). The
    directories are listed as the node sees them: a symlinked one is followed (in the
    usr-merged Talos root ``/bin``, ``/sbin`` and ``/usr/sbin`` are ``/usr/bin``) and a shell
    is reported by its real path; one that does not exist counts as empty (a stock image
    has no ``/usr/local/bin`` or ``/usr/local/sbin``; Talos answers ``lstat <path>: no such
    file or directory``); any other error is raised. Host processes must include no shell,
    no login or remote-access daemon (sshd and its ``sshd-session``/``sshd-auth`` helpers,
    dropbear, telnetd, getty, web terminals such as ttyd, gotty, wetty, shellinabox, tmate)
    and no socat/ncat relay listening for connections. Processes of pod workloads
    (descendants of a containerd shim of the ``k8s.io`` namespace) are not the host's: a pod
    whose entrypoint is a shell is normal, and such shells are only listed in the evidence.

    With ``docker_container`` (a node running as a local Docker container), also requires
    ``docker exec <container> sh`` to exit 127; that part is skipped (see ``notes``) when
    the ``docker`` command is absent.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = "immutability.no-shell-or-ssh"
    findings: dict[str, str] = {}
    result = CheckResult(check, node.name)
    on_disk, searched, absent = find_programs(node, SHELL_NAMES, directories)
    result.evidence["directories searched"] = ", ".join(searched)
    if absent:
        result.evidence["directories absent"] = ", ".join(absent)
    if on_disk:
        findings["shells on disk"] = ", ".join(on_disk)
    processes = node.processes
    in_pods = pod_workload_pids(processes)
    shells = [p for p in processes if _is_shell_process(p)]
    host = [_describe_process(p) for p in shells if p.pid not in in_pods]
    pods = [_describe_process(p) for p in shells if p.pid in in_pods]
    if pods:
        result.evidence["shells in pods (not the host's)"] = "\n".join(pods)
    if host:
        findings["shell or remote-login processes"] = "\n".join(host)
    ssh = node.scan_ports([SSH_PORT], timeout=scan_timeout)
    result.evidence["port 22"] = ssh.state_of(SSH_PORT)
    if SSH_PORT in ssh.open_ports:
        findings["port 22"] = f"open ({_listener_text(node, SSH_PORT)})"
    if docker_container is not None:
        _docker_exec_check(docker_container, result, findings)
    if findings:
        raise ConformanceFailure(
            check,
            "the node offers a way in besides the Talos API",
            node=node.name,
            expected="no shell, no busybox, no sshd, port 22 closed",
            observed="; ".join(findings),
            evidence=findings,
        )
    return result


def is_program_named(name: str, names: Iterable[str]) -> bool:
    """Whether the file or process ``name`` is one of ``names``, or one of them under a
    well-known alias: a build or architecture suffix (``busybox.static``, ``toybox-x86_64``,
    ``apk.static``) and a version (``bash5``, ``ksh93``, ``dnf5``)."""
    wanted = frozenset(names)
    name = posixpath.basename(name.rstrip("/")).lower()
    if name in wanted:
        return True
    base = _VERSION_SUFFIX.sub("", _BUILD_SUFFIX.sub("", name))
    return base != name and base in wanted


def find_programs(
    node: TalosNode, names: Iterable[str], directories: Iterable[str] = SHELL_DIRECTORIES
) -> tuple[list[str], list[str], list[str]]:
    """Programs called one of ``names`` (or an alias, see :func:`is_program_named`) directly
    in ``directories``: the real paths found (each once), the directories searched and those
    that do not exist.

    A directory with a ``*`` component is expanded one level at a time from what the node
    lists (``/opt/*/bin`` is the ``bin`` of each directory in ``/opt``). A missing directory
    is Unknown ``lstat <path>: no such file or directory`` on Talos (``pkg/archiver/walker.go``):
    absent, not an error. Any other error is raised.
    """
    wanted = frozenset(names)
    found: dict[str, None] = {}
    searched: list[str] = []
    absent: list[str] = []
    for directory in _expand_directories(node, directories):
        searched.append(directory)
        entries = node.files.entries(directory)
        if entries is None:
            absent.append(directory)
            continue
        for entry in entries:
            if entry.error:
                raise TalosError(
                    f"cannot list {directory}: {entry.error}", node=node.name, method="List"
                )
            if not entry.is_dir and is_program_named(entry.name, wanted):
                found[entry.name] = None
    return list(found), searched, absent


def _expand_directories(node: TalosNode, directories: Iterable[str]) -> list[str]:
    expanded: dict[str, None] = {}
    for directory in directories:
        parts = directory.strip("/").split("/")
        if "*" not in parts:
            expanded[directory] = None
            continue
        star = parts.index("*")
        parent = "/" + "/".join(parts[:star])
        rest = "/".join(parts[star + 1 :])
        children = [
            posixpath.join(parent, posixpath.basename(entry.name.rstrip("/")))
            for entry in node.files.entries(parent) or []
            if entry.is_dir and not entry.error
        ]
        for child in sorted(children):
            expanded.update(
                dict.fromkeys(_expand_directories(node, [posixpath.join(child, rest)]))
            )
    return list(expanded)


def pod_workload_pids(processes: Iterable[models.ProcessInfo]) -> frozenset[int]:
    """The PIDs of pod workloads: descendants of a containerd shim of the ``k8s.io`` namespace.

    The Processes API lists every PID of the host (``internal/pkg/miniprocfs``), pods
    included. The CRI runs each pod under a shim started as ``containerd-shim-runc-v2
    -namespace k8s.io -id <sandbox> ...``; Talos's own services run under shims of the
    ``system`` namespace and stay host processes.
    """
    table = {process.pid: process for process in processes}
    shims = {pid for pid, process in table.items() if _is_pod_shim(process)}
    found: set[int] = set()
    for pid in table:
        seen: set[int] = set()
        current = table[pid].ppid
        while current and current not in seen and current in table:
            if current in shims:
                found.add(pid)
                break
            seen.add(current)
            current = table[current].ppid
    return frozenset(found)


def _is_pod_shim(process: models.ProcessInfo) -> bool:
    runtime = process.executable.rsplit("/", 1)[-1] or process.command
    if not runtime.startswith("containerd-shim"):
        return False
    words = process.args.split()
    for index, word in enumerate(words):
        flag, _, value = word.partition("=")
        if flag in ("-namespace", "--namespace"):
            namespace = value or (words[index + 1] if index + 1 < len(words) else "")
            return namespace == "k8s.io"
    return False


def _is_shell_process(process: models.ProcessInfo) -> bool:
    """A shell, a login or remote-access daemon, or a relay listening for connections, by
    its command (``/proc/<pid>/comm``), its executable, or the program its args name."""
    words = process.args.split()
    names = [process.command, process.executable, *words[:1]]
    names = [name.split(":", 1)[0] for name in names if name]  # "sshd: user@pts/0"
    if any(is_program_named(name, SHELL_PROCESSES) for name in names):
        return True
    if not any(is_program_named(name, _RELAYS) for name in names):
        return False
    return any(_is_listen_flag(word) for word in words[1:])


def _is_listen_flag(word: str) -> bool:
    """``socat``'s ``TCP-LISTEN:``/``UNIX-LISTEN:`` addresses, ``nc``/``ncat``'s ``-l``,
    ``--listen`` and short-flag clusters such as ``-lvp``."""
    if "LISTEN" in word.upper().split(":", 1)[0]:
        return True
    if word == "--listen":
        return True
    return word.startswith("-") and not word.startswith("--") and "l" in word[1:]


def _describe_process(process: models.ProcessInfo) -> str:
    return f"pid {process.pid}: {process.executable or process.command} {process.args}".rstrip()


def _docker_exec_check(container: str, result: CheckResult, findings: dict[str, str]) -> None:
    docker = shutil.which("docker")
    if docker is None:
        result.notes.append("docker exec check skipped: the docker command is not installed")
        return
    try:
        done = subprocess.run(
            [docker, "exec", container, "sh", "-c", "exit 0"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        findings["docker exec sh"] = "did not finish within 60 s"
        return
    output = (done.stderr or done.stdout).decode(errors="replace").strip()
    result.evidence["docker exec sh"] = f"exit {done.returncode}: {output}"
    if done.returncode != 127:
        findings["docker exec sh"] = f"exit {done.returncode} (expected 127): {output}"


# --------------------------------------------------------------------------- ports


def assert_only_expected_ports(
    node: TalosNode,
    allowed: Iterable[int] | None = None,
    *,
    port_spec: str | Iterable[int] = ports.DEFAULT_PORTS,
    timeout: float = ports.DEFAULT_TIMEOUT,
    concurrency: int = ports.DEFAULT_CONCURRENCY,
    addresses: Iterable[str] = (),
    allowed_udp: Iterable[int] | None = None,
) -> CheckResult:
    """Only allowed ports are open on any of the node's addresses, by a scan and by Netstat.

    ``allowed`` defaults to the node's ``expected_ports`` (the plugin fills it from
    :func:`~pytest_talos.node.default_expected_ports` and the ``pytest_talos_expected_ports``
    hook), else what Talos opens for the node's role and its machine config: worker 50000,
    10250 and kube-proxy's 10256 (unless ``cluster.proxy.disabled``); control plane also
    50001, 6443, 2379, 2380.

    The node's address and each of ``addresses`` (IPv4 or IPv6, ``10.5.0.2/24`` form
    accepted; the conformance suite passes the node's own addresses from AddressStatuses)
    get a full TCP scan; an extra address where apid's 50000 does not answer is not
    reachable from here and is skipped (noted). The node's Netstat is read before and after
    the scans, and the two accounts must agree:

    * an open port outside ``allowed`` on any address fails (with Netstat's owner);
    * a TCP listener Netstat shows in both reads on a wildcard or scanned address, outside
      ``allowed``, fails even when the scan did not reach it (a firewall may hide it);
    * an allowed port Netstat shows on a wildcard or scanned address that the scan found
      refused (closed, not filtered) on one of ``addresses`` fails: one of the two accounts
      is wrong (the node's own address only: a NAT in front of it may refuse);
    * a port Talos itself opens (:func:`~pytest_talos.node.expected_ports_for`) that is open
      but has no TCP listener in either Netstat read fails: Netstat hides it. Ports only
      the caller allowed are exempt (a pod's hostPort or a NodePort is DNAT, no socket);
    * a UDP socket Netstat shows in both reads bound to an address other than loopback or
      link-local (host DNS on 127.0.0.53 and 169.254.116.108 is neither reachable nor
      reported), on a port outside ``allowed_udp``, fails. ``allowed_udp`` defaults to
      :func:`expected_udp_ports_for`.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    allow = _allowlist(node, allowed)
    udp_allow = expected_udp_ports_for(node) if allowed_udp is None else frozenset(allowed_udp)
    return _check_all_addresses(node, allow, udp_allow, addresses, port_spec, timeout, concurrency)


def expected_udp_ports_for(node: TalosNode) -> frozenset[int]:
    """The UDP ports a healthy node may bind on a reachable address, from its machine config.

    Every node may have a DHCP client's socket (68, DHCPv6 546). Flannel (Talos's default
    CNI) has a kernel VXLAN socket on 4789
    (``controllers/k8s/internal/k8stemplates/flannel.go``); KubeSpan's WireGuard listens on
    51820 (``pkg/machinery/constants/constants.go`` KubeSpanDefaultPort). With a custom CNI
    (``cluster.network.cni.name`` ``custom`` or ``none``) the common overlay and WireGuard
    ports of Cilium and Calico are allowed too (4789, 8472, 6081, 51820, 51821). Without
    os:admin the config cannot be read and Flannel is assumed.
    """
    try:
        config: models.MachineConfig | None = node.machine_config
    except PermissionDenied:
        config = None
    main = _v1alpha1(config)
    cni = _dig(main, "cluster", "network", "cni", "name")
    udp = set(DHCP_CLIENT_PORTS)
    if cni in (None, "", "flannel"):
        udp.add(FLANNEL_VXLAN_PORT)
    else:
        udp |= CUSTOM_CNI_UDP_PORTS
    if _dig(main, "machine", "network", "kubespan", "enabled") is True:
        udp.add(KUBESPAN_PORT)
    return frozenset(udp)


FLANNEL_VXLAN_PORT = 4789
# DHCP clients: controllers/network/operator/dhcp4.go renews over a unicast UDP socket on
# port 68, dhcp6.go's nclient6 binds 546; a DHCP-configured (metal) node may show either.
DHCP_CLIENT_PORTS = frozenset({68, 546})
KUBESPAN_PORT = 51820
CUSTOM_CNI_UDP_PORTS = frozenset({4789, 8472, 6081, 51820, 51821})


def _address_of(text: str) -> str:
    """``10.5.0.2/24``, ``[fd00::2]`` or ``fd00::2`` -> the bare address."""
    return text.strip().strip("[]").partition("/")[0].partition("%")[0]


def _same_ip(left: str, right: str) -> bool:
    try:
        return ipaddress.ip_address(left) == ipaddress.ip_address(right)
    except ValueError:
        return left == right


def _normal(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def _is_v6(address: str) -> bool:
    return ":" in address


def _covers(record: models.ConnectRecord, address: str) -> bool:
    """Whether a listener bound to ``record.local_ip`` answers on ``address``.

    ``::`` is taken as dual-stack (Go's listeners are; Linux's default bindv6only=0)."""
    bind = record.local_ip
    if bind in ("::", ""):
        return True
    if bind == "0.0.0.0":
        return not _is_v6(address)
    return _same_ip(bind, address)


def _exposed(bind: str) -> bool:
    """Whether a socket bound to ``bind`` can be reached from off the node."""
    if bind in ("", "::", "0.0.0.0"):
        return True
    try:
        ip = ipaddress.ip_address(bind)
    except ValueError:
        return True
    return not (ip.is_loopback or ip.is_link_local)


def _stable(
    first: list[models.ConnectRecord], second: list[models.ConnectRecord]
) -> list[models.ConnectRecord]:
    """The host-network listeners present in both Netstat reads."""
    seen = {(r.l4proto, r.local_ip, r.local_port) for r in first}
    return [r for r in second if not r.netns and (r.l4proto, r.local_ip, r.local_port) in seen]


def _scan_targets(node: TalosNode, addresses: Iterable[str]) -> list[str]:
    targets = [node.host]
    for text in addresses:
        address = _address_of(text)
        if address and not any(_same_ip(address, known) for known in targets):
            targets.append(address)
    return targets


def _baseline_for(node: TalosNode, address: str) -> str | None:
    baseline = node.scan_baseline
    if baseline is None or _is_v6(_address_of(baseline)) != _is_v6(address):
        return None
    return baseline


def _owner(record: models.ConnectRecord) -> str:
    who = (
        f"pid {record.pid} ({record.process_name or '?'})"
        if record.pid is not None
        else "no process (a kernel socket)"
    )
    return f"{record.l4proto} {record.local_ip}:{record.local_port} {who}"


def _check_all_addresses(
    node: TalosNode,
    allow: frozenset[int],
    udp_allow: frozenset[int],
    addresses: Iterable[str],
    port_spec: str | Iterable[int],
    timeout: float,
    concurrency: int,
) -> CheckResult:
    check = "immutability.only-expected-ports"
    before = node.listeners
    scans: dict[str, ports.ScanResult] = {}  # by the address scanned (names resolved)
    skipped: dict[str, str] = {}
    for index, address in enumerate(_scan_targets(node, addresses)):
        baseline = _baseline_for(node, address)
        if index:
            probe = ports.scan(address, [APID_PORT], timeout=timeout, baseline_host=baseline)
            if probe.state_of(APID_PORT) != "open":
                skipped[address] = (
                    f"apid's port {APID_PORT} is {probe.state_of(APID_PORT)} there: "
                    "not reachable from this machine, not scanned"
                )
                continue
        scan = ports.scan(
            address, port_spec, timeout=timeout, concurrency=concurrency, baseline_host=baseline
        )
        scans[scan.address or address] = scan
    after = node.listeners
    stable = _stable(before, after)
    tcp_either = [r for r in [*before, *after] if r.l4proto.startswith("tcp") and not r.netns]
    talos_ports = expected_ports_for(node) & allow
    own = {_normal(_address_of(text)) for text in addresses}

    found = {port for scan in scans.values() for port in scan.open_ports}
    unexpected = sorted(found - allow)
    hidden: list[str] = []  # "port on address"
    ghosts: list[str] = []
    refused: list[str] = []
    udp: list[str] = []
    details: list[str] = []
    for address, scan in scans.items():
        for port in sorted(set(scan.open_ports) & talos_ports):
            # any listener off loopback will do: behind NAT the scanned address is not the
            # one a listener bound to a single address shows
            if not any(
                r.local_port == port and (_covers(r, address) or _exposed(r.local_ip))
                for r in tcp_either
            ):
                hidden.append(f"{port} on {address}")
                details.append(f"{address}:{port} open, but Netstat lists no TCP listener for it")
    for record in stable:
        port = record.local_port
        if not _exposed(record.local_ip):
            continue
        if record.l4proto.startswith("udp"):
            if port not in udp_allow:
                udp.append(f"{port} on {record.local_ip or '*'}")
                details.append(f"Netstat: {_owner(record)}")
            continue
        covered = [a for a in scans if _covers(record, a)]
        if port not in allow:
            if port not in unexpected:
                states = ", ".join(f"{a} {_scan_state(scans[a], port)}" for a in covered)
                ghosts.append(str(port))
                details.append(f"Netstat: {_owner(record)}; scan: {states or 'no address'}")
            continue
        for address in covered:
            # only where the node itself has the address: a NAT in front may refuse
            if address in own and _scan_state(scans[address], port) == "closed":
                refused.append(f"{port} on {address}")
                details.append(f"Netstat: {_owner(record)}; the scan of {address}: refused")

    evidence: dict[str, Any] = {
        ("scan" if index == 0 else f"scan {address}"): scan.summary()
        for index, (address, scan) in enumerate(scans.items())
    }
    if skipped:
        evidence["addresses not scanned"] = "\n".join(f"{a}: {why}" for a, why in skipped.items())
    evidence["UDP allowed off loopback"] = _ports_text(udp_allow)
    problems = []
    if unexpected:
        plural = "s" if len(unexpected) > 1 else ""
        problems.append(f"unexpected open TCP port{plural}: " + ", ".join(map(str, unexpected)))
        evidence["listeners (node's Netstat)"] = "\n".join(
            f"{port}: {_netstat_text(port, tcp_either)}" for port in unexpected
        )
    for label, items in (
        ("open but hidden from the node's Netstat", hidden),
        ("listening by Netstat, outside the allowlist, not reached by the scan", ghosts),
        ("listening by Netstat but refused by the node", refused),
        ("unexpected UDP listener", udp),
    ):
        if items:
            problems.append(f"{label}: " + ", ".join(dict.fromkeys(items)))
    if problems:
        if details:
            evidence["Netstat and scan disagree"] = "\n".join(dict.fromkeys(details))
        raise ConformanceFailure(
            check,
            "; ".join(problems),
            node=node.name,
            expected=f"at most {_ports_text(allow)} open",
            observed=f"open: {_ports_text(found)}",
            evidence={
                "addresses scanned": ", ".join(scans),
                "also required": "Netstat and the scans agree; UDP at most "
                f"{_ports_text(udp_allow)} off loopback and link-local",
                **evidence,
            },
        )
    return CheckResult(
        check,
        node.name,
        {**evidence, "open": sorted(found), "addresses": list(scans)},
        notes=[f"{a}: {why}" for a, why in skipped.items()],
    )


def _scan_state(scan: ports.ScanResult, port: int) -> str:
    if port in scan.shared:
        return "open (also on the baseline)"
    try:
        return scan.state_of(port)
    except KeyError:
        return "not scanned"


def _netstat_text(port: int, records: list[models.ConnectRecord]) -> str:
    matches = list(dict.fromkeys(_owner(r) for r in records if r.local_port == port))
    return "; ".join(matches) or "no listener (something in front of the node answers?)"


def assert_only_api_port(
    node: TalosNode,
    *,
    port_spec: str | Iterable[int] = ports.DEFAULT_PORTS,
    timeout: float = ports.DEFAULT_TIMEOUT,
    concurrency: int = ports.DEFAULT_CONCURRENCY,
) -> CheckResult:
    """Only the Talos API (50000) answers: the strict form for nodes without Kubernetes."""
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    return _check_ports(
        "immutability.only-api-port", node, frozenset({50000}), port_spec, timeout, concurrency
    )


def _allowlist(node: TalosNode, allowed: Iterable[int] | None) -> frozenset[int]:
    if allowed is not None:
        return frozenset(allowed)
    if node.expected_ports is not None:
        return node.expected_ports
    return expected_ports_for(node)


def _check_ports(
    check: str,
    node: TalosNode,
    allow: frozenset[int],
    port_spec: str | Iterable[int],
    timeout: float,
    concurrency: int,
) -> CheckResult:
    scan = node.scan_ports(port_spec, timeout=timeout, concurrency=concurrency)
    found = set(scan.open_ports)
    unexpected = sorted(found - allow)
    evidence = {"scan": scan.summary()}
    if unexpected:
        listeners = node.listeners
        evidence["listeners (node's Netstat)"] = "\n".join(
            f"{port}: {_listener_text(node, port, listeners)}" for port in unexpected
        )
        raise ConformanceFailure(
            check,
            f"unexpected open TCP port{'s' if len(unexpected) > 1 else ''}: "
            + ", ".join(map(str, unexpected)),
            node=node.name,
            expected=f"at most {_ports_text(allow)} open",
            observed=f"open: {_ports_text(found)}",
            evidence=evidence,
        )
    return CheckResult(check, node.name, {**evidence, "open": sorted(found)})


def _ports_text(values: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(values))) or "none"


def _listener_text(
    node: TalosNode, port: int, listeners: list[models.ConnectRecord] | None = None
) -> str:
    try:
        records = listeners if listeners is not None else node.listeners
    except TalosError as exc:
        return f"Netstat failed: {exc}"
    matches = [r for r in records if r.local_port == port and r.l4proto.startswith("tcp")]
    if not matches:
        return "no listener in the node's Netstat (something in front of the node answers?)"
    return "; ".join(
        f"{r.l4proto} {r.local_ip}:{r.local_port} "
        + (f"pid {r.pid} ({r.process_name or '?'})" if r.pid is not None else "process unknown")
        for r in matches
    )


# --------------------------------------------------------------------------- config changes


def assert_config_unchanged_after_rejection(
    node: TalosNode,
    patch: PatchInput,
    *,
    mode: models.ApplyMode = "no-reboot",
    guard: ConfigGuard | None = None,
    settle: float = 0.0,
    expect_rejection: str = "",
    check_id: str = "config.invalid-patch-rejected",
) -> CheckResult:
    """Applying ``patch`` is refused with InvalidArgument and leaves the config untouched.

    Both the MachineConfig resource version and the exact bytes must stay the same, on the
    first read and again after ``settle`` seconds (a node may refuse in its reply and apply
    later). ``expect_rejection``, when given, must appear in the node's refusal. If the node
    accepts the patch, or changes its config later, the original config is restored and the
    check fails with what was seen. ``check_id`` names the failure.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = check_id
    with _guarding(node, guard) as chosen:
        before = node.machine_config
        try:
            reply = node.apply_patch(patch, mode=mode, guard=chosen)
        except InvalidArgument as exc:
            rejection = exc.details
        except APIError as exc:
            raise ConformanceFailure(
                check, "the patch was refused, but not as invalid", node=node.name,
                expected="InvalidArgument", observed=f"{exc.code}: {exc.details}",
            ) from None
        else:
            chosen.restore_node(node)
            raise ConformanceFailure(
                check, "the node accepted an invalid patch (the original config was restored)",
                node=node.name, expected="InvalidArgument",
                observed=f"accepted ({reply.mode}): {reply.mode_details}",
                evidence={"warnings": "\n".join(reply.warnings)} if reply.warnings else None,
            )
        after = node.machine_config
        when = "at once"
        if settle > 0 and (after.version, after.raw) == (before.version, before.raw):
            after, when = _settled_config(node, before, settle), f"within {settle:g}s"
        if (after.version, after.raw) != (before.version, before.raw):
            chosen.restore_node(node)
    _require_same_config(check, node, before, after, rejection, when)
    if expect_rejection and expect_rejection not in rejection:
        raise ConformanceFailure(
            check, "the patch was refused for another reason than expected", node=node.name,
            expected=f"InvalidArgument: {expect_rejection}", observed=rejection[:800],
        )
    return CheckResult(check, node.name, {"rejection": rejection, "version": after.version})


def _settled_config(
    node: TalosNode, before: models.MachineConfig, settle: float
) -> models.MachineConfig:
    """The active config once ``settle`` s have passed with no change (or at the first one)."""
    with contextlib.suppress(WaitTimeout):
        wait_for_config(node, lambda raw: raw != before.raw, timeout=settle,
                        description="a late change (there should be none)")
    return node.machine_config


def _require_same_config(
    check: str,
    node: TalosNode,
    before: models.MachineConfig,
    after: models.MachineConfig,
    rejection: str,
    when: str = "at once",
) -> None:
    problems = []
    if after.version != before.version:
        problems.append(f"version {before.version} -> {after.version}")
    if after.raw != before.raw:
        problems.append("the config bytes changed")
    if problems:
        raise ConformanceFailure(
            check,
            "the patch was rejected, but the machine config changed anyway"
            + ("" if when == "at once" else f" ({when} of the refusal; restored)")
            + ": " + "; ".join(problems),
            node=node.name,
            expected=f"unchanged: {config_summary(before.raw, before.version)}",
            observed=config_summary(after.raw, after.version),
            evidence={"rejection": rejection},
        )


def assert_service_healthy_after_patch(
    node: TalosNode,
    patch: PatchInput,
    service: str = "kubelet",
    *,
    stable_for: float = DEFAULT_STABLE_FOR,
    timeout: float | None = None,
    mode: models.ApplyMode = "no-reboot",
    max_restarts: int | None = 3,
    guard: ConfigGuard | None = None,
    check_id: str = "config.kubelet-flag-failure-detected",
) -> CheckResult:
    """After applying ``patch``, ``service`` is running and healthy for ``stable_for`` s on end.

    Follows the Services resource (a COSI watch), not sleep-polling. Fails as soon as the
    service has restarted ``max_restarts`` times (a crash loop), or when it has not been
    stable for a whole window within ``timeout`` (default: ``stable_for`` + 60 s); the
    failure shows the state changes seen, the service's last events and its log tail.
    ``check_id`` names the failure (the conformance check that heals kubelet this way by
    default), so it can be pasted into a waiver.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = check_id
    with _guarding(node, guard) as chosen:
        reply = node.apply_patch(patch, mode=mode, guard=chosen)
        limit = timeout if timeout is not None else stable_for + 60.0
        try:
            report = wait_service_stable(
                node, service, stable_for=stable_for, timeout=limit, max_restarts=max_restarts
            )
        except WaitTimeout as exc:
            raise _unstable_failure(
                check, node, service, reply, exc, stable_for, max_restarts
            ) from None
    return CheckResult(
        check,
        node.name,
        {"apply": reply.mode_details, "state changes": report.timeline(),
         "waited": f"{report.elapsed:.1f}s"},
    )


def _unstable_failure(
    check: str,
    node: TalosNode,
    service: str,
    reply: models.ApplyResult,
    exc: WaitTimeout,
    stable_for: float,
    max_restarts: int | None,
) -> ConformanceFailure:
    report = exc.last_observation
    if not isinstance(report, StabilityReport):
        report = StabilityReport(service, stable_for)
    restarts = f"{report.restarts} restart{'s' if report.restarts != 1 else ''}"
    if max_restarts and report.restarts >= max_restarts:
        why = f"it keeps restarting ({restarts} in {exc.elapsed:.1f}s)"
    else:
        why = (
            f"it was not running and healthy for {stable_for:g}s on end within "
            f"{exc.elapsed:.1f}s ({restarts})"
        )
    return ConformanceFailure(
        check,
        f"{service} is not healthy after the patch: {why}",
        node=node.name,
        expected=f"{service} running and healthy for {stable_for:g}s on end",
        observed=str(report.last) if report.last is not None else "no state seen",
        evidence={
            "apply": reply.mode_details,
            "state changes": report.timeline(),
            "last events": _last_events(node, service),
            "log tail": _log_tail(node, service),
        },
    )


def _last_events(node: TalosNode, service: str) -> str:
    try:
        events = node.service(service).events[-_EVENT_LINES:]
    except TalosError as exc:
        return f"(could not read: {exc})"
    return "\n".join(f"[{e.state}] {e.msg}" for e in events) or "(none)"


def _log_tail(node: TalosNode, service: str) -> str:
    try:
        text = node.logs(service, tail=_LOG_LINES)
    except TalosError as exc:
        return f"(could not read: {exc})"
    return text.rstrip() or "(empty)"


def assert_try_reverts(
    node: TalosNode,
    patch: PatchInput,
    *,
    try_timeout: float = 30.0,
    timeout: float | None = None,
    guard: ConfigGuard | None = None,
    settle: float = 0.0,
) -> CheckResult:
    """A try-mode apply takes effect, then the exact previous config comes back by itself.

    ``try_timeout`` is sent to the node (its revert timer); ``timeout`` bounds the wait for
    the revert on this side (default: ``try_timeout`` + 30 s). With ``settle`` > 0 the
    reverted config must then stay as it is (bytes and version) for ``settle`` seconds.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = "config.try-mode-reverts"
    with _guarding(node, guard) as chosen:
        before = node.machine_config
        reply = node.apply_patch(patch, mode="try", guard=chosen, try_timeout=try_timeout)
        tried = node.machine_config
        if tried.raw == before.raw:
            raise ConformanceFailure(
                check, "the try-mode apply did not change the active config", node=node.name,
                expected="the patched config active during the try window",
                observed=f"still {config_summary(before.raw, before.version)}",
                evidence={"apply": reply.mode_details},
            )
        limit = timeout if timeout is not None else try_timeout + 30.0
        try:
            wait_for_config(
                node, lambda raw: raw == before.raw, timeout=limit,
                description="the try-mode change to revert",
            )
        except WaitTimeout as exc:
            chosen.restore_node(node)
            raise ConformanceFailure(
                check,
                f"the try-mode change was not reverted within {limit:g}s "
                "(the original config was restored)",
                node=node.name,
                expected=f"back to {config_summary(before.raw, before.version)}",
                observed=str(exc.last_observation),
                evidence={"apply": reply.mode_details},
            ) from None
        if settle > 0:
            reverted = node.machine_config
            settled = _settled_config(node, reverted, settle)
            if (settled.version, settled.raw) != (reverted.version, reverted.raw):
                chosen.restore_node(node)
                raise ConformanceFailure(
                    check,
                    f"the try-mode change was reverted, but the config changed again within "
                    f"{settle:g}s (the original config was restored)",
                    node=node.name,
                    expected=f"stays {config_summary(reverted.raw, reverted.version)}",
                    observed=config_summary(settled.raw, settled.version),
                    evidence={"apply": reply.mode_details},
                )
    return CheckResult(
        check, node.name,
        {"apply": reply.mode_details, "tried": config_summary(tried.raw, tried.version)},
    )


# --------------------------------------------------------------------------- Kubernetes


def assert_node_ready(
    cluster: TalosCluster, node: TalosNode, *, timeout: float = 0.0
) -> CheckResult:
    """The Kubernetes Node named after ``node``'s hostname reports Ready=True.

    With ``timeout`` > 0, waits up to that long for it (polling the API server).
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = "kubernetes.node-ready"
    kube = cluster.kubernetes

    def probe() -> dict[str, tuple[str, str]]:
        return _conditions(kube.node(node.hostname))

    try:
        conditions = probe() if timeout <= 0 else wait_until(
            probe, _is_ready, timeout=timeout, node=node.name,
            description=f"Kubernetes node {node.hostname} to be Ready",
        )
    except WaitTimeout as exc:
        conditions = exc.last_observation if isinstance(exc.last_observation, dict) else {}
    except Exception as exc:  # the kubernetes client raises its own ApiException
        if getattr(exc, "status", None) == 404:
            raise ConformanceFailure(
                check, f"Kubernetes has no Node named {node.hostname}", node=node.name,
            ) from None
        raise
    if not _is_ready(conditions):
        status, reason = conditions.get("Ready", ("missing", ""))
        raise ConformanceFailure(
            check, "the Kubernetes Node is not Ready", node=node.name,
            expected="Ready=True", observed=f"Ready={status}" + (f" ({reason})" if reason else ""),
            evidence={"conditions": "\n".join(
                f"{kind}={value} {why}".rstrip() for kind, (value, why) in conditions.items()
            ) or "(none)"},
        )
    return CheckResult(check, node.name, {"conditions": conditions})


def _conditions(kube_node: Any) -> dict[str, tuple[str, str]]:
    found = getattr(getattr(kube_node, "status", None), "conditions", None) or []
    return {
        str(c.type): (str(c.status), " ".join(filter(None, [c.reason, c.message])))
        for c in found
    }


def _is_ready(conditions: dict[str, tuple[str, str]]) -> bool:
    return conditions.get("Ready", ("", ""))[0] == "True"
