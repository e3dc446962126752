"""The emulator CLI's talosconfig names its scan baseline, so the host's wildcard listeners
are not counted as the nodes' ports by ``immutability.only-expected-ports``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pytest_talos.talosconfig import SCAN_BASELINE_KEY, load_talosconfig
from tests.plugin.interruptions import QUIET, REPO, Emulator, child_env, emulator


@pytest.fixture
def wildcard_listener() -> Iterator[int]:
    """A TCP listener on 0.0.0.0: it answers on every loopback address, node or not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        yield listener.getsockname()[1]


def _only_expected_ports(emu: Emulator, talosconfig: Path, work: Path) -> tuple[int, str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "conformance",
            *QUIET,
            "-q",
            "-k",
            "only_expected_ports",
            f"--talosconfig={talosconfig}",
            f"--talos-endpoint={emu.endpoint}",
            f"--talos-state-dir={work / 'state'}",
        ],
        cwd=REPO,
        env=child_env(HOME=str(work)),
        capture_output=True,
        text=True,
        timeout=400,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_cli_talosconfig_names_a_vacant_address(tmp_path: Path) -> None:
    with emulator(tmp_path) as emu:
        baseline = load_talosconfig(emu.talosconfig, env={}).context.scan_baseline
    assert baseline is not None
    assert baseline not in emu.nodes.values()
    assert baseline.rsplit(".", 1)[0] == next(iter(emu.nodes.values())).rsplit(".", 1)[0]


def test_wildcard_listener_passes_only_expected_ports_against_the_cli(
    tmp_path: Path, wildcard_listener: int
) -> None:
    with emulator(tmp_path) as emu:
        code, output = _only_expected_ports(emu, emu.talosconfig, tmp_path)
        assert code == 0, output
        assert "passed" in output, output

        # Without the key the same run counts the host's listener as the nodes' own port.
        doc = yaml.safe_load(emu.talosconfig.read_text())
        for body in doc["contexts"].values():
            del body[SCAN_BASELINE_KEY]
        bare = tmp_path / "talosconfig-without-baseline"
        bare.write_text(yaml.safe_dump(doc))
        bare.chmod(0o600)
        code, output = _only_expected_ports(emu, bare, tmp_path)
        assert code != 0, output
        assert str(wildcard_listener) in output, output
