"""The initialize and boot sequences of an emulated node, as the events they emit.

``internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go`` (Initialize, Boot) and
``v1alpha1_sequencer_tasks.go`` (the task names, StartAllServices).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytest_talos.emulator.node.events import Payload, PhasePayload, SequencePayload, TaskPayload
from pytest_talos.emulator.node.services.runner import ServiceManager

__all__ = ["Emit", "finish_boot_sequence", "run_boot_sequence"]

Emit = Callable[[Payload], object]  # publishes one runtime event of the node


def run_boot_sequence(
    emit: Emit, services: ServiceManager, *, container: bool, rtc_ahead: float = 0.0
) -> None:
    """The initialize and boot sequences, with the services each phase starts, at once.

    internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go (Initialize, Boot)
    and v1alpha1_sequencer_tasks.go (the task names, StartAllServices). The boot ends
    (its SequenceEvent STOP, stage running) only once every service is up: until then
    StartAllServices is still waiting (:func:`finish_boot_sequence`).

    ``rtc_ahead``: seconds the node's clock runs ahead until its first time sync steps it
    back (controllers/time/sync.go). Everything of the initialize and boot phases is
    stamped on that clock (event ids: rs/xid, runtime/events.go; service histories); the
    services StartAllServices starts come after the sync, since etcd, kubelet and trustd
    wait for it (system/services/etcd.go, kubelet.go, trustd.go: "time sync"). Where in
    the phases the sync lands depends on the network; here it lands at their end (INFERRED).
    """
    with services.clock.running_ahead(rtc_ahead):
        _initialize_and_boot_phases(emit, services, container=container)
    emit(PhasePayload("startEverything", "START"))
    emit(TaskPayload("startAllServices", "START"))
    # StartAllServices: cri, and trustd + etcd on control planes; kubelet is started by
    # controllers/k8s/kubelet_service.go, extension services by their controller
    # (v1.14: sandboxd first, where the node lists it: sandbox.py)
    services.boot(
        [
            "sandboxd",
            "cri",
            "trustd",
            "etcd",
            "kubelet",
            *(sid for sid in services.services if sid.startswith("ext-")),
        ]
    )


def _initialize_and_boot_phases(emit: Emit, services: ServiceManager, *, container: bool) -> None:
    emit(SequencePayload("initialize", "START"))
    if container:
        initialize = [
            ("machined", ("startApid", "startMachined", "startContainerd")),
            ("config", ("loadConfig",)),
        ]
    else:
        initialize = [
            ("systemRequirements", ("enforceKSPPRequirements",)),
            (
                "earlyServices",
                (
                    "startUdevd",
                    "startMachined",
                    "startApid",
                    "startAuditd",
                    "startSyslogd",
                    "startContainerd",
                ),
            ),
            ("usb", ("waitForUSB",)),
            ("meta", ("reloadMeta",)),
            ("dashboard", ("startDashboard",)),
            ("config", ("loadConfig",)),
        ]
    for phase, tasks in initialize:
        _run_phase(emit, services, phase, tasks)
    emit(SequencePayload("initialize", "STOP"))
    emit(SequencePayload("boot", "START"))
    boot = [
        ("memorySizeCheck", ("memorySizeCheck",)),
        ("diskSizeCheck", ("diskSizeCheck",)),
        ("env", ("setUserEnvVars", "waitForCARoots")),
        ("dbus", ("startDBus",)),
        *([("sharedFilesystems", ("setupSharedFilesystems",))] if container else []),
        ("ephemeral", ("mountEphemeralPartition",)),
        *(
            []
            if container
            else [("udevSetup", ("writeUdevRules",)), ("userDisks", ("mountUserDisks",))]
        ),
        ("userSetup", ("writeUserFiles",)),
    ]
    for phase, tasks in boot:
        _run_phase(emit, services, phase, tasks)


def _run_phase(emit: Emit, services: ServiceManager, phase: str, tasks: Sequence[str]) -> None:
    starts = {  # the tasks that start a service (v1alpha1_sequencer_tasks.go)
        "startApid": "apid",
        "startMachined": "machined",
        "startContainerd": "containerd",
        "startUdevd": "udevd",
        "startAuditd": "auditd",
        "startSyslogd": "syslogd",
        "startDashboard": "dashboard",
    }
    emit(PhasePayload(phase, "START"))
    for task in tasks:
        emit(TaskPayload(task, "START"))
        if task in starts:
            services.boot([starts[task]])
        emit(TaskPayload(task, "STOP"))
    emit(PhasePayload(phase, "STOP"))


def finish_boot_sequence(emit: Emit) -> None:
    """StartAllServices returned (every service is up): the boot sequence ends."""
    emit(TaskPayload("startAllServices", "STOP"))
    emit(PhasePayload("startEverything", "STOP"))
    emit(SequencePayload("boot", "STOP"))
