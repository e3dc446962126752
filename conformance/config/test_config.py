"""Machine configuration semantics (opt-in: ``--talos-allow mutating``; the kubelet-flag
check needs ``--talos-allow disruptive``). Every change goes through the plugin's
``talos_config_guard``: the node's exact original config is restored afterwards.

As measured on Talos v1.13 nodes: validation rejects malformed documents without touching the
config, but cannot know kubelet's flags — an unknown ``machine.kubelet.extraArgs`` flag is
accepted and kubelet then restarts about every 5 s — so the kit must see kubelet fail and say
why; a ``$patch: delete`` of that key heals it within seconds; try mode reverts unless another
apply cancels it; a dry run shows a diff and changes nothing; ``no-reboot`` refuses fields that
need a reboot (``CanApplyImmediate`` in
``internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go``: ``machine.env`` and
``machine.files`` are not on its list).

A refusal, a dry run and a revert are judged again after the node has had ``CONFIG_SETTLE``
node seconds to act on them (a node may answer one thing and do another a moment later), by
the config's version and bytes and by the labels of the Kubernetes Node.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from conformance._support.context import Timing
from conformance._support.fixtures import node_runs
from conformance._support.node_runs import NodeRuns
from pytest_talos.checks import (
    assert_config_unchanged_after_rejection,
    assert_service_healthy_after_patch,
    assert_try_reverts,
)
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.errors import ConformanceFailure, InvalidArgument, WaitTimeout
from pytest_talos.guard import ConfigGuard
from pytest_talos.node import TalosNode
from pytest_talos.wait import (
    Cancelled,
    config_summary,
    wait_for_config,
    wait_service_stable,
    wait_until,
)

LABEL_PREFIX = "conformance.pytest-talos.dev"
UNKNOWN_KUBELET_FLAG = "pytest-talos-no-such-flag"
KUBELET_STABLE = 12.0  # node seconds: two kubelet restart periods (~5 s each)
TRY_WINDOW = 10.0  # node seconds of the try-mode rollback timer
LABEL_SETTLE = 30.0  # node seconds for a label to reach the Kubernetes Node
CONFIG_SETTLE = 10.0  # node seconds a refused, dry-run or reverted change is watched for
IMMEDIATE_REFUSAL = "this config change can't be applied in immediate mode"


def _label(kind: str) -> str:
    return f"{LABEL_PREFIX}/{kind}-{uuid.uuid4().hex[:8]}"


def _label_patch(key: str, value: str = "yes") -> dict[str, Any]:
    return {"machine": {"nodeLabels": {key: value}}}


def _has_label(raw: bytes, key: str) -> bool:
    return key.encode() in raw


def _kube_labels(cluster: TalosCluster, node: TalosNode) -> dict[str, str] | str:
    """The Kubernetes Node's labels, or why they could not be read (another check reports
    an unreachable Kubernetes API; this one still judges the config)."""
    try:
        return dict(cluster.kubernetes.node(node.hostname).metadata.labels or {})
    except Exception as exc:  # TalosError (no kubeconfig) or the client's ApiException
        return f"not checked: {type(exc).__name__}: {str(exc)[:200]}"


def _require_no_label(
    check: str,
    cluster: TalosCluster,
    node: TalosNode,
    key: str,
    evidence: dict[str, Any],
    why: str,
) -> None:
    labels = _kube_labels(cluster, node)
    if isinstance(labels, str):
        evidence["kubernetes node labels"] = labels
        return
    if key in labels:
        raise ConformanceFailure(
            check,
            f"{why}, but the Kubernetes Node carries its label",
            node=node.name,
            expected=f"no label {key}",
            observed=f"{key}={labels[key]}",
        )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.invalid-patch-rejected",
    severity="critical",
    claim="A patch with an invalid label name is rejected and leaves the config untouched "
    "(version and bytes, also after a settle time) and the Kubernetes Node unlabelled",
)
def test_invalid_label_patch_is_rejected_without_change(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
) -> None:
    # A valid label rides along with the invalid one: if the node applies the patch anyway,
    # even later, the valid one shows on the Kubernetes Node.
    key = _label("rejected")
    patch = {"machine": {"nodeLabels": {key: "yes", "bad label name with spaces": "yes"}}}
    result = assert_config_unchanged_after_rejection(
        talos_node, patch, settle=talos_timing.real(CONFIG_SETTLE)
    )
    talos_evidence.update(result.evidence)
    _require_no_label(
        "config.invalid-patch-rejected",
        talos_cluster,
        talos_node,
        key,
        talos_evidence,
        "the patch was refused and the config is unchanged",
    )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.no-reboot-refuses-reboot-fields",
    severity="high",
    claim="A no-reboot apply of fields that need a reboot (machine.env, machine.files) is "
    "refused and leaves the config untouched",
)
@pytest.mark.parametrize("field", ["env", "files"])
def test_no_reboot_refuses_reboot_only_fields(
    talos_node: TalosNode, talos_timing: Timing, talos_evidence: dict[str, Any], field: str
) -> None:
    probe = uuid.uuid4().hex[:8]
    # Harmless if a defective node takes it: an unused variable, a file in /var.
    patch: dict[str, Any] = {"machine": {"env": {"PYTEST_TALOS_PROBE": probe}}}
    if field == "files":
        patch = {
            "machine": {
                "files": [
                    {
                        "content": "pytest-talos probe\n",
                        "permissions": 0o644,
                        "op": "create",
                        "path": f"/var/pytest-talos-probe-{probe}",
                    }
                ]
            }
        }
    result = assert_config_unchanged_after_rejection(
        talos_node,
        patch,
        mode="no-reboot",
        settle=talos_timing.real(CONFIG_SETTLE),
        expect_rejection=IMMEDIATE_REFUSAL,
        check_id="config.no-reboot-refuses-reboot-fields",
    )
    talos_evidence.update(field=f"machine.{field}", **result.evidence)


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.label-applies-without-reboot",
    severity="high",
    claim="A no-reboot label patch applies at once, bumps the config version and reaches "
    "the Kubernetes Node",
)
def test_label_patch_applies_without_reboot(
    talos_node: TalosNode,
    talos_kubernetes: KubernetesAccess,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
) -> None:
    key = _label("applied")
    before = talos_node.machine_config
    reply = talos_node.apply_patch(_label_patch(key), mode="no-reboot")
    after = talos_node.machine_config
    talos_evidence.update(
        label=key,
        reply=reply.mode_details,
        version_before=before.version,
        version_after=after.version,
    )
    if reply.mode != "no-reboot" or "without a reboot" not in reply.mode_details:
        raise ConformanceFailure(
            "config.label-applies-without-reboot",
            "the label patch was not applied immediately",
            node=talos_node.name,
            expected="no-reboot: Applied configuration without a reboot",
            observed=f"{reply.mode}: {reply.mode_details}",
        )
    if after.version <= before.version or not _has_label(after.raw, key):
        raise ConformanceFailure(
            "config.label-applies-without-reboot",
            "the active config did not change",
            node=talos_node.name,
            expected=f"version > {before.version} with the label",
            observed=config_summary(after.raw, after.version),
        )
    try:
        wait_until(
            lambda: talos_kubernetes.node(talos_node.hostname).metadata.labels or {},
            lambda labels: labels.get(key) == "yes",
            timeout=talos_timing.real(LABEL_SETTLE),
            node=talos_node.name,
            description=f"label {key} on the Kubernetes Node",
        )
    except WaitTimeout as exc:
        raise ConformanceFailure(
            "config.label-applies-without-reboot",
            "the label never reached the Kubernetes Node",
            node=talos_node.name,
            expected=f"{key}=yes",
            observed=str(exc.last_observation),
        ) from None


@pytest.mark.talos_disruptive
@pytest.mark.talos_check(
    "config.kubelet-flag-failure-detected",
    severity="high",
    claim="An unknown kubelet flag passes validation, the kit reports kubelet failing with "
    "the cause, and $patch: delete heals it",
)
def test_unknown_kubelet_flag_is_detected_and_healed(
    talos_node: TalosNode, talos_timing: Timing, talos_evidence: dict[str, Any]
) -> None:
    check = "config.kubelet-flag-failure-detected"
    bad = {"machine": {"kubelet": {"extraArgs": {UNKNOWN_KUBELET_FLAG: "true"}}}}
    try:
        reply = talos_node.apply_patch(bad, mode="no-reboot")
    except InvalidArgument as exc:
        pytest.skip(
            f"the node refuses unknown kubelet flags up front ({exc.details}); "
            "there is no runtime failure to detect"
        )
    talos_evidence["accepted"] = reply.mode_details
    stable = talos_timing.real(KUBELET_STABLE)
    try:
        report = wait_service_stable(
            talos_node, "kubelet", stable_for=stable, timeout=stable * 3, max_restarts=2
        )
    except WaitTimeout as exc:
        talos_evidence["kubelet after the bad flag"] = exc.message
    else:
        raise ConformanceFailure(
            check,
            "kubelet stayed healthy with an unknown flag: the failure cannot be seen",
            node=talos_node.name,
            expected="kubelet failing (unknown flag)",
            observed=report.timeline(),
        )
    cause = talos_node.logs("kubelet", tail=40) + "\n".join(
        e.msg for e in talos_node.service("kubelet").events
    )
    if UNKNOWN_KUBELET_FLAG not in cause:
        raise ConformanceFailure(
            check,
            "kubelet fails, but neither its log nor its events name the cause",
            node=talos_node.name,
            expected=f"'unknown flag: --{UNKNOWN_KUBELET_FLAG}'",
            observed=cause[-800:],
        )
    heal = {"machine": {"kubelet": {"extraArgs": {UNKNOWN_KUBELET_FLAG: {"$patch": "delete"}}}}}
    result = assert_service_healthy_after_patch(
        talos_node, heal, "kubelet", stable_for=stable, timeout=stable + talos_timing.real(60)
    )
    talos_evidence["healed"] = result.evidence.get("waited", "")


def _try_reverts(
    node: TalosNode, cancelled: Cancelled, *, cluster: TalosCluster, timing: Timing
) -> dict[str, Any]:
    """config.try-mode-reverts on one node: its evidence, or the ConformanceFailure."""
    key = _label("tried")
    result = assert_try_reverts(
        node,
        _label_patch(key),
        try_timeout=TRY_WINDOW,
        timeout=timing.real(TRY_WINDOW * 2) + node.client.timeout,
        settle=timing.real(CONFIG_SETTLE),
        cancelled=cancelled,
    )
    # The revert must reach Kubernetes too: the tried label leaves the Node.
    try:
        wait_until(
            lambda: _kube_labels(cluster, node),
            lambda labels: isinstance(labels, str) or key not in labels,
            timeout=timing.real(LABEL_SETTLE),
            node=node.name,
            description=f"label {key} to leave the Kubernetes Node",
            cancelled=cancelled,
        )
    except WaitTimeout:
        raise ConformanceFailure(
            "config.try-mode-reverts",
            "the config was reverted, but the Kubernetes Node kept the tried label",
            node=node.name,
            expected=f"no label {key} after the revert",
            observed=f"{key} still set {LABEL_SETTLE:g} node seconds later",
        ) from None
    return dict(result.evidence)


@pytest.fixture(scope="module")
def try_reverts(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster, talos_timing: Timing
) -> Iterator[NodeRuns[dict[str, Any]]]:
    """config.try-mode-reverts on every node at once: one try window for the fleet."""
    check = partial(_try_reverts, cluster=talos_cluster, timing=talos_timing)
    yield from node_runs(request, test_try_mode_change_reverts, check, "the try-mode revert")


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.try-mode-reverts",
    severity="high",
    claim="A try-mode change is reverted to the exact previous config when its timer ends, "
    "stays reverted, and its label leaves the Kubernetes Node",
)
def test_try_mode_change_reverts(
    talos_node: TalosNode,
    try_reverts: NodeRuns[dict[str, Any]],
    talos_evidence: dict[str, Any],
) -> None:
    talos_evidence.update(try_reverts.outcome(talos_node))


def _apply_cancels_revert(node: TalosNode, cancelled: Cancelled, *, timing: Timing) -> str:
    """config.apply-cancels-try-revert on one node: the config after both applies."""
    tried, kept = _label("tried"), _label("kept")
    node.apply_patch(_label_patch(tried), mode="try", try_timeout=TRY_WINDOW)
    node.apply_patch(_label_patch(kept), mode="no-reboot")
    current = node.machine_config
    try:
        changed = wait_for_config(
            node,
            lambda raw: raw != current.raw,
            timeout=timing.real(TRY_WINDOW * 1.5) + 0.5,
            description="a revert (there should be none)",
            cancelled=cancelled,
        )
    except WaitTimeout:
        # nothing moved through the whole try window and beyond: the revert was cancelled
        return config_summary(current.raw, current.version)
    raise ConformanceFailure(
        "config.apply-cancels-try-revert",
        "the try-mode revert still happened",
        node=node.name,
        expected="the config stays as last applied",
        observed=f"reverted: {config_summary(changed)}; try label present: "
        f"{_has_label(changed, tried)}, later label present: {_has_label(changed, kept)}",
    )


@pytest.fixture(scope="module")
def apply_cancels(request: pytest.FixtureRequest, talos_timing: Timing) -> Iterator[NodeRuns[str]]:
    """config.apply-cancels-try-revert on every node at once."""
    check = partial(_apply_cancels_revert, timing=talos_timing)
    yield from node_runs(
        request, test_apply_during_try_window_cancels_revert, check, "the cancelled try revert"
    )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.apply-cancels-try-revert",
    severity="medium",
    claim="A regular apply during the try window cancels the pending revert",
)
def test_apply_during_try_window_cancels_revert(
    talos_node: TalosNode, apply_cancels: NodeRuns[str], talos_evidence: dict[str, Any]
) -> None:
    talos_evidence["after both applies"] = apply_cancels.outcome(talos_node)


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.dry-run-changes-nothing",
    severity="high",
    claim="A dry run shows the change as a diff and leaves the config untouched (also after "
    "a settle time) and the Kubernetes Node unlabelled",
)
def test_dry_run_shows_diff_and_changes_nothing(
    talos_node: TalosNode,
    talos_cluster: TalosCluster,
    talos_config_guard: ConfigGuard,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
) -> None:
    check = "config.dry-run-changes-nothing"
    key = _label("dry-run")
    # A dry run is guarded like any change: a node that applies it anyway is put back.
    talos_config_guard.protect(talos_node)
    before = talos_node.machine_config
    reply = talos_node.apply_patch(_label_patch(key), mode="no-reboot", dry_run=True)
    after = talos_node.machine_config
    when = "at once"
    if (after.version, after.raw) == (before.version, before.raw):
        settle = talos_timing.real(CONFIG_SETTLE)
        with contextlib.suppress(WaitTimeout):
            wait_for_config(
                talos_node,
                lambda raw: raw != before.raw,
                timeout=settle,
                description="a late change (there should be none)",
            )
        after, when = talos_node.machine_config, f"within {CONFIG_SETTLE:g} node seconds"
    talos_evidence.update(
        reply=reply.mode_details.splitlines()[:3], before=before.version, after=after.version
    )
    problems = []
    if "Dry run summary" not in reply.mode_details or key not in reply.mode_details:
        problems.append("the reply has no dry-run diff naming the label")
    if after.version != before.version or after.raw != before.raw:
        talos_config_guard.restore_node(talos_node)
        problems.append(
            f"the config changed {when} (restored): "
            f"{config_summary(before.raw, before.version)} -> "
            f"{config_summary(after.raw, after.version)}"
        )
    if problems:
        raise ConformanceFailure(
            check,
            "; ".join(problems),
            node=talos_node.name,
            expected="a 'Dry run summary' with the diff, config unchanged",
        )
    _require_no_label(
        check,
        talos_cluster,
        talos_node,
        key,
        talos_evidence,
        "the dry run left the config unchanged",
    )
