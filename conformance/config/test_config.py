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
``machine.files`` are not on its list), and so does ``try`` (its case falls through to
no-reboot's). Validation and the dry-run return come before the mode is acted on
(``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`` ApplyConfiguration),
so the refusal and the dry run are also sent in ``staged`` mode, judged by the persistent
config (the next boot's), which is the only one staged mode writes.

A refusal, a dry run and a revert are judged again after the node has had ``CONFIG_SETTLE``
node seconds to act on them (a node may answer one thing and do another a moment later), by
the config's version and bytes and by the labels of the Kubernetes Node.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from conformance._support.context import Timing
from conformance._support.fixtures import node_runs
from conformance._support.node_runs import NodeRun, NodeRuns
from pytest_talos.checks import (
    assert_config_unchanged_after_rejection,
    assert_service_healthy_after_patch,
    assert_try_reverts,
)
from pytest_talos.checks.config import (
    persisted_changes,
    read_persisted_config,
    try_timers,
    try_window_missed,
)
from pytest_talos.checks.kubernetes import read_kube_node
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.drift import compare_configs
from pytest_talos.errors import ConformanceFailure, InvalidArgument, WaitTimeout
from pytest_talos.guard import ConfigGuard
from pytest_talos.models import ApplyMode
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.wait import (
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


def _kube_labels(cluster: TalosCluster, node: TalosNode, check: str) -> dict[str, str] | str:
    """The labels of the node's Kubernetes Node (by the name Talos registers it under), or
    why they could not be read: a node that registers no Node, or an unreachable Kubernetes
    API (another check reports that; this one still judges the config). A Node that does
    not exist is ``check``'s failure."""
    registration = node.kubernetes_registration
    if not registration.registered:
        return f"not checked: {registration.skip_reason}"
    try:
        return dict(read_kube_node(cluster.kubernetes, node, check).metadata.labels or {})
    except ConformanceFailure:
        raise  # the Node is missing
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
    labels = _kube_labels(cluster, node, check)
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


# The modes a refusal and a dry run are sent in: the handler validates, and returns on a dry
# run, before it acts on the mode; staged writes only the next boot's config.
CHECKED_MODES: tuple[ApplyMode, ...] = ("no-reboot", "staged")


def _mode(case: str) -> ApplyMode:
    return next(mode for mode in CHECKED_MODES if mode == case)


def _invalid_patch_rejected(
    node: TalosNode, run: NodeRun, *, cluster: TalosCluster, timing: Timing
) -> None:
    """config.invalid-patch-rejected on one node, in the mode ``run.case``."""
    # A valid label rides along with the invalid one: if the node applies the patch anyway,
    # even later, the valid one shows on the Kubernetes Node.
    key = _label("rejected")
    patch = {"machine": {"nodeLabels": {key: "yes", "bad label name with spaces": "yes"}}}
    result = assert_config_unchanged_after_rejection(
        node,
        patch,
        mode=_mode(run.case),
        settle=timing.real(CONFIG_SETTLE),
        cancelled=run.cancelled,
    )
    run.evidence.update(mode=run.case, **result.evidence)
    _require_no_label(
        run.check_id,
        cluster,
        node,
        key,
        run.evidence,
        "the patch was refused and the config is unchanged",
    )


@pytest.fixture(scope="module")
def invalid_patch(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster, talos_timing: Timing
) -> Iterator[NodeRuns[None]]:
    check = partial(_invalid_patch_rejected, cluster=talos_cluster, timing=talos_timing)
    yield from node_runs(
        request,
        test_invalid_label_patch_is_rejected_without_change,
        check,
        "the invalid patch",
        cases=CHECKED_MODES,
    )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.invalid-patch-rejected",
    severity="critical",
    claim="A patch with an invalid label name is rejected, no-reboot or staged, and leaves "
    "the config untouched (active and persistent; version and bytes, also after a settle "
    "time) and the Kubernetes Node unlabelled",
)
@pytest.mark.parametrize("mode", CHECKED_MODES)
def test_invalid_label_patch_is_rejected_without_change(
    talos_node: TalosNode,
    invalid_patch: NodeRuns[None],
    talos_evidence: dict[str, Any],
    mode: str,
) -> None:
    invalid_patch.outcome(talos_node, talos_evidence, mode)


# Each field in no-reboot mode, and machine.env in try mode (CanApplyImmediate runs for both).
REBOOT_FIELDS = ("env", "files", "env-try")


def _reboot_field_patch(field: str) -> dict[str, Any]:
    """Harmless if a defective node takes it: an unused variable, a file in /var."""
    probe = uuid.uuid4().hex[:8]
    if field == "env":
        return {"machine": {"env": {"PYTEST_TALOS_PROBE": probe}}}
    return {
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


def _reboot_field_refused(node: TalosNode, run: NodeRun, *, timing: Timing) -> None:
    """config.no-reboot-refuses-reboot-fields on one node, for the case ``run.case``: a
    field, in no-reboot mode or (``-try``) in try mode."""
    field, _, tried = run.case.partition("-")
    mode: ApplyMode = "try" if tried else "no-reboot"
    result = assert_config_unchanged_after_rejection(
        node,
        _reboot_field_patch(field),
        mode=mode,
        settle=timing.real(CONFIG_SETTLE),
        expect_rejection=IMMEDIATE_REFUSAL,
        check_id=run.check_id,
        cancelled=run.cancelled,
        # A node that takes it reverts by itself within the settle time: the guard's
        # no-reboot restore of a reboot-only field would be refused as well.
        try_timeout=CONFIG_SETTLE / 2 if tried else None,
    )
    run.evidence.update(field=f"machine.{field}", mode=mode, **result.evidence)


@pytest.fixture(scope="module")
def reboot_fields(request: pytest.FixtureRequest, talos_timing: Timing) -> Iterator[NodeRuns[None]]:
    check = partial(_reboot_field_refused, timing=talos_timing)
    yield from node_runs(
        request,
        test_no_reboot_refuses_reboot_only_fields,
        check,
        "the no-reboot refusal",
        cases=REBOOT_FIELDS,
    )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.no-reboot-refuses-reboot-fields",
    severity="high",
    claim="A no-reboot apply of fields that need a reboot (machine.env, machine.files), and "
    "a try-mode one of machine.env, is refused and leaves the config untouched",
)
@pytest.mark.parametrize("case", REBOOT_FIELDS)
def test_no_reboot_refuses_reboot_only_fields(
    talos_node: TalosNode,
    reboot_fields: NodeRuns[None],
    talos_evidence: dict[str, Any],
    case: str,
) -> None:
    reboot_fields.outcome(talos_node, talos_evidence, case)


def _label_applies(
    node: TalosNode, run: NodeRun, *, kubernetes: KubernetesAccess, timing: Timing
) -> None:
    """config.label-applies-without-reboot on one node."""
    check = run.check_id
    key = _label("applied")
    before = node.machine_config
    reply = node.apply_patch(_label_patch(key), mode="no-reboot")
    after = node.machine_config
    run.evidence.update(
        label=key,
        reply=reply.mode_details,
        version_before=before.version,
        version_after=after.version,
    )
    if reply.mode != "no-reboot" or "without a reboot" not in reply.mode_details:
        raise ConformanceFailure(
            check,
            "the label patch was not applied immediately",
            node=node.name,
            expected="no-reboot: Applied configuration without a reboot",
            observed=f"{reply.mode}: {reply.mode_details}",
        )
    if after.version <= before.version or not _has_label(after.raw, key):
        raise ConformanceFailure(
            check,
            "the active config did not change",
            node=node.name,
            expected=f"version > {before.version} with the label",
            observed=config_summary(after.raw, after.version),
        )
    _require_persisted_as_active(node, after.raw, check)
    registration = node.kubernetes_registration
    run.evidence.update(registration.evidence())
    if not registration.registered:
        pytest.skip(f"the label was applied to the config; {registration.skip_reason}")
    try:
        wait_until(
            lambda: read_kube_node(kubernetes, node, check).metadata.labels or {},
            lambda labels: labels.get(key) == "yes",
            timeout=timing.allow(LABEL_SETTLE),
            node=node.name,
            description=f"label {key} on the Kubernetes Node",
            cancelled=run.cancelled,
        )
    except WaitTimeout as exc:
        raise ConformanceFailure(
            check,
            "the label never reached the Kubernetes Node",
            node=node.name,
            expected=f"{key}=yes",
            observed=str(exc.last_observation),
        ) from None


def _require_persisted_as_active(node: TalosNode, active: bytes, check: str) -> None:
    """A no-reboot apply writes the persistent config, then the active one, from the same
    config (``v1alpha1_server.go`` ApplyConfiguration NO_REBOOT: SetPersistedConfig, then
    SetConfig), both before it replies: the next boot keeps the change."""
    persisted = read_persisted_config(node)
    if persisted is None:
        problem = "the node has no persistent config after the apply"
    else:
        comparison = compare_configs(
            active, persisted.raw, left_name="active", right_name="persistent"
        )
        if comparison.equal:
            return
        problem = "; ".join(comparison.lines(limit=5))
    raise ConformanceFailure(
        check,
        "the label was applied to the active config only: the next boot would load a "
        "config without it",
        node=node.name,
        expected="the persistent config equal to the active one (a no-reboot apply writes both)",
        observed=problem,
    )


@pytest.fixture(scope="module")
def label_applies(
    request: pytest.FixtureRequest, talos_kubernetes: KubernetesAccess, talos_timing: Timing
) -> Iterator[NodeRuns[None]]:
    check = partial(_label_applies, kubernetes=talos_kubernetes, timing=talos_timing)
    yield from node_runs(
        request, test_label_patch_applies_without_reboot, check, "the no-reboot label"
    )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.label-applies-without-reboot",
    severity="high",
    claim="A no-reboot label patch applies at once, bumps the config version, is kept for "
    "the next boot (persistent config) and reaches the Kubernetes Node",
)
def test_label_patch_applies_without_reboot(
    talos_node: TalosNode, label_applies: NodeRuns[None], talos_evidence: dict[str, Any]
) -> None:
    label_applies.outcome(talos_node, talos_evidence)


@pytest.mark.talos_disruptive
@pytest.mark.talos_check(
    "config.kubelet-flag-failure-detected",
    severity="high",
    claim="An unknown kubelet flag passes validation, the kit reports kubelet failing with "
    "the cause, and $patch: delete heals it",
)
def test_unknown_kubelet_flag_is_detected_and_healed(
    talos_node: TalosNode,
    talos_timing: Timing,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    check = talos_check_spec.id
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


def _try_reverts(node: TalosNode, run: NodeRun, *, cluster: TalosCluster, timing: Timing) -> None:
    """config.try-mode-reverts on one node."""
    key = _label("tried")
    result = assert_try_reverts(
        node,
        _label_patch(key),
        try_timeout=TRY_WINDOW,
        timeout=timing.real(TRY_WINDOW * 2) + node.client.timeout,
        settle=timing.real(CONFIG_SETTLE),
        cancelled=run.cancelled,
        time_scale=timing.scale,
    )
    run.evidence.update(result.evidence)
    # The revert must reach Kubernetes too: the tried label leaves the Node.
    try:
        wait_until(
            lambda: _kube_labels(cluster, node, run.check_id),
            lambda labels: isinstance(labels, str) or key not in labels,
            timeout=timing.allow(LABEL_SETTLE),
            node=node.name,
            description=f"label {key} to leave the Kubernetes Node",
            cancelled=run.cancelled,
        )
    except WaitTimeout:
        raise ConformanceFailure(
            run.check_id,
            "the config was reverted, but the Kubernetes Node kept the tried label",
            node=node.name,
            expected=f"no label {key} after the revert",
            observed=f"{key} still set {LABEL_SETTLE:g} node seconds later",
        ) from None


@pytest.fixture(scope="module")
def try_reverts(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster, talos_timing: Timing
) -> Iterator[NodeRuns[None]]:
    """config.try-mode-reverts on every node at once: one try window for the fleet."""
    check = partial(_try_reverts, cluster=talos_cluster, timing=talos_timing)
    yield from node_runs(request, test_try_mode_change_reverts, check, "the try-mode revert")


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.try-mode-reverts",
    severity="high",
    claim="A try-mode change is reverted to the exact previous config when its timer ends "
    "(not seconds before), stays reverted, never reaches the persistent config, and its "
    "label leaves the Kubernetes Node",
)
def test_try_mode_change_reverts(
    talos_node: TalosNode,
    try_reverts: NodeRuns[None],
    talos_evidence: dict[str, Any],
) -> None:
    try_reverts.outcome(talos_node, talos_evidence)


def _apply_cancels_revert(node: TalosNode, run: NodeRun, *, timing: Timing) -> None:
    """config.apply-cancels-try-revert on one node. The regular apply must land inside the
    try window; when this machine cannot tell that it did (its reply came after the timer
    could have fired), the pair is sent again with a timer twice as long."""
    timers = try_timers(TRY_WINDOW)
    seen_after = 0.0
    for window in timers:
        sent = time.monotonic()  # the node arms its timer after this
        tried, kept = _applied_during_try_window(node, window)
        seen_after = (time.monotonic() - sent) * timing.scale
        if seen_after < window:
            _require_no_revert(node, run, window, tried, kept, timing)
            return
        run.evidence[f"{window:g}s timer"] = (
            f"not judged: the regular apply returned {seen_after:.1f} node seconds after "
            "the try-mode one, when the timer may have fired first"
        )
    raise try_window_missed(node, "the cancelled try-mode revert", timers, seen_after)


def _applied_during_try_window(node: TalosNode, window: float) -> tuple[str, str]:
    """A try-mode apply of one label, then a regular apply of another; their labels."""
    tried, kept = _label("tried"), _label("kept")
    node.apply_patch(_label_patch(tried), mode="try", try_timeout=window)
    node.apply_patch(_label_patch(kept), mode="no-reboot")
    return tried, kept


def _require_no_revert(
    node: TalosNode, run: NodeRun, window: float, tried: str, kept: str, timing: Timing
) -> None:
    """The regular apply landed, and nothing moves through the try window and beyond."""
    current = node.machine_config
    run.evidence["after both applies"] = config_summary(current.raw, current.version)
    if not _has_label(current.raw, kept):
        raise ConformanceFailure(
            run.check_id,
            "the regular apply during the try window did not land: its label is not in the "
            "active config",
            node=node.name,
            expected=f"the active config with label {kept}",
            observed=f"{config_summary(current.raw, current.version)}; try label present: "
            f"{_has_label(current.raw, tried)}",
        )
    try:
        changed = wait_for_config(
            node,
            lambda raw: raw != current.raw,
            timeout=timing.real(window * 1.5) + 0.5,
            description="a revert (there should be none)",
            cancelled=run.cancelled,
        )
    except WaitTimeout:
        return  # nothing moved through the whole try window and beyond: the revert was cancelled
    raise ConformanceFailure(
        run.check_id,
        "the try-mode revert still happened",
        node=node.name,
        expected="the config stays as last applied",
        observed=f"reverted: {config_summary(changed)}; try label present: "
        f"{_has_label(changed, tried)}, later label present: {_has_label(changed, kept)}",
    )


@pytest.fixture(scope="module")
def apply_cancels(request: pytest.FixtureRequest, talos_timing: Timing) -> Iterator[NodeRuns[None]]:
    """config.apply-cancels-try-revert on every node at once."""
    check = partial(_apply_cancels_revert, timing=talos_timing)
    yield from node_runs(
        request, test_apply_during_try_window_cancels_revert, check, "the cancelled try revert"
    )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.apply-cancels-try-revert",
    severity="medium",
    claim="A regular apply during the try window lands and cancels the pending revert",
)
def test_apply_during_try_window_cancels_revert(
    talos_node: TalosNode, apply_cancels: NodeRuns[None], talos_evidence: dict[str, Any]
) -> None:
    apply_cancels.outcome(talos_node, talos_evidence)


def _dry_run_changes_nothing(
    node: TalosNode, run: NodeRun, *, cluster: TalosCluster, timing: Timing
) -> None:
    """config.dry-run-changes-nothing on one node, in the mode ``run.case``."""
    check = run.check_id
    key = _label("dry-run")
    # A dry run is guarded like any change: a node that applies it anyway is put back.
    guard = node.guard
    if not isinstance(guard, ConfigGuard):
        raise TypeError(f"the dry-run check needs a node with a ConfigGuard, not {guard!r}")
    guard.protect(node)
    before, persisted_before = node.machine_config, read_persisted_config(node)
    reply = node.apply_patch(_label_patch(key), mode=_mode(run.case), dry_run=True)
    after = node.machine_config
    when = "at once"
    if (after.version, after.raw) == (before.version, before.raw):
        with contextlib.suppress(WaitTimeout):
            wait_for_config(
                node,
                lambda raw: raw != before.raw,
                timeout=timing.real(CONFIG_SETTLE),
                description="a late change (there should be none)",
                cancelled=run.cancelled,
            )
        after, when = node.machine_config, f"within {CONFIG_SETTLE:g} node seconds"
    # The config for the next boot too: a dry run returns before SetPersistedConfig.
    staged = persisted_changes(persisted_before, read_persisted_config(node))
    run.evidence.update(
        mode=run.case,
        reply=reply.mode_details.splitlines()[:3],
        before=before.version,
        after=after.version,
    )
    problems = []
    if "Dry run summary" not in reply.mode_details or key not in reply.mode_details:
        problems.append("the reply has no dry-run diff naming the label")
    if staged:
        problems.append(f"{'; '.join(staged)} {when} (restored)")
    if after.version != before.version or after.raw != before.raw or staged:
        guard.restore_node(node)
    if after.version != before.version or after.raw != before.raw:
        problems.append(
            f"the config changed {when} (restored): "
            f"{config_summary(before.raw, before.version)} -> "
            f"{config_summary(after.raw, after.version)}"
        )
    if problems:
        raise ConformanceFailure(
            check,
            "; ".join(problems),
            node=node.name,
            expected="a 'Dry run summary' with the diff, config unchanged",
        )
    _require_no_label(
        check, cluster, node, key, run.evidence, "the dry run left the config unchanged"
    )


@pytest.fixture(scope="module")
def dry_run(
    request: pytest.FixtureRequest, talos_cluster: TalosCluster, talos_timing: Timing
) -> Iterator[NodeRuns[None]]:
    check = partial(_dry_run_changes_nothing, cluster=talos_cluster, timing=talos_timing)
    yield from node_runs(
        request,
        test_dry_run_shows_diff_and_changes_nothing,
        check,
        "the dry run",
        cases=CHECKED_MODES,
    )


@pytest.mark.talos_mutating
@pytest.mark.talos_check(
    "config.dry-run-changes-nothing",
    severity="high",
    claim="A dry run, no-reboot or staged, shows the change as a diff and leaves the config "
    "untouched (active and persistent, also after a settle time) and the Kubernetes Node "
    "unlabelled",
)
@pytest.mark.parametrize("mode", CHECKED_MODES)
def test_dry_run_shows_diff_and_changes_nothing(
    talos_node: TalosNode, dry_run: NodeRuns[None], talos_evidence: dict[str, Any], mode: str
) -> None:
    dry_run.outcome(talos_node, talos_evidence, mode)
