"""Which conformance checks each emulator fault must break — and only those.

For every fault profile of the emulator (``python -m pytest_talos.emulator --list-faults``)
the suite areas the fault targets (:attr:`FaultCase.areas`) run once against
``--talos-emulator --talos-emulator-fault <fault> --talos-allow disruptive``; the checks that
do not pass must be exactly the ones listed here, with the outcome listed (``failed``: the
check caught the defect; ``error``: the check could not be measured because of it). A
healthy emulator, and every healthy variant, must pass every check of the whole suite.

A check that no fault breaks is listed in ``PROVED_ELSEWHERE`` (with the test that proves
it can fail) or in ``NO_FAULT_YET`` (a gap to close with a new emulator fault).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["FAULT_MATRIX", "HEALTHY_VARIANTS", "NO_FAULT_YET", "PROVED_ELSEWHERE", "FaultCase"]

Outcome = Literal["failed", "error"]


@dataclass(frozen=True)
class FaultCase:
    """The faults to turn on (the profile, plus any it needs to show) and what must break.

    A fault's run covers the suite areas of the checks it must break (``also_areas`` adds
    more): the healthy run and the healthy variants run every area, so a check that fails
    for no fault is caught there. A fault that must break nothing runs every area, since
    that is its claim.
    """

    faults: tuple[str, ...]
    broken: Mapping[str, Outcome]
    why: str = ""
    extra_args: tuple[str, ...] = field(default=())
    also_areas: tuple[str, ...] = field(default=())
    whole_suite: bool = False  # the fault needs the node's time a whole run gives (say why)

    @property
    def areas(self) -> tuple[str, ...] | None:
        """The areas (``conformance/<area>``) the run covers, sorted; None: all of them."""
        if not self.broken or self.whole_suite:
            return None
        return tuple(sorted({c.split(".", 1)[0] for c in self.broken} | set(self.also_areas)))

    def fault_args(self) -> list[str]:
        """The suite options that turn the faults on (plus any the row needs)."""
        args = [arg for fault in self.faults for arg in ("--talos-emulator-fault", fault)]
        return args + list(self.extra_args)

    def paths(self, suite: Path) -> tuple[str, ...]:
        """What the run collects: the targeted areas of ``suite``, or all of it."""
        areas = self.areas
        return (str(suite),) if areas is None else tuple(str(suite / a) for a in areas)


def _failed(*checks: str) -> dict[str, Outcome]:
    return dict.fromkeys(checks, "failed")


_SERVICE_DOWN = _failed(
    "services.expected-running-healthy", "services.no-recent-restarts", "upgrade.nodes-running"
)

FAULT_MATRIX: Mapping[str, FaultCase] = {
    "cidr-overlap": FaultCase(("cidr-overlap",), _failed("kubernetes.cidrs-clear-of-nodes")),
    "config-drift": FaultCase(("config-drift",), _failed("config.matches-desired")),
    "config-staged": FaultCase(
        ("config-staged",),
        _failed("config.persisted-matches-active"),
        why="the staged change is not drift (the active config matches git) but the next "
        "boot changes the node",
    ),
    "client-cert-expiring": FaultCase(
        ("client-cert-expiring",), _failed("certs.client-certificate")
    ),
    "apid-cert-missing-san": FaultCase(
        ("apid-cert-missing-san",), _failed("certs.api-certificate")
    ),
    "kube-cert-expired": FaultCase(
        ("kube-cert-expired",),
        _failed(
            "certs.kubernetes-api",
            "kubernetes.kubeconfig-obtainable",
            "kubernetes.node-ready",
            "kubernetes.node-conditions-clear",
            "config.label-applies-without-reboot",
        ),
        why="an expired kube-apiserver certificate stops every Kubernetes client: the checks "
        "that talk to Kubernetes fail with the TLS error",
    ),
    "client-certs-unverified": FaultCase(
        ("client-certs-unverified",),
        _failed(
            "api.mtls-required",
            "api.foreign-ca-refused",
            "api.reader-cannot-apply",
            "api.reader-cannot-read-secrets",
            "api.expired-cert-refused",
            "api.client-auth-eku-required",
            "api.kube-ca-refused",
            "api.reader-cannot-apply-for-real",
            "api.reader-cannot-get-kubeconfig",
            "api.reader-cannot-mint-roles",
            "api.reader-cannot-change-node",
            "api.reader-cannot-run-disruptive-calls",
        ),
        why="apid that never asks for a client certificate cannot tell a foreign CA's, an "
        "expired one, one without client-auth usage, the Kubernetes CA's, nor a reader's, "
        "from none (all get os:admin); Python's ssl cannot ask for one and then accept any CA",
    ),
    "cosi-writable": FaultCase(("cosi-writable",), _failed("api.resource-writes-refused")),
    "dry-run-applies": FaultCase(
        ("dry-run-applies",),
        _failed("config.dry-run-changes-nothing"),
        why="the check guards its dry run like any change, so the applied label is taken "
        "back and the nodes still match their desired state",
    ),
    "dry-run-applies-late": FaultCase(
        ("dry-run-applies-late",),
        _failed("config.dry-run-changes-nothing"),
        why="only a second look after the settle time sees the change",
    ),
    "refused-config-staged": FaultCase(
        ("refused-config-staged",),
        _failed(
            "config.invalid-patch-rejected",
            "config.no-reboot-refuses-reboot-fields",
            "config.dry-run-changes-nothing",
        ),
        why="the active config stays as it was: only the persistent config, the one the next "
        "boot loads, shows the change (the guard puts it back)",
    ),
    "reader-reads-files": FaultCase(
        ("reader-reads-files",),
        _failed("api.reader-cannot-read-secrets"),
        why="Read (os:admin only) answers the reader; every COSI read stays refused",
    ),
    "reader-restarts-services": FaultCase(
        ("reader-restarts-services",), _failed("api.reader-cannot-change-node")
    ),
    "reader-wipes-disks": FaultCase(
        ("reader-wipes-disks",),
        _failed("api.reader-cannot-run-disruptive-calls"),
        why="the rule admits os:reader (maintenance); only the handler's os:admin check is gone",
    ),
    "unlisted-secrets-served": FaultCase(
        ("unlisted-secrets-served",),
        _failed("api.reader-cannot-read-secrets"),
        why="OSRootSecrets is not in ResourceDefinitions: only probing every known sensitive "
        "type finds it",
    ),
    "eku-rule-only-refuses-server-auth": FaultCase(
        ("eku-rule-only-refuses-server-auth",),
        _failed("api.client-auth-eku-required"),
        why="no EKU and [ClientAuth, ServerAuth] are still refused; [ClientAuth, CodeSigning] "
        "passes",
    ),
    "not-yet-valid-certs-accepted": FaultCase(
        ("not-yet-valid-certs-accepted",),
        _failed("api.expired-cert-refused"),
        why="the expired certificate is still refused; only one not valid yet passes",
    ),
    "try-reverts-early": FaultCase(
        ("try-reverts-early",),
        _failed("config.try-mode-reverts"),
        why="the revert comes at half the 10 node-second timer: seen before 8 node seconds",
    ),
    "try-persists-config": FaultCase(
        ("try-persists-config",),
        _failed("config.try-mode-reverts"),
        why="the active config reverts on time; only the persistent config keeps the tried change",
    ),
    "staged-skips-validation": FaultCase(
        ("staged-skips-validation",),
        _failed("config.invalid-patch-rejected"),
        why="only the staged case sees it",
    ),
    "try-accepts-reboot-fields": FaultCase(
        ("try-accepts-reboot-fields",),
        _failed("config.no-reboot-refuses-reboot-fields"),
        why="only the env-try case sees it",
    ),
    "staged-dry-run-applies": FaultCase(
        ("staged-dry-run-applies",),
        _failed("config.dry-run-changes-nothing"),
        why="only the staged case's persistent config shows it",
    ),
    "no-reboot-not-persisted": FaultCase(
        ("no-reboot-not-persisted",),
        _failed("config.label-applies-without-reboot"),
        why="the active config and the Node get the label; the next boot's config does not",
    ),
    "apply-during-try-dropped": FaultCase(
        ("apply-during-try-dropped",),
        _failed("config.apply-cancels-try-revert"),
        why="the config does not move, but the regular apply never lands",
    ),
    "node-uninitialized": FaultCase(
        ("node-uninitialized",),
        _failed("kubernetes.node-conditions-clear"),
        why="Ready and every condition stay clean; only the cloud provider's uninitialized "
        "taint, never removed, keeps pods off",
    ),
    "pid1-init-wrapper": FaultCase(
        ("pid1-init-wrapper",),
        _failed("immutability.pid1-is-machined"),
        why="the wrapper has machined's command, executable and args; its single thread and "
        "machined running as its child give it away",
    ),
    "login-running": FaultCase(
        ("login-running",),
        _failed("immutability.no-shell-or-ssh"),
        why="a login session is neither a shell nor a daemon by name, and opens no port",
    ),
    "shell-in-libexec-subdir": FaultCase(
        ("shell-in-libexec-subdir",),
        _failed("immutability.no-shell-or-ssh"),
        why="one level below /usr/libexec, under a versioned name: neither the directory nor "
        "the name was looked at",
    ),
    "etcd-member-missing": FaultCase(
        ("etcd-member-missing",),
        _failed("cluster.etcd-members-are-control-planes"),
        why="Talos's own health check only requires the members to be a subset of the control "
        "planes (pkg/cluster/check/etcd.go EtcdControlPlaneNodesAssertion), so a missing "
        "member passes it; only the kit's own check sees it",
    ),
    "events-no-hello": FaultCase(
        ("events-no-hello",),
        {},
        why="client-level fault: our client "
        "does not depend on the hello event; no node claim breaks",
    ),
    "extra-port": FaultCase(("extra-port",), _failed("immutability.only-expected-ports")),
    "flapping-service": FaultCase(
        ("flapping-service",),
        _failed(
            "services.expected-running-healthy",
            "services.no-recent-restarts",
            "upgrade.nodes-running",
        ),
        why="containerd is killed every 30 s: a crash always lies within the last 60 s that "
        "services.expected-running-healthy looks back; after each restart it is unhealthy "
        "until its next health check, so the machine is briefly not ready, and the 36 s "
        "stability window of upgrade.nodes-running always spans one of those. The first "
        "kill comes 30 s after the boot: the services area alone can be done by then, so "
        "the run is the whole suite's, as on a node that has been up a while",
        whole_suite=True,
    ),
    "hidden-listener": FaultCase(
        ("hidden-listener",),
        _failed("immutability.only-expected-ports"),
        why="10250 is an allowed port, so a plain scan passed; its Netstat no longer accounts "
        "for it",
    ),
    "host-shell-process": FaultCase(
        ("host-shell-process",),
        _failed("immutability.no-shell-or-ssh"),
        why="a shell outside every pod's containerd shim is a way into the host itself",
    ),
    "shell-in-libexec": FaultCase(
        ("shell-in-libexec",),
        _failed("immutability.no-shell-or-ssh"),
        why="/usr/libexec is off PATH, so a search of the bin directories alone missed it",
    ),
    "shell-alias": FaultCase(
        ("shell-alias",),
        _failed("immutability.no-shell-or-ssh"),
        why="busybox.static is busybox under its static-build name; an exact name match missed it",
    ),
    "web-terminal-running": FaultCase(
        ("web-terminal-running",),
        _failed("immutability.no-shell-or-ssh"),
        why="ttyd serves a terminal on a unix socket: no port, no shell or sshd process name",
    ),
    "package-manager-in-opt": FaultCase(
        ("package-manager-in-opt",),
        _failed("immutability.no-package-manager"),
        why="/opt/foo/bin is an add-on tree under the writable /opt, not /opt/bin",
    ),
    "resolv-conf-writable-on-metal": FaultCase(
        ("resolv-conf-writable-on-metal",),
        _failed("immutability.rootfs-read-only"),
        why="only on metal, where machined binds /etc/resolv.conf read-only; in a container "
        "Docker's bind is writable on a healthy node too",
        extra_args=("--talos-emulator-variant", "metal"),
    ),
    "usr-writable": FaultCase(
        ("usr-writable",),
        _failed("immutability.rootfs-read-only"),
        why="/ stays ro; a writable overlay mounted over /usr makes the image content writable",
    ),
    "node-memory-pressure": FaultCase(
        ("node-memory-pressure",),
        _failed("kubernetes.node-conditions-clear"),
        why="Ready stays True; only the MemoryPressure condition shows it",
    ),
    "node-cordoned": FaultCase(
        ("node-cordoned",),
        _failed("kubernetes.node-conditions-clear", "cluster.health-check-passes"),
        why="Ready stays True; spec.unschedulable shows it, as does talosctl health's "
        "'all k8s nodes to report schedulable' (pkg/cluster/check/kubernetes.go)",
    ),
    "ready-flapping": FaultCase(
        ("ready-flapping",),
        _failed("kubernetes.node-ready", "upgrade.nodes-running"),
        why="Ready is True most of the time, so a wait for Ready passed; the watch over the "
        "window sees it False (or its lastTransitionTime move) within one 8 s period",
    ),
    "kubelet-crashloop": FaultCase(
        ("kubelet-crashloop",),
        _failed(
            "services.expected-running-healthy",
            "services.no-recent-restarts",
            "config.kubelet-flag-failure-detected",
            "cluster.health-check-passes",
            "upgrade.nodes-running",
            "kubernetes.node-ready",
        ),
        why="kubelet is never up, so the boot never ends (no restart is excused as the "
        "boot's); a kubelet silent for the node-monitor grace period (40 s) turns its Node "
        "NotReady; the suite reaches the Kubernetes checks well after that",
    ),
    "late-apply-on-reject": FaultCase(
        ("late-apply-on-reject",),
        _failed("config.invalid-patch-rejected"),
        why="the reply and the first read are right; the config changes 2 s later",
    ),
    "labels-not-synced": FaultCase(
        ("labels-not-synced",), _failed("config.label-applies-without-reboot")
    ),
    "lenient-validation": FaultCase(
        ("lenient-validation",), _failed("config.invalid-patch-rejected")
    ),
    "logs-broken": FaultCase(
        ("logs-broken",),
        _failed("services.logs-readable"),
        why="containerd runs, but its log is not registered",
    ),
    "machined-unhealthy": FaultCase(
        ("machined-unhealthy",),
        _failed(
            "services.expected-running-healthy",
            "services.no-recent-restarts",
            "upgrade.nodes-running",
        ),
        why="machined stays Running with its health check failing: no restart, but the "
        "machine is not ready (machine_status.go counts an unhealthy service), and its "
        "'Health check failed' event after the boot is an unhealthy spell",
    ),
    "health-flap-running": FaultCase(
        ("health-flap-running",),
        _failed(
            "services.expected-running-healthy",
            "services.no-recent-restarts",
            "upgrade.nodes-running",
        ),
        why="cri never leaves Running, so a check of states alone passes between two flaps; "
        "its 'Health check failed' events (within the last 60 s, and in the watched window) "
        "are caught by the quick profile too, not only by the machine hold. The first flap "
        "comes 2 s after the boot and counts as the boot's: the services area alone can "
        "be judged before the next, 20 s later (seen once in CI: "
        "services.expected-running-healthy passed), so the run is the whole suite's, as on "
        "a node that has been up a while",
        whole_suite=True,
    ),
    "empty-logs": FaultCase(
        ("empty-logs",),
        _failed("services.logs-readable"),
        why="apid runs, its log is registered but reads back empty",
    ),
    "service-stuck-preparing": FaultCase(
        ("service-stuck-preparing",),
        _SERVICE_DOWN,
        why="trustd was stopped (a stop after the boot) and its new run never leaves "
        "Preparing: the stuck state itself fails services.expected-running-healthy",
    ),
    "events-ignore-tail-seconds": FaultCase(
        ("events-ignore-tail-seconds",),
        _failed("services.events-cover-window"),
        why="the stream brings none of the boot's service events that ServiceList shows "
        "within the window; the restart checks then say the history does not cover it",
    ),
    "maintenance-version": FaultCase(("maintenance-version",), _failed("api.version-answers")),
    "member-hidden": FaultCase(("member-hidden",), _failed("cluster.members-consistent")),
    "netstat-ghost": FaultCase(
        ("netstat-ghost",),
        _failed("immutability.only-expected-ports"),
        why="the scan finds 9100 refused; Netstat shows its wildcard listener",
    ),
    "no-kubeconfig": FaultCase(
        ("no-kubeconfig",),
        {
            "kubernetes.kubeconfig-obtainable": "failed",
            "kubernetes.node-ready": "error",
            "kubernetes.node-conditions-clear": "error",
            "config.label-applies-without-reboot": "error",
            "certs.kubernetes-api": "error",
        },
        why="without a kubeconfig the Kubernetes-side checks cannot be measured (errors)",
    ),
    "no-mtls": FaultCase(("no-mtls",), _failed("api.mtls-required")),
    "no-reboot-accepts-reboot-fields": FaultCase(
        ("no-reboot-accepts-reboot-fields",), _failed("config.no-reboot-refuses-reboot-fields")
    ),
    "node-not-ready": FaultCase(
        ("node-not-ready",),
        _failed("kubernetes.node-ready", "cluster.health-check-passes", "upgrade.nodes-running"),
        why="the machine is not ready while its Kubernetes Node is not (machine_status.go "
        "nodeReady)",
    ),
    "package-manager-present": FaultCase(
        ("package-manager-present",), _failed("immutability.no-package-manager")
    ),
    "pid1-not-machined": FaultCase(
        ("pid1-not-machined",), _failed("immutability.pid1-is-machined")
    ),
    "pid1-systemd-as-init": FaultCase(
        ("pid1-systemd-as-init",), _failed("immutability.pid1-is-machined")
    ),
    "reader-can-apply": FaultCase(
        ("reader-can-apply",),
        _failed("api.reader-cannot-apply", "api.reader-cannot-apply-for-real"),
        why="the handler's admin rule is gone for dry runs and real applies alike",
    ),
    "reader-applies-for-real": FaultCase(
        ("reader-applies-for-real",),
        _failed("api.reader-cannot-apply-for-real"),
        why="the dry run is refused; only a real apply shows it",
    ),
    "reader-watches-secrets": FaultCase(
        ("reader-watches-secrets",),
        _failed("api.reader-cannot-read-secrets"),
        why="Get and List are refused; only a Watch leaks",
    ),
    "reader-gets-kubeconfig": FaultCase(
        ("reader-gets-kubeconfig",), _failed("api.reader-cannot-get-kubeconfig")
    ),
    "reader-mints-admin": FaultCase(
        ("reader-mints-admin",), _failed("api.reader-cannot-mint-roles")
    ),
    "expired-certs-accepted": FaultCase(
        ("expired-certs-accepted",), _failed("api.expired-cert-refused")
    ),
    "any-eku-accepted": FaultCase(("any-eku-accepted",), _failed("api.client-auth-eku-required")),
    "kube-ca-trusted": FaultCase(("kube-ca-trusted",), _failed("api.kube-ca-refused")),
    "cosi-create-lies": FaultCase(
        ("cosi-create-lies",),
        _failed("api.resource-writes-refused"),
        why="the reply is PermissionDenied; only the Get afterwards finds the probe resource",
    ),
    "cosi-write-accepted-after-decoding": FaultCase(
        ("cosi-write-accepted-after-decoding",),
        _failed("api.resource-writes-refused"),
        why="a write with an empty spec is still refused: only probes that send a real spec, "
        "encoded as Talos encodes it, get through the decoding to the broken policy",
    ),
    "reader-reads-secrets": FaultCase(
        ("reader-reads-secrets",), _failed("api.reader-cannot-read-secrets")
    ),
    "resources-unlistable": FaultCase(("resources-unlistable",), _failed("api.resources-readable")),
    "rw-rootfs": FaultCase(("rw-rootfs",), _failed("immutability.rootfs-read-only")),
    "service-down": FaultCase(
        ("service-down",),
        _SERVICE_DOWN,
        why="trustd, required on control planes, stops after the boot and stays Finished: a "
        "container-mode node runs no service that stays Failed once it ran (the restart "
        "runner restarts all but machined)",
    ),
    "services-resource-stale": FaultCase(
        ("services-resource-stale", "service-down"),
        {**_SERVICE_DOWN, **_failed("services.resources-match-service-list")},
        why="a resource can only go stale when a service stops: service-down stops trustd",
    ),
    "shell-present": FaultCase(("shell-present",), _failed("immutability.no-shell-or-ssh")),
    "ssh-open": FaultCase(
        ("ssh-open",), _failed("immutability.no-shell-or-ssh", "immutability.only-expected-ports")
    ),
    "try-no-revert": FaultCase(("try-no-revert",), _failed("config.try-mode-reverts")),
    "try-revert-keeps-label": FaultCase(
        ("try-revert-keeps-label",),
        _failed("config.try-mode-reverts"),
        why="the config comes back; only the Kubernetes Node shows the tried label staying",
    ),
    "try-not-cancelled": FaultCase(
        ("try-not-cancelled",), _failed("config.apply-cancels-try-revert")
    ),
    "udp-listener": FaultCase(
        ("udp-listener",),
        _failed("immutability.only-expected-ports"),
        why="a TCP scan cannot see UDP 69; Netstat shows it off loopback",
    ),
    "host-listener-beside-cni": FaultCase(
        ("host-listener-beside-cni",),
        _failed("immutability.only-expected-ports"),
        why="the Cilium pod's own listeners are not the host's to judge, but a host process "
        "(named like the agent, a child of PID 1) on 4245 is",
        extra_args=("--talos-emulator-variant", "cilium"),
    ),
    "stray-wireguard-socket": FaultCase(
        ("stray-wireguard-socket",),
        _failed("immutability.only-expected-ports"),
        why="each WireGuard link's bound port is allowed (siderolink's random one here), "
        "but a kernel UDP socket no link owns is not",
        extra_args=("--talos-emulator-variant", "siderolink"),
    ),
    "version-bump-on-reject": FaultCase(
        ("version-bump-on-reject",), _failed("config.invalid-patch-rejected")
    ),
    "wrong-version": FaultCase(
        ("wrong-version",), _failed("api.version-consistent", "api.version-matches-resource")
    ),
}

# Checks no emulator fault breaks, and the test in tests/conformance that shows them failing.
PROVED_ELSEWHERE: Mapping[str, str] = {
    "immutability.pod-listeners-expected": "test_conformance_pod_listeners.py (opt-in hook, "
    "cilium variant, Hubble's 4244 not allowed)",
    "upgrade.talos-version": "test_conformance_upgrade.py (wrong --talos-expect-version)",
    "upgrade.kubernetes-version": "test_conformance_upgrade.py (wrong expected version)",
    "upgrade.config-unchanged": "test_conformance_upgrade.py (config changed after save)",
    "upgrade.extensions-unchanged": "test_conformance_upgrade.py (edited snapshot)",
    "upgrade.node-labels-unchanged": "test_conformance_upgrade.py (label removed after save)",
    "upgrade.snapshot-recorded": "test_conformance_upgrade.py (unwritable snapshot path)",
    "vendor.talos-version": "test_conformance_vendor.py (mismatching profile)",
    "vendor.kubernetes-version": "test_conformance_vendor.py (mismatching profile)",
    "vendor.kernel-version": "test_conformance_vendor.py (metal emulator, mismatching profile)",
    "vendor.kernel-args": "test_conformance_vendor.py (metal emulator, mismatching profile)",
    "vendor.platform": "test_conformance_vendor.py (mismatching profile)",
    "vendor.required-extensions": "test_conformance_vendor.py (mismatching profile)",
    "vendor.forbidden-extensions": "test_conformance_vendor.py (extension-carrying emulator)",
    "vendor.expected-ports": "test_conformance_vendor.py (mismatching profile)",
    "vendor.forbidden-ports": "test_conformance_vendor.py (mismatching profile)",
    "vendor.image-verification": "test_conformance_vendor.py (verification required)",
    # Both pass on the node a profile was recorded from, in every GOLDEN_SHAPES variant and
    # release of test_record_profile.py, and fail when the node differs:
    "vendor.image-verification-rules": "test_record_profile.py (a rule added after recording)",
    "vendor.security-settings": "test_record_profile.py (a sysctl weakened after recording)",
}

# Checks that pass on a healthy emulator but that no emulator fault can break yet.
NO_FAULT_YET: Mapping[str, str] = {}


# Healthy shapes a real cluster can have (``python -m pytest_talos.emulator --list-variants``):
# the suite must pass on each with zero failures, or a check would fail a healthy real node.
# Several variants at once are a shape too (a domain on metal with discovery off).
HEALTHY_VARIANTS: Mapping[str, tuple[str, ...]] = {
    "domain": ("domain",),
    "discovery-disabled": ("discovery-disabled",),
    "discovery-unreachable": ("discovery-unreachable",),
    "pod-shell": ("pod-shell",),
    "kube-proxy-disabled": ("kube-proxy-disabled",),
    "metal": ("metal",),
    "extensions": ("extensions",),
    "register-with-fqdn": ("register-with-fqdn",),
    "kubespan": ("kubespan",),
    "clock-stepped": ("clock-stepped",),  # on metal: container nodes never sync time
    "three-control-planes": ("three-control-planes",),  # 3 control planes, 1 worker
    "endpoint-only": ("endpoint-only",),  # workers reached only through the endpoint's apid
    "metrics-exposed": ("metrics-exposed",),
    "siderolink": ("siderolink",),
    "wireguard": ("wireguard",),
    "cilium": ("cilium",),
    "cilium+metal": ("cilium", "metal"),
    "siderolink+wireguard+metal": ("siderolink", "wireguard", "metal"),
    "metrics-exposed+metal": ("metrics-exposed", "metal"),
    "metal+domain+discovery-disabled": ("metal", "domain", "discovery-disabled"),
}
