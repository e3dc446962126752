"""Certificate hygiene (read-only): the certificates the cluster's management rests on.

Lose the talosconfig certificate and a path to apid, and a node cannot be repaired; let
kube-apiserver's certificate lapse, and Kubernetes stops. Long-lived certificates warn under
``--talos-cert-warn-days`` (default 30) and fail under ``--talos-cert-fail-days`` (default 7)
days to expiry; apid's, which Talos issues for 24 hours and renews every 12, must be valid,
renewed on time and live no longer than that. Evidence shows subjects, issuers, serials,
names and dates, never key material.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import pytest

from conformance._support.fanout import FanOut, Gated
from conformance._support.fixtures import values_at_once
from conformance._support.reach import DIRECT_REACH_CHECKS, KUBE_API_AT_NODE_NEEDS, DirectReach
from pytest_talos.certs import (
    CertificateReport,
    ExpiryPolicy,
    apid_certificate,
    ca_certificates,
    client_certificate,
    kubernetes_certificates,
    local_api_server_port,
)
from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import ConformanceFailure, PermissionDenied, TalosError
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.settings import SuiteSettings
from pytest_talos.talosconfig import Context

ADMIN = "os:admin"


class CertificateWarning(UserWarning):
    """A certificate close to expiry, or more privilege than the run needs."""


def _policy(settings: SuiteSettings) -> ExpiryPolicy:
    return ExpiryPolicy(settings.cert_warn_days, settings.cert_fail_days)


def _context(cluster: TalosCluster) -> Context:
    if cluster.talosconfig is None:
        pytest.skip("the run has no talosconfig to read certificates from")
    return cluster.talosconfig.context


def _changes_selected(session: pytest.Session) -> bool:
    """Whether any check selected for this run may change a node (and is allowed to)."""
    return any(
        (item.get_closest_marker("talos_mutating") or item.get_closest_marker("talos_disruptive"))
        and not item.get_closest_marker("skip")
        for item in session.items
    )


def _verdict(
    check: str,
    node: str | None,
    reports: Sequence[CertificateReport],
    evidence: dict[str, Any],
    extra_warnings: Sequence[str] = (),
) -> None:
    evidence["certificates"] = [report.to_json() for report in reports]
    notes = [*(w for r in reports for w in r.warnings), *extra_warnings]
    if notes:
        evidence["warnings"] = notes
        for note in notes:
            warnings.warn(CertificateWarning(f"{node or 'run'}: {note}"), stacklevel=2)
    failures = [f for report in reports for f in report.failures]
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise ConformanceFailure(
            check,
            failures[0] + more,
            node=node,
            evidence={"failures": "\n".join(failures)} if more else {},
        )


@pytest.mark.talos_check(
    "certs.client-certificate",
    severity="high",
    claim="The talosconfig's client certificate is not close to expiry, and the run holds no "
    "more privilege than its checks need",
)
def test_client_certificate_far_from_expiry(
    talos_cluster: TalosCluster,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    request: pytest.FixtureRequest,
    talos_check_spec: CheckSpec,
) -> None:
    report = client_certificate(_context(talos_cluster), _policy(talos_suite))
    roles = report.facts.organizations if report.facts else ()
    talos_evidence["roles"] = list(roles)
    extra = []
    # The advice applies to a talosconfig someone chose: not to the built-in emulator's,
    # which the kit makes os:admin itself.
    chosen = not request.config.getoption("talos_emulator", None)
    if chosen and ADMIN in roles and not _changes_selected(request.session):
        extra.append(
            f"the talosconfig carries {ADMIN} but every selected check is read-only: "
            "a read-only run can use an os:reader talosconfig (talosctl config new "
            "--roles os:reader); the checks that need os:admin are then reported as "
            "not run (needs os:admin), named in the verdict, and do not fail the run"
        )
    _verdict(talos_check_spec.id, None, [report], talos_evidence, extra)


@pytest.mark.talos_check(
    "certs.api-certificate",
    severity="high",
    claim="apid's certificate is issued by the talosconfig's CA, valid, renewed on time, "
    "valid no longer than the 24 hours Talos gives it, and names the address the node is "
    "reached on, every node address, 127.0.0.1, its hostname and FQDN; the CA is not close "
    "to expiry",
)
def test_apid_certificate_trusted_and_names_node(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
    apid_certificate_reads: FanOut[Gated[CertificateReport]],
) -> None:
    context = _context(talos_cluster)
    report = apid_certificate_reads.get(talos_node).value
    cas = ca_certificates(context, _policy(talos_suite))
    _verdict(talos_check_spec.id, talos_node.name, [report, *cas], talos_evidence)


@pytest.fixture(scope="module")
def apid_certificate_reads(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster, talos_direct_reach: DirectReach
) -> FanOut[Gated[CertificateReport]]:
    """apid's certificate read on every checked node at once (a TLS handshake with each
    node's own address, then its addresses and hostname), by the first node's test; the
    verdict is each test's, so that its warnings are the test's own."""

    def read(node: TalosNode) -> CertificateReport:
        # the test skips on a node not reached directly (the autouse _direct_reach) before
        # it asks; here that node is not read at all
        talos_direct_reach.require(node, DIRECT_REACH_CHECKS["certs.api-certificate"])
        return apid_certificate(node, _context(talos_cluster), timeout=talos_cluster.client.timeout)

    return values_at_once(request, test_apid_certificate_trusted_and_names_node, read)


@pytest.fixture
def node_kubeconfig(talos_node: TalosNode) -> bytes:
    """The node's admin kubeconfig (os:admin); without one the certificates are unmeasured."""
    try:
        return talos_node.client.kubeconfig()
    except PermissionDenied as exc:
        roles = talos_node.client.roles
        if ADMIN in roles:
            raise
        pytest.skip(
            f"needs {ADMIN} to fetch the kubeconfig; this talosconfig has "
            f"{', '.join(roles) or 'no role'} ({exc.details})"
        )
    except TalosError as exc:
        problem = str(exc)
    pytest.fail(
        f"no kubeconfig from {talos_node.name} to find kube-apiserver by: {problem}", pytrace=False
    )


@pytest.mark.talos_role("controlplane")
@pytest.mark.talos_check(
    "certs.kubernetes-api",
    severity="high",
    claim="kube-apiserver's certificate (at the kubeconfig's server and at the node's local "
    "API server port) is issued by the kubeconfig's CA, not close to expiry, and names what "
    "in-cluster clients reach it as (kubernetes.default.svc, the service IP, localhost, "
    "127.0.0.1) and, at the node, its addresses and hostname",
)
def test_kube_apiserver_certificates_valid_and_trusted(
    talos_node: TalosNode,
    node_kubeconfig: bytes,
    talos_cluster: TalosCluster,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_direct_reach: DirectReach,
    talos_check_spec: CheckSpec,
) -> None:
    port, source = local_api_server_port(talos_node)
    talos_evidence["local API server port"] = f"{port} ({source})"
    unreached = talos_direct_reach.reason(talos_node, KUBE_API_AT_NODE_NEEDS)
    reports = kubernetes_certificates(
        talos_node,
        node_kubeconfig,
        _policy(talos_suite),
        timeout=talos_cluster.client.timeout,
        node_port=port,
        at_node=unreached is None,
    )
    _verdict(talos_check_spec.id, talos_node.name, reports, talos_evidence)
    if unreached is not None:  # what the kubeconfig's server showed passed; the node's not
        pytest.skip(unreached)
