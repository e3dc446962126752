"""Machine config changes and what they do to a node: an invalid patch is refused and leaves
the config untouched (:func:`assert_config_unchanged_after_rejection`), a service stays
healthy after a patch (:func:`assert_service_healthy_after_patch`), a try-mode change reverts
by itself (:func:`assert_try_reverts`).

Each goes through a :class:`~pytest_talos.guard.ConfigGuard` (the one passed in, else the
node's own, else a private one) so that whatever it changed is restored.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_talos import models
from pytest_talos.checks.result import CheckResult
from pytest_talos.errors import (
    APIError,
    ConformanceFailure,
    InvalidArgument,
    NotFound,
    NotObserved,
    TalosError,
    WaitTimeout,
)
from pytest_talos.guard import ConfigGuard, guarding
from pytest_talos.node import TalosNode
from pytest_talos.node._node import as_patch_list
from pytest_talos.patches import PatchInput
from pytest_talos.wait import (
    MACHINE_CONFIG_RESOURCE,
    Cancelled,
    StabilityReport,
    config_summary,
    wait_for_config,
    wait_service_stable,
)

__all__ = [
    "DEFAULT_STABLE_FOR",
    "EARLY_REVERT_FRACTION",
    "TRY_ATTEMPTS",
    "PersistedConfig",
    "assert_config_unchanged_after_rejection",
    "assert_service_healthy_after_patch",
    "assert_try_reverts",
    "persisted_changes",
    "read_persisted_config",
    "try_timers",
    "try_window_missed",
]

# A crash-looping service is restarted every 5 s (internal/app/machined/pkg/system/runner/
# restart/restart.go); 12 s covers two periods.
DEFAULT_STABLE_FOR = 12.0
# A try-mode revert seen sooner than this share of its timer (in node seconds, from just
# before the apply was sent) came early. A healthy node cannot be seen early: Talos arms the
# timer when it handles the apply, after it was sent, and time.AfterFunc never fires before
# its duration (runtime/v1alpha1/v1alpha1_runtime.go RollbackToConfigAfter); the watch sees
# the revert after it happened; load only delays both. The 20 % margin is for a clock rate
# that differs from the one stated (real clocks differ by parts per million).
EARLY_REVERT_FRACTION = 0.8
# Timers a try-mode check tries, each twice the last, before it says it could not observe.
TRY_ATTEMPTS = 3
_TRY_CHECK = "config.try-mode-reverts"
_EVENT_LINES = 8
_LOG_LINES = 30


def assert_config_unchanged_after_rejection(
    node: TalosNode,
    patch: PatchInput,
    *,
    mode: models.ApplyMode = "no-reboot",
    guard: ConfigGuard | None = None,
    settle: float = 0.0,
    expect_rejection: str = "",
    check_id: str = "config.invalid-patch-rejected",
    cancelled: Cancelled | None = None,
    try_timeout: float | None = None,
) -> CheckResult:
    """Applying ``patch`` is refused with InvalidArgument and leaves the config untouched.

    Both the MachineConfig resource version and the exact bytes must stay the same, on the
    first read and again after ``settle`` seconds (a node may refuse in its reply and apply
    later); so must the ``persistent`` config, the one the next boot loads (Talos validates
    before it writes either: ``v1alpha1_server.go`` ApplyConfiguration).
    ``expect_rejection``, when given, must appear in the node's refusal. If the node accepts
    the patch, or changes its config later, the original config is restored and the check
    fails with what was seen. ``check_id`` names the failure; ``cancelled`` stops the settle
    wait early (WaitCancelled); ``try_timeout`` is sent with a ``try`` mode apply (the
    revert timer of a node that takes it: keep it below ``settle``, which is how long such a
    node is given to revert by itself before the guard restores it).
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = check_id
    with guarding(node, guard) as chosen:
        before, persisted_before = node.machine_config, read_persisted_config(node)
        try:
            reply = node.apply_patch(patch, mode=mode, guard=chosen, try_timeout=try_timeout)
        except InvalidArgument as exc:
            rejection = exc.details
        except APIError as exc:
            raise ConformanceFailure(
                check,
                "the patch was refused, but not as invalid",
                node=node.name,
                expected="InvalidArgument",
                observed=f"{exc.code}: {exc.details}",
            ) from None
        else:
            if mode == "try":
                # A node that took a field no immediate apply may change refuses the
                # no-reboot restore too: let its own revert come first (within ``settle``).
                _settled_config(node, before, settle, cancelled, back=True)
            chosen.restore_node(node)
            raise ConformanceFailure(
                check,
                "the node accepted an invalid patch (the original config was restored)",
                node=node.name,
                expected="InvalidArgument",
                observed=f"accepted ({reply.mode}): {reply.mode_details}",
                evidence={"warnings": "\n".join(reply.warnings)} if reply.warnings else None,
            )
        after = node.machine_config
        when = "at once"
        if settle > 0 and (after.version, after.raw) == (before.version, before.raw):
            after = _settled_config(node, before, settle, cancelled)
            when = f"within {settle:g}s"
        staged = persisted_changes(persisted_before, read_persisted_config(node))
        if (after.version, after.raw) != (before.version, before.raw) or staged:
            chosen.restore_node(node)
    _require_same_config(check, node, before, after, rejection, when, staged)
    if expect_rejection and expect_rejection not in rejection:
        raise ConformanceFailure(
            check,
            "the patch was refused for another reason than expected",
            node=node.name,
            expected=f"InvalidArgument: {expect_rejection}",
            observed=rejection[:800],
        )
    return CheckResult(check, node.name, {"rejection": rejection, "version": after.version})


def _settled_config(
    node: TalosNode,
    before: models.MachineConfig,
    settle: float,
    cancelled: Cancelled | None = None,
    *,
    back: bool = False,
) -> models.MachineConfig:
    """The active config once ``settle`` s have passed with no change (or at the first one);
    with ``back``, once it is ``before`` again (or ``settle`` s have passed)."""
    with contextlib.suppress(WaitTimeout):
        wait_for_config(
            node,
            (lambda raw: raw == before.raw) if back else (lambda raw: raw != before.raw),
            timeout=settle,
            description="the revert" if back else "a late change (there should be none)",
            cancelled=cancelled,
        )
    return node.machine_config


def _require_same_config(
    check: str,
    node: TalosNode,
    before: models.MachineConfig,
    after: models.MachineConfig,
    rejection: str,
    when: str = "at once",
    staged: Sequence[str] = (),
) -> None:
    problems = []
    if after.version != before.version:
        problems.append(f"version {before.version} -> {after.version}")
    if after.raw != before.raw:
        problems.append("the config bytes changed")
    problems += staged
    if problems:
        raise ConformanceFailure(
            check,
            "the patch was rejected, but the machine config changed anyway"
            + ("" if when == "at once" else f" ({when} of the refusal; restored)")
            + ": "
            + "; ".join(problems),
            node=node.name,
            expected=f"unchanged: {config_summary(before.raw, before.version)}",
            observed=config_summary(after.raw, after.version),
            evidence={"rejection": rejection},
        )


@dataclass(frozen=True)
class PersistedConfig:
    """The node's ``persistent`` MachineConfig: the config its next boot loads."""

    version: int
    raw: bytes = field(repr=False)  # holds the cluster's secrets: never printed


def read_persisted_config(node: TalosNode) -> PersistedConfig | None:
    """The ``persistent`` MachineConfig, or None where the node keeps none (an installed
    node booted from its STATE partition with nothing applied since:
    ``internal/app/machined/pkg/controllers/config/acquire.go``)."""
    kind, _, namespace = MACHINE_CONFIG_RESOURCE
    try:
        found = node.client.get(kind, "persistent", namespace)
    except NotFound:
        return None
    spec = found.typed_spec
    raw = spec.yaml if isinstance(spec, models.MachineConfigSpec) else b""
    return PersistedConfig(found.version, raw)


def persisted_changes(before: PersistedConfig | None, after: PersistedConfig | None) -> list[str]:
    """How the persistent config changed between two reads (``[]``: it did not)."""
    what = "the persistent config (loaded at the next boot)"
    if before is None or after is None:
        if before is after:
            return []
        if after is not None:
            return [f"{what} appeared: {config_summary(after.raw, after.version)}"]
        return [f"{what} disappeared"]
    problems = []
    if after.version != before.version:
        problems.append(f"{what}: version {before.version} -> {after.version}")
    if after.raw != before.raw:
        problems.append(f"{what}: its bytes changed")
    return problems


def assert_service_healthy_after_patch(
    node: TalosNode,
    patch: PatchInput,
    service: str = "kubelet",
    *,
    stable_for: float = DEFAULT_STABLE_FOR,
    timeout: float | None = None,
    mode: models.ApplyMode = "no-reboot",
    max_restarts: int | None = 3,
    guard: ConfigGuard | None = None,
    check_id: str = "config.kubelet-flag-failure-detected",
) -> CheckResult:
    """After applying ``patch``, ``service`` is running and healthy for ``stable_for`` s on end.

    Follows the Services resource (a COSI watch), not sleep-polling. Fails as soon as the
    service has restarted ``max_restarts`` times (a crash loop), or when it has not been
    stable for a whole window within ``timeout`` (default: ``stable_for`` + 60 s); the
    failure shows the state changes seen, the service's last events and its log tail.
    ``check_id`` names the failure (the conformance check that heals kubelet this way by
    default), so it can be pasted into a waiver.
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    check = check_id
    with guarding(node, guard) as chosen:
        reply = node.apply_patch(patch, mode=mode, guard=chosen)
        limit = timeout if timeout is not None else stable_for + 60.0
        try:
            report = wait_service_stable(
                node, service, stable_for=stable_for, timeout=limit, max_restarts=max_restarts
            )
        except WaitTimeout as exc:
            raise _unstable_failure(
                check, node, service, reply, exc, stable_for, max_restarts
            ) from None
    return CheckResult(
        check,
        node.name,
        {
            "apply": reply.mode_details,
            "state changes": report.timeline(),
            "waited": f"{report.elapsed:.1f}s",
        },
    )


def _unstable_failure(
    check: str,
    node: TalosNode,
    service: str,
    reply: models.ApplyResult,
    exc: WaitTimeout,
    stable_for: float,
    max_restarts: int | None,
) -> ConformanceFailure:
    report = exc.last_observation
    if not isinstance(report, StabilityReport):
        report = StabilityReport(service, stable_for)
    restarts = f"{report.restarts} restart{'s' if report.restarts != 1 else ''}"
    if max_restarts and report.restarts >= max_restarts:
        why = f"it keeps restarting ({restarts} in {exc.elapsed:.1f}s)"
    else:
        why = (
            f"it was not running and healthy for {stable_for:g}s on end within "
            f"{exc.elapsed:.1f}s ({restarts})"
        )
    return ConformanceFailure(
        check,
        f"{service} is not healthy after the patch: {why}",
        node=node.name,
        expected=f"{service} running and healthy for {stable_for:g}s on end",
        observed=str(report.last) if report.last is not None else "no state seen",
        evidence={
            "apply": reply.mode_details,
            "state changes": report.timeline(),
            "last events": _last_events(node, service),
            "log tail": _log_tail(node, service),
        },
    )


def _last_events(node: TalosNode, service: str) -> str:
    try:
        events = node.service(service).events[-_EVENT_LINES:]
    except TalosError as exc:
        return f"(could not read: {exc})"
    return "\n".join(f"[{e.state}] {e.msg}" for e in events) or "(none)"


def _log_tail(node: TalosNode, service: str) -> str:
    try:
        text = node.logs(service, tail=_LOG_LINES)
    except TalosError as exc:
        return f"(could not read: {exc})"
    return text.rstrip() or "(empty)"


def assert_try_reverts(
    node: TalosNode,
    patch: PatchInput,
    *,
    try_timeout: float = 30.0,
    timeout: float | None = None,
    guard: ConfigGuard | None = None,
    settle: float = 0.0,
    cancelled: Cancelled | None = None,
    time_scale: float | None = None,
    attempts: int = TRY_ATTEMPTS,
) -> CheckResult:
    """A try-mode apply takes effect, then the exact previous config comes back by itself.

    ``try_timeout`` is sent to the node (its revert timer); ``timeout`` bounds the wait for
    the revert on this side (default: ``try_timeout`` + 30 s). With ``settle`` > 0 the
    reverted config must then stay as it is (bytes and version) for ``settle`` seconds.
    The ``persistent`` config (the next boot's) must not change at all: try mode sets only
    the active config, and so does its revert (``v1alpha1_server.go`` ApplyConfiguration,
    ``v1alpha1_runtime.go`` RollbackToConfigAfter). ``time_scale`` is the node clock's rate
    against this machine's (1, the default, for a real node). A revert seen sooner than
    :data:`EARLY_REVERT_FRACTION` of the timer after the apply was sent fails (it fired
    early); that is judged only when ``time_scale`` is given.

    The tried config must be seen active, by a read right after the apply. A read that
    comes later than the timer (a busy machine, a slow link) may already see the revert, so
    an unchanged config there is no verdict: the apply is tried again with a timer twice as
    long, up to ``attempts`` timers, and then :class:`~pytest_talos.errors.NotObserved` is
    raised. An unchanged config read inside the timer fails.
    ``cancelled`` stops the waits early (WaitCancelled; the guard restores the node).
    """
    __tracebackhide__ = True  # pytest shows the failure at the caller, not in here
    timers = try_timers(try_timeout, attempts)
    check = _TRY_CHECK
    rate = 1.0 if time_scale is None else time_scale
    with guarding(node, guard) as chosen:
        before, persisted = node.machine_config, read_persisted_config(node)
        data = node.patched_config(*as_patch_list(patch))
        evidence: dict[str, str] = {}
        for window in timers:
            sent = time.monotonic()  # the node arms its timer after this
            reply = node.apply_config(data, mode="try", guard=chosen, try_timeout=window)
            tried = node.machine_config
            seen_after = (time.monotonic() - sent) * rate
            evidence["apply"] = reply.mode_details
            if tried.raw != before.raw:
                break
            if seen_after < window:
                raise ConformanceFailure(
                    check,
                    "the try-mode apply did not change the active config",
                    node=node.name,
                    expected="the patched config active during the try window",
                    observed=f"still {config_summary(before.raw, before.version)}, read "
                    f"{seen_after:.1f} node seconds after the apply was sent, inside its "
                    f"{window:g}s timer",
                    evidence=evidence,
                )
            evidence[f"{window:g}s timer"] = (
                f"not judged: read {seen_after:.1f} node seconds after the apply, when it may "
                "have reverted already"
            )
            _require_persisted_kept(node, chosen, persisted, "after a missed try window", evidence)
        else:
            raise try_window_missed(node, "the try-mode revert", timers, seen_after)
        _require_persisted_kept(node, chosen, persisted, "during the try window", evidence)
        widened = window / try_timeout
        limit = timeout * widened if timeout is not None else window + 30.0
        _wait_for_revert(node, chosen, before, limit, cancelled, evidence)
        waited = time.monotonic() - sent
        if time_scale is not None:
            evidence["reverted after"] = f"{waited * time_scale:.1f} node seconds"
            _require_not_early(node, window, waited * time_scale, evidence)
        _require_persisted_kept(node, chosen, persisted, "after the revert", evidence)
        if settle > 0:
            _require_settled(node, chosen, settle, cancelled, evidence)
            _require_persisted_kept(node, chosen, persisted, "after the settle time", evidence)
    return CheckResult(
        check, node.name, {**evidence, "tried": config_summary(tried.raw, tried.version)}
    )


def try_timers(first: float, attempts: int = TRY_ATTEMPTS) -> tuple[float, ...]:
    """The try-mode timers a check tries in turn: ``first`` node seconds, then each twice
    the last, ``attempts`` in all (10, 20, 40)."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    return tuple(first * 2**i for i in range(attempts))


def try_window_missed(
    node: TalosNode, what: str, timers: Sequence[float], seen_after: float
) -> NotObserved:
    """The NotObserved for a try-mode check whose every timer (:func:`try_timers`, node
    seconds) ran out before this machine could read ``what``; ``seen_after``: node seconds
    from the last apply to its read."""
    shown = ", ".join(f"{timer:g}" for timer in timers)
    return NotObserved(
        f"{what}: after each try-mode apply (timers of "
        f"{shown} node seconds) the node was read too late, when the revert may already "
        f"have happened (last read {seen_after:.1f} node seconds after its apply). "
        "Run on a less busy machine, or nearer the node.",
        window=timers[-1],
        seen_after=seen_after,
        node=node.name,
    )


def _wait_for_revert(
    node: TalosNode,
    chosen: ConfigGuard,
    before: models.MachineConfig,
    limit: float,
    cancelled: Cancelled | None,
    evidence: dict[str, str],
) -> None:
    try:
        wait_for_config(
            node,
            lambda raw: raw == before.raw,
            timeout=limit,
            description="the try-mode change to revert",
            cancelled=cancelled,
        )
    except WaitTimeout as exc:
        chosen.restore_node(node)
        raise ConformanceFailure(
            _TRY_CHECK,
            f"the try-mode change was not reverted within {limit:g}s "
            "(the original config was restored)",
            node=node.name,
            expected=f"back to {config_summary(before.raw, before.version)}",
            observed=str(exc.last_observation),
            evidence=evidence,
        ) from None


def _require_not_early(
    node: TalosNode, try_timeout: float, seen_after: float, evidence: dict[str, str]
) -> None:
    """The revert came no sooner than the timer allows (node seconds since the apply was
    sent; see :data:`EARLY_REVERT_FRACTION` for the margin)."""
    earliest = try_timeout * EARLY_REVERT_FRACTION
    if seen_after >= earliest:
        return
    raise ConformanceFailure(
        _TRY_CHECK,
        f"the try-mode change was reverted early: {seen_after:.1f} node seconds after the "
        f"apply was sent, before its {try_timeout:g}s timer could end",
        node=node.name,
        expected=f"the revert {try_timeout:g} node seconds after the apply "
        f"(not sooner than {earliest:g})",
        observed=f"reverted after {seen_after:.1f} node seconds",
        evidence=evidence,
    )


def _require_persisted_kept(
    node: TalosNode,
    chosen: ConfigGuard,
    persisted: PersistedConfig | None,
    when: str,
    evidence: dict[str, str],
) -> None:
    """Try mode and its revert never touch the config the next boot loads."""
    changes = persisted_changes(persisted, read_persisted_config(node))
    if not changes:
        return
    chosen.restore_node(node)
    raise ConformanceFailure(
        _TRY_CHECK,
        f"the try-mode apply changed the config the next boot loads ({when}; the original "
        "config was restored): a reboot would keep the tried change",
        node=node.name,
        expected="the persistent config unchanged (try mode sets only the active config)",
        observed="; ".join(changes),
        evidence=evidence,
    )


def _require_settled(
    node: TalosNode,
    chosen: ConfigGuard,
    settle: float,
    cancelled: Cancelled | None,
    evidence: dict[str, str],
) -> None:
    reverted = node.machine_config
    settled = _settled_config(node, reverted, settle, cancelled)
    if (settled.version, settled.raw) == (reverted.version, reverted.raw):
        return
    chosen.restore_node(node)
    raise ConformanceFailure(
        _TRY_CHECK,
        f"the try-mode change was reverted, but the config changed again within "
        f"{settle:g}s (the original config was restored)",
        node=node.name,
        expected=f"stays {config_summary(reverted.raw, reverted.version)}",
        observed=config_summary(settled.raw, settled.version),
        evidence=evidence,
    )
