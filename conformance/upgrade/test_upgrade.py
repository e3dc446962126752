"""After an upgrade (profile ``post-upgrade``): the expected versions run everywhere, no node
is stuck outside the running stage, and what the upgrade must not touch — the machine config,
the system extensions, the node labels — matches the snapshot taken before it.

Before the upgrade::

    pytest conformance --talos-suite post-upgrade --talos-snapshot save pre-upgrade.json

After it::

    pytest conformance --talos-suite post-upgrade --talos-snapshot compare pre-upgrade.json \\
        --talos-expect-version v1.13.9 --talos-expect-kubernetes-version v1.36.0
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance._support.observe import READY_STABLE_FOR, STAGE_SETTLE, WatchWindow
from conformance._support.snapshot import (
    NodeSnapshot,
    Snapshot,
    config_digest,
    diff_labels,
    diff_sections,
    load_snapshot,
    lost_extension_labels,
    save_snapshot,
    section_digests,
    without_extension_labels,
)
from conformance.kubernetes.node_lookup import registered_node
from pytest_talos.checks.kubernetes import read_kube_node
from pytest_talos.cluster import KubernetesAccess, TalosCluster
from pytest_talos.errors import ConfigError, ConformanceFailure, TalosError, WaitTimeout
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.settings import SuiteSettings
from pytest_talos.plugin.conformance.vendor_profile import version_matches

EXTENSIONS = ("ExtensionStatuses.runtime.talos.dev", "runtime")


def installed_extensions(node: TalosNode) -> dict[str, str]:
    """``{name: version}`` of the node's system extensions (talosctl get extensions)."""
    found = {}
    for item in node.resources(*EXTENSIONS):
        meta = (item.spec or {}).get("metadata") or {}
        name = str(meta.get("name") or (item.spec or {}).get("image") or item.id)
        found[name] = str(meta.get("version", ""))
    return found


def kubernetes_labels(
    kube: KubernetesAccess | None, node: TalosNode, check: str
) -> dict[str, str] | None:
    """The labels of the node's Kubernetes Node, by the name Talos registers it under; None
    without Kubernetes or for a node that registers no Node. A missing Node fails ``check``."""
    if kube is None or not node.kubernetes_registration.registered:
        return None
    return dict(read_kube_node(kube, node, check).metadata.labels or {})


def take_snapshot(node: TalosNode, kube: KubernetesAccess | None, check: str) -> NodeSnapshot:
    config = node.machine_config
    return NodeSnapshot(
        talos_version=node.version.tag,
        config_digest=config_digest(config.raw),
        config_version=config.version,
        config_sections=section_digests(config.raw),
        extensions=installed_extensions(node),
        node_labels=kubernetes_labels(kube, node, check),
    )


def _kube_or_none(cluster: TalosCluster) -> KubernetesAccess | None:
    try:
        return cluster.kubernetes
    except TalosError:
        return None


@pytest.fixture(scope="session")
def snapshot_before(talos_suite: SuiteSettings) -> Snapshot:
    if talos_suite.snapshot_mode != "compare" or talos_suite.snapshot_path is None:
        pytest.skip(
            "no snapshot to compare with: take one before the upgrade with "
            "--talos-snapshot save PATH, then pass --talos-snapshot compare PATH"
        )
    try:
        return load_snapshot(talos_suite.snapshot_path)
    except ConfigError as exc:
        pytest.fail(str(exc), pytrace=False)


def _node_snapshot(snapshot: Snapshot, node: TalosNode, check: str) -> NodeSnapshot:
    before = snapshot.node(node.name)
    if before is None:
        raise ConformanceFailure(
            check,
            f"the snapshot ({snapshot.source}) has no node {node.name}",
            node=node.name,
            observed=", ".join(sorted(snapshot.nodes)),
        )
    return before


@pytest.mark.talos_check(
    "upgrade.talos-version",
    severity="critical",
    claim="Every node runs the Talos version the upgrade was meant to install",
)
def test_node_runs_expected_talos_version(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    wanted = talos_suite.expect_version
    if not wanted:
        pytest.skip("no expected version: pass --talos-expect-version v1.13.x")
    tag = talos_node.version.tag
    talos_evidence.update(expected=wanted, running=tag)
    before = _version_before(talos_suite, talos_node.name)
    if before:
        talos_evidence["before the upgrade (snapshot)"] = before
    if not version_matches(wanted, tag):
        raise ConformanceFailure(
            talos_check_spec.id,
            "the node runs another Talos version"
            + (_pre_release(wanted, tag) or _rolled_back(before, tag)),
            node=talos_node.name,
            expected=wanted,
            observed=tag,
        )


def _version_before(suite: SuiteSettings, node: str) -> str | None:
    """What the node ran when the snapshot was taken, when the run compares with one."""
    if suite.snapshot_mode != "compare" or suite.snapshot_path is None:
        return None
    try:
        before = load_snapshot(suite.snapshot_path).node(node)
    except ConfigError:
        return None
    return before.talos_version if before is not None else None


def _pre_release(wanted: str, running: str) -> str:
    """Why ``v1.14.x`` refuses ``v1.14.0-rc.1``: a pre-release or build of a release the
    expectation names matches only when named in full (docs/conformance.md)."""
    release = running.partition("+")[0].partition("-")[0]
    if release == running or not version_matches(wanted, release):
        return ""
    return (
        f": {running} is a pre-release or build of {release}, which {wanted} does not match "
        f"(it matches releases only): pass --talos-expect-version {running} to accept it"
    )


def _rolled_back(before: str | None, running: str) -> str:
    if before is None:
        return ""
    if before == running:
        return (
            f": it still runs {before}, the version it ran before the upgrade (snapshot): the "
            "upgrade did not take, or the node rolled back to its previous boot partition"
        )
    return f": it ran {before} before the upgrade (snapshot), so it changed, but not to it"


@pytest.mark.talos_check(
    "upgrade.kubernetes-version",
    severity="high",
    claim="Every node's kubelet runs the expected Kubernetes version",
)
def test_node_runs_expected_kubernetes_version(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    request: pytest.FixtureRequest,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    wanted = talos_suite.expect_kubernetes_version
    if not wanted:
        pytest.skip("no expected Kubernetes version: pass --talos-expect-kubernetes-version")
    registration = registered_node(talos_node)
    kube: KubernetesAccess = request.getfixturevalue("talos_kubernetes")
    kube_node = read_kube_node(kube, talos_node, talos_check_spec.id)
    kubelet = str(kube_node.status.node_info.kubelet_version)
    talos_evidence.update(expected=wanted, kubelet=kubelet, **registration.evidence())
    if not version_matches(wanted, kubelet):
        raise ConformanceFailure(
            talos_check_spec.id,
            "the kubelet runs another Kubernetes version",
            node=talos_node.name,
            expected=wanted,
            observed=kubelet,
        )


# controllers/time/sync.go: with no machine.time section the node waits for its first NTP
# sync without end (bootTimeout 0), and machine_status.go keeps it not ready ("time").
TIME_SYNC_HINT = (
    "the node's clock is not synced: check that the node reaches its NTP servers "
    "(machine.time.servers; time.cloudflare.com unless set), or set machine.time.bootTimeout "
    "so that it counts as synced once that time has passed"
)


def _unmet_evidence(unmet: str) -> dict[str, str] | None:
    return {"unmet conditions": unmet} if unmet else None


def _with_hint(message: str, unmet: str) -> str:
    """The failure message, with what to look at when the clock is what is waited for."""
    if any(part.strip().startswith("time:") for part in unmet.split(";")):
        return f"{message}: {TIME_SYNC_HINT}"
    return message


@pytest.mark.talos_check(
    "upgrade.nodes-running",
    severity="critical",
    claim="No node is stuck outside the running stage: every machine reports running and ready",
)
def test_node_finished_booting_and_is_ready(
    talos_node: TalosNode,
    talos_machine_watch: WatchWindow,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    # Every node is watched at once in the run's window (conformance/_support/observe.py):
    # up to STAGE_SETTLE to finish booting, then READY_STABLE_FOR without a lapse.
    try:
        held = talos_machine_watch.machine(talos_node.name)
    except WaitTimeout as exc:
        seen = exc.last_observation
        stage, ready, unmet = seen if isinstance(seen, tuple) else (str(seen), False, "")
        raise ConformanceFailure(
            talos_check_spec.id,
            _with_hint(f"the machine is not running and ready within {STAGE_SETTLE:g}s", unmet),
            node=talos_node.name,
            expected="stage running, ready",
            observed=f"stage {stage}, ready {ready}",
            evidence=_unmet_evidence(unmet),
        ) from None
    if held.lapse is not None:
        stage, ready, unmet = held.lapse
        raise ConformanceFailure(
            talos_check_spec.id,
            _with_hint("the machine did not stay running and ready", unmet),
            node=talos_node.name,
            expected=f"stage running, ready for {held.hold:g}s",
            observed=f"stage {stage}, ready {ready}",
            evidence=_unmet_evidence(unmet),
        )
    talos_evidence.update(
        stage=held.reached.stage, ready=held.reached.ready, stable_for=READY_STABLE_FOR
    )


@pytest.mark.talos_check(
    "upgrade.config-unchanged",
    severity="critical",
    claim="The machine config is byte for byte the one recorded before the upgrade",
)
def test_machine_config_unchanged_since_snapshot(
    talos_node: TalosNode,
    snapshot_before: Snapshot,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    before = _node_snapshot(snapshot_before, talos_node, talos_check_spec.id)
    config = talos_node.machine_config
    digest = config_digest(config.raw)
    talos_evidence.update(
        before=before.config_digest,
        now=digest,
        version_before=before.config_version,
        version_now=config.version,
    )
    if digest == before.config_digest:
        return
    # Which sections changed, by their digests only (the config holds the cluster's secrets).
    where = "the snapshot has no section digests (taken by an older kit)"
    if before.config_sections:
        diff = diff_sections(before.config_sections, section_digests(config.raw))
        talos_evidence.update({f"sections {k}": ", ".join(v) for k, v in diff.items() if v})
        where = "; ".join(f"{k}: {', '.join(v)}" for k, v in diff.items() if v) or (
            "no section differs (only formatting or document order)"
        )
    raise ConformanceFailure(
        talos_check_spec.id,
        f"the machine config changed since the snapshot (version {before.config_version} -> "
        f"{config.version}; {where})",
        node=talos_node.name,
        expected=before.config_digest,
        observed=digest,
    )


@pytest.mark.talos_check(
    "upgrade.extensions-unchanged",
    severity="high",
    claim="The same system extensions are installed as before the upgrade",
)
def test_extensions_unchanged_since_snapshot(
    talos_node: TalosNode,
    snapshot_before: Snapshot,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    before = _node_snapshot(snapshot_before, talos_node, talos_check_spec.id)
    now = installed_extensions(talos_node)
    missing = sorted(set(before.extensions) - set(now))
    added = sorted(set(now) - set(before.extensions))
    updated = {
        n: f"{before.extensions[n]} -> {now[n]}"
        for n in sorted(set(now) & set(before.extensions))
        if now[n] != before.extensions[n]
    }
    talos_evidence.update(before=dict(before.extensions), now=now, updated=updated)
    if missing or added:
        raise ConformanceFailure(
            talos_check_spec.id,
            "the installed extensions changed",
            node=talos_node.name,
            expected=", ".join(sorted(before.extensions)) or "none",
            observed=f"missing: {', '.join(missing) or 'none'}; new: {', '.join(added) or 'none'}",
        )


@pytest.mark.talos_check(
    "upgrade.node-labels-unchanged",
    severity="medium",
    claim="The Kubernetes node labels recorded before the upgrade are all still there",
)
def test_node_labels_unchanged_since_snapshot(
    talos_node: TalosNode,
    snapshot_before: Snapshot,
    request: pytest.FixtureRequest,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    before = _node_snapshot(snapshot_before, talos_node, talos_check_spec.id)
    registered_node(talos_node)  # no Node now: nothing to compare
    if before.node_labels is None:
        pytest.skip("the snapshot has no node labels (Kubernetes was not reachable then)")
    kube: KubernetesAccess = request.getfixturevalue("talos_kubernetes")
    now = kubernetes_labels(kube, talos_node, talos_check_spec.id) or {}
    # Extension labels carry versions an upgrade changes: upgrade.extensions-unchanged
    # judges those; here only one gone while its extension is still installed counts.
    missing, changed, added = diff_labels(
        without_extension_labels(before.node_labels), without_extension_labels(now)
    )
    lost = lost_extension_labels(before.node_labels, now, installed_extensions(talos_node))
    missing.update(lost)
    talos_evidence.update(
        missing=missing, changed={k: f"{a} -> {b}" for k, (a, b) in changed.items()}, added=added
    )
    if lost:
        talos_evidence["extension labels lost"] = {
            k: f"its extension is still installed (version {v})" for k, v in lost.items()
        }
    if missing or changed:
        raise ConformanceFailure(
            talos_check_spec.id,
            "node labels were lost or changed",
            node=talos_node.name,
            expected="every label of the snapshot, same value",
            observed="; ".join(
                [
                    *(f"{k} missing" for k in missing),
                    *(f"{k}: {a} -> {b}" for k, (a, b) in changed.items()),
                ]
            ),
        )


@pytest.mark.talos_check(
    "upgrade.snapshot-recorded",
    severity="low",
    claim="The pre-upgrade snapshot of every node was recorded (--talos-snapshot save)",
)
def test_snapshot_is_recorded_before_upgrade(
    talos_cluster: TalosCluster,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    if talos_suite.snapshot_mode != "save" or talos_suite.snapshot_path is None:
        pytest.skip("not recording a snapshot (pass --talos-snapshot save PATH before upgrading)")
    kube = _kube_or_none(talos_cluster)
    nodes = {
        node.name: take_snapshot(node, kube, talos_check_spec.id)
        for node in talos_cluster.reachable
    }
    try:
        path = save_snapshot(talos_suite.snapshot_path, nodes)
    except ConfigError as exc:
        pytest.fail(str(exc), pytrace=False)
    talos_evidence.update(path=str(path), nodes=sorted(nodes))
