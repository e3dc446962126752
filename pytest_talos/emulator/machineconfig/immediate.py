"""No-reboot blockers and the ApplyConfiguration reply and dry-run texts.

Blockers: ``CanApplyImmediate`` (``internal/app/machined/pkg/runtime/v1alpha1/
v1alpha1_runtime.go``); texts: ``ApplyConfiguration`` and ``generateDiff``
(``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go``).
"""

from __future__ import annotations

from typing import Any

from pytest_talos.emulator.machineconfig.loader import main_document
from pytest_talos.patches import config_diff, dump_documents

# Fields CanApplyImmediate copies from the running config before comparing (so they may
# differ); `debug` and `cluster` are whole.
IMMEDIATE_TOP_LEVEL = frozenset({"debug", "cluster"})
IMMEDIATE_MACHINE_FIELDS = frozenset(
    {
        "ca",
        "acceptedCAs",
        "time",
        "certSANs",
        "install",
        "network",
        "sysfs",
        "sysctls",
        "logging",
        "controlPlane",
        "kubelet",
        "kernel",
        "registries",
        "pods",
        "seccompProfiles",
        "nodeAnnotations",
        "nodeLabels",
        "nodeTaints",
    }
)
IMMEDIATE_FEATURES = frozenset(
    {
        "kubernetesTalosAPIAccess",
        "kubePrism",
        "hostDNS",
        "imageCache",
        "nodeAddressSortAlgorithm",
    }
)


# Non-allowed fields of type `string` (not a pointer): Go's zero value, so "" equals absent.
_STRING_FIELDS = frozenset({"version", "type", "token"})


def _differs(old: Any, new: Any, key: str = "") -> bool:
    """Whether reflect.DeepEqual would tell the two typed values apart.

    An absent key and ``null`` both decode to nil. An empty ``{}`` or ``[]`` decodes to an
    empty, non-nil map or slice, and a struct field that is present (``features: {}``) to a
    non-nil pointer: DeepEqual tells those from nil. Only a plain string field reads ``""``
    as its zero value. The typed fields are in
    ``pkg/machinery/config/types/v1alpha1/v1alpha1_types.go`` (MachineConfig: pointers,
    slices and maps but for ``type`` and ``token``; Config: ``version`` a string, ``debug``
    and ``persist`` ``*bool``). Nested values are compared the same way (INFERRED: their
    own string fields are not told apart from pointers)."""
    if key in _STRING_FIELDS:
        old, new = old or None, new or None
    return bool(old != new)


def _blocked_paths(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    paths: list[str] = []
    for key in dict.fromkeys([*old, *new]):
        if key in IMMEDIATE_TOP_LEVEL or not _differs(old.get(key), new.get(key), key):
            continue
        old_m, new_m = old.get(key), new.get(key)
        if key != "machine" or not (isinstance(old_m, dict) and isinstance(new_m, dict)):
            # CanApplyImmediate copies the allowed machine fields only when both configs
            # have a machine section; else the whole of it is compared.
            paths.append(str(key))
            continue
        paths += _blocked_machine(old_m, new_m)
    return paths


def _blocked_machine(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    paths: list[str] = []
    for key in dict.fromkeys([*old, *new]):
        if key in IMMEDIATE_MACHINE_FIELDS or not _differs(old.get(key), new.get(key), key):
            continue
        old_f, new_f = old.get(key), new.get(key)
        if key == "features" and isinstance(old_f, dict) and isinstance(new_f, dict):
            paths += _blocked_features(old_f, new_f)
        else:
            # `features` on one side only: v1alpha1_runtime.go copies the allowed features
            # only `if newFeatures != nil && currentFeatures != nil`, so nil vs a
            # FeaturesConfig is a difference whatever it holds.
            paths.append(f"machine.{key}")
    return paths


def _blocked_features(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [
        f"machine.features.{key}"
        for key in dict.fromkeys([*old, *new])
        if key not in IMMEDIATE_FEATURES and _differs(old.get(key), new.get(key))
    ]


def immediate_apply_blockers(old: bytes, new: bytes) -> list[str]:
    """Dotted paths of v1alpha1 fields that differ and need a reboot (CanApplyImmediate)."""
    return _blocked_paths(main_document(old), main_document(new))


def _merge_allowed(
    old: dict[str, Any], new: dict[str, Any], allowed: frozenset[str]
) -> dict[str, Any]:
    """``new`` with the ``allowed`` keys taken from ``old``; keys keep ``old``'s order."""
    merged: dict[str, Any] = {}
    for key in dict.fromkeys([*old, *new]):
        source = old if key in allowed else new
        if key in source:
            merged[key] = source[key]
    return merged


def _with_allowed_from(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` with every immediately-applicable field taken from ``old``: the machine
    fields only where both have a machine section, the features only where both have a
    features section (as CanApplyImmediate copies them)."""
    masked = _merge_allowed(old, new, IMMEDIATE_TOP_LEVEL)
    old_m, new_m = old.get("machine"), new.get("machine")
    if isinstance(old_m, dict) and isinstance(new_m, dict):
        machine = _merge_allowed(old_m, new_m, IMMEDIATE_MACHINE_FIELDS)
        old_f, new_f = old_m.get("features"), machine.get("features")
        if isinstance(old_f, dict) and isinstance(new_f, dict):
            machine["features"] = _merge_allowed(old_f, new_f, IMMEDIATE_FEATURES)
        masked["machine"] = machine
    return masked


def immediate_apply_error(old: bytes, new: bytes) -> str:
    """The InvalidArgument text for a NO_REBOOT/TRY apply that needs a reboot."""
    old_doc, new_doc = main_document(old), main_document(new)
    diff = config_diff(
        dump_documents([old_doc]), dump_documents([_with_allowed_from(old_doc, new_doc)])
    )
    return f"this config change can't be applied in immediate mode\ndiff:\n{diff}"


# --------------------------------------------------------------------------- reply texts

_MODE_DETAILS = {
    "NO_REBOOT": "Applied configuration without a reboot",
    "TRY": "Applied configuration without a reboot",
    "STAGED": "Staged configuration to be applied after the next reboot",
    "REBOOT": "Applied configuration with a reboot",
}


def apply_mode_details(mode_name: str, *, reason: str = "", try_timeout: str = "") -> str:
    """``mode_details`` of an ApplyConfiguration reply for the *resolved* mode.

    ``reason`` (why AUTO became REBOOT) is appended as ``: <reason>``; ``try_timeout`` is a
    Go duration text such as ``1m0s`` and adds the try-mode sentence.
    """
    details = _MODE_DETAILS.get(mode_name.upper(), _MODE_DETAILS["REBOOT"])
    if reason:
        details += f": {reason}"
    if mode_name.upper() == "TRY" and try_timeout:
        details += (
            "\nThe config is applied in 'try' mode and will be automatically reverted back in "
            f"{try_timeout}"
        )
    return details


def dry_run_details(mode_name: str, old: bytes, new: bytes) -> str:
    """``mode_details`` of a dry-run reply; ``mode_name`` is the resolved mode.

    The handler returns before it appends the try-mode sentence or the AUTO ``: <reason>``,
    so a dry run shows neither.
    """
    diff = config_diff(old, new) or "No changes."
    details = apply_mode_details(mode_name)
    return f"Dry run summary:\n{details} (skipped in dry-run).\nConfig diff:\n\n{diff}"
