"""Faults are objects: names from an enum, seams declared, docs and matrix generated or kept."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys
import tokenize
from pathlib import Path

from mypy import api as mypy_api

from pytest_talos.emulator.faults import (
    FAULTS,
    PROFILES,
    Fault,
    FaultSet,
    KubeQuirk,
    describe_faults,
    resolve_faults,
)
from tests.conformance.fault_matrix import FAULT_MATRIX

ROOT = Path(__file__).resolve().parents[2]


def test_every_enum_member_has_one_profile() -> None:
    assert [p.fault for p in PROFILES] == list(Fault)
    assert set(FAULTS) == {str(member) for member in Fault}


def test_every_profile_declares_a_seam() -> None:
    assert all(profile.changes for profile in PROFILES)


def test_every_fault_has_a_fault_matrix_row() -> None:
    assert sorted(FAULT_MATRIX) == sorted(str(member) for member in Fault)


def test_plain_strings_still_name_faults() -> None:
    assert resolve_faults(["ssh-open"]) == (FAULTS[Fault.SSH_OPEN],)
    faults = FaultSet(resolve_faults(["node-not-ready"]), last_node="b")
    assert faults.on(Fault.NODE_NOT_READY, "b")
    assert not faults.on(Fault.NODE_NOT_READY, "a")
    assert faults.on_node("b") == frozenset({Fault.NODE_NOT_READY})


def test_list_faults_shows_the_declared_seams() -> None:
    line = next(x for x in describe_faults().splitlines() if x.startswith("ssh-open "))
    assert line.endswith("[rootfs, processes, listeners]")


# mypy analyses the faults package and nothing else: the kit's other modules (pulled in by
# pytest_talos/__init__.py's TYPE_CHECKING imports) are skipped, so the check takes seconds
# instead of analysing the whole kit; Fault and FaultSet are defined in the package itself.
_FAULTS_ONLY = """\
[mypy]
strict = True
follow_imports = skip
[mypy-pytest_talos.emulator.faults.*]
follow_imports = silent
"""


def test_a_misspelt_fault_fails_type_checking(tmp_path: Path) -> None:
    source = tmp_path / "typo.py"
    source.write_text(
        "from pytest_talos.emulator.faults import Fault, FaultSet\n"
        "FaultSet().on(Fault.SSH_OEPN, 'node')\n"
        "FaultSet().on('ssh-open', 'node')\n"
        "FaultSet().on(Fault.SSH_OPEN, 'node')\n"
    )
    config = tmp_path / "mypy.ini"
    config.write_text(_FAULTS_ONLY)
    out, _, status = mypy_api.run(
        ["--config-file", str(config), "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    assert status == 1
    assert '"type[Fault]" has no attribute "SSH_OEPN"' in out
    assert 'incompatible type "str"; expected "Fault"' in out
    assert "Found 2 errors in 1 file" in out, out  # the right member is fine


def test_fault_docs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_fault_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_emulator_errors_have_their_own_root() -> None:
    from pytest_talos.emulator import EmulatorError
    from pytest_talos.emulator.errors import (
        ConfigRejected,
        ListenerError,
        RPCFailure,
        ServiceRefused,
    )
    from pytest_talos.emulator.machineconfig import ConfigRejected as FromMachineconfig
    from pytest_talos.errors import TalosError

    for error in (ConfigRejected, ListenerError, RPCFailure, ServiceRefused):
        assert issubclass(error, EmulatorError)
        assert not issubclass(error, TalosError)
    assert not issubclass(EmulatorError, TalosError)
    assert FromMachineconfig is ConfigRejected
    assert issubclass(ListenerError, OSError)


# Every module of the rooms that apply the active profiles' declared effects (data, stages or
# Quirk switches) names no fault itself: a fault's definition is its profile in catalogue.py.
# These few name one in prose only (the fault whose wording or data they hold), never in code.
_NAMES_A_FAULT_IN_PROSE = {
    "apid/listeners.py",  # the paragraph on ports below 1024 names fault ssh-open
    "apid/tls.py",
    "cluster/configs.py",
    "cluster/desired.py",
    "cluster/pki.py",
    "cosi/store.py",
    "node/host/mounts.py",
}


def test_converted_seams_name_no_fault() -> None:
    emulator = ROOT / "pytest_talos" / "emulator"
    names = [f"Fault.{member.name}" for member in Fault] + [
        f"fault {member.value}" for member in Fault
    ]
    seams = [
        path
        for room in ("apid", "node", "cluster", "cosi")
        for path in sorted((emulator / room).rglob("*.py"))
        if path.relative_to(emulator).as_posix() not in _NAMES_A_FAULT_IN_PROSE
    ]
    assert len(seams) > 40
    for module in seams:
        text = module.read_text()
        assert [name for name in names if name in text] == [], module
    for prose in sorted(_NAMES_A_FAULT_IN_PROSE):
        assert "Fault." not in (emulator / prose).read_text(), prose


def test_a_quirk_is_on_where_its_profile_is() -> None:

    faults = FaultSet(resolve_faults(["node-not-ready"]), last_node="b")
    assert faults.quirk(KubeQuirk.KUBE_READY_FALSE, "b")
    assert not faults.quirk(KubeQuirk.KUBE_READY_FALSE, "a")
    assert not faults.quirk(KubeQuirk.KUBE_UNSCHEDULABLE, "b")


def test_data_effects_are_declared_on_their_profiles() -> None:
    ssh = FAULTS[Fault.SSH_OPEN]
    assert ssh.rootfs_executables == ("/usr/bin/sshd",)
    assert [listener.port for listener in ssh.listeners] == [22]
    assert [process.executable for process in ssh.host_processes] == ["/usr/bin/sshd"]
    assert FAULTS[Fault.HIDDEN_LISTENER].hidden_ports == (10250,)


def test_each_machine_rpc_is_served_by_exactly_one_plain_group() -> None:
    """No mixins: every MachineService RPC of the generated base comes from one servicer
    group module, and no group serves a method the other serves."""
    from pytest_talos._proto.machine import machine_grpc
    from pytest_talos.emulator.apid.servicers.machine import GROUPS, machine_servicer

    rpcs = set(machine_grpc.MachineServiceBase.__abstractmethods__)
    served = [rpcs & set(dir(group)) for group in GROUPS]
    assert set().union(*served) == rpcs
    assert sum(len(names) for names in served) == len(rpcs)
    assert all(group.__mro__ == (group, object) for group in GROUPS)
    assert set(vars(machine_servicer())) == rpcs


# Each seam owns its quirk kind: only these modules ask it (faults/ declares them).
_QUIRK_OWNERS = {
    "ApplyQuirk": {"node/apply.py"},
    "AuthenticationQuirk": {"apid/gate.py", "apid/server.py", "cluster/member.py"},
    "AuthorizationQuirk": {"apid/dispatch.py", "apid/unmodelled.py"},
    "CosiQuirk": {"apid/servicers/cosi.py"},
    "DiscoveryQuirk": {"node/net/place.py"},
    "GeneratedConfigQuirk": {"cluster/emulated.py"},
    "KubeQuirk": {"node/kubelet.py", "node/published.py"},
    "MachineApiQuirk": {
        "node/state.py",
        "apid/servicers/machine_info.py",
        "apid/servicers/machine_ops.py",
    },
    "ServiceQuirk": {"node/services/published.py"},
}


def _quirk_kinds_used(path: Path) -> set[str]:
    """The quirk kinds a module's code (not its comments) names as ``Kind.MEMBER``."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    return {
        token.string
        for token, following in itertools.pairwise(tokens)
        if token.type == tokenize.NAME and token.string in _QUIRK_OWNERS and following.string == "."
    }


def test_each_seam_asks_only_its_own_quirk_kind() -> None:
    from pytest_talos.emulator.faults import QUIRK_KINDS

    assert {kind.__name__ for kind in QUIRK_KINDS} == set(_QUIRK_OWNERS)
    emulator = ROOT / "pytest_talos" / "emulator"
    for path in sorted(emulator.rglob("*.py")):
        name = path.relative_to(emulator).as_posix()
        if name.startswith("faults/"):
            continue  # where the kinds and the profiles that turn them on are declared
        for kind in _quirk_kinds_used(path):
            assert name in _QUIRK_OWNERS[kind], f"{name} asks {kind}, another seam's quirk"
    members = [member.value for kind in QUIRK_KINDS for member in kind]
    assert len(members) == len(set(members))  # one name for one switch, across the kinds
