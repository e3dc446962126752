"""The names of the fault profiles and of the seams of the node state they change.

Names are :class:`Fault` members, so a misspelt one fails type checking; the enum is a
``StrEnum``, so the plain strings (``"ssh-open"``) of the command line, the plugin options and
the conformance fault matrix keep working wherever a name is expected.
"""

from __future__ import annotations

import typing
from enum import StrEnum
from typing import Literal, TypeAlias

__all__ = [
    "QUIRK_KINDS",
    "SEAM_WHERE",
    "ApplyQuirk",
    "AuthenticationQuirk",
    "AuthorizationQuirk",
    "CosiQuirk",
    "DiscoveryQuirk",
    "Fault",
    "GeneratedConfigQuirk",
    "KubeQuirk",
    "MachineApiQuirk",
    "Quirk",
    "Scope",
    "Seam",
    "ServiceQuirk",
]

# Which nodes a profile affects: every node, only the last node of the cluster (so that a
# check comparing nodes with each other has something to compare against), or the control
# planes.
Scope = Literal["all", "last-node", "controlplanes"]


class Fault(StrEnum):
    """Every fault profile, by its command-line name."""

    SSH_OPEN = "ssh-open"
    SHELL_PRESENT = "shell-present"
    HOST_SHELL_PROCESS = "host-shell-process"
    PACKAGE_MANAGER_PRESENT = "package-manager-present"
    EXTRA_PORT = "extra-port"
    LENIENT_VALIDATION = "lenient-validation"
    VERSION_BUMP_ON_REJECT = "version-bump-on-reject"
    KUBELET_CRASHLOOP = "kubelet-crashloop"
    FLAPPING_SERVICE = "flapping-service"
    TRY_NO_REVERT = "try-no-revert"
    TRY_NOT_CANCELLED = "try-not-cancelled"
    DRY_RUN_APPLIES = "dry-run-applies"
    NO_KUBECONFIG = "no-kubeconfig"
    NODE_NOT_READY = "node-not-ready"
    WRONG_VERSION = "wrong-version"
    LABELS_NOT_SYNCED = "labels-not-synced"
    MEMBER_HIDDEN = "member-hidden"
    MAINTENANCE_VERSION = "maintenance-version"
    NO_MTLS = "no-mtls"
    CLIENT_CERTS_UNVERIFIED = "client-certs-unverified"
    RW_ROOTFS = "rw-rootfs"
    SHELL_IN_LIBEXEC = "shell-in-libexec"
    SHELL_ALIAS = "shell-alias"
    PACKAGE_MANAGER_IN_OPT = "package-manager-in-opt"
    WEB_TERMINAL_RUNNING = "web-terminal-running"
    USR_WRITABLE = "usr-writable"
    RESOLV_CONF_WRITABLE_ON_METAL = "resolv-conf-writable-on-metal"
    NODE_MEMORY_PRESSURE = "node-memory-pressure"
    NODE_CORDONED = "node-cordoned"
    READY_FLAPPING = "ready-flapping"
    PID1_NOT_MACHINED = "pid1-not-machined"
    PID1_SYSTEMD_AS_INIT = "pid1-systemd-as-init"
    SERVICE_DOWN = "service-down"
    MACHINED_UNHEALTHY = "machined-unhealthy"
    ETCD_MEMBER_MISSING = "etcd-member-missing"
    CIDR_OVERLAP = "cidr-overlap"
    CONFIG_DRIFT = "config-drift"
    CONFIG_STAGED = "config-staged"
    CLIENT_CERT_EXPIRING = "client-cert-expiring"
    APID_CERT_MISSING_SAN = "apid-cert-missing-san"
    KUBE_CERT_EXPIRED = "kube-cert-expired"
    RESOURCES_UNLISTABLE = "resources-unlistable"
    LOGS_BROKEN = "logs-broken"
    COSI_WRITABLE = "cosi-writable"
    READER_CAN_APPLY = "reader-can-apply"
    READER_READS_SECRETS = "reader-reads-secrets"
    EVENTS_NO_HELLO = "events-no-hello"
    SERVICES_RESOURCE_STALE = "services-resource-stale"
    READER_WATCHES_SECRETS = "reader-watches-secrets"
    READER_GETS_KUBECONFIG = "reader-gets-kubeconfig"
    READER_MINTS_ADMIN = "reader-mints-admin"
    READER_APPLIES_FOR_REAL = "reader-applies-for-real"
    EXPIRED_CERTS_ACCEPTED = "expired-certs-accepted"
    ANY_EKU_ACCEPTED = "any-eku-accepted"
    KUBE_CA_TRUSTED = "kube-ca-trusted"
    COSI_CREATE_LIES = "cosi-create-lies"
    COSI_WRITE_ACCEPTED_AFTER_DECODING = "cosi-write-accepted-after-decoding"
    LATE_APPLY_ON_REJECT = "late-apply-on-reject"
    DRY_RUN_APPLIES_LATE = "dry-run-applies-late"
    TRY_REVERT_KEEPS_LABEL = "try-revert-keeps-label"
    NO_REBOOT_ACCEPTS_REBOOT_FIELDS = "no-reboot-accepts-reboot-fields"
    HIDDEN_LISTENER = "hidden-listener"
    UDP_LISTENER = "udp-listener"
    STRAY_WIREGUARD_SOCKET = "stray-wireguard-socket"
    HOST_LISTENER_BESIDE_CNI = "host-listener-beside-cni"
    NETSTAT_GHOST = "netstat-ghost"
    HEALTH_FLAP_RUNNING = "health-flap-running"
    EMPTY_LOGS = "empty-logs"
    EVENTS_IGNORE_TAIL_SECONDS = "events-ignore-tail-seconds"
    SERVICE_STUCK_PREPARING = "service-stuck-preparing"
    REFUSED_CONFIG_STAGED = "refused-config-staged"
    TRY_REVERTS_EARLY = "try-reverts-early"
    TRY_PERSISTS_CONFIG = "try-persists-config"
    STAGED_SKIPS_VALIDATION = "staged-skips-validation"
    TRY_ACCEPTS_REBOOT_FIELDS = "try-accepts-reboot-fields"
    STAGED_DRY_RUN_APPLIES = "staged-dry-run-applies"
    NO_REBOOT_NOT_PERSISTED = "no-reboot-not-persisted"
    APPLY_DURING_TRY_DROPPED = "apply-during-try-dropped"
    READER_READS_FILES = "reader-reads-files"
    READER_RESTARTS_SERVICES = "reader-restarts-services"
    READER_WIPES_DISKS = "reader-wipes-disks"
    UNLISTED_SECRETS_SERVED = "unlisted-secrets-served"
    EKU_RULE_ONLY_REFUSES_SERVER_AUTH = "eku-rule-only-refuses-server-auth"
    NOT_YET_VALID_CERTS_ACCEPTED = "not-yet-valid-certs-accepted"
    NODE_UNINITIALIZED = "node-uninitialized"
    PID1_INIT_WRAPPER = "pid1-init-wrapper"
    LOGIN_RUNNING = "login-running"
    SHELL_IN_LIBEXEC_SUBDIR = "shell-in-libexec-subdir"


class ApplyQuirk(StrEnum):
    """Seam.APPLY: the ApplyConfiguration pipeline and try mode (node.apply.MachineConfigState)."""

    APPLY_SKIPS_ROLE_CHECK = "apply-skips-role-check"
    APPLY_KEEPS_PENDING_TRY = "apply-keeps-pending-try"
    REJECTED_APPLY_LANDS_LATE = "rejected-apply-lands-late"
    DRY_RUN_EXECUTES = "dry-run-executes"
    DRY_RUN_EXECUTES_LATE = "dry-run-executes-late"
    VALIDATION_ACCEPTS_PARSEABLE = "validation-accepts-parseable"
    REJECT_BUMPS_VERSION = "reject-bumps-version"
    IMMEDIATE_ALLOWS_ENV_AND_FILES = "immediate-allows-env-and-files"
    TRY_TIMER_SKIPS_REVERT = "try-timer-skips-revert"
    TRY_REVERT_KEEPS_NODE_LABELS = "try-revert-keeps-node-labels"
    REFUSED_APPLY_PERSISTS = "refused-apply-persists"
    TRY_TIMER_FIRES_EARLY = "try-timer-fires-early"
    TRY_WRITES_PERSISTENT = "try-writes-persistent"
    STAGED_SKIPS_VALIDATION = "staged-skips-validation"
    TRY_SKIPS_IMMEDIATE_CHECK = "try-skips-immediate-check"
    STAGED_DRY_RUN_PERSISTS = "staged-dry-run-persists"
    NO_REBOOT_SKIPS_PERSISTENT = "no-reboot-skips-persistent"
    APPLY_DURING_TRY_DROPPED = "apply-during-try-dropped"


class KubeQuirk(StrEnum):
    """Seam.KUBERNETES: the node's Kubernetes Node object (node.kubelet)."""

    KUBE_LABELS_NEVER_SYNC = "kube-labels-never-sync"
    KUBE_READY_FLAPS = "kube-ready-flaps"
    KUBE_READY_FALSE = "kube-ready-false"
    KUBE_MEMORY_PRESSURE = "kube-memory-pressure"
    KUBE_UNSCHEDULABLE = "kube-unschedulable"
    KUBE_CLOUD_TAINT_STAYS = "kube-cloud-taint-stays"


class AuthorizationQuirk(StrEnum):
    """Seam.AUTHORIZATION: apid's role rules (apid.dispatch) and storaged's BlockDeviceWipe
    handler (apid.unmodelled)."""

    READER_REAL_APPLY_RUNS_AS_ADMIN = "reader-real-apply-runs-as-admin"
    BLOCK_WIPE_SKIPS_ROLE_CHECK = "block-wipe-skips-role-check"


class ServiceQuirk(StrEnum):
    """Seam.SERVICES: the Services resource, failure reasons and logs (node.services.published)."""

    SERVICE_RESOURCE_OUTLIVES_STOP = "service-resource-outlives-stop"
    KUBELET_EXITS_AFTER_START = "kubelet-exits-after-start"
    CONTAINERD_LOG_UNREGISTERED = "containerd-log-unregistered"
    APID_LOG_EMPTY = "apid-log-empty"


class DiscoveryQuirk(StrEnum):
    """Seam.DISCOVERY: discovery Members and the etcd member list (node.net.place)."""

    DISCOVERY_MISSES_FIRST_NODE = "discovery-misses-first-node"
    ETCD_MEMBERS_LACK_LAST_CONTROLPLANE = "etcd-members-lack-last-controlplane"


class CosiQuirk(StrEnum):
    """Seam.COSI, Seam.AUTHORIZATION: the COSI resource API (apid.servicers.cosi.StateServicer)."""

    COSI_ACCEPTS_WRITES = "cosi-accepts-writes"
    COSI_SHOWS_SENSITIVE_TO_READERS = "cosi-shows-sensitive-to-readers"
    COSI_WATCH_SHOWS_SENSITIVE_TO_READERS = "cosi-watch-shows-sensitive-to-readers"
    COSI_HOSTNAME_STATUS_UNLISTABLE = "cosi-hostname-status-unlistable"
    COSI_CREATE_WRITES_THEN_DENIES = "cosi-create-writes-then-denies"
    COSI_SERVES_UNLISTED_SECRETS = "cosi-serves-unlisted-secrets"
    COSI_REFUSES_ONLY_EMPTY_WRITES = "cosi-refuses-only-empty-writes"


class MachineApiQuirk(StrEnum):
    """Seam.MACHINE_API: the machine API's replies (apid.servicers, node.state.api_version_tag)."""

    VERSION_OMITS_FEATURES = "version-omits-features"
    EVENTS_TAIL_SECONDS_DROPS_HISTORY = "events-tail-seconds-drops-history"
    EVENTS_SKIP_HELLO = "events-skip-hello"
    KUBECONFIG_WITHHELD = "kubeconfig-withheld"
    VERSION_TAG_WRONG = "version-tag-wrong"


class AuthenticationQuirk(StrEnum):
    """Seam.AUTHENTICATION, Seam.CERTIFICATES: apid's TLS handshake, client-certificate rules
    and its own certificate (apid.gate, apid.server, cluster.member)."""

    APID_SKIPS_EKU_RULE = "apid-skips-eku-rule"
    APID_IGNORES_CERT_VALIDITY = "apid-ignores-cert-validity"
    APID_TRUSTS_KUBERNETES_CA = "apid-trusts-kubernetes-ca"
    APID_EKU_RULE_ONLY_REFUSES_SERVER_AUTH = "apid-eku-rule-only-refuses-server-auth"
    APID_IGNORES_NOT_BEFORE = "apid-ignores-not-before"
    APID_CERT_LACKS_HOSTNAME_SAN = "apid-cert-lacks-hostname-san"
    APID_CLIENT_CERT_OPTIONAL = "apid-client-cert-optional"
    APID_SKIPS_CLIENT_CERT_VERIFY = "apid-skips-client-cert-verify"


class GeneratedConfigQuirk(StrEnum):
    """Seam.GENERATED_CONFIG, Seam.CERTIFICATES: what the cluster generates at start
    (cluster.emulated.EmulatedCluster)."""

    ADMIN_CERT_EXPIRES_SOON = "admin-cert-expires-soon"
    CONFIG_CHANGE_STAGED_AT_START = "config-change-staged-at-start"
    POD_CIDR_OVERLAPS_NODES = "pod-cidr-overlaps-nodes"
    CONFIG_DRIFTS_FROM_DESIRED = "config-drifts-from-desired"
    KUBE_APISERVER_CERT_EXPIRED = "kube-apiserver-cert-expired"


# A behaviour switch inside a seam's pipeline: each seam owns its enum and asks only its own
# (``node.quirk(ApplyQuirk.X)``; the seam's ``quirk`` callable is typed to its enum); a fault
# profile lists the quirks it turns on (``FaultProfile.quirks``).
Quirk: TypeAlias = (
    ApplyQuirk
    | KubeQuirk
    | AuthorizationQuirk
    | ServiceQuirk
    | DiscoveryQuirk
    | CosiQuirk
    | MachineApiQuirk
    | AuthenticationQuirk
    | GeneratedConfigQuirk
)
QUIRK_KINDS: tuple[type[StrEnum], ...] = typing.get_args(Quirk)  # the union's members, in order


class Seam(StrEnum):
    """A place of the node state through which a fault changes the emulator."""

    ROOTFS = "rootfs"
    MOUNTS = "mounts"
    PROCESSES = "processes"
    LISTENERS = "listeners"
    APPLY = "apply"
    SERVICES = "services"
    KUBERNETES = "kubernetes"
    DISCOVERY = "discovery"
    MACHINE_API = "machine-api"
    AUTHENTICATION = "authentication"
    AUTHORIZATION = "authorization"
    CERTIFICATES = "certificates"
    COSI = "cosi"
    GENERATED_CONFIG = "generated-config"


# Where each seam is applied (the docs and --list-faults show it).
SEAM_WHERE: dict[Seam, str] = {
    Seam.ROOTFS: "the root filesystem builder (node.host.view.NodeHost over "
    "node.host.system.build_rootfs)",
    Seam.MOUNTS: "the mount table (node.host.view.NodeHost.mounts, /proc/mounts)",
    Seam.PROCESSES: "the process table (node.host.view.NodeHost.processes, the PID 1 choice)",
    Seam.LISTENERS: "the listener table (node.host.view.NodeHost.listeners, what Netstat shows)",
    Seam.APPLY: "the ApplyConfiguration pipeline and try mode (node.apply.MachineConfigState)",
    Seam.SERVICES: "the services runner and logs (node.services.faults: the stages engine; "
    "node.services.published)",
    Seam.KUBERNETES: "the node's Kubernetes Node object (node.kubelet.kube_node_info)",
    Seam.DISCOVERY: "discovery Members and the etcd member list (node.net.place.NodeNetworking)",
    Seam.MACHINE_API: "the replies of the machine API servicers (Version, Events, Kubeconfig)",
    Seam.AUTHENTICATION: "apid's TLS handshake and client-certificate rules (apid.gate)",
    Seam.AUTHORIZATION: "apid's role rules per RPC (apid.dispatch) and COSI's sensitive reads",
    Seam.CERTIFICATES: "the certificate issuer (cluster.pki.ClusterPKI, the apid certificate)",
    Seam.COSI: "the COSI resource API (apid.servicers.cosi)",
    Seam.GENERATED_CONFIG: "the generated machine configs (cluster.configs.NodeConfigs, "
    "cluster start)",
}
