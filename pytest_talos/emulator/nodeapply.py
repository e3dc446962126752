"""ApplyConfiguration on an emulated node: facts §9 order of operations, §8 versions.

:class:`ConfigMixin` is mixed into :class:`~pytest_talos.emulator.state.NodeState`; it holds
the apply flow, the MachineConfig resource writes and the try-mode timer. Plain Python.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.resources import T
from pytest_talos.patches import PatchError, load_documents

if TYPE_CHECKING:
    from pytest_talos.emulator.clock import Cancellable, Clock
    from pytest_talos.emulator.resources import ResourceStore
    from pytest_talos.emulator.services import ServiceManager
    from pytest_talos.emulator.state import NodeHooks

__all__ = [
    "CONFIG_ANNOTATIONS",
    "DEFAULT_TRY_TIMEOUT",
    "ApplyRequest",
    "ApplyResult",
    "ConfigMixin",
    "NodeFailure",
    "go_duration",
]

DEFAULT_TRY_TIMEOUT = 60.0  # facts §9: ConfigTryTimeout = 1m
CONFIG_ANNOTATIONS = {"talos.dev/yaml-spec": "1"}  # facts §8


class NodeFailure(Exception):
    """A request the node refuses; ``code`` is a gRPC status name (``INVALID_ARGUMENT``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ApplyRequest:
    data: bytes
    mode: str  # REBOOT, AUTO, NO_REBOOT, STAGED, TRY
    dry_run: bool = False
    try_timeout: float | None = None
    admin: bool = True


@dataclass(frozen=True)
class ApplyResult:
    mode: str
    mode_details: str
    warnings: list[str] = field(default_factory=list)


def go_duration(seconds: float) -> str:
    """Go's ``time.Duration.String()`` for whole and fractional seconds (``1m0s``, ``30s``)."""
    if seconds <= 0:
        return "0s"
    whole = int(seconds)
    fraction = seconds - whole
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    sec_text = f"{secs + fraction:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{sec_text}"
    if minutes:
        return f"{minutes}m{sec_text}"
    return sec_text


class ConfigMixin:
    """ApplyConfiguration and try mode; the node state provides the attributes below."""

    if TYPE_CHECKING:
        clock: Clock
        store: ResourceStore
        services: ServiceManager
        hooks: NodeHooks
        active_config: bytes
        persisted_config: bytes
        rebooting: bool
        _applying: bool
        _try_timer: Cancellable | None
        _try_target: bytes | None

        @property
        def container(self) -> bool: ...

        def _fault(self, name: str) -> bool: ...

        def _reboot_sequence(self, actor: str, sequence: str) -> None: ...

    def apply_configuration(self, request: ApplyRequest) -> ApplyResult:
        if self._applying:  # facts §9 step 2
            raise NodeFailure(
                "FAILED_PRECONDITION", "another apply configuration is already in progress"
            )
        if self.rebooting:
            raise NodeFailure(
                "FAILED_PRECONDITION",
                "configuration was already applied and node is rebooting, cannot apply more "
                "configuration changes until next reboot",
            )
        # facts §9 step 3 (fault reader-can-apply skips it)
        if not request.admin and not self._fault("reader-can-apply"):
            raise NodeFailure("PERMISSION_DENIED", "not authorized")
        self._applying = True
        try:
            return self._apply(request)
        finally:
            self._applying = False

    def _apply(self, request: ApplyRequest) -> ApplyResult:
        # facts §9 step 4: even if the request fails later (fault try-not-cancelled skips it)
        if request.mode != "TRY" and not self._fault("try-not-cancelled"):
            self.cancel_try()
        warnings = self._validate(request.data)
        old, new = self.active_config, request.data
        mode, reason = self._resolve_mode(request.mode, old, new)
        timeout = request.try_timeout if request.try_timeout else DEFAULT_TRY_TIMEOUT
        if request.dry_run:  # facts §9 step 10: no warnings in a dry run, nothing changes
            if self._fault("dry-run-applies"):  # fault dry-run-applies
                self._execute(mode, new, timeout)
            return ApplyResult(mode, mc.dry_run_details(mode, old, new, reason))
        self._execute(mode, new, timeout)
        try_text = go_duration(timeout) if mode == "TRY" else ""
        details = mc.apply_mode_details(mode, reason=reason, try_timeout=try_text)
        return ApplyResult(mode, details, warnings)

    def _validate(self, data: bytes) -> list[str]:
        """facts §9 steps 5-7; fault lenient-validation accepts anything that parses."""
        try:
            return list(mc.validate(data, container_mode=self.container).warnings)
        except mc.ConfigRejected as exc:
            if self._fault("lenient-validation") and _parses_with_v1alpha1(data):
                return []
            if self._fault("version-bump-on-reject"):
                self.store.bump("config", T.MACHINE_CONFIGS, "v1alpha1")
            raise NodeFailure(exc.code, exc.message) from None

    def _resolve_mode(self, mode: str, old: bytes, new: bytes) -> tuple[str, str]:
        """facts §9 step 9: TRY/NO_REBOOT must apply immediately; AUTO picks."""
        if mode in ("TRY", "NO_REBOOT", "AUTO"):
            blockers = mc.immediate_apply_blockers(old, new)
            if not blockers:
                return ("NO_REBOOT" if mode == "AUTO" else mode), ""
            error = mc.immediate_apply_error(old, new)
            if mode != "AUTO":
                raise NodeFailure("INVALID_ARGUMENT", error)
            return "REBOOT", error
        return mode, ""

    def _execute(self, mode: str, new: bytes, try_timeout: float) -> None:
        """facts §9 step 11 and the version rules of §8."""
        if mode == "TRY":
            self._arm_try(try_timeout)
            self._set_active(new)
        elif mode == "NO_REBOOT":
            self._set_persisted(new)
            self._set_active(new)
        elif mode == "STAGED":
            self._set_persisted(new)
        else:  # REBOOT
            self._set_persisted(new)
            self.rebooting = True
            self.clock.call_later(0.1, lambda: self._reboot_sequence(str(uuid.uuid4()), "reboot"))

    def _set_persisted(self, data: bytes) -> None:
        self.persisted_config = data
        if not self.container:  # facts §8: `persistent` is absent in container mode
            self.store.put(
                "config",
                T.MACHINE_CONFIGS,
                "persistent",
                data,
                annotations=CONFIG_ANNOTATIONS,
                always_bump=True,
            )

    def _set_active(self, data: bytes) -> None:
        old = self.active_config
        self.active_config = data
        self.store.put(
            "config",
            T.MACHINE_CONFIGS,
            "v1alpha1",
            data,
            annotations=CONFIG_ANNOTATIONS,
            always_bump=True,
        )
        self._on_active_changed(old, data)

    def _on_active_changed(self, old: bytes, new: bytes) -> None:
        if mc.kubelet_extra_args(old) != mc.kubelet_extra_args(new):
            # B4/B5: kubelet is restarted with its new arguments (fails or heals).
            self.services.restart_if_running("kubelet")
        if mc.node_labels(old) != mc.node_labels(new):
            self.hooks.kube_changed()

    # ---- try mode ------------------------------------------------------------------------

    @property
    def try_pending(self) -> bool:
        return self._try_timer is not None

    def _arm_try(self, timeout: float) -> None:
        # facts §9: the rollback target is the config active when the *first* TRY arrived;
        # a second TRY re-arms the timer and keeps that target.
        if self._try_target is None:
            self._try_target = self.active_config
        if self._try_timer is not None:
            self._try_timer.cancel()
        self._try_timer = self.clock.call_later(timeout, self._try_expired)

    def _try_expired(self) -> None:
        target, self._try_target, self._try_timer = self._try_target, None, None
        if target is None or self._fault("try-no-revert"):
            return
        self._set_active(target)  # facts §8: v1alpha1 +1 again

    def cancel_try(self) -> None:
        if self._try_timer is not None:
            self._try_timer.cancel()
        self._try_timer = None
        self._try_target = None


def _parses_with_v1alpha1(data: bytes) -> bool:
    try:
        documents = load_documents(data)
    except PatchError:
        return False
    return any(doc.get("kind", "v1alpha1") == "v1alpha1" for doc in documents)
