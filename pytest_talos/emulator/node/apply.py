"""ApplyConfiguration on an emulated node, as machined's handler runs it.

The handler is ``ApplyConfiguration`` in
``internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go``; the config writes are
``SetConfig``/``SetPersistedConfig`` (``internal/app/machined/pkg/runtime/v1alpha1/
v1alpha1_runtime.go``), each a cosi ``Update`` of a MachineConfig resource
(``internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go`` ``SetConfig``), which always
bumps the version. :class:`MachineConfigState` is the node's config lifecycle,
composed by :class:`~.state.NodeState`: it owns the configs, the apply
flow, the MachineConfig resource writes and the try-mode timer. Plain Python.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_talos.emulator import machineconfig as mc
from pytest_talos.emulator.clock import Cancellable, Clock
from pytest_talos.emulator.cosi.registry import T
from pytest_talos.emulator.cosi.store import ResourceStore
from pytest_talos.emulator.errors import RPCFailure
from pytest_talos.emulator.faults import ApplyQuirk
from pytest_talos.errors import StatusCode
from pytest_talos.patches import PatchError, load_documents

__all__ = [
    "CONFIG_ANNOTATIONS",
    "DEFAULT_TRY_TIMEOUT",
    "ApplyRequest",
    "ApplyResult",
    "MachineConfigState",
    "RPCFailure",
    "go_duration",
]

DEFAULT_TRY_TIMEOUT = 60.0  # pkg/machinery/constants: ConfigTryTimeout = 1m
LATE_APPLY_DELAY = 2.0  # node seconds: how late the late-applying faults change the config
EARLY_TRY_FRACTION = 0.5  # quirk TRY_TIMER_FIRES_EARLY: the share of the timeout it waits
# pkg/machinery/resources/config/machine_config.go NewMachineConfigWithID
CONFIG_ANNOTATIONS = {"talos.dev/yaml-spec": "1"}


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
    """Go's ``time.Duration.String()`` (``1m0s``, ``30s``, ``1.5s``, ``500ms``, ``-2s``)."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign, nanos = ("-" if nanos < 0 else ""), abs(nanos)
    if nanos < 1_000_000_000:  # below a second Go switches to ns, µs or ms
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size:
                return sign + _decimal(nanos, size) + unit
    whole, fraction = divmod(nanos, 1_000_000_000)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = _decimal(secs * 1_000_000_000 + fraction, 1_000_000_000) + "s"
    if hours:
        text = f"{hours}h{minutes}m{text}"
    elif minutes:
        text = f"{minutes}m{text}"
    return sign + text


def _decimal(value: int, unit: int) -> str:
    """``value / unit`` in decimal, without trailing zeros (Go's fmtFrac)."""
    whole, fraction = divmod(value, unit)
    digits = len(str(unit)) - 1
    frac_text = f"{fraction:0{digits}d}".rstrip("0") if digits else ""
    return f"{whole}.{frac_text}" if frac_text else str(whole)


class MachineConfigState:
    """The node's machine configs (active and persisted), their MachineConfig resources, the
    apply flow and the try-mode timer. The node tells it how to reboot and hears of changes
    of the active config through ``on_active_changed``."""

    def __init__(
        self,
        config: bytes,
        *,
        clock: Clock,
        store: ResourceStore,
        container: bool,
        quirk: Callable[[ApplyQuirk], bool],
        on_active_changed: Callable[[bytes, bytes], None],
        reboot: Callable[[str, str], None],
    ) -> None:
        self.active_config = config
        self.persisted_config = config
        self.rebooting = False  # a REBOOT-mode apply was accepted (v1alpha1_server.go)
        # Node labels a defective revert left on the Kubernetes Node (fault
        # try-revert-keeps-label).
        self.labels_kept_after_revert: dict[str, str] = {}
        self._clock = clock
        self._store = store
        self._container = container
        self._quirk = quirk
        self._on_active_changed = on_active_changed
        self._reboot = reboot
        self._applying = False
        self._try_timer: Cancellable | None = None
        self._try_target: bytes | None = None
        # Whether the persisted config is on the node's STATE partition yet; None until the
        # first boot decides (see boot_config_from_state).
        self._config_on_disk: bool | None = None

    def reset_for_boot(self) -> None:
        """A boot runs the persisted config; a try in flight is gone, no reboot is pending."""
        self.active_config = self.persisted_config
        self._try_target = None
        self.rebooting = False

    def apply_configuration(self, request: ApplyRequest) -> ApplyResult:
        if self._applying:  # a non-blocking mutex: applyConfigMu.TryLock()
            raise RPCFailure(
                StatusCode.FAILED_PRECONDITION, "another apply configuration is already in progress"
            )
        if self.rebooting:
            raise RPCFailure(
                StatusCode.FAILED_PRECONDITION,
                "configuration was already applied and node is rebooting, cannot apply more "
                "configuration changes until next reboot",
            )
        # os:admin only, outside maintenance
        if not request.admin and not self._quirk(ApplyQuirk.APPLY_SKIPS_ROLE_CHECK):
            raise RPCFailure(StatusCode.PERMISSION_DENIED, "not authorized")
        self._applying = True
        try:
            return self._apply(request)
        finally:
            self._applying = False

    def _apply(self, request: ApplyRequest) -> ApplyResult:
        # Quirk APPLY_DURING_TRY_DROPPED: a regular apply in a try window is answered as
        # applied but changes nothing (the rollback is still cancelled below).
        dropped = (
            request.mode != "TRY"
            and not request.dry_run
            and self.try_pending
            and self._quirk(ApplyQuirk.APPLY_DURING_TRY_DROPPED)
        )
        # Any non-TRY request cancels a pending rollback first, even a dry run or one that
        # fails later.
        if request.mode != "TRY" and not self._quirk(ApplyQuirk.APPLY_KEEPS_PENDING_TRY):
            self.cancel_try()
        old, new = self.active_config, request.data
        try:
            warnings = self._validate(request.data, staged=request.mode == "STAGED")
        except RPCFailure:
            if self._quirk(ApplyQuirk.REJECTED_APPLY_LANDS_LATE) and _parses_with_v1alpha1(new):
                # refused in the reply, applied 2 s later anyway
                self._clock.call_later(LATE_APPLY_DELAY, lambda: self._execute("NO_REBOOT", new, 0))
            self._persist_if_quirk(new)
            raise
        try:
            mode, reason = self._resolve_mode(request.mode, old, new)
        except RPCFailure:
            self._persist_if_quirk(new)
            raise
        # A try_mode_timeout that is present is used as it is, even 0s (the handler tests
        # `in.TryModeTimeout != nil`); only an absent one means ConfigTryTimeout.
        timeout = DEFAULT_TRY_TIMEOUT if request.try_timeout is None else request.try_timeout
        if request.dry_run:
            # No warnings and no AUTO `: <reason>` in a dry run; nothing changes.
            if self._quirk(ApplyQuirk.DRY_RUN_EXECUTES):
                self._execute(mode, new, timeout)
            elif self._quirk(ApplyQuirk.DRY_RUN_EXECUTES_LATE):
                self._clock.call_later(LATE_APPLY_DELAY, lambda: self._execute(mode, new, timeout))
            elif mode == "STAGED" and self._quirk(ApplyQuirk.STAGED_DRY_RUN_PERSISTS):
                self._execute(mode, new, timeout)  # the dry-run flag honoured for no-reboot only
            self._persist_if_quirk(new)
            return ApplyResult(mode, mc.dry_run_details(mode, old, new))
        if not dropped:
            self._execute(mode, new, timeout)
        try_text = go_duration(timeout) if mode == "TRY" else ""
        details = mc.apply_mode_details(mode, reason=reason, try_timeout=try_text)
        return ApplyResult(mode, details, warnings)

    def _persist_if_quirk(self, data: bytes) -> None:
        """Quirk REFUSED_APPLY_PERSISTS: a refused or dry-run request is staged for the next
        boot all the same (Talos returns before SetPersistedConfig in both cases)."""
        if self._quirk(ApplyQuirk.REFUSED_APPLY_PERSISTS):
            self._set_persisted(data)

    def _validate(self, data: bytes, *, staged: bool = False) -> list[str]:
        """configloader, Validate and RuntimeValidate (InvalidArgument with their text), for
        every mode alike: the handler validates before it looks at the mode. A quirk accepts
        anything that parses (in every mode, or only in staged mode)."""
        try:
            return list(mc.validate(data, container_mode=self._container).warnings)
        except mc.ConfigRejected as exc:
            lenient = self._quirk(ApplyQuirk.VALIDATION_ACCEPTS_PARSEABLE) or (
                staged and self._quirk(ApplyQuirk.STAGED_SKIPS_VALIDATION)
            )
            if lenient and _parses_with_v1alpha1(data):
                return []
            if self._quirk(ApplyQuirk.REJECT_BUMPS_VERSION):
                self._store.bump("config", T.MACHINE_CONFIGS, "v1alpha1")
            raise RPCFailure(exc.code, exc.message) from None

    def _resolve_mode(self, mode: str, old: bytes, new: bytes) -> tuple[str, str]:
        """TRY/NO_REBOOT must pass CanApplyImmediate (TRY falls through to NO_REBOOT's case);
        AUTO picks NO_REBOOT or REBOOT."""
        if mode == "TRY" and self._quirk(ApplyQuirk.TRY_SKIPS_IMMEDIATE_CHECK):
            return mode, ""  # try mode takes anything
        if mode in ("TRY", "NO_REBOOT", "AUTO"):
            blockers = mc.immediate_apply_blockers(old, new)
            if self._quirk(ApplyQuirk.IMMEDIATE_ALLOWS_ENV_AND_FILES):
                # env and files pass as immediate
                blockers = [b for b in blockers if b not in ("machine.env", "machine.files")]
            if not blockers:
                return ("NO_REBOOT" if mode == "AUTO" else mode), ""
            error = mc.immediate_apply_error(old, new)
            if mode != "AUTO":
                raise RPCFailure(StatusCode.INVALID_ARGUMENT, error)
            return "REBOOT", error
        return mode, ""

    def _execute(self, mode: str, new: bytes, try_timeout: float) -> None:
        """TRY: arm the rollback, set active; NO_REBOOT: persisted then active; STAGED:
        persisted; REBOOT: persisted, then reboot. Each set bumps that resource's version."""
        if mode == "TRY":  # SetConfig only: the next boot loads the config it had
            self._arm_try(try_timeout)
            if self._quirk(ApplyQuirk.TRY_WRITES_PERSISTENT):
                self._set_persisted(new)  # the tried config would boot next time
            self._set_active(new)
        elif mode == "NO_REBOOT":
            if not self._quirk(ApplyQuirk.NO_REBOOT_SKIPS_PERSISTENT):
                self._set_persisted(new)
            self._set_active(new)
        elif mode == "STAGED":
            self._set_persisted(new)
        else:  # REBOOT
            self._set_persisted(new)
            self.rebooting = True
            self._clock.call_later(0.1, lambda: self._reboot(str(uuid.uuid4()), "reboot"))

    def _set_persisted(self, data: bytes) -> None:
        # SetPersistedConfig: creates `persistent` (version 1) where the node booted without
        # one, else updates it; PersistenceController then writes it to STATE.
        self.persisted_config = data
        self._store.put(
            "config",
            T.MACHINE_CONFIGS,
            "persistent",
            data,
            annotations=CONFIG_ANNOTATIONS,
            always_bump=True,
        )
        self._config_on_disk = True

    def boot_config_from_state(self) -> bool:
        """Whether this boot reads its config from the STATE partition alone.

        AcquireController (internal/app/machined/pkg/controllers/config/acquire.go) calls
        SetPersistedConfig unless STATE was the only source. A fresh container node gets its
        config from the platform (USERDATA), so it has `persistent`; an installed metal node
        boots from STATE, and so does any node after a reboot (docker keeps /system/state in
        a volume, pkg/provision/providers/docker/node.go): no `persistent` until an apply.
        """
        if self._config_on_disk is None:
            self._config_on_disk = not self._container
        from_state = self._config_on_disk
        self._config_on_disk = True  # PersistenceController writes what was acquired
        return from_state

    def _set_active(self, data: bytes) -> None:
        old = self.active_config
        self.active_config = data
        self._store.put(
            "config",
            T.MACHINE_CONFIGS,
            "v1alpha1",
            data,
            annotations=CONFIG_ANNOTATIONS,
            always_bump=True,
        )
        self._on_active_changed(old, data)

    # ---- try mode ------------------------------------------------------------------------

    @property
    def try_pending(self) -> bool:
        return self._try_timer is not None

    def _arm_try(self, timeout: float) -> None:
        # RollbackToConfigAfter (runtime/v1alpha1/v1alpha1_runtime.go): the target is the
        # config active when *this* TRY arrives, so a second TRY in the window reverts to the
        # first tried config; the earlier timer is stopped. A 0s timer fires right after the
        # apply (INFERRED: in Go its goroutine races the SetConfig that follows).
        self._try_target = self.active_config
        if self._try_timer is not None:
            self._try_timer.cancel()
        if self._quirk(ApplyQuirk.TRY_TIMER_FIRES_EARLY):
            timeout *= EARLY_TRY_FRACTION
        self._try_timer = self._clock.call_later(max(timeout, 0.0), self._try_expired)

    def _try_expired(self) -> None:
        target, self._try_target, self._try_timer = self._try_target, None, None
        if target is None or self._quirk(ApplyQuirk.TRY_TIMER_SKIPS_REVERT):
            return
        if self._quirk(ApplyQuirk.TRY_REVERT_KEEPS_NODE_LABELS):
            # the Node keeps the labels the tried config added
            tried = mc.node_labels(self.active_config)
            kept = {k: v for k, v in tried.items() if k not in mc.node_labels(target)}
            self.labels_kept_after_revert = {**self.labels_kept_after_revert, **kept}
        self._set_active(target)  # SetConfig again: v1alpha1 +1, `persistent` untouched

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
