"""The machine-config truth an emulated Talos v1.13 node applies.

Pure functions over config bytes — no I/O, no gRPC: generate a config as ``talosctl gen
config`` would, validate one the way ``ApplyConfiguration`` does
(``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go``: configloader,
``Validate``, ``RuntimeValidate``), decide whether a change can apply without a reboot
(``CanApplyImmediate``) and word the dry-run summary. The servicers turn
:class:`ConfigRejected` into a gRPC status.

Where the upstream source was not followed line by line the behaviour below is a guess;
every guess is listed in :data:`INFERRED` (the emulator docs page prints that list).

Modules: :mod:`.generate` (gen config), :mod:`.loader` and :mod:`.schema` (configloader and
strict decoding), :mod:`.validate` (the semantic checks), :mod:`.immediate` (no-reboot
blockers, reply and dry-run texts), :mod:`.accessors` (single values), :mod:`.render` (YAML
writing) and :mod:`.common` (what they share).
"""

from __future__ import annotations

from pytest_talos.emulator.errors import ConfigRejected
from pytest_talos.emulator.machineconfig.accessors import (
    KNOWN_KUBELET_FLAGS,
    cert_sans,
    cluster_name,
    hostname,
    image_verification_rules,
    kubelet_extra_args,
    kubernetes_version,
    machine_type,
    node_labels,
    pod_subnets,
    service_subnets,
    unknown_kubelet_flags,
)
from pytest_talos.emulator.machineconfig.common import (
    DEFAULT_POD_SUBNETS,
    DEFAULT_SERVICE_SUBNETS,
    INFERRED,
    NO_V1ALPHA1_MESSAGE,
    ValidationOutcome,
    multierror,
)
from pytest_talos.emulator.machineconfig.generate import generate_config
from pytest_talos.emulator.machineconfig.immediate import (
    IMMEDIATE_FEATURES,
    IMMEDIATE_MACHINE_FIELDS,
    apply_mode_details,
    dry_run_details,
    immediate_apply_blockers,
    immediate_apply_error,
)
from pytest_talos.emulator.machineconfig.immediate import IMMEDIATE_TOP_LEVEL as IMMEDIATE_TOP_LEVEL
from pytest_talos.emulator.machineconfig.validate import validate

__all__ = [
    "DEFAULT_POD_SUBNETS",
    "DEFAULT_SERVICE_SUBNETS",
    "IMMEDIATE_FEATURES",
    "IMMEDIATE_MACHINE_FIELDS",
    "INFERRED",
    "KNOWN_KUBELET_FLAGS",
    "NO_V1ALPHA1_MESSAGE",
    "ConfigRejected",
    "ValidationOutcome",
    "apply_mode_details",
    "cert_sans",
    "cluster_name",
    "dry_run_details",
    "generate_config",
    "hostname",
    "image_verification_rules",
    "immediate_apply_blockers",
    "immediate_apply_error",
    "kubelet_extra_args",
    "kubernetes_version",
    "machine_type",
    "multierror",
    "node_labels",
    "pod_subnets",
    "service_subnets",
    "unknown_kubelet_flags",
    "validate",
]
