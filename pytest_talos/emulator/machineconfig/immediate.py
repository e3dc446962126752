"""No-reboot blockers and the ApplyConfiguration reply and dry-run texts.

Blockers: ``CanApplyImmediate`` (``internal/app/machined/pkg/runtime/v1alpha1/
v1alpha1_runtime.go``); texts: ``ApplyConfiguration`` and ``generateDiff``
(``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go``).
"""

from __future__ import annotations

from typing import Any

from pytest_talos.emulator.machineconfig.common import as_mapping
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


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def _differs(old: Any, new: Any) -> bool:
    return not (_empty(old) and _empty(new)) and old != new


def _blocked_paths(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    paths: list[str] = []
    for key in dict.fromkeys([*old, *new]):
        if key in IMMEDIATE_TOP_LEVEL or not _differs(old.get(key), new.get(key)):
            continue
        if key != "machine":
            paths.append(str(key))
            continue
        old_m, new_m = as_mapping(old.get(key)), as_mapping(new.get(key))
        for mkey in dict.fromkeys([*old_m, *new_m]):
            if mkey in IMMEDIATE_MACHINE_FIELDS or not _differs(old_m.get(mkey), new_m.get(mkey)):
                continue
            if mkey == "features":
                paths += _blocked_features(as_mapping(old_m.get(mkey)), as_mapping(new_m.get(mkey)))
            else:
                paths.append(f"machine.{mkey}")
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
    """``new`` with every immediately-applicable field taken from ``old``."""
    masked = _merge_allowed(old, new, IMMEDIATE_TOP_LEVEL)
    old_m, new_m = as_mapping(old.get("machine")), as_mapping(new.get("machine"))
    if isinstance(masked.get("machine"), dict):
        machine = _merge_allowed(old_m, new_m, IMMEDIATE_MACHINE_FIELDS)
        if isinstance(machine.get("features"), dict):
            machine["features"] = _merge_allowed(
                as_mapping(old_m.get("features")), machine["features"], IMMEDIATE_FEATURES
            )
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
