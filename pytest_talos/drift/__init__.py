"""Config drift: is every node exactly what the desired state in git says?

::

    from pytest_talos.cluster import TalosCluster
    from pytest_talos.drift import check_nodes, load_desired

    desired = load_desired("talos/")           # base configs, patches, talos-desired.yaml
    with TalosCluster.connect("talosconfig") as cluster:
        for drift in check_nodes(cluster.reachable, desired):
            print("\\n".join(drift.lines()))   # secrets masked

Or from a shell (exit 1 on drift): ``python -m pytest_talos.drift --desired talos/``.
Modules: :mod:`.desired` (the directory and its mapping), :mod:`.compare` (configs as data),
:mod:`.mask` (what is never shown), :mod:`.nodes` (reading the nodes).
"""

from pytest_talos.drift.compare import (
    ABSENT,
    ConfigComparison,
    Difference,
    compare_configs,
    document_label,
)
from pytest_talos.drift.desired import (
    MAPPING_FILE,
    DesiredPlan,
    DesiredState,
    PatchRule,
    load_desired,
)
from pytest_talos.drift.mask import MASK, is_secret_key, mask_value
from pytest_talos.drift.nodes import NodeDrift, check_node, check_nodes, persistent_config

__all__ = [
    "ABSENT",
    "MAPPING_FILE",
    "MASK",
    "ConfigComparison",
    "DesiredPlan",
    "DesiredState",
    "Difference",
    "NodeDrift",
    "PatchRule",
    "check_node",
    "check_nodes",
    "compare_configs",
    "document_label",
    "is_secret_key",
    "load_desired",
    "mask_value",
    "persistent_config",
]
