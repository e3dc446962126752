"""Named fault profiles: each one a defect that a conformance check must catch.

A profile is only a name, a one-line description and the nodes it touches; the behaviour
lives where the emulator models the healthy behaviour, guarded by ``faults.on(name, node)``
(grep for ``fault <name>``). Profiles are independent of each other, so any combination
can be active at once: ``EmulatedCluster(faults=["ssh-open", "kubelet-crashloop"])``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pytest_talos.errors import ConfigError

__all__ = [
    "FAULTS",
    "FaultProfile",
    "FaultSet",
    "Scope",
    "describe_faults",
    "fault_names",
    "resolve_faults",
]

# Which nodes a profile affects: every node, or only the last node of the cluster (so that a
# check comparing nodes with each other has something to compare against).
Scope = Literal["all", "last-node", "controlplanes"]


@dataclass(frozen=True)
class FaultProfile:
    name: str
    description: str
    scope: Scope = "all"


_PROFILES = (
    FaultProfile("ssh-open", "every node runs sshd and answers on TCP port 22"),
    FaultProfile(
        "shell-present",
        "/usr/bin/sh, bash and busybox exist in every node's root (/bin/sh: /bin is usr/bin)",
    ),
    FaultProfile(
        "host-shell-process",
        "a sh process runs on every node's host (a child of PID 1, not under a pod's shim)",
    ),
    FaultProfile(
        "package-manager-present",
        "/usr/bin/apk (also seen as /sbin/apk) exists in every node's root filesystem",
    ),
    FaultProfile("extra-port", "every node also listens on TCP port 8080, which Talos never opens"),
    FaultProfile(
        "lenient-validation",
        "ApplyConfiguration skips validation: bad label names, unknown keys, bad types pass",
    ),
    FaultProfile(
        "version-bump-on-reject",
        "a rejected ApplyConfiguration still bumps the MachineConfig resource version",
    ),
    FaultProfile(
        "kubelet-crashloop",
        "kubelet exits right after every start whatever the machine config; the restart "
        "runner shows it Waiting and runs it again every 5 s, so the boot never ends",
    ),
    FaultProfile(
        "flapping-service",
        "containerd is healthy most of the time but is killed every 30 s; the restart runner "
        "shows it Waiting and runs it again 5 s later",
    ),
    FaultProfile("try-no-revert", "try-mode changes are never reverted when the timer fires"),
    FaultProfile(
        "try-not-cancelled", "a non-try ApplyConfiguration leaves a pending try revert armed"
    ),
    FaultProfile("dry-run-applies", "a dry-run ApplyConfiguration applies the config as well"),
    FaultProfile(
        "no-kubeconfig", "Kubeconfig returns an archive without the kubeconfig file in it"
    ),
    FaultProfile(
        "node-not-ready",
        "the last node's Kubernetes Node object reports Ready=False",
        scope="last-node",
    ),
    FaultProfile(
        "wrong-version",
        "the last node's Version API reports v1.12.6 (its Versions resource does not)",
        scope="last-node",
    ),
    FaultProfile(
        "labels-not-synced", "machine.nodeLabels never reach the Kubernetes Node objects"
    ),
    FaultProfile(
        "member-hidden",
        "the last node's discovery (Members resources) does not list the first node",
        scope="last-node",
    ),
    FaultProfile(
        "maintenance-version",
        "the last node's Version answers without features (rbac), as in maintenance mode",
        scope="last-node",
    ),
    FaultProfile("no-mtls", "apid accepts clients without a certificate and gives them os:admin"),
    FaultProfile(
        "client-certs-unverified",
        "apid never asks for a client certificate, so any CA's (or none) is accepted as os:admin",
    ),
    FaultProfile("rw-rootfs", "the root filesystem is mounted read-write (/proc/mounts)"),
    FaultProfile("shell-in-libexec", "a dash shell sits in every node's /usr/libexec"),
    FaultProfile(
        "shell-alias", "busybox under its static-build name, /usr/bin/busybox.static, on every node"
    ),
    FaultProfile(
        "package-manager-in-opt", "dpkg in /opt/foo/bin (an add-on tree under /opt) on every node"
    ),
    FaultProfile(
        "web-terminal-running",
        "a ttyd web terminal runs on every node's host (dropped on /var, on a unix socket)",
    ),
    FaultProfile(
        "usr-writable", "a writable overlay is mounted over /usr (upper dir on /var) on every node"
    ),
    FaultProfile(
        "node-memory-pressure",
        "the last node's kubelet reports MemoryPressure=True (Ready stays True)",
        scope="last-node",
    ),
    FaultProfile(
        "node-cordoned",
        "the last node is cordoned: spec.unschedulable, Ready stays True",
        scope="last-node",
    ),
    FaultProfile(
        "ready-flapping",
        "the last node's Ready turns False for 2 s of every 8 s (node time)",
        scope="last-node",
    ),
    FaultProfile(
        "pid1-not-machined",
        "PID 1 is systemd installed as /sbin/init (executable /usr/lib/systemd/systemd)",
    ),
    FaultProfile(
        "pid1-systemd-as-init",
        "PID 1 is systemd copied to /sbin/init (executable /sbin/init, command systemd)",
    ),
    FaultProfile(
        "service-down",
        "trustd stops 2 s after boot (Finished) and nothing starts it again",
        scope="controlplanes",
    ),
    FaultProfile(
        "machined-unhealthy",
        "2 s after boot machined's health check (a dial of its socket) starts failing on "
        "every node; machined keeps running",
    ),
    FaultProfile(
        "etcd-member-missing",
        "the etcd member list on control planes lacks the last control plane",
        scope="controlplanes",
    ),
    FaultProfile(
        "cidr-overlap", "the pod subnet overlaps the node addresses (127.0.0.0/8 pod CIDR)"
    ),
    FaultProfile(
        "config-drift",
        "the last node's machine config differs from its desired state in one path "
        "(machine.sysctls, changed outside git)",
        scope="last-node",
    ),
    FaultProfile(
        "config-staged",
        "the last node has a change staged for its next reboot (persistent config differs "
        "from the active one)",
        scope="last-node",
    ),
    FaultProfile(
        "client-cert-expiring", "the talosconfig's os:admin client certificate expires in 3 days"
    ),
    FaultProfile(
        "apid-cert-missing-san",
        "the last node's apid certificate lacks its hostname among the SANs",
        scope="last-node",
    ),
    FaultProfile(
        "kube-cert-expired",
        "kube-apiserver's serving certificate on the control planes expired a day ago",
        scope="controlplanes",
    ),
    FaultProfile(
        "resources-unlistable", "COSI List of HostnameStatuses fails with an Internal error"
    ),
    FaultProfile(
        "logs-broken", "Logs of the listed, running containerd service fails: log not registered"
    ),
    FaultProfile("cosi-writable", "COSI Create/Update/Destroy are accepted instead of refused"),
    FaultProfile("reader-can-apply", "ApplyConfiguration accepts os:reader clients"),
    FaultProfile(
        "reader-reads-secrets", "os:reader clients may Get/List sensitive resources (MachineConfig)"
    ),
    FaultProfile("events-no-hello", "the Events stream does not send the empty hello event first"),
    FaultProfile(
        "services-resource-stale",
        "Services resources stay behind when a service stops (COSI disagrees with ServiceList)",
    ),
    FaultProfile(
        "reader-watches-secrets",
        "os:reader clients may Watch sensitive resources (MachineConfig); Get and List are refused",
    ),
    FaultProfile("reader-gets-kubeconfig", "the Kubeconfig RPC answers os:reader clients"),
    FaultProfile(
        "reader-mints-admin",
        "GenerateClientConfiguration answers os:reader clients with the roles they ask for",
    ),
    FaultProfile(
        "reader-applies-for-real",
        "ApplyConfiguration refuses an os:reader dry run but carries out its real apply",
    ),
    FaultProfile(
        "expired-certs-accepted", "apid accepts client certificates outside their validity"
    ),
    FaultProfile(
        "any-eku-accepted",
        "apid skips its ExtKeyUsage rule: a Talos-CA certificate without ClientAuth usage passes",
    ),
    FaultProfile(
        "kube-ca-trusted",
        "apid also trusts the cluster's Kubernetes CA (cluster.ca) for client certificates",
    ),
    FaultProfile(
        "cosi-create-lies",
        "COSI Create replies PermissionDenied but stores the resource all the same",
    ),
    FaultProfile(
        "late-apply-on-reject",
        "ApplyConfiguration refuses a config that fails validation, then applies it "
        "(no-reboot) 2 s later anyway",
    ),
    FaultProfile(
        "dry-run-applies-late",
        "a dry-run ApplyConfiguration changes nothing at once, but applies the config 2 s later",
    ),
    FaultProfile(
        "try-revert-keeps-label",
        "a try-mode revert restores the config, but the Kubernetes Node keeps the labels the "
        "tried config added",
    ),
    FaultProfile(
        "no-reboot-accepts-reboot-fields",
        "no-reboot and try applies accept machine.env and machine.files changes, which need a "
        "reboot",
    ),
    FaultProfile(
        "hidden-listener",
        "every node's Netstat leaves out the socket on TCP 10250, which still answers on the "
        "node address (a listener hidden from the node's own account)",
    ),
    FaultProfile(
        "udp-listener",
        "every node runs a TFTP server bound to UDP 0.0.0.0:69, which Talos never opens",
    ),
    FaultProfile(
        "netstat-ghost",
        "every node's Netstat shows node_exporter listening on TCP :::9100, a port Talos never "
        "opens; connections to it are refused (a firewall hides it from the scan)",
    ),
    FaultProfile(
        "health-flap-running",
        "from 2 s after boot cri's health check fails for 5 s every 20 s; cri never leaves "
        "Running (only its health flaps)",
    ),
    FaultProfile(
        "empty-logs", "the log of the running apid service reads back empty (nothing written)"
    ),
    FaultProfile(
        "events-ignore-tail-seconds",
        "the Events stream ignores tail_seconds: it sends no history, only new events",
    ),
    FaultProfile(
        "service-stuck-preparing",
        "2 s after boot trustd is restarted and never gets past its pre-start step "
        "(Preparing forever)",
        scope="controlplanes",
    ),
)

FAULTS: Mapping[str, FaultProfile] = {profile.name: profile for profile in _PROFILES}


def fault_names() -> list[str]:
    return sorted(FAULTS)


def describe_faults() -> str:
    """One line per profile: ``name  description`` (what ``--list-faults`` prints)."""
    width = max(len(name) for name in FAULTS)
    return "\n".join(f"{name:<{width}}  {FAULTS[name].description}" for name in fault_names())


def resolve_faults(names: Iterable[str | FaultProfile]) -> tuple[FaultProfile, ...]:
    """Validate fault names; unknown names raise one clear :class:`ConfigError`."""
    resolved: dict[str, FaultProfile] = {}
    for item in names:
        name = item.name if isinstance(item, FaultProfile) else str(item)
        if name not in FAULTS:
            raise ConfigError(
                f"unknown fault profile {name!r}; choose from: {', '.join(fault_names())} "
                "(python -m pytest_talos.emulator --list-faults describes them)"
            )
        resolved[name] = FAULTS[name]
    return tuple(resolved.values())


@dataclass(frozen=True)
class FaultSet:
    """The active profiles of one cluster and the node layout they are scoped against."""

    profiles: tuple[FaultProfile, ...] = ()
    last_node: str = ""
    last_controlplane: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(profile.name for profile in self.profiles)

    def active(self, name: str) -> bool:
        """Whether the profile is on anywhere in the cluster."""
        return name in self.names

    def on(self, name: str, hostname: str, *, controlplane: bool = False) -> bool:
        """Whether the profile affects the node ``hostname``."""
        profile = FAULTS[name]
        if profile not in self.profiles:
            return False
        if profile.scope == "last-node":
            return hostname == self.last_node
        if profile.scope == "controlplanes":
            return controlplane
        return True
