"""What ``services.logs-readable`` requires of one service's log (no node needed).

Every runner registers the service's log when it starts the service
(``internal/app/machined/pkg/runtime/logging/circular.go``): a process or containerd runner
hands the program's stdout and stderr to it (``system/runner/process/process.go``,
``runner/containerd/containerd.go``), a goroutine runner only passes the writer to the
service's ``main``, which writes what it writes (``runner/goroutine/goroutine.go``
``wrappedMain``; its "Service started as goroutine" is an event, not a log line). So a
running service's log is sure to hold something only where its daemon writes at start, or
writes for the very API calls this check makes, in Talos v1.13.9:

* apid: "starting apid with config: ..." (``internal/app/apid/service.go`` runService);
* containerd and cri: containerd logs its start at level info (``hack/containerd.toml``
  ``[debug] level = "info"``);
* etcd and kubelet: both log their flags and start-up (zap and klog to stderr);
* machined: every request it serves, ServiceList and Logs included, is logged by the gRPC
  log middleware and its authorizer (``system/services/machined.go`` Main:
  ``factory.WithLog("machined ", logWriter)``, ``pkg/grpc/middleware/authz/authorizer.go``);
* registryd: "starting registry server" (``system/services/registry/registry.go`` Run).

The others may run with an empty log on a healthy node (:data:`QUIET_SERVICES`), as may
extension services (``ext-*``), whose programs are the extension's own.
"""

from __future__ import annotations

from pytest_talos import models

__all__ = ["QUIET_SERVICES", "log_problem", "may_be_quiet"]

# Services whose daemon writes nothing of its own at start:
# - syslogd (``internal/app/syslogd/syslogd.go``) writes only the syslog messages sent to
#   /dev/log, and nothing in Talos sends any;
# - auditd (``internal/app/auditd/auditd.go``) writes only the audit records the kernel
#   sends it;
# - trustd (``internal/app/trustd/main.go``) logs only the CSR requests of joining nodes
#   (``internal/app/trustd/internal/reg/reg.go``), none on a control plane alone;
# - udevd: systemd-udevd logs its start line only with ``--daemon``, which Talos does not
#   pass (``system/services/udevd.go``; systemd ``src/udev/udevd.c`` run_udevd);
# - the dashboard draws on its tty; only its stderr reaches the log
#   (``system/services/dashboard.go``: ``WithStdoutFile(tty)``).
QUIET_SERVICES = frozenset({"auditd", "dashboard", "syslogd", "trustd", "udevd"})


def may_be_quiet(service_id: str) -> bool:
    """Whether a running ``service_id`` may have an empty log on a healthy node."""
    return service_id.startswith("ext-") or service_id in QUIET_SERVICES


def log_problem(service: models.ServiceInfo, size: int) -> str | None:
    """What is wrong with ``service``'s readable log of ``size`` bytes (None: nothing)."""
    if service.running and not size and not may_be_quiet(service.id):
        return "Running, but its log is empty"
    return None
