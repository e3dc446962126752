"""Config drift: every node is exactly what the desired state in git says (read-only).

Give the desired state with ``--talos-desired DIR`` (ini ``talos_desired``, env
``$TALOS_DESIRED``): the base configs ``talosctl gen config`` wrote, the patch files, and
``talos-desired.yaml`` saying which patches make which node (see docs/conformance.md). The
active config must equal the desired one as data. The persistent one must equal the active
one, or a reboot changes the node: that needs no desired state and runs without one.
Differences name the document and path; secret values are masked. Reading machine configs
needs ``os:admin``. ``-k drift`` runs only these.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from pytest_talos.checks.config import read_persisted_config
from pytest_talos.cluster import TalosCluster
from pytest_talos.drift import DesiredState, check_node, compare_configs, load_desired
from pytest_talos.errors import ConfigError, ConformanceFailure
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.settings import DESIRED_FROM_EMULATOR, SuiteSettings

NO_DESIRED_STATE = "no desired state to compare with"
NO_PERSISTENT = (
    "no persistent config: the node booted from its STATE partition and nothing was applied "
    "since, so the next boot loads the same config"
)


@pytest.fixture(scope="module")
def talos_desired(
    talos_suite: SuiteSettings,
    talos_cluster: TalosCluster,
    talos_emulator: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> DesiredState:
    """The desired state of ``--talos-desired`` (``@emulator``: the emulated cluster's own)."""
    if talos_suite.desired is None:
        pytest.skip(
            f"{NO_DESIRED_STATE}: give --talos-desired DIR (base configs, patches "
            "and talos-desired.yaml, kept in git)"
        )
    directory = talos_suite.desired
    if directory == DESIRED_FROM_EMULATOR:
        if talos_emulator is None:
            pytest.fail(
                f"--talos-desired {DESIRED_FROM_EMULATOR} needs --talos-emulator", pytrace=False
            )
        directory = tmp_path_factory.mktemp("desired")
        talos_emulator.write_desired(directory)
    try:
        return load_desired(Path(directory))
    except ConfigError as exc:
        pytest.fail(f"--talos-desired: {exc}", pytrace=False)


@pytest.mark.talos_check(
    "config.matches-desired",
    severity="high",
    claim="The node's active machine config equals its desired config from git (as data: "
    "documents, keys and values; comments and order aside)",
)
def test_active_config_matches_desired_state(
    talos_node: TalosNode,
    talos_desired: DesiredState,
    talos_unchanged: Callable[[TalosNode], AbstractContextManager[None]],
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    with talos_unchanged(talos_node):  # not mid-way through another worker's change
        drift = check_node(talos_node, talos_desired)
    talos_evidence.update(desired=drift.plan.describe(), active_version=drift.active_version)
    if drift.matches_desired:
        return
    talos_evidence["differences"] = drift.active.to_json()
    raise ConformanceFailure(
        talos_check_spec.id,
        f"the active config differs from the desired state in "
        f"{len(drift.active.differences)} place(s) ({', '.join(drift.active.documents)})",
        node=talos_node.name,
        expected=f"the config of {drift.plan.describe()}",
        evidence={
            "diff": "\n".join(drift.active.lines()),
            **(
                {}
                if drift.plan.named
                else {
                    "note": "the desired state does not name this node (no nodes: entry, no patch "
                    "selects its hostname)"
                }
            ),
        },
    )


@pytest.mark.talos_check(
    "config.persisted-matches-active",
    severity="medium",
    claim="The node's persistent machine config equals its active one: no change waits for "
    "the next reboot",
)
def test_persistent_config_matches_active_config(
    talos_node: TalosNode,
    talos_unchanged: Callable[[TalosNode], AbstractContextManager[None]],
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    # Persistent against active: no desired state involved. An installed node that booted
    # from STATE keeps no persistent config until an apply
    # (internal/app/machined/pkg/controllers/config/acquire.go): its next boot loads the same.
    # Both read under the node's lock: another worker's try window moves them apart.
    with talos_unchanged(talos_node):
        active = talos_node.machine_config
        persisted = read_persisted_config(talos_node)
    talos_evidence.update(
        active_version=active.version,
        persistent_version=persisted.version if persisted is not None else None,
    )
    if persisted is None:
        talos_evidence["note"] = NO_PERSISTENT
        return
    staged = compare_configs(active.raw, persisted.raw, left_name="active", right_name="persistent")
    if staged.equal:
        return
    talos_evidence["staged_differences"] = staged.to_json()
    raise ConformanceFailure(
        talos_check_spec.id,
        "a change is waiting for the next reboot: the persistent config differs from the "
        f"active one in {len(staged.differences)} place(s) (a staged apply, or a try-mode "
        "change not yet reverted) — not drift from git, but the next boot changes the node",
        node=talos_node.name,
        expected="persistent = active",
        evidence={"diff": "\n".join(staged.lines())},
    )
