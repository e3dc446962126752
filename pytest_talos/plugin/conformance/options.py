"""The conformance options and ini keys (``talos-conformance`` group), with their defaults.

Each option that takes a value also has the ini key ``talos_<name>`` and the environment
variable ``$TALOS_<NAME>``; :mod:`.settings` resolves them with the pytest-talos plugin's
precedence (command line > ini > environment > default).
"""

from __future__ import annotations

import pytest

from pytest_talos.plugin.conformance.catalogue import SUITES
from pytest_talos.reporting import SEVERITIES

__all__ = [
    "DEFAULT_CERT_FAIL_DAYS",
    "DEFAULT_CERT_WARN_DAYS",
    "DEFAULT_OBSERVE",
    "DEFAULT_RESTART_WINDOW",
    "DESIRED_FROM_EMULATOR",
    "add_options",
]

DEFAULT_OBSERVE = 10.0  # node seconds: two kubelet crash-loop periods (~5 s each)
DEFAULT_CERT_WARN_DAYS = 30.0  # a long-lived certificate this close to expiry warns
DEFAULT_CERT_FAIL_DAYS = 7.0  # ... and this close fails
DESIRED_FROM_EMULATOR = "emulator:"  # --talos-desired: what the emulated cluster writes
DEFAULT_RESTART_WINDOW = 300.0  # node seconds of event history searched for restarts


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("talos-conformance", "Talos conformance suite (conformance/)")
    group.addoption(
        "--talos-suite",
        choices=sorted(SUITES),
        default=None,
        metavar="PROFILE",
        help="which checks to run: quick (read-only, seconds), full (everything --talos-allow "
        "permits), post-upgrade, vendor-image (default: every check)" + _layers("talos_suite"),
    )
    group.addoption(
        "--talos-profile",
        default=None,
        metavar="PATH",
        help="vendor acceptance profile: a YAML file, or the name of one the kit ships "
        "(example-vendor)" + _layers("talos_profile"),
    )
    group.addoption(
        "--talos-expect-version",
        default=None,
        metavar="VERSION",
        help="Talos version every node must run, e.g. v1.13.9 or v1.13.x (post-upgrade)"
        + _layers("talos_expect_version"),
    )
    group.addoption(
        "--talos-expect-kubernetes-version",
        default=None,
        metavar="VERSION",
        help="Kubernetes (kubelet) version every node must run, e.g. v1.36.0 (post-upgrade)"
        + _layers("talos_expect_kubernetes_version"),
    )
    group.addoption(
        "--talos-snapshot",
        nargs=2,
        default=None,
        metavar=("MODE", "PATH"),
        help="save: record config digest, extensions and node labels before an upgrade; "
        "compare: check the nodes against that record after it (ini/env: 'MODE PATH')"
        + _layers("talos_snapshot"),
    )
    group.addoption(
        "--talos-waivers",
        default=None,
        metavar="FILE",
        help="YAML waivers (check, reason, expires[, node]): a waived failure is reported as "
        "an expected failure until it expires" + _layers("talos_waivers"),
    )
    group.addoption(
        "--talos-fail-under",
        choices=SEVERITIES,
        default=None,
        metavar="SEVERITY",
        help="fail the run only for failing checks of this severity or worse: critical, high, "
        "medium, low (default: low, i.e. any failure)" + _layers("talos_fail_under"),
    )
    group.addoption(
        "--talos-report",
        default=None,
        metavar="DIR",
        help="write results.json, report.md and report.html into DIR" + _layers("talos_report"),
    )
    group.addoption(
        "--talos-observe",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"how long to watch each node for service restarts (node seconds; default "
        f"{DEFAULT_OBSERVE:g})" + _layers("talos_observe"),
    )
    group.addoption(
        "--talos-restart-window",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"a service that failed or restarted this recently fails the check (node seconds; "
        f"default {DEFAULT_RESTART_WINDOW:g})" + _layers("talos_restart_window"),
    )
    group.addoption(
        "--talos-desired",
        default=None,
        metavar="DIR",
        help="desired state in git: base configs, patches and talos-desired.yaml; the drift "
        "checks compare every node with it (emulator: what --talos-emulator was generated "
        "from) [ini talos_desired; env $TALOS_DESIRED]",
    )
    group.addoption(
        "--talos-cert-warn-days",
        type=float,
        default=None,
        metavar="DAYS",
        help=f"a certificate expiring within DAYS warns (default {DEFAULT_CERT_WARN_DAYS:g}) "
        "[ini talos_cert_warn_days; env $TALOS_CERT_WARN_DAYS]",
    )
    group.addoption(
        "--talos-cert-fail-days",
        type=float,
        default=None,
        metavar="DAYS",
        help=f"a certificate expiring within DAYS fails (default {DEFAULT_CERT_FAIL_DAYS:g}) "
        "[ini talos_cert_fail_days; env $TALOS_CERT_FAIL_DAYS]",
    )
    for ini, what in (
        ("talos_desired", "the desired-state directory (--talos-desired)"),
        ("talos_cert_warn_days", "days before expiry a certificate warns"),
        ("talos_cert_fail_days", "days before expiry a certificate fails"),
        *_INI_KEYS.items(),
    ):
        parser.addini(ini, what, default=None)
    group.addoption(
        "--talos-check",
        action="append",
        default=None,
        metavar="ID",
        dest="talos_check_ids",
        help="run only this check (its id, e.g. immutability.no-shell-or-ssh); repeatable; "
        "replaces the --talos-suite selection (ini/env: comma-separated)" + _layers("talos_check"),
    )
    group.addoption(
        "--talos-list-checks",
        action="store_true",
        default=False,
        help="print every check of the suite (id, severity, area, what it changes, claim) and exit",
    )
    group.addoption(
        "--talos-shard",
        default=None,
        metavar="I/N",
        help="check only shard I of N of the nodes (a stable split by hostname; cluster-wide "
        "checks in shard 1); combine the shards' reports with talos-report merge"
        + _layers("talos_shard"),
    )
    group.addoption(
        "--talos-docker",
        action="store_true",
        default=None,
        help="the nodes are local Docker containers named after their hostnames (talosctl "
        "cluster create docker): also require `docker exec <node> sh` to fail with 127 "
        "(ini/env: true or false)" + _layers("talos_docker"),
    )


# Ini keys of the options that take a value (besides desired and the certificate days).
_INI_KEYS = {
    "talos_suite": "suite profile (--talos-suite)",
    "talos_profile": "vendor acceptance profile (--talos-profile)",
    "talos_expect_version": "Talos version every node must run (--talos-expect-version)",
    "talos_expect_kubernetes_version": "Kubernetes version every node must run "
    "(--talos-expect-kubernetes-version)",
    "talos_snapshot": "MODE PATH (--talos-snapshot)",
    "talos_waivers": "waivers file (--talos-waivers)",
    "talos_fail_under": "severity gate (--talos-fail-under)",
    "talos_report": "report directory (--talos-report)",
    "talos_observe": "seconds watched for restarts (--talos-observe)",
    "talos_restart_window": "restart history in seconds (--talos-restart-window)",
    "talos_check": "comma-separated check ids to run (--talos-check)",
    "talos_shard": "the shard I/N of the nodes this run checks (--talos-shard)",
    "talos_docker": "true: the nodes are local Docker containers (--talos-docker)",
}


def _layers(name: str) -> str:
    """The help suffix naming an option's ini key and environment variable."""
    return f" [ini {name}; env ${name.upper()}]"
