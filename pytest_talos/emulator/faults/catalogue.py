"""The fault profiles: for each, what it breaks, which nodes and which seams it changes.

Each profile is a defect a conformance check must catch. Profiles are independent of each
other, so any combination can be active at once:
``EmulatedCluster(faults=[Fault.SSH_OPEN, "kubelet-crashloop"])``. A profile declares what
it changes: data a seam adds (``rootfs_executables``, ``listeners``, ``hidden_ports``,
``writable_mounts``, ``host_processes``, ``pid1``, ``reader_grants``), which the seam applies
for all the node's active profiles without naming one; timed transitions of its services
(``stages``, :mod:`.stages`), which one engine applies on the emulated clock; and behaviour
switches (``quirks``, :class:`Quirk`) a seam's pipeline asks about with
``node.quirk(Quirk.<NAME>)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_talos.emulator.faults.names import (
    ApplyQuirk,
    AuthenticationQuirk,
    AuthorizationQuirk,
    CosiQuirk,
    DiscoveryQuirk,
    Fault,
    GeneratedConfigQuirk,
    KubeQuirk,
    MachineApiQuirk,
    Quirk,
    Scope,
    Seam,
    ServiceQuirk,
)
from pytest_talos.emulator.faults.stages import Act, Stage

__all__ = [
    "EXTRA_PORT",
    "FAULTS",
    "PROFILES",
    "SSH_PORT",
    "AddedListener",
    "FaultProfile",
    "HostProcess",
]

# The ports the listener faults open (a healthy Talos node opens neither); the emulator's
# listeners answer on them with an SSH banner and an HTTP reply.
SSH_PORT = 22
EXTRA_PORT = 8080
HOST_BESIDE_CNI_PORT = 4245  # fault host-listener-beside-cni: a host process's TCP port
STRAY_WIREGUARD_PORT = 47305  # fault stray-wireguard-socket: a port no link is bound to

# The timed faults' figures (their stages below).
FAULT_AFTER_BOOT = 2.0  # emulated seconds after boot a "little after boot" defect shows
FLAP_PERIOD = 30.0  # flapping-service: containerd is killed every FLAP_PERIOD s
# health-flap-running: cri's health check fails for HEALTH_FLAP_DOWN s every
# HEALTH_FLAP_PERIOD s (the error is what a dial of its socket says when it does not answer)
HEALTH_FLAP_PERIOD = 20.0
HEALTH_FLAP_DOWN = 5.0
CRI_UNHEALTHY = "rpc error: code = DeadlineExceeded desc = context deadline exceeded"
# machined-unhealthy: what the dial of the machine socket says when machined's listen backlog
# is full (INFERRED cause; the check is services/machined.go HealthFunc)
MACHINED_UNHEALTHY = (
    "dial unix /system/run/machined/machine.sock: connect: resource temporarily unavailable"
)


@dataclass(frozen=True)
class HostProcess:
    """A process a fault runs on the host: a child of PID 1, or the PID 1 itself."""

    argv0: str  # the exec path, the command line's first word
    executable: str  # what /proc/<pid>/exe resolves to
    args: tuple[str, ...] = ()
    threads: int = 1
    comm: str = ""  # set when the program renames itself (else argv0's file name)


@dataclass(frozen=True)
class AddedListener:
    """A host socket a fault adds (the fields of :class:`..sockets.Listener`)."""

    port: int
    process: str
    bind: str
    udp: bool = False
    rejected: bool = False  # in Netstat, refused to every connection (as behind a firewall)


@dataclass(frozen=True)
class FaultProfile:
    """One fault: its name, what it breaks, the seams it changes and the nodes it touches."""

    fault: Fault
    description: str
    changes: tuple[Seam, ...]
    scope: Scope = "all"
    # Data the seams add for the fault (applied generically; the seam never names a fault).
    rootfs_executables: tuple[str, ...] = ()  # Seam.ROOTFS: executables dropped on the root
    listeners: tuple[AddedListener, ...] = ()  # Seam.LISTENERS: host sockets added
    hidden_ports: tuple[int, ...] = ()  # Seam.LISTENERS: open, but left out of Netstat
    # Seam.MOUNTS: "/" read-write, "/usr" overlaid rw, a read-only /etc bind made writable
    writable_mounts: tuple[str, ...] = ()
    host_processes: tuple[HostProcess, ...] = ()  # Seam.PROCESSES: children of PID 1 added
    pid1: HostProcess | None = None  # Seam.PROCESSES: what runs as PID 1 instead of machined
    # Behaviour switches the seams' pipelines ask about (node.quirk(Quirk.X)).
    quirks: tuple[Quirk, ...] = ()
    # Seam.AUTHORIZATION: machine API methods (gRPC paths) os:reader may call as well
    reader_grants: tuple[str, ...] = ()
    # Seam.SERVICES: timed transitions of the node's services from each boot (stages.py)
    stages: tuple[Stage, ...] = ()

    @property
    def name(self) -> str:
        return str(self.fault)


PROFILES: tuple[FaultProfile, ...] = (
    FaultProfile(
        Fault.SSH_OPEN,
        "every node runs sshd and answers on TCP port 22",
        changes=(
            Seam.ROOTFS,
            Seam.PROCESSES,
            Seam.LISTENERS,
        ),
        rootfs_executables=("/usr/bin/sshd",),
        listeners=(AddedListener(SSH_PORT, "sshd", "0.0.0.0"),),
        # /usr/sbin/sshd is /usr/bin/sshd in the usr-merged root
        host_processes=(HostProcess("/usr/sbin/sshd", "/usr/bin/sshd", ("-D",)),),
    ),
    FaultProfile(
        Fault.SHELL_PRESENT,
        "/usr/bin/sh, bash and busybox exist in every node's root (/bin/sh: /bin is usr/bin)",
        changes=(Seam.ROOTFS,),
        # the usr-merged root puts /bin/sh in /usr/bin
        rootfs_executables=("/usr/bin/sh", "/usr/bin/bash", "/usr/bin/busybox"),
    ),
    FaultProfile(
        Fault.HOST_SHELL_PROCESS,
        "a sh process runs on every node's host (a child of PID 1, not under a pod's shim)",
        changes=(Seam.PROCESSES,),
        host_processes=(HostProcess("sh", "/tmp/busybox"),),  # from a dropped binary
    ),
    FaultProfile(
        Fault.PACKAGE_MANAGER_PRESENT,
        "/usr/bin/apk (also seen as /sbin/apk) exists in every node's root filesystem",
        changes=(Seam.ROOTFS,),
        rootfs_executables=("/usr/bin/apk",),
    ),
    FaultProfile(
        Fault.EXTRA_PORT,
        "every node also listens on TCP port 8080, which Talos never opens",
        changes=(Seam.LISTENERS,),
        listeners=(AddedListener(EXTRA_PORT, "python3", "0.0.0.0"),),
    ),
    FaultProfile(
        Fault.LENIENT_VALIDATION,
        "ApplyConfiguration skips validation: bad label names, unknown keys, bad types pass",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.VALIDATION_ACCEPTS_PARSEABLE,),
    ),
    FaultProfile(
        Fault.VERSION_BUMP_ON_REJECT,
        "a rejected ApplyConfiguration still bumps the MachineConfig resource version",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.REJECT_BUMPS_VERSION,),
    ),
    FaultProfile(
        Fault.KUBELET_CRASHLOOP,
        "kubelet exits right after every start whatever the machine config; the restart "
        "runner shows it Waiting and runs it again every 5 s, so the boot never ends",
        changes=(Seam.SERVICES,),
        quirks=(ServiceQuirk.KUBELET_EXITS_AFTER_START,),
    ),
    FaultProfile(
        Fault.FLAPPING_SERVICE,
        "containerd is healthy most of the time but is killed every 30 s; the restart runner "
        "shows it Waiting and runs it again 5 s later",
        changes=(Seam.SERVICES,),
        # the restart runner brings it back 5 s later (runner/restart/restart.go)
        stages=(Stage("containerd", Act.KILL, FLAP_PERIOD, "signal: killed", then=0),),
    ),
    FaultProfile(
        Fault.TRY_NO_REVERT,
        "try-mode changes are never reverted when the timer fires",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.TRY_TIMER_SKIPS_REVERT,),
    ),
    FaultProfile(
        Fault.TRY_NOT_CANCELLED,
        "a non-try ApplyConfiguration leaves a pending try revert armed",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.APPLY_KEEPS_PENDING_TRY,),
    ),
    FaultProfile(
        Fault.DRY_RUN_APPLIES,
        "a dry-run ApplyConfiguration applies the config as well",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.DRY_RUN_EXECUTES,),
    ),
    FaultProfile(
        Fault.NO_KUBECONFIG,
        "Kubeconfig returns an archive without the kubeconfig file in it",
        changes=(Seam.MACHINE_API,),
        quirks=(MachineApiQuirk.KUBECONFIG_WITHHELD,),
    ),
    FaultProfile(
        Fault.NODE_NOT_READY,
        "the last node's Kubernetes Node object reports Ready=False",
        changes=(Seam.KUBERNETES,),
        scope="last-node",
        quirks=(KubeQuirk.KUBE_READY_FALSE,),
    ),
    FaultProfile(
        Fault.WRONG_VERSION,
        "the last node's Version API reports v1.12.6 (its Versions resource does not)",
        changes=(Seam.MACHINE_API,),
        scope="last-node",
        quirks=(MachineApiQuirk.VERSION_TAG_WRONG,),
    ),
    FaultProfile(
        Fault.LABELS_NOT_SYNCED,
        "machine.nodeLabels never reach the Kubernetes Node objects",
        changes=(Seam.KUBERNETES,),
        quirks=(KubeQuirk.KUBE_LABELS_NEVER_SYNC,),
    ),
    FaultProfile(
        Fault.MEMBER_HIDDEN,
        "the last node's discovery (Members resources) does not list the first node",
        changes=(Seam.DISCOVERY,),
        scope="last-node",
        quirks=(DiscoveryQuirk.DISCOVERY_MISSES_FIRST_NODE,),
    ),
    FaultProfile(
        Fault.MAINTENANCE_VERSION,
        "the last node's Version answers without features (rbac), as in maintenance mode",
        changes=(Seam.MACHINE_API,),
        scope="last-node",
        quirks=(MachineApiQuirk.VERSION_OMITS_FEATURES,),
    ),
    FaultProfile(
        Fault.NO_MTLS,
        "apid accepts clients without a certificate and gives them os:admin",
        changes=(Seam.AUTHENTICATION,),
        quirks=(AuthenticationQuirk.APID_CLIENT_CERT_OPTIONAL,),
    ),
    FaultProfile(
        Fault.CLIENT_CERTS_UNVERIFIED,
        "apid never asks for a client certificate, so any CA's (or none) is accepted as os:admin",
        changes=(Seam.AUTHENTICATION,),
        quirks=(AuthenticationQuirk.APID_SKIPS_CLIENT_CERT_VERIFY,),
    ),
    FaultProfile(
        Fault.RW_ROOTFS,
        "the root filesystem is mounted read-write (/proc/mounts)",
        changes=(Seam.MOUNTS,),
        writable_mounts=("/",),
    ),
    FaultProfile(
        Fault.SHELL_IN_LIBEXEC,
        "a dash shell sits in every node's /usr/libexec",
        changes=(Seam.ROOTFS,),
        rootfs_executables=("/usr/libexec/dash",),
    ),
    FaultProfile(
        Fault.SHELL_ALIAS,
        "busybox under its static-build name, /usr/bin/busybox.static, on every node",
        changes=(Seam.ROOTFS,),
        rootfs_executables=("/usr/bin/busybox.static",),
    ),
    FaultProfile(
        Fault.PACKAGE_MANAGER_IN_OPT,
        "dpkg in /opt/foo/bin (an add-on tree under /opt) on every node",
        changes=(Seam.ROOTFS,),
        rootfs_executables=("/opt/foo/bin/dpkg",),
    ),
    FaultProfile(
        Fault.WEB_TERMINAL_RUNNING,
        "a ttyd web terminal runs on every node's host (dropped on /var, on a unix socket)",
        changes=(Seam.PROCESSES,),
        host_processes=(
            HostProcess(
                "/var/lib/ttyd/ttyd",
                "/var/lib/ttyd/ttyd",
                ("--interface", "/run/ttyd.sock", "--writable", "/var/lib/ttyd/login"),
            ),
        ),
    ),
    FaultProfile(
        Fault.USR_WRITABLE,
        "a writable overlay is mounted over /usr (upper dir on /var) on every node",
        changes=(Seam.MOUNTS,),
        writable_mounts=("/usr",),
    ),
    FaultProfile(
        Fault.RESOLV_CONF_WRITABLE_ON_METAL,
        "/etc/resolv.conf is bound writable on metal, where machined binds it read-only "
        "(in containers Docker's bind is writable anyway)",
        changes=(Seam.MOUNTS,),
        writable_mounts=("/etc/resolv.conf",),
    ),
    FaultProfile(
        Fault.NODE_MEMORY_PRESSURE,
        "the last node's kubelet reports MemoryPressure=True (Ready stays True)",
        changes=(Seam.KUBERNETES,),
        scope="last-node",
        quirks=(KubeQuirk.KUBE_MEMORY_PRESSURE,),  # kubelet reports MemoryPressure=True
    ),
    FaultProfile(
        Fault.NODE_CORDONED,
        "the last node is cordoned: spec.unschedulable, Ready stays True",
        changes=(Seam.KUBERNETES,),
        scope="last-node",
        quirks=(KubeQuirk.KUBE_UNSCHEDULABLE,),
    ),
    FaultProfile(
        Fault.READY_FLAPPING,
        "the last node's Ready turns False for 2 s of every 8 s (node time)",
        changes=(Seam.KUBERNETES,),
        scope="last-node",
        quirks=(KubeQuirk.KUBE_READY_FLAPS,),
    ),
    FaultProfile(
        Fault.PID1_NOT_MACHINED,
        "PID 1 is systemd installed as /sbin/init (executable /usr/lib/systemd/systemd)",
        changes=(Seam.PROCESSES,),
        # /sbin/init -> ../lib/systemd/systemd
        pid1=HostProcess("/sbin/init", "/usr/lib/systemd/systemd", comm="systemd"),
    ),
    FaultProfile(
        Fault.PID1_SYSTEMD_AS_INIT,
        "PID 1 is systemd copied to /sbin/init (executable /sbin/init, command systemd)",
        changes=(Seam.PROCESSES,),
        # systemd copied to /sbin/init
        pid1=HostProcess("/sbin/init", "/sbin/init", comm="systemd"),
    ),
    FaultProfile(
        Fault.SERVICE_DOWN,
        "trustd stops 2 s after boot (Finished) and nothing starts it again",
        changes=(Seam.SERVICES,),
        # trustd stops a little after boot and nothing starts it again
        stages=(Stage("trustd", Act.STOP, FAULT_AFTER_BOOT, with_run=True),),
        scope="controlplanes",
    ),
    FaultProfile(
        Fault.MACHINED_UNHEALTHY,
        "2 s after boot machined's health check (a dial of its socket) starts failing on "
        "every node; machined keeps running",
        changes=(Seam.SERVICES,),
        # services/machined.go HealthFunc dials the socket; it keeps running
        stages=(
            Stage("machined", Act.HEALTH_FAIL, FAULT_AFTER_BOOT, MACHINED_UNHEALTHY, with_run=True),
        ),
    ),
    FaultProfile(
        Fault.ETCD_MEMBER_MISSING,
        "the etcd member list on control planes lacks the last control plane",
        changes=(Seam.DISCOVERY,),
        scope="controlplanes",
        quirks=(DiscoveryQuirk.ETCD_MEMBERS_LACK_LAST_CONTROLPLANE,),
    ),
    FaultProfile(
        Fault.CIDR_OVERLAP,
        "the pod subnet overlaps the node addresses (127.0.0.0/8 pod CIDR)",
        changes=(Seam.GENERATED_CONFIG,),
        quirks=(GeneratedConfigQuirk.POD_CIDR_OVERLAPS_NODES,),
    ),
    FaultProfile(
        Fault.CONFIG_DRIFT,
        "the last node's machine config differs from its desired state in one path "
        "(machine.sysctls, changed outside git)",
        changes=(Seam.GENERATED_CONFIG,),
        scope="last-node",
        quirks=(GeneratedConfigQuirk.CONFIG_DRIFTS_FROM_DESIRED,),
    ),
    FaultProfile(
        Fault.CONFIG_STAGED,
        "the last node has a change staged for its next reboot (persistent config differs "
        "from the active one)",
        changes=(Seam.GENERATED_CONFIG,),
        scope="last-node",
        quirks=(GeneratedConfigQuirk.CONFIG_CHANGE_STAGED_AT_START,),
    ),
    FaultProfile(
        Fault.CLIENT_CERT_EXPIRING,
        "the talosconfig's os:admin client certificate expires in 3 days",
        changes=(Seam.CERTIFICATES,),
        quirks=(GeneratedConfigQuirk.ADMIN_CERT_EXPIRES_SOON,),
    ),
    FaultProfile(
        Fault.APID_CERT_MISSING_SAN,
        "the last node's apid certificate lacks its hostname among the SANs",
        changes=(Seam.CERTIFICATES,),
        scope="last-node",
        quirks=(AuthenticationQuirk.APID_CERT_LACKS_HOSTNAME_SAN,),
    ),
    FaultProfile(
        Fault.KUBE_CERT_EXPIRED,
        "kube-apiserver's serving certificate on the control planes expired a day ago",
        changes=(Seam.CERTIFICATES,),
        scope="controlplanes",
        quirks=(GeneratedConfigQuirk.KUBE_APISERVER_CERT_EXPIRED,),
    ),
    FaultProfile(
        Fault.RESOURCES_UNLISTABLE,
        "COSI List of HostnameStatuses fails with an Internal error",
        changes=(Seam.COSI,),
        quirks=(CosiQuirk.COSI_HOSTNAME_STATUS_UNLISTABLE,),
    ),
    FaultProfile(
        Fault.LOGS_BROKEN,
        "Logs of the listed, running containerd service fails: log not registered",
        changes=(Seam.SERVICES,),
        quirks=(ServiceQuirk.CONTAINERD_LOG_UNREGISTERED,),
    ),
    FaultProfile(
        Fault.COSI_WRITABLE,
        "COSI Create/Update/Destroy are accepted instead of refused",
        changes=(Seam.COSI,),
        quirks=(CosiQuirk.COSI_ACCEPTS_WRITES,),
    ),
    FaultProfile(
        Fault.READER_CAN_APPLY,
        "ApplyConfiguration accepts os:reader clients",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.APPLY_SKIPS_ROLE_CHECK,),
    ),
    FaultProfile(
        Fault.READER_READS_SECRETS,
        "os:reader clients may Get/List sensitive resources (MachineConfig)",
        changes=(Seam.AUTHORIZATION,),
        quirks=(CosiQuirk.COSI_SHOWS_SENSITIVE_TO_READERS,),
    ),
    FaultProfile(
        Fault.EVENTS_NO_HELLO,
        "the Events stream does not send the empty hello event first",
        changes=(Seam.MACHINE_API,),
        quirks=(MachineApiQuirk.EVENTS_SKIP_HELLO,),
    ),
    FaultProfile(
        Fault.SERVICES_RESOURCE_STALE,
        "Services resources stay behind when a service stops (COSI disagrees with ServiceList)",
        changes=(Seam.SERVICES,),
        quirks=(ServiceQuirk.SERVICE_RESOURCE_OUTLIVES_STOP,),
    ),
    FaultProfile(
        Fault.READER_WATCHES_SECRETS,
        "os:reader clients may Watch sensitive resources (MachineConfig); Get and List are refused",
        changes=(Seam.AUTHORIZATION,),
        quirks=(CosiQuirk.COSI_WATCH_SHOWS_SENSITIVE_TO_READERS,),
    ),
    FaultProfile(
        Fault.READER_GETS_KUBECONFIG,
        "the Kubeconfig RPC answers os:reader clients",
        changes=(Seam.AUTHORIZATION,),
        reader_grants=("/machine.MachineService/Kubeconfig",),
    ),
    FaultProfile(
        Fault.READER_MINTS_ADMIN,
        "GenerateClientConfiguration answers os:reader clients with the roles they ask for",
        changes=(Seam.AUTHORIZATION,),
        reader_grants=("/machine.MachineService/GenerateClientConfiguration",),
    ),
    FaultProfile(
        Fault.READER_APPLIES_FOR_REAL,
        "ApplyConfiguration refuses an os:reader dry run but carries out its real apply",
        changes=(Seam.AUTHORIZATION,),
        quirks=(AuthorizationQuirk.READER_REAL_APPLY_RUNS_AS_ADMIN,),
    ),
    FaultProfile(
        Fault.EXPIRED_CERTS_ACCEPTED,
        "apid accepts client certificates outside their validity",
        changes=(Seam.AUTHENTICATION,),
        quirks=(AuthenticationQuirk.APID_IGNORES_CERT_VALIDITY,),
    ),
    FaultProfile(
        Fault.ANY_EKU_ACCEPTED,
        "apid skips its ExtKeyUsage rule: a Talos-CA certificate without ClientAuth usage passes",
        changes=(Seam.AUTHENTICATION,),
        quirks=(AuthenticationQuirk.APID_SKIPS_EKU_RULE,),
    ),
    FaultProfile(
        Fault.KUBE_CA_TRUSTED,
        "apid also trusts the cluster's Kubernetes CA (cluster.ca) for client certificates",
        changes=(Seam.AUTHENTICATION,),
        quirks=(AuthenticationQuirk.APID_TRUSTS_KUBERNETES_CA,),
    ),
    FaultProfile(
        Fault.COSI_CREATE_LIES,
        "COSI Create replies PermissionDenied but stores the resource all the same",
        changes=(Seam.COSI,),
        quirks=(CosiQuirk.COSI_CREATE_WRITES_THEN_DENIES,),
    ),
    FaultProfile(
        Fault.COSI_WRITE_ACCEPTED_AFTER_DECODING,
        "COSI refuses a Create or Update only when its spec is empty: a well-formed resource "
        "is decoded and written (Destroy stays refused)",
        changes=(Seam.COSI,),
        quirks=(CosiQuirk.COSI_REFUSES_ONLY_EMPTY_WRITES,),
    ),
    FaultProfile(
        Fault.LATE_APPLY_ON_REJECT,
        "ApplyConfiguration refuses a config that fails validation, then applies it "
        "(no-reboot) 2 s later anyway",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.REJECTED_APPLY_LANDS_LATE,),
    ),
    FaultProfile(
        Fault.DRY_RUN_APPLIES_LATE,
        "a dry-run ApplyConfiguration changes nothing at once, but applies the config 2 s later",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.DRY_RUN_EXECUTES_LATE,),
    ),
    FaultProfile(
        Fault.TRY_REVERT_KEEPS_LABEL,
        "a try-mode revert restores the config, but the Kubernetes Node keeps the labels the "
        "tried config added",
        changes=(
            Seam.APPLY,
            Seam.KUBERNETES,
        ),
        quirks=(ApplyQuirk.TRY_REVERT_KEEPS_NODE_LABELS,),
    ),
    FaultProfile(
        Fault.NO_REBOOT_ACCEPTS_REBOOT_FIELDS,
        "no-reboot and try applies accept machine.env and machine.files changes, which need a"
        " reboot",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.IMMEDIATE_ALLOWS_ENV_AND_FILES,),
    ),
    FaultProfile(
        Fault.HIDDEN_LISTENER,
        "every node's Netstat leaves out the socket on TCP 10250, which still answers on the "
        "node address (a listener hidden from the node's own account)",
        changes=(Seam.LISTENERS,),
        hidden_ports=(10250,),
    ),
    FaultProfile(
        Fault.UDP_LISTENER,
        "every node runs a TFTP server bound to UDP 0.0.0.0:69, which Talos never opens",
        changes=(Seam.LISTENERS,),
        # a TFTP server on every address: Talos runs none
        listeners=(AddedListener(69, "in.tftpd", "0.0.0.0", udp=True),),
    ),
    FaultProfile(
        Fault.STRAY_WIREGUARD_SOCKET,
        "every node has a kernel UDP socket on 0.0.0.0:47305, shaped like a WireGuard "
        "device's (no process, a random high port), that no link in LinkStatuses owns",
        changes=(Seam.LISTENERS,),
        # a WireGuard device Talos does not know (made outside its controllers): the kernel
        # socket looks like SideroLink's, but no LinkStatus of kind wireguard has its port
        listeners=(AddedListener(STRAY_WIREGUARD_PORT, "", "0.0.0.0", udp=True),),
    ),
    FaultProfile(
        Fault.HOST_LISTENER_BESIDE_CNI,
        "every node runs a cilium-agent binary on the host (a child of PID 1, under no pod's "
        "shim) listening on TCP 4245, next to the CNI pod's 4240 and 4244",
        changes=(Seam.PROCESSES, Seam.LISTENERS),
        # named like the CNI's agent: only its parent chain says it is not a pod's
        host_processes=(
            HostProcess(
                "/usr/local/bin/cilium-agent",
                "/usr/local/bin/cilium-agent",
                ("--hubble-listen-address=:4245",),
                threads=12,
            ),
        ),
        listeners=(AddedListener(HOST_BESIDE_CNI_PORT, "cilium-agent", "::"),),
    ),
    FaultProfile(
        Fault.NETSTAT_GHOST,
        "every node's Netstat shows node_exporter listening on TCP :::9100, a port Talos "
        "never opens; connections to it are refused (a firewall hides it from the scan)",
        changes=(Seam.LISTENERS,),
        # node_exporter's usual port, listening on every address behind a rejecting firewall
        listeners=(AddedListener(9100, "node_exporter", "::", rejected=True),),
    ),
    FaultProfile(
        Fault.HEALTH_FLAP_RUNNING,
        "from 2 s after boot cri's health check fails for 5 s every 20 s; cri never leaves "
        "Running (only its health flaps)",
        changes=(Seam.SERVICES,),
        # cri keeps running; system/health/check.go reports each change of its health and
        # service_runner.go healthUpdate records it as a Running event
        stages=(
            Stage("cri", Act.HEALTH_FAIL, FAULT_AFTER_BOOT, CRI_UNHEALTHY, then=1),
            Stage("cri", Act.HEALTH_PASS, HEALTH_FLAP_DOWN, then=2),
            Stage(
                "cri", Act.HEALTH_FAIL, HEALTH_FLAP_PERIOD - HEALTH_FLAP_DOWN, CRI_UNHEALTHY, then=1
            ),
        ),
    ),
    FaultProfile(
        Fault.EMPTY_LOGS,
        "the log of the running apid service reads back empty (nothing written)",
        changes=(Seam.SERVICES,),
        quirks=(ServiceQuirk.APID_LOG_EMPTY,),
    ),
    FaultProfile(
        Fault.EVENTS_IGNORE_TAIL_SECONDS,
        "the Events stream ignores tail_seconds: it sends no history, only new events",
        changes=(Seam.MACHINE_API,),
        quirks=(MachineApiQuirk.EVENTS_TAIL_SECONDS_DROPS_HISTORY,),
    ),
    FaultProfile(
        Fault.SERVICE_STUCK_PREPARING,
        "2 s after boot trustd is restarted and never gets past its pre-start step (Preparing"
        " forever)",
        changes=(Seam.SERVICES,),
        stages=(Stage("trustd", Act.STICK, FAULT_AFTER_BOOT, with_run=True),),
        scope="controlplanes",
    ),
    FaultProfile(
        Fault.REFUSED_CONFIG_STAGED,
        "a refused or dry-run ApplyConfiguration leaves the active config alone but writes the "
        "config for the next boot (persistent) all the same",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.REFUSED_APPLY_PERSISTS,),
    ),
    FaultProfile(
        Fault.TRY_REVERTS_EARLY,
        "the try-mode rollback timer fires at half the timeout the apply asked for",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.TRY_TIMER_FIRES_EARLY,),
    ),
    FaultProfile(
        Fault.TRY_PERSISTS_CONFIG,
        "a try-mode apply also writes the tried config for the next boot (persistent); the "
        "revert restores only the active config",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.TRY_WRITES_PERSISTENT,),
    ),
    FaultProfile(
        Fault.STAGED_SKIPS_VALIDATION,
        "a staged ApplyConfiguration skips validation: an invalid config that parses is "
        "staged for the next boot",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.STAGED_SKIPS_VALIDATION,),
    ),
    FaultProfile(
        Fault.TRY_ACCEPTS_REBOOT_FIELDS,
        "a try-mode apply skips the immediate-apply check: machine.env and machine.files "
        "changes pass (no-reboot still refuses them)",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.TRY_SKIPS_IMMEDIATE_CHECK,),
    ),
    FaultProfile(
        Fault.STAGED_DRY_RUN_APPLIES,
        "a dry-run ApplyConfiguration in staged mode stages the config for the next boot "
        "(dry runs of the other modes change nothing)",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.STAGED_DRY_RUN_PERSISTS,),
    ),
    FaultProfile(
        Fault.NO_REBOOT_NOT_PERSISTED,
        "a no-reboot apply changes only the active config: the persistent one, the next "
        "boot's, keeps the old config",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.NO_REBOOT_SKIPS_PERSISTENT,),
    ),
    FaultProfile(
        Fault.APPLY_DURING_TRY_DROPPED,
        "a regular apply during a try window cancels the revert but is not applied (the "
        "reply says it was)",
        changes=(Seam.APPLY,),
        quirks=(ApplyQuirk.APPLY_DURING_TRY_DROPPED,),
    ),
    FaultProfile(
        Fault.READER_READS_FILES,
        "the Read RPC (os:admin only) answers os:reader clients: any file, the machine config "
        "with its CA keys included",
        changes=(Seam.AUTHORIZATION,),
        reader_grants=("/machine.MachineService/Read",),
    ),
    FaultProfile(
        Fault.READER_RESTARTS_SERVICES,
        "ServiceRestart (os:admin, os:operator) answers os:reader clients",
        changes=(Seam.AUTHORIZATION,),
        reader_grants=("/machine.MachineService/ServiceRestart",),
    ),
    FaultProfile(
        Fault.READER_WIPES_DISKS,
        "BlockDeviceWipe skips its handler's os:admin check on a configured node: os:reader "
        "clients may wipe disks (its rule admits them for maintenance only)",
        changes=(Seam.AUTHORIZATION,),
        quirks=(AuthorizationQuirk.BLOCK_WIPE_SKIPS_ROLE_CHECK,),
    ),
    FaultProfile(
        Fault.UNLISTED_SECRETS_SERVED,
        "the COSI API serves OSRootSecrets (the OS CA key) to every role although the node's "
        "ResourceDefinitions do not list the type",
        changes=(Seam.COSI, Seam.AUTHORIZATION),
        quirks=(CosiQuirk.COSI_SERVES_UNLISTED_SECRETS,),
    ),
    FaultProfile(
        Fault.EKU_RULE_ONLY_REFUSES_SERVER_AUTH,
        "apid's ExtKeyUsage rule refuses only a certificate without the extension or with "
        "ServerAuth: [ClientAuth, CodeSigning] passes",
        changes=(Seam.AUTHENTICATION,),
        quirks=(AuthenticationQuirk.APID_EKU_RULE_ONLY_REFUSES_SERVER_AUTH,),
    ),
    FaultProfile(
        Fault.NOT_YET_VALID_CERTS_ACCEPTED,
        "apid checks only a client certificate's NotAfter: one whose NotBefore lies ahead passes",
        changes=(Seam.AUTHENTICATION,),
        quirks=(AuthenticationQuirk.APID_IGNORES_NOT_BEFORE,),
    ),
    FaultProfile(
        Fault.NODE_UNINITIALIZED,
        "the last node's Node keeps node.cloudprovider.kubernetes.io/uninitialized:NoSchedule "
        "(kubelet with an external cloud provider, no cloud controller manager); Ready and "
        "every condition stay clean",
        changes=(Seam.KUBERNETES,),
        scope="last-node",
        quirks=(KubeQuirk.KUBE_CLOUD_TAINT_STAYS,),
    ),
    FaultProfile(
        Fault.PID1_INIT_WRAPPER,
        "PID 1 is a one-thread init wrapper (tini-like) copied to /usr/bin/init and run as "
        "/sbin/init; it starts the real machined as its child",
        changes=(Seam.PROCESSES,),
        # the wrapper reads like machined by name, path and args; machined, a Go program,
        # always runs several threads, and there is only ever one of it
        pid1=HostProcess("/sbin/init", "/usr/bin/init", threads=1),
        host_processes=(HostProcess("/sbin/init", "/usr/bin/init", threads=24),),
    ),
    FaultProfile(
        Fault.LOGIN_RUNNING,
        "a login session, /bin/login -f root, runs on every node's host (a child of PID 1)",
        changes=(Seam.PROCESSES,),
        host_processes=(HostProcess("/bin/login", "/usr/bin/login", ("-f", "root")),),
    ),
    FaultProfile(
        Fault.SHELL_IN_LIBEXEC_SUBDIR,
        "a versioned bash, /usr/libexec/toolbox/bash-5.2, sits one level down in every node's "
        "/usr/libexec",
        changes=(Seam.ROOTFS,),
        rootfs_executables=("/usr/libexec/toolbox/bash-5.2",),
    ),
)

FAULTS: Mapping[str, FaultProfile] = {profile.name: profile for profile in PROFILES}
