"""The conformance options and ini keys (``talos-conformance`` group): one table.

Each option that takes a value also has the ini key ``talos_<name>`` and the environment
variable ``$TALOS_<NAME>``; :mod:`.settings` resolves them with the pytest-talos plugin's
precedence (command line > ini > environment > default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_talos.plugin.conformance.catalogue import SUITES
from pytest_talos.plugin.conformance.parts import PARTS
from pytest_talos.reporting import SEVERITIES

__all__ = [
    "DEFAULT_CERT_FAIL_DAYS",
    "DEFAULT_CERT_WARN_DAYS",
    "DEFAULT_OBSERVE",
    "DEFAULT_RESTART_WINDOW",
    "DESIRED_FROM_EMULATOR",
    "SUITE_OPTIONS",
    "SuiteOption",
    "add_options",
]

DEFAULT_OBSERVE = 10.0  # node seconds: two kubelet crash-loop periods (~5 s each)
DEFAULT_CERT_WARN_DAYS = 30.0  # a long-lived certificate this close to expiry warns
DEFAULT_CERT_FAIL_DAYS = 7.0  # ... and this close fails
DESIRED_FROM_EMULATOR = "emulator:"  # --talos-desired: what the emulated cluster writes
DEFAULT_RESTART_WINDOW = 300.0  # node seconds of event history searched for restarts


@dataclass(frozen=True)
class SuiteOption:
    """``--talos-<name>``; with an ``ini`` help also the ini key ``talos_<name>`` and
    ``$TALOS_<NAME>`` (without one it is a switch of the command line only)."""

    name: str  # the ini key, e.g. talos_fail_under; the flag and the variable follow from it
    help: str
    ini: str | None = None  # the ini key's help
    dest: str | None = None  # when it is not ``name``
    default: Any = None
    argparse: Mapping[str, Any] = field(default_factory=dict)  # action, type, choices, metavar...

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return self.name.upper()

    @property
    def option_dest(self) -> str:
        return self.dest or self.name

    @property
    def full_help(self) -> str:
        """The help, naming the ini key and environment variable when there are some."""
        return self.help + (f" [ini {self.name}; env ${self.env}]" if self.ini else "")


def _parts_help() -> str:
    return "; ".join(f"{name} (needs {part.needs})" for name, part in sorted(PARTS.items()))


_FLOAT_SECONDS = {"type": float, "metavar": "SECONDS"}
_FLOAT_DAYS = {"type": float, "metavar": "DAYS"}

SUITE_OPTIONS: Mapping[str, SuiteOption] = {
    o.name: o
    for o in (
        SuiteOption(
            "talos_suite",
            "which checks to run: quick (read-only, seconds), full (everything --talos-allow "
            "permits), post-upgrade, vendor-image (default: every check)",
            ini="suite profile (--talos-suite)",
            argparse={"choices": sorted(SUITES), "metavar": "PROFILE"},
        ),
        SuiteOption(
            "talos_profile",
            "vendor acceptance profile: a YAML file, or the name of one the kit ships "
            "(example-vendor)",
            ini="vendor acceptance profile (--talos-profile)",
            argparse={"metavar": "PATH"},
        ),
        SuiteOption(
            "talos_expect_version",
            "Talos version every node must run, e.g. v1.13.9 or v1.13.x (post-upgrade)",
            ini="Talos version every node must run (--talos-expect-version)",
            argparse={"metavar": "VERSION"},
        ),
        SuiteOption(
            "talos_expect_kubernetes_version",
            "Kubernetes (kubelet) version every node must run, e.g. v1.36.0 (post-upgrade)",
            ini="Kubernetes version every node must run (--talos-expect-kubernetes-version)",
            argparse={"metavar": "VERSION"},
        ),
        SuiteOption(
            "talos_snapshot",
            "save: record config digest, extensions and node labels before an upgrade; "
            "compare: check the nodes against that record after it (ini/env: 'MODE PATH')",
            ini="MODE PATH (--talos-snapshot)",
            argparse={"nargs": 2, "metavar": ("MODE", "PATH")},
        ),
        SuiteOption(
            "talos_waivers",
            "YAML waivers (check, reason, expires[, node]): a waived failure is reported as "
            "an expected failure until it expires",
            ini="waivers file (--talos-waivers)",
            argparse={"metavar": "FILE"},
        ),
        SuiteOption(
            "talos_fail_under",
            "fail the run only for failing checks of this severity or worse: critical, high, "
            "medium, low (default: low, i.e. any failure)",
            ini="severity gate (--talos-fail-under)",
            argparse={"choices": SEVERITIES, "metavar": "SEVERITY"},
        ),
        SuiteOption(
            "talos_report",
            "write results.json, report.md and report.html into DIR",
            ini="report directory (--talos-report)",
            argparse={"metavar": "DIR"},
        ),
        SuiteOption(
            "talos_observe",
            "how long to watch each node for service restarts (node seconds; default "
            f"{DEFAULT_OBSERVE:g})",
            ini="seconds watched for restarts (--talos-observe)",
            argparse=_FLOAT_SECONDS,
        ),
        SuiteOption(
            "talos_restart_window",
            "a service that failed or restarted this recently fails the check (node seconds; "
            f"default {DEFAULT_RESTART_WINDOW:g})",
            ini="restart history in seconds (--talos-restart-window)",
            argparse=_FLOAT_SECONDS,
        ),
        SuiteOption(
            "talos_desired",
            "desired state in git: base configs, patches and talos-desired.yaml; the drift "
            "checks compare every node with it (emulator: what --talos-emulator was generated "
            "from)",
            ini="the desired-state directory (--talos-desired)",
            argparse={"metavar": "DIR"},
        ),
        SuiteOption(
            "talos_cert_warn_days",
            f"a certificate expiring within DAYS warns (default {DEFAULT_CERT_WARN_DAYS:g})",
            ini="days before expiry a certificate warns",
            argparse=_FLOAT_DAYS,
        ),
        SuiteOption(
            "talos_cert_fail_days",
            f"a certificate expiring within DAYS fails (default {DEFAULT_CERT_FAIL_DAYS:g})",
            ini="days before expiry a certificate fails",
            argparse=_FLOAT_DAYS,
        ),
        SuiteOption(
            "talos_check",
            "run only this check (its id, e.g. immutability.no-shell-or-ssh); repeatable; "
            "replaces the --talos-suite selection (ini/env: comma-separated)",
            ini="comma-separated check ids to run (--talos-check)",
            dest="talos_check_ids",
            argparse={"action": "append", "metavar": "ID"},
        ),
        SuiteOption(
            "talos_list_checks",
            "print every check of the suite (id, severity, area, what it changes, claim) and exit",
            default=False,
            argparse={"action": "store_true"},
        ),
        SuiteOption(
            "talos_shard",
            "check only shard I of N of the nodes (a stable split by hostname; cluster-wide "
            "checks in shard 1); combine the shards' reports with talos-report merge",
            ini="the shard I/N of the nodes this run checks (--talos-shard)",
            argparse={"metavar": "I/N"},
        ),
        SuiteOption(
            "talos_docker",
            "the nodes are local Docker containers named after their hostnames (talosctl "
            "cluster create docker): also require `docker exec <node> sh` to fail with 127 "
            "(ini/env: true or false)",
            ini="true: the nodes are local Docker containers (--talos-docker)",
            argparse={"action": "store_true"},
        ),
        SuiteOption(
            "talos_leave_out",
            "leave out a part of the suite that needs an input this run does not give "
            f"(repeatable): {_parts_help()}; ini/env: comma-separated",
            ini="comma-separated parts of the suite left out (--talos-leave-out)",
            default=[],
            argparse={"action": "append", "choices": sorted(PARTS), "metavar": "PART"},
        ),
        SuiteOption(
            "talos_record_profile",
            "record a vendor profile of what the target nodes run (nodes you trust) into "
            "PATH, then stop; accept a new image with --talos-suite=vendor-image "
            "--talos-profile PATH",
            argparse={"metavar": "PATH"},
        ),
    )
}


def add_options(parser: pytest.Parser) -> None:
    """The ``talos-conformance`` option group and its ini keys, from :data:`SUITE_OPTIONS`."""
    group = parser.getgroup("talos-conformance", "Talos conformance suite (conformance/)")
    for option in SUITE_OPTIONS.values():
        group.addoption(
            option.flag,
            dest=option.option_dest,
            default=option.default,
            help=option.full_help,
            **option.argparse,
        )
        if option.ini:
            parser.addini(option.name, option.ini, default=None)
