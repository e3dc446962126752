"""Facts about the Talos API that both the client side and the emulator use.

A leaf module: it imports nothing from pytest_talos, so the client (which refuses changes a
test may not make) and the emulator (whose call log records them) share one table.

:data:`CHANGING_METHODS` lists every RPC of the Talos v1.13 API that changes a node, with the
allow level it needs:

* ``mutating``: a change the kit can undo (machine config applied without a reboot, services
  started, stopped or restarted, META keys, images, COSI resources);
* ``disruptive``: the node reboots, shuts down, resets, upgrades or installs, or the etcd
  cluster's membership, leadership or data changes.

The method lists are those of ``api/machine/machine.proto``, ``api/machine/image.proto``,
``api/machine/lifecycle.proto``, ``api/machine/debug.proto``, ``api/storage/storage.proto``
and ``api/resource/...`` (COSI ``State``). Reading calls (Version, List, Logs, EtcdSnapshot,
EtcdStatus, PacketCapture, ImageList, Verify, ...) are absent: they do not change the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

__all__ = [
    "ALLOW_LEVELS",
    "CHANGING_METHODS",
    "ChangeLevel",
    "change_level",
    "permits",
]

ChangeLevel = Literal["mutating", "disruptive"]
ALLOW_LEVELS: Final = ("none", "mutating", "disruptive")  # each permits those before it

_MACHINE = "/machine.MachineService/"
_IMAGE = "/machine.ImageService/"
_LIFECYCLE = "/machine.LifecycleService/"
_DEBUG = "/machine.DebugService/"
_STORAGE = "/storage.StorageService/"
_STATE = "/cosi.resource.State/"

_MUTATING = (
    _MACHINE + "ApplyConfiguration",  # unless dry_run; a reboot mode is disruptive
    _MACHINE + "ServiceStart",
    _MACHINE + "ServiceStop",
    _MACHINE + "ServiceRestart",
    _MACHINE + "Restart",  # restarts a container
    _MACHINE + "MetaWrite",
    _MACHINE + "MetaDelete",
    _MACHINE + "ImagePull",
    _IMAGE + "Pull",
    _IMAGE + "Import",
    _IMAGE + "Remove",
    _DEBUG + "ContainerRun",  # runs a privileged container on the node
    _STATE + "Create",
    _STATE + "Update",
    _STATE + "Destroy",
)
_DISRUPTIVE = (
    _MACHINE + "Bootstrap",
    _MACHINE + "Reboot",
    _MACHINE + "Shutdown",
    _MACHINE + "Reset",
    _MACHINE + "Upgrade",
    _MACHINE + "Rollback",
    _LIFECYCLE + "Install",
    _LIFECYCLE + "Upgrade",
    _STORAGE + "BlockDeviceWipe",
    _MACHINE + "EtcdRemoveMemberByID",
    _MACHINE + "EtcdLeaveCluster",
    _MACHINE + "EtcdForfeitLeadership",
    _MACHINE + "EtcdRecover",
    _MACHINE + "EtcdAlarmDisarm",
    _MACHINE + "EtcdDefragment",
    _MACHINE + "EtcdDowngradeValidate",
    _MACHINE + "EtcdDowngradeEnable",
    _MACHINE + "EtcdDowngradeCancel",
)

CHANGING_METHODS: Final[Mapping[str, ChangeLevel]] = {
    **dict.fromkeys(_MUTATING, "mutating"),
    **dict.fromkeys(_DISRUPTIVE, "disruptive"),
}

# ApplyConfigurationRequest.Mode (api/machine/machine.proto): REBOOT = 0, AUTO = 1 (reboots
# when the change needs it), NO_REBOOT = 2, STAGED = 3, TRY = 4.
_REBOOTING_APPLY_MODES = frozenset({0, 1})


def change_level(method: str, request: Any = None) -> ChangeLevel | None:
    """The allow level a call to ``method`` with ``request`` needs; None if it only reads.

    An ApplyConfiguration with ``dry_run`` reads; one in a mode that may reboot the node
    (reboot, auto) is disruptive. Without a request, the method's own level.
    """
    level = CHANGING_METHODS.get(method)
    if level is None or request is None or method != _MACHINE + "ApplyConfiguration":
        return level
    if getattr(request, "dry_run", False):
        return None
    if getattr(request, "mode", 2) in _REBOOTING_APPLY_MODES:
        return "disruptive"
    return level


def permits(allowed: str, needed: ChangeLevel | None) -> bool:
    """Whether the allow level ``allowed`` (none, mutating, disruptive) covers ``needed``."""
    if needed is None:
        return True
    return ALLOW_LEVELS.index(allowed) >= ALLOW_LEVELS.index(needed)
