"""Only the ports a healthy node opens are open: by a TCP scan of each of the node's
addresses and by the node's own Netstat, which must agree
(:func:`assert_only_expected_ports`, which is :func:`observe_ports`, the I/O, then
:func:`judge_ports`, the verdict); the strict form for nodes without Kubernetes
(:func:`assert_only_api_port`); and the UDP sockets a node may bind
(:func:`expected_udp_ports_for`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_talos import models, ports
from pytest_talos.checks.listeners import (
    address_of,
    covers,
    exposed,
    is_v6,
    listener_text,
    netstat_text,
    normal_address,
    owner_text,
    same_ip,
    scan_state,
    stable_listeners,
)
from pytest_talos.checks.result import CheckResult
from pytest_talos.checks.shell import pod_sandboxes
from pytest_talos.errors import ConformanceFailure, PermissionDenied, TalosError
from pytest_talos.node import TalosNode, dig, expected_ports_for, v1alpha1_document
from pytest_talos.talos_api import APID_PORT

__all__ = [
    "CUSTOM_CNI_UDP_PORTS",
    "DHCP_CLIENT_PORTS",
    "FLANNEL_VXLAN_PORT",
    "KUBESPAN_KIND",
    "KUBESPAN_PORT",
    "PortObservation",
    "assert_only_api_port",
    "assert_only_expected_ports",
    "expected_udp_ports_for",
    "judge_ports",
    "kubespan_enabled",
    "observe_listeners",
    "observe_ports",
    "wireguard_link_ports",
]


def assert_only_expected_ports(
    node: TalosNode,
    allowed: Iterable[int] | None = None,
    *,
    port_spec: str | Iterable[int] = ports.DEFAULT_PORTS,
    timeout: float = ports.DEFAULT_TIMEOUT,
    concurrency: int = ports.DEFAULT_CONCURRENCY,
    addresses: Iterable[str] = (),
    allowed_udp: Iterable[int] | None = None,
    observation: PortObservation | None = None,
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
      :func:`expected_udp_ports_for`. The port each WireGuard link's device is bound to
      (``LinkStatuses``, :func:`wireguard_link_ports`: SideroLink's random one, a user's
      ``listenPort``) is allowed too; a UDP socket on a port no link owns is not.

    ``observation`` is one :func:`observe_ports` made earlier (a caller that observes many
    nodes at once hands each its own); the node is then not read or scanned again, and
    ``addresses``, ``port_spec``, ``timeout`` and ``concurrency`` are those it was made with.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    allow = _allowlist(node, allowed)
    udp_allow = expected_udp_ports_for(node) if allowed_udp is None else frozenset(allowed_udp)
    if observation is None:
        observation = observe_ports(
            node, addresses=addresses, port_spec=port_spec, timeout=timeout, concurrency=concurrency
        )
    elif observation.host != node.host:
        raise ValueError(
            f"the observation is of {observation.host}, not of {node.name} ({node.host}); "
            "pass the node's own observation"
        )
    return judge_ports(node, observation, allow, udp_allow, expected_ports_for(node) & allow)


@dataclass(frozen=True)
class PortObservation:
    """What :func:`judge_ports` needs of one node, read by :func:`observe_ports`: the
    node's Netstat listeners before and after the scans, each scanned address's result
    (in scan order, the node's own address first), the extra addresses skipped and why,
    and the addresses the caller named as the node's own."""

    host: str
    before: tuple[models.ConnectRecord, ...]
    after: tuple[models.ConnectRecord, ...]
    scans: tuple[tuple[str, ports.ScanResult], ...]  # (address scanned, names resolved)
    skipped: tuple[tuple[str, str], ...]  # (address, why it was not scanned)
    addresses: tuple[str, ...]
    # (link name, UDP port its WireGuard device is bound to), from LinkStatuses
    wireguard: tuple[tuple[str, int], ...] = ()
    wireguard_note: str | None = None  # why LinkStatuses could not be read
    # the process table after the scans: who owns each listener (pods or the host)
    processes: tuple[models.ProcessInfo, ...] = ()
    processes_note: str | None = None  # why Processes could not be read


def observe_ports(
    node: TalosNode,
    *,
    addresses: Iterable[str] = (),
    port_spec: str | Iterable[int] = ports.DEFAULT_PORTS,
    timeout: float = ports.DEFAULT_TIMEOUT,
    concurrency: int = ports.DEFAULT_CONCURRENCY,
) -> PortObservation:
    """The I/O of :func:`assert_only_expected_ports` for one node, and nothing else: its
    Netstat, a TCP scan of its address and of each of ``addresses`` where apid's port
    answers, and its Netstat again. Every call carries its deadline (the client's for
    Netstat, ``timeout`` per probe for the scans)."""
    own = tuple(addresses)
    before = tuple(node.listeners)
    scans: dict[str, ports.ScanResult] = {}  # by the address scanned (names resolved)
    skipped: dict[str, str] = {}
    for index, address in enumerate(_scan_targets(node, own)):
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
    after = tuple(node.listeners)
    note = None
    try:
        wireguard = wireguard_link_ports(node.resources(*LINK_STATUSES))
    except TalosError as exc:  # readable with os:reader; say so rather than guess
        wireguard, note = (), f"LinkStatuses unreadable ({exc}): no WireGuard link port allowed"
    processes_note = None
    try:
        processes = tuple(node.processes)
    except TalosError as exc:  # then every listener is judged as the host's
        processes = ()
        processes_note = f"Processes unreadable ({exc}): every listener judged as the host's"
    return PortObservation(
        node.host,
        before,
        after,
        tuple(scans.items()),
        tuple(skipped.items()),
        own,
        wireguard,
        note,
        processes,
        processes_note,
    )


def observe_listeners(
    node: TalosNode, *, addresses: Iterable[str] = (), why: str
) -> PortObservation:
    """:func:`observe_ports` without the scans, for a node this machine cannot reach
    directly (``why``: which address was tried and what happened). Netstat is read through
    the endpoint twice, as around a scan; :func:`judge_ports` then judges Netstat alone (a
    listener outside the allow-list, a UDP socket) and notes the address as not scanned."""
    before = tuple(node.listeners)
    after = tuple(node.listeners)
    return PortObservation(node.host, before, after, (), ((node.host, why),), tuple(addresses))


LINK_STATUSES = ("LinkStatuses.net.talos.dev", "network")


def wireguard_link_ports(links: Iterable[models.Resource]) -> tuple[tuple[str, int], ...]:
    """Each WireGuard link's name and the UDP port its device is bound to.

    ``LinkStatuses.net.talos.dev``: for a link of kind ``wireguard``,
    ``controllers/network/link_status.go`` reads the live device (wgctrl) and
    ``adapters/network/wireguard_spec.go`` Decode puts its ``ListenPort`` in
    ``spec.wireguard.listenPort`` — the port actually bound, also when the link was created
    without one and the kernel picked it (SideroLink: ``controllers/siderolink/manager.go``
    sets no listen port), whatever made the link (SideroLink, a ``WireguardConfig``
    document, ``machine.network.interfaces[].wireguard``, KubeSpan's ``kubespan``).
    """
    found: list[tuple[str, int]] = []
    for link in links:
        spec = link.spec if isinstance(link.spec, dict) else {}
        wireguard = spec.get("wireguard")
        if spec.get("kind") != "wireguard" or not isinstance(wireguard, dict):
            continue
        port = wireguard.get("listenPort")
        if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
            found.append((link.id, port))
    return tuple(found)


def expected_udp_ports_for(node: TalosNode) -> frozenset[int]:
    """The UDP ports a healthy node may bind on a reachable address, from its machine config.

    Every node may have a DHCP client's socket (68, DHCPv6 546). Flannel (Talos's default
    CNI) has a kernel VXLAN socket on 4789
    (``controllers/k8s/internal/k8stemplates/flannel.go``); KubeSpan's WireGuard listens on
    51820 (``pkg/machinery/constants/constants.go`` KubeSpanDefaultPort,
    ``controllers/kubespan/manager.go``) when the config enables it
    (:func:`kubespan_enabled`: a ``KubeSpanConfig`` document, else
    ``machine.network.kubespan``). With a custom CNI (``cluster.network.cni.name``
    ``custom`` or ``none``) the common overlay and WireGuard ports of Cilium and Calico are
    allowed too (4789, 8472, 6081, 51820, 51821, and Cilium's WireGuard encryption's 51871).
    Without os:admin the config cannot be read and Flannel is assumed. The conformance suite
    lets the ``pytest_talos_expected_udp_ports`` hook edit the result.
    """
    try:
        config: models.MachineConfig | None = node.machine_config
    except PermissionDenied:
        config = None
    main = v1alpha1_document(config)
    cni = dig(main, "cluster", "network", "cni", "name")
    udp = set(DHCP_CLIENT_PORTS)
    if cni in (None, "", "flannel"):
        udp.add(FLANNEL_VXLAN_PORT)
    else:
        udp |= CUSTOM_CNI_UDP_PORTS
    if kubespan_enabled(config):
        udp.add(KUBESPAN_PORT)
    return frozenset(udp)


def kubespan_enabled(config: models.MachineConfig | None) -> bool:
    """Whether the machine config enables KubeSpan. A ``KubeSpanConfig`` document (Talos
    1.13's own) wins over the v1alpha1 ``machine.network.kubespan``
    (``pkg/machinery/config/container/container.go`` NetworkKubeSpanConfig: "first check if
    we have a dedicated document"); its ``enabled`` is off when unset
    (``pkg/machinery/config/types/network/kubespan.go`` Enabled)."""
    for document in config.documents if config is not None else ():
        if isinstance(document, dict) and document.get("kind") == KUBESPAN_KIND:
            return document.get("enabled") is True
    return dig(v1alpha1_document(config), "machine", "network", "kubespan", "enabled") is True


FLANNEL_VXLAN_PORT = 4789
# DHCP clients: controllers/network/operator/dhcp4.go renews over a unicast UDP socket on
# port 68, dhcp6.go's nclient6 binds 546; a DHCP-configured (metal) node may show either.
DHCP_CLIENT_PORTS = frozenset({68, 546})
KUBESPAN_PORT = 51820
KUBESPAN_KIND = "KubeSpanConfig"  # pkg/machinery/config/types/network/kubespan.go
# VXLAN 4789 and 8472 (Cilium, Calico), Geneve 6081 (Cilium), WireGuard 51820 and 51821
# (Calico), 51871 (Cilium's transparent encryption: Documentation/security/network/
# encryption-wireguard.rst in cilium/cilium, "exposed on UDP port 51871 on each node")
CUSTOM_CNI_UDP_PORTS = frozenset({4789, 8472, 6081, 51820, 51821, 51871})


def _scan_targets(node: TalosNode, addresses: Iterable[str]) -> list[str]:
    targets = [node.host]
    for text in addresses:
        address = address_of(text)
        if address and not any(same_ip(address, known) for known in targets):
            targets.append(address)
    return targets


def _baseline_for(node: TalosNode, address: str) -> str | None:
    baseline = node.scan_baseline
    if baseline is None or is_v6(address_of(baseline)) != is_v6(address):
        return None
    return baseline


def judge_ports(
    node: TalosNode,
    observation: PortObservation,
    allow: frozenset[int],
    udp_allow: frozenset[int],
    talos_ports: frozenset[int],
) -> CheckResult:
    """The verdict of :func:`assert_only_expected_ports` on an observation, with no I/O:
    the CheckResult, or :class:`ConformanceFailure`. ``allow`` and ``udp_allow`` are the
    TCP and UDP allow-lists, ``talos_ports`` the allowed ports Talos itself opens (those
    must show in Netstat); ``node`` gives its name only."""
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = "immutability.only-expected-ports"
    before, after = list(observation.before), list(observation.after)
    scans = dict(observation.scans)
    skipped = dict(observation.skipped)
    addresses = observation.addresses
    stable = stable_listeners(before, after)
    tcp_either = [r for r in [*before, *after] if r.l4proto.startswith("tcp") and not r.netns]
    own = {normal_address(address_of(text)) for text in addresses}
    links_udp = {port for _, port in observation.wireguard}  # each WireGuard link's own
    pods = pod_sandboxes(observation.processes)
    pod_ports = _pod_only_ports(tcp_either, pods)

    found = {port for scan in scans.values() for port in scan.open_ports}
    # a port only pods listen on is theirs to judge (pod-listeners-expected), not the host's
    unexpected = sorted(found - allow - pod_ports)
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
                r.local_port == port and (covers(r, address) or exposed(r.local_ip))
                for r in tcp_either
            ):
                hidden.append(f"{port} on {address}")
                details.append(f"{address}:{port} open, but Netstat lists no TCP listener for it")
    in_pods: list[str] = []  # evidence: listeners of host-network pods
    for record in stable:
        port = record.local_port
        if not exposed(record.local_ip):
            continue
        sandbox = pods.get(record.pid) if record.pid is not None else None
        in_pod = sandbox is not None
        if sandbox is not None:  # a pod's: not judged against the host's allowlists, listed
            in_pods.append(pod_listener_text(record, sandbox))
        if record.l4proto.startswith("udp"):
            if in_pod:
                continue
            if port not in udp_allow and port not in links_udp:
                udp.append(f"{port} on {record.local_ip or '*'}")
                details.append(f"Netstat: {owner_text(record)}")
            continue
        covered = [a for a in scans if covers(record, a)]
        if in_pod and port not in allow:
            continue  # the two accounts still must agree on the ports allowed (below)
        if port not in allow:
            if port not in unexpected:
                states = ", ".join(f"{a} {scan_state(scans[a], port)}" for a in covered)
                ghosts.append(str(port))
                details.append(f"Netstat: {owner_text(record)}; scan: {states or 'no address'}")
            continue
        for address in covered:
            # only where the node itself has the address: a NAT in front may refuse
            if address in own and scan_state(scans[address], port) == "closed":
                refused.append(f"{port} on {address}")
                details.append(f"Netstat: {owner_text(record)}; the scan of {address}: refused")

    evidence: dict[str, Any] = {
        ("scan" if index == 0 else f"scan {address}"): scan.summary()
        for index, (address, scan) in enumerate(scans.items())
    }
    if skipped:
        evidence["addresses not scanned"] = "\n".join(f"{a}: {why}" for a, why in skipped.items())
    evidence["UDP allowed off loopback"] = _ports_text(udp_allow)
    if observation.wireguard:
        evidence["WireGuard links (LinkStatuses)"] = ", ".join(
            f"{name} UDP {port}" for name, port in observation.wireguard
        )
    if observation.wireguard_note:
        evidence["WireGuard links (LinkStatuses)"] = observation.wireguard_note
    if in_pods:
        evidence["host-network pod listeners (not judged here)"] = "\n".join(dict.fromkeys(in_pods))
    if observation.processes_note:
        evidence["listener owners"] = observation.processes_note
    problems = []
    if unexpected:
        plural = "s" if len(unexpected) > 1 else ""
        problems.append(f"unexpected open TCP port{plural}: " + ", ".join(map(str, unexpected)))
        evidence["listeners (node's Netstat)"] = "\n".join(
            f"{port}: {netstat_text(port, tcp_either)}" for port in unexpected
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
                f"{_ports_text(udp_allow | links_udp)} off loopback and link-local",
                **evidence,
            },
        )
    return CheckResult(
        check,
        node.name,
        {**evidence, "open": sorted(found), "addresses": list(scans)},
        notes=[f"{a}: {why}" for a, why in skipped.items()],
    )


def _pod_only_ports(records: Iterable[models.ConnectRecord], pods: dict[int, str]) -> set[int]:
    """TCP ports whose every listener (in either Netstat read) is a pod workload's; a port
    with a host or kernel listener, or none, is not one."""
    owners: dict[int, set[bool]] = {}
    for record in records:
        owners.setdefault(record.local_port, set()).add(
            record.pid is not None and record.pid in pods
        )
    return {port for port, kinds in owners.items() if kinds == {True}}


def pod_listener_text(record: models.ConnectRecord, sandbox: str) -> str:
    """A host-network pod's listener as evidence: pod sandbox, process, port."""
    return (
        f"{record.l4proto} {record.local_ip or '*'}:{record.local_port} pod sandbox "
        f"{sandbox[:13] or '?'} process {record.process_name or '?'} (pid {record.pid})"
    )


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
            f"{port}: {listener_text(node, port, listeners)}" for port in unexpected
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
