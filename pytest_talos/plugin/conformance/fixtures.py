"""The conformance plugin's fixtures: a check's evidence, the run's options, and the
targets sent along with the first check of each process (for the reports)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_talos.cluster import TalosCluster
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.collector import PROP_TARGETS, targets_property
from pytest_talos.plugin.conformance.settings import SuiteSettings
from pytest_talos.plugin.conformance.state import EVIDENCE, SETTINGS, TARGETS_SENT, check_spec
from pytest_talos.releases import release_of
from pytest_talos.reporting import TargetInfo
from pytest_talos.talos_api import ADMIN

__all__ = ["talos_check_spec", "talos_evidence", "talos_suite"]


@pytest.fixture
def talos_evidence(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A dict a check fills with what it observed; it goes to results.json and report.md."""
    evidence: dict[str, Any] = request.node.stash.setdefault(EVIDENCE, {})
    return evidence


@pytest.fixture
def talos_check_spec(request: pytest.FixtureRequest) -> CheckSpec:
    """The running check's id, severity and claim, from its ``talos_check`` marker: the one
    place a check states its id (its failures name it from here)."""
    spec = check_spec(request.node)
    if spec is None:
        pytest.fail(
            f"{request.node.nodeid} asks for talos_check_spec but is not a check: mark it "
            "@pytest.mark.talos_check(id, severity=..., claim=...)",
            pytrace=False,
        )
    return spec


@pytest.fixture(scope="session")
def talos_suite(request: pytest.FixtureRequest) -> SuiteSettings:
    """The conformance options of this run."""
    return request.config.stash[SETTINGS]


def _install_image(node: TalosNode) -> str:
    """machine.install.image of the node's config: the installer (and, from the Image
    Factory, the schematic) the node was installed from; needs os:admin."""
    try:
        documents = node.machine_config.documents
    except TalosError:
        return ""
    for document in documents:
        install = (document.get("machine") or {}).get("install") or {}
        if isinstance(install, dict) and install.get("image"):
            return str(install["image"])
    return ""


def _target_info(cluster: TalosCluster) -> list[TargetInfo]:
    targets = []
    admin = ADMIN in cluster.client.roles
    for node in cluster.reachable:
        try:
            version = node.version
            tag = version.tag
            match = release_of(tag)
            if not match.exact:  # the report says which release's expectations judged it
                tag = f"{tag} (not a known release: judged by {match.release.line})"
        except TalosError:
            targets.append(TargetInfo(node.name, node.role, "unknown", "", node.address))
            continue
        image = _install_image(node) if admin else ""
        targets.append(
            TargetInfo(
                node.name,
                node.role,
                tag,
                version.platform,
                node.address,
                sha=version.sha,
                built=version.built,
                install_image=image,
            )
        )
    return targets


# The two plugin-internal fixtures keep private names (hidden from ``pytest --fixtures``); their
# functions are public so that the plugin can register them.
@pytest.fixture(scope="session", name="_conformance_targets")
def conformance_targets(
    talos_cluster: TalosCluster, record_testsuite_property: Any
) -> list[TargetInfo]:
    targets = _target_info(talos_cluster)
    for target in targets:
        record_testsuite_property(
            f"talos_node_{target.name}", f"{target.role} {target.talos_version} {target.platform}"
        )
    return targets


@pytest.fixture(autouse=True, name="_conformance_item")
def conformance_item(request: pytest.FixtureRequest) -> None:
    """Send the run's targets along with the first check of this process (for reports)."""
    config = request.config
    if check_spec(request.node) is None or config.stash.get(TARGETS_SENT, False):
        return
    targets: list[TargetInfo] = request.getfixturevalue("_conformance_targets")
    config.stash[TARGETS_SENT] = True
    request.node.user_properties.append((PROP_TARGETS, targets_property(targets)))
