"""No way into the node besides the Talos API: no shell on disk, no shell or login process on
the host, port 22 closed (:func:`assert_no_shell`).

Also the pieces it is made of, which other checks use too: finding programs by name and alias
in the node's directories (:func:`find_programs`, :func:`is_program_named`) and telling a
pod's processes from the host's (:func:`pod_workload_pids`).
"""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from pytest_talos import models, ports
from pytest_talos.checks.listeners import exposed, listener_text
from pytest_talos.checks.result import CheckResult
from pytest_talos.errors import ConformanceFailure, TalosError
from pytest_talos.node import TalosNode

__all__ = [
    "REMOTE_ACCESS_PROCESSES",
    "SHELL_DIRECTORIES",
    "SHELL_NAMES",
    "SHELL_PROCESSES",
    "SSH_PORT",
    "assert_no_shell",
    "find_programs",
    "is_program_named",
    "is_shell_process",
    "pod_sandboxes",
    "pod_workload_pids",
]

# The PATH Talos gives its processes (pkg/machinery/constants/environment.go: /usr/bin,
# /usr/local/sbin, /usr/local/bin and go-cni's /opt/cni/bin; EnvPathWithBin puts /bin first),
# the links of the usr-merged root (/sbin and /usr/sbin are usr/bin), helper directories
# that are not on PATH (/usr/libexec), and every add-on tree under /opt (``*`` is one
# directory level: /opt/containerd/bin, /opt/cni/bin, ...). One level down in /usr/libexec
# too, where packages keep their helpers (/usr/libexec/<package>/...): the stock image has
# only the empty /usr/libexec/kubernetes there (Dockerfile, the rootfs stage, and the packages
# it copies; hack/cleanup.sh drops /usr/libexec/getconf), and /opt/*/sbin, which no stock
# /opt tree has (/opt/containerd/{bin,lib}, /opt/cni/bin).
SHELL_DIRECTORIES = (
    "/bin",
    "/sbin",
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/opt/cni/bin",
    "/usr/libexec",
    "/usr/libexec/*",
    "/opt/*/bin",
    "/opt/*/sbin",
)
SHELL_NAMES = frozenset(
    {
        "sh",
        "ash",
        "bash",
        "rbash",
        "dash",
        "zsh",
        "ksh",
        "ksh93",
        "mksh",
        "lksh",
        "oksh",
        "pdksh",
        "posh",
        "yash",
        "hush",
        "sash",
        "fish",
        "csh",
        "tcsh",
        "elvish",
        "nu",
        "xonsh",
        "busybox",
        "toybox",
    }
)
# Login and remote-access daemons: OpenSSH (and its per-session helpers since 9.8), Dropbear,
# telnet, getty and the login programs they run, web terminals and terminal sharing.
REMOTE_ACCESS_PROCESSES = frozenset(
    {
        "login",
        "sulogin",
        "sshd",
        "sshd-session",
        "sshd-auth",
        "dropbear",
        "dropbearmulti",
        "telnetd",
        "in.telnetd",
        "utelnetd",
        "getty",
        "agetty",
        "mingetty",
        "ttyd",
        "gotty",
        "wetty",
        "shellinaboxd",
        "shellinabox",
        "tmate",
        "tmate-ssh-server",
    }
)
SHELL_PROCESSES = SHELL_NAMES | REMOTE_ACCESS_PROCESSES
# Relays that hand a socket to whatever connects when they listen (``socat TCP-LISTEN:...
# EXEC:sh``, ``nc -l -e /bin/sh``).
_RELAYS = frozenset({"socat", "ncat", "nc", "netcat"})
# A program under another name: a build or architecture suffix (busybox.static,
# toybox-x86_64, apk.static) or a Debian diversion's (sh.distrib, dash.orig, bash.real), then
# a version, right after the name or after a dash or underscore (bash5, ksh93, bash5.2, dnf5,
# bash-5.2, busybox-1.36.1).
_BUILD_SUFFIX = re.compile(
    r"[.-](?:static|dynamic|musl|glibc|minimal|x86_64|amd64|aarch64|arm64|armv7l|armhf|i686|"
    r"i386|riscv64|ppc64le|s390x|distrib|orig|real)$"
)
_VERSION_SUFFIX = re.compile(r"(?:(?<=[a-z])|[-_])\d[\d.]*$")
SSH_PORT = 22


def assert_no_shell(
    node: TalosNode,
    *,
    directories: Iterable[str] = SHELL_DIRECTORIES,
    docker_container: str | None = None,
    scan_timeout: float = ports.DEFAULT_TIMEOUT,
    scan_port_22: bool = True,
) -> CheckResult:
    """No shell or busybox on disk, no shell or login process on the host, port 22 closed.

    ``scan_port_22=False`` (a node this machine reaches only through the endpoint): port 22
    is not scanned; a TCP listener on it off loopback in the node's Netstat still fails.

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
    the ``docker`` command is absent, and raises :class:`~pytest_talos.errors.TalosError`
    (not measured) when docker cannot reach the container or its daemon (no such
    container, the daemon down or its socket not permitted).
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
    shells = [p for p in processes if is_shell_process(p)]
    host = [_describe_process(p) for p in shells if p.pid not in in_pods]
    pods = [_describe_process(p) for p in shells if p.pid in in_pods]
    if pods:
        result.evidence["shells in pods (not the host's)"] = "\n".join(pods)
    if host:
        findings["shell or remote-login processes"] = "\n".join(host)
    if scan_port_22:
        ssh = node.scan_ports([SSH_PORT], timeout=scan_timeout)
        result.evidence["port 22"] = ssh.state_of(SSH_PORT)
        if SSH_PORT in ssh.open_ports:
            findings["port 22"] = f"open ({listener_text(node, SSH_PORT)})"
    else:
        listening = [
            r
            for r in node.listeners
            if r.local_port == SSH_PORT and r.l4proto.startswith("tcp") and exposed(r.local_ip)
        ]
        result.evidence["port 22"] = "not scanned (no direct reach); Netstat: " + (
            "listening" if listening else "no listener"
        )
        if listening:
            findings["port 22"] = f"listening by Netstat ({listener_text(node, SSH_PORT)})"
    unmeasured = None
    if docker_container is not None:
        unmeasured = _docker_exec_check(docker_container, result, findings)
    if findings:
        evidence = {**findings, "docker exec sh (not measured)": unmeasured or ""}
        raise ConformanceFailure(
            check,
            "the node offers a way in besides the Talos API",
            node=node.name,
            expected="no shell, no busybox, no sshd, port 22 closed",
            observed="; ".join(findings),
            evidence={k: v for k, v in evidence.items() if v},
        )
    if unmeasured is not None:
        raise TalosError(unmeasured, node=node.name)
    return result


def is_program_named(name: str, names: Iterable[str]) -> bool:
    """Whether the file or process ``name`` is one of ``names``, or one of them under a
    well-known alias: a build, architecture or diversion suffix (``busybox.static``,
    ``toybox-x86_64``, ``apk.static``, ``sh.distrib``) and a version (``bash5``, ``ksh93``,
    ``dnf5``, ``bash-5.2``)."""
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
    in ``directories``, or links there to one (a busybox under any name with its applet
    links, ``ls -> toolbox``, is found by the links' target): the real paths found (each
    once, a link as ``<path> -> <target>``), the directories searched and those that do not
    exist.

    A directory with a ``*`` component is expanded one level at a time from what the node
    lists (``/opt/*/bin`` is the ``bin`` of each directory in ``/opt`` that has one). A
    missing directory is Unknown ``lstat <path>: no such file or directory`` on Talos
    (``pkg/archiver/walker.go``): absent, not an error. Any other error is raised.
    """
    wanted = frozenset(names)
    found: dict[str, None] = {}
    searched: list[str] = []
    absent: list[str] = []
    expanded = _expand_directories(node, directories)
    for directory, entries in zip(expanded, _listings(node, expanded), strict=True):
        searched.append(directory)
        if entries is None:
            absent.append(directory)
            continue
        for entry in entries:
            if entry.error:
                raise TalosError(
                    f"cannot list {directory}: {entry.error}", node=node.name, method="List"
                )
            if entry.is_dir:
                continue
            if is_program_named(entry.name, wanted):
                found[entry.name] = None
            elif entry.link and is_program_named(entry.link, wanted):
                found[f"{entry.name} -> {entry.link}"] = None
    return list(found), searched, absent


LISTERS = 8  # directory listings in flight at once (each one round trip to the node)


def _listings(node: TalosNode, directories: list[str]) -> Iterator[list[models.FileInfo] | None]:
    """Each directory's entries, in order, listed up to LISTERS at a time: the round trips
    overlap instead of adding up. An error is raised where the directory's turn comes."""
    if len(directories) < 2:
        yield from (node.files.entries(d) for d in directories)
        return
    with ThreadPoolExecutor(min(LISTERS, len(directories)), "talos-list") as pool:
        yield from pool.map(node.files.entries, directories)


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
            if rest and not _has_entry(node, child, rest.split("/", 1)[0]):
                continue  # a wildcard names only the trees that have the rest of the path
            below = posixpath.join(child, rest) if rest else child
            expanded.update(dict.fromkeys(_expand_directories(node, [below])))
    return list(expanded)


def _has_entry(node: TalosNode, directory: str, name: str) -> bool:
    entries = node.files.entries(directory) or []
    return any(posixpath.basename(e.name.rstrip("/")) == name for e in entries if not e.error)


def pod_workload_pids(processes: Iterable[models.ProcessInfo]) -> frozenset[int]:
    """The PIDs of pod workloads: descendants of a containerd shim of the ``k8s.io`` namespace.

    The Processes API lists every PID of the host (``internal/pkg/miniprocfs``), pods
    included. The CRI runs each pod under a shim started as ``containerd-shim-runc-v2
    -namespace k8s.io -id <sandbox> ...``; Talos's own services run under shims of the
    ``system`` namespace and stay host processes.
    """
    return frozenset(pod_sandboxes(processes))


def pod_sandboxes(processes: Iterable[models.ProcessInfo]) -> dict[int, str]:
    """The PID of each pod workload (see :func:`pod_workload_pids`) and the sandbox id its
    shim names (``-id <sandbox>``: the CRI's pod sandbox, not the pod's name)."""
    table = {process.pid: process for process in processes}
    shims = {pid: _shim_id(process) for pid, process in table.items() if _is_pod_shim(process)}
    found: dict[int, str] = {}
    for pid in table:
        seen: set[int] = set()
        current = table[pid].ppid
        while current and current not in seen and current in table:
            if current in shims:
                found[pid] = shims[current]
                break
            seen.add(current)
            current = table[current].ppid
    return found


def _shim_id(process: models.ProcessInfo) -> str:
    words = process.args.split()
    for index, word in enumerate(words):
        flag, _, value = word.partition("=")
        if flag in ("-id", "--id"):
            return value or (words[index + 1] if index + 1 < len(words) else "")
    return ""


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


def is_shell_process(process: models.ProcessInfo) -> bool:
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


def _docker_exec_check(container: str, result: CheckResult, findings: dict[str, str]) -> str | None:
    """Run ``docker exec <container> sh``; a finding unless it exits 127. Returns why it was
    not measured when docker could not reach the container or its daemon (else None)."""
    docker = shutil.which("docker")
    if docker is None:
        result.notes.append("docker exec check skipped: the docker command is not installed")
        return None
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
        return None
    output = (done.stderr or done.stdout).decode(errors="replace").strip()
    result.evidence["docker exec sh"] = f"exit {done.returncode}: {output}"
    if docker_unmeasured(done.returncode, output):
        return (
            f"docker exec could not run in container {container!r} (exit {done.returncode}: "
            f"{output}): the docker part of the check was not measured; --talos-docker "
            "expects local containers named after the nodes' hostnames and a reachable "
            "Docker daemon"
        )
    if done.returncode != 127:
        findings["docker exec sh"] = f"exit {done.returncode} (expected 127): {output}"
    return None


# What the docker CLI prints when it did not get to run anything in the container: the
# daemon's refusals ("Error response from daemon: No such container: x", "... container x
# is not running") and failures to reach the daemon ("Cannot connect to the Docker daemon
# at ...", "permission denied while trying to connect to the Docker daemon socket ...").
# Exit codes 126 and 127 are docker exec's own for a command it could not start.
_DOCKER_UNREACHED = (
    "No such container",
    "is not running",
    "Cannot connect to the Docker daemon",
    "while trying to connect to the Docker daemon",
    "Is the docker daemon running",
)


def docker_unmeasured(returncode: int, output: str) -> bool:
    """Whether ``docker exec`` failed before running anything in the container (the
    container or the daemon could not be reached), so its exit code says nothing of the
    node."""
    return returncode not in (0, 126, 127) and any(mark in output for mark in _DOCKER_UNREACHED)
