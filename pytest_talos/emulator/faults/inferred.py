"""Where the emulator's behaviour is a guess rather than read in the Talos v1.13.9 source.

``docs/emulator.md`` prints this list (``scripts/gen_emulator_docs.py``) next to
:data:`pytest_talos.emulator.machineconfig.INFERRED` and the Kubernetes API limits. Code
marks the same places with ``INFERRED`` comments.
"""

from __future__ import annotations

__all__ = ["INFERRED"]

INFERRED: tuple[str, ...] = (
    # transport and routing
    "A client certificate whose ExtKeyUsage is not exactly `[ClientAuth]` (or that has none) "
    "passes the TLS handshake in Python's `ssl` and is then refused by closing the connection "
    "at once; Go's apid fails the handshake itself. Clients see a TLS/connection error either "
    "way. Fault `no-mtls` gives certificate-less clients `os:admin`.",
    "Per-node errors of a one-to-many call read `rpc error: code = <Go code name> desc = "
    "<message>` (grpc-go's status error text); an unreachable node reads `connection error: "
    'desc = "transport: Error while dialing: dial tcp <host>:<port>: <reason>"`. Targets '
    "outside 127.0.0.0/8 are never dialled and count as unreachable. A forwarded call whose "
    "connection breaks (the target went down) reads the same, with reason `connect: "
    "connection refused` (what the redial meets), and the channel to that node is dropped.",
    "A forward that runs out of its own time is DeadlineExceeded `context deadline "
    "exceeded`. Forwarded calls get the client's deadline plus 1 s, so the client's deadline "
    "always ends first and cancels the forwarded call with it (no status of ours); only "
    "unary forwards without a client deadline (30 s) can time out on our side.",
    "Forwarded calls carry `proxyfrom: <control-plane address>:50000`; forwarded unary calls "
    "without a client deadline get 30 s. A worker given `nodes` that all name itself serves "
    "them locally with the per-node metadata filled in.",
    "`ApplyConfiguration` is allowed to `os:reader` by the role table so that the handler's "
    "own admin check (v1alpha1_server.go ApplyConfiguration) is the one that answers (same "
    "status and text).",
    # services, logs, events
    "Service timing: a boot starts every service at once, each reaching Running and its "
    "first health result in the same instant (in the sequencer's order); later starts take "
    "0.1 s until the conditions are met and 0.3 s to Running; a kubelet with a bad flag "
    "exits 0.5 s after it starts. A start shows one `Waiting for <conditions>` event with "
    "every condition; the ones Talos adds as conditions are met one by one are not shown.",
    "Health check failures say what Go's dialers say when nothing listens (`dial tcp "
    "127.0.0.1:10248: connect: connection refused` and the like); udevd's says `file "
    '"/run/udev/control" does not exist`. PIDs count up from 1000 per node.',
    "Service logs are a few synthetic lines; a kubelet with an unknown flag logs `Error: "
    "failed to parse kubelet flag: unknown flag: --<flag>` (the first unknown flag, sorted), "
    "and that is the last log in its crash message. "
    'Logs outside namespace `system` (containers) answer NotFound `container "<id>" not '
    "found`.",
    "Fault `kubelet-crashloop` fails kubelet with a CRI error in its log; fault "
    "`flapping-service` kills containerd every 30 s; fault `service-down` stops trustd 2 s "
    "after boot; fault `machined-unhealthy` fails machined's health check 2 s after boot "
    "with `connect: resource temporarily unavailable` (a full listen backlog).",
    "The event buffer keeps the last 1000 events; two tail options at once answer "
    "InvalidArgument `only one of tail_events, tail_id, tail_seconds can be set`. A boot emits "
    "sequence/phase/task events (initialize, boot), an AddressEvent and every service's state "
    "events.",
    "A MachineStatusEvent is emitted whenever the MachineStatuses resource changes, with the "
    "same stage, ready flag and unmet conditions: on boot `booting` (not ready, all services "
    "unmet) then `running` (ready when every service runs and is not unhealthy), again on "
    "every change of readiness (e.g. a crash-looping kubelet), and `rebooting`, `upgrading`, "
    "`resetting` or `shutting down` (not ready) when a lifecycle sequence starts. Those carry "
    "the sequence's actor id; boot events carry none. Rollback's stage is `rebooting`.",
    # system data
    "Which programs of each package the image holds (a representative subset in /usr/bin), "
    "/etc/os-release keys other than `ID=talos`, the runtime directories under /system and "
    "/var, extension files beyond iscsi-tools and qemu-guest-agent, mount devices, options "
    "and sizes other than the root's type and `ro`, and the 8 GiB meminfo.",
    "Process table details: PIDs, thread counts and memory; shims' parent is PID 1 (shims "
    "daemonize); apid's and trustd's executable is their path inside their container "
    "(`/apid`); udevd's executable is `/usr/bin/udevadm` (siderolabs/pkgs links "
    "systemd-udevd to udevadm); the subset of each component's flags in its args; extension "
    "services run `/usr/local/bin/<name>`; the pod-shell variant's busybox pod.",
    "Netstat details: Go wildcard listeners (`0.0.0.0`, `:N`) appear as dual-stack "
    "`tcp6 ::`, kube-proxy's healthz included; the VXLAN socket's bind address; the CRI "
    "streaming port number; pod network namespace names (`cni-<uuid>`) and that a host "
    "socket's netns is empty.",
    "WireGuard links: a link without a listen port (SideroLink) is bound to a port from the "
    "kernel's ephemeral range picked from the node id and link name; the SideroLink node "
    "address comes from the node id (Omni's provision API is not modelled); the links' MTUs "
    "and public keys are stand-ins; their kernel UDP sockets are shown on `0.0.0.0`.",
    "Variant `cilium`: its agent pod's processes and host-network ports (4240, 4244, 9879, "
    "9890, UDP 8472) follow Cilium's own docs and chart, not the Talos source; Netstat gives a "
    "listener the PID of the process of its name in its pod (else the first of that name, "
    "else PID 1).",
    "Every file and directory of the root filesystem has the image's build time as its "
    "modification time (reproducible builds stamp one time; we picked 2026-08-20 09:30 UTC "
    "for every version), also in Copy archives; `/proc/mounts` has the boot time.",
    "Copy of a relative path answers InvalidArgument `path must be absolute`. A symlink "
    "loop in a List root stops after 40 links (the kernel answers ELOOP).",
    "Version reports the release table's short commit for the tag each entry was read at "
    "(`3ebd10a7c` for v1.13.9; a hash of the tag for any other tag) and go_version from the "
    "tag's go.mod `go` directive (`go1.26.6` on v1.13; the least toolchain, not the "
    "release images' exact one). The v1.12 and v1.14 emulators behave as v1.13.9 wherever "
    "pytest_talos/releases.py lists no difference, and "
    "every release accepts a SecurityProfileConfig document (only v1.14 registers it). On "
    "v1.14 with workload isolation, cri's parent in Processes is sandboxd.",
    # COSI
    "COSI texts: NotFound `resource <type>(<namespace>/<id>@undefined) doesn't exist`; a "
    "single-resource Watch with bootstrap/label query answers Unimplemented `bootstrap "
    "contents and label queries are not supported for single resource watch`; any bookmark "
    "is FailedPrecondition `invalid bookmark`. A DESTROYED tombstone carries only "
    "namespace/type/id. Several label queries must all match.",
    "Resource details: ResourceDefinition YAML keys (`type`, `displayType`, `aliases`, "
    "`allAliases`, `defaultNamespace`, `printColumns`, `sensitivity`), namespace "
    "descriptions, owners (`cluster.MemberController`, `runtime.MachineStatusController`), "
    "EtcdMember spec `memberID` (field 1) and Nodename spec (`nodename` 1, `hostname` 2), "
    "Version spec name `Talos`, MachineStatus unmet conditions `time`, `services` and "
    "`nodeReady` (`network` and `staticPods` are never unmet here). Namespaces registered: "
    "those of v1alpha2_state.go; types: the ones listed in docs/emulator.md.",
    "ExtensionStatuses resources (ids `0`, `1`, …) have a YAML spec `image`, `metadata` "
    "(name, version, author, description) and no proto_spec (not restated in our protos).",
    # apply and lifecycle
    "A REBOOT-mode (or AUTO-resolved REBOOT) apply on a container node restarts the node "
    "like a metal reboot (the container restarts). A lifecycle sequence (reboot, upgrade, "
    "rollback, reset, shutdown) starts 0.1 s (emulated) after the reply: the stage changes "
    "and every service but apid stops; 0.5 s later apid stops and the API goes down. A "
    "reboot keeps it down for 5 s; the node boots with fresh resources (versions start at 1 "
    "again) and a fresh event buffer. A try timeout of zero means the default 1m.",
    "Reset (both platforms) stops every service and powers the node off for good (tests may "
    "`power_on()` it); metal reset does not wipe or enter maintenance mode. Upgrade takes "
    "the version from the image tag (`…:vX.Y.Z`), played by that tag's release entry "
    "(`installer:v1.14.0` plays v1.14 as read at v1.14.0-rc.1, and its Version `sha`); "
    "Rollback swaps back to the previous version; both reboot, and the old version answers "
    "until the node is down: only the booted system reports the new one, and each boot opens "
    "the sockets of the release and config it booted. Shutdown powers off.",
    "Bootstrap always answers AlreadyExists `etcd data directory is not empty` (the emulated "
    "cluster is bootstrapped when it starts).",
    "GenerateClientConfiguration with several roles names the context after the cluster; "
    "the key PEM uses the `ED25519 PRIVATE KEY` label.",
    # health and Kubernetes
    "HealthCheck prints `waiting for <condition>: ...`, then `...: OK` or `...: <problem>` "
    "when the problem changes, re-checks every second (emulated) and ends with "
    "DeadlineExceeded `<condition>: <problem>` after `wait_timeout` (default 20 min). Disk "
    "sizes, memory sizes, kube-proxy and CoreDNS always pass; `kubelet to be healthy` looks "
    "at control planes (pkg/cluster/check/default.go).",
    "The Kubernetes Node is Ready unless the node is powered off or fault `node-not-ready` "
    "is on. Kubernetes behaviour, not a Talos fact: a kubelet posts node status only while "
    "it runs healthy; once it has not for longer than kube-controller-manager's default "
    "node-monitor grace period (40 s, emulated time), e.g. while it crash-loops (B4), every "
    "Node condition turns Unknown with reason `NodeStatusUnknown` and message `Kubelet "
    "stopped posting node status.`, until kubelet is healthy again (no unreachable taints "
    "are added). kube-system holds the control-plane static pods and one kube-proxy pod per "
    "node, ready while kubelet runs. The kubeconfig's client certificate is ECDSA with "
    "O=system:masters, CN=admin.",
    "trustd (50001), etcd (2379/2380), kubelet (10250) and kube-proxy's healthz (10256) "
    "listeners accept a TCP connection and close it; no TLS or HTTP is spoken there.",
    "Emulated time runs `time_scale` times faster for timestamps too (events, resources), "
    "so periods look real in the data while tests run fast.",
)
