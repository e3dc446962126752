"""The emulator beside a local Kubernetes: something listens on 0.0.0.0:10250 (a kubelet)
and on 0.0.0.0:6443 (k3s's API server).

Each scenario runs in a network namespace of its own (``unshare --net --map-root-user``):
there the test itself holds the wildcard ports, and no other test's emulator (which binds
10250 on its own loopback addresses, and so makes 0.0.0.0:10250 unbindable) gets in the way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Runs inside the namespace: holds the given wildcard ports, starts the emulator in-process and
# as `python -m pytest_talos.emulator`, releases the ports, starts it again; prints JSON.
SCENARIO = r"""
import json, os, signal, socket, subprocess, sys, tempfile
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.emulator.errors import EmulatorError

def hold(port):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    sock.listen(16)
    return sock

def in_process():
    try:
        with EmulatedCluster(time_scale=20) as cluster:
            probe = socket.create_connection((cluster.emulated_nodes[0].address, 10250), 5)
            probe.close()
            return {"started": True}
    except EmulatorError as exc:
        return {"started": False, "error": str(exc)}

def as_module(workdir):
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest_talos.emulator", "--talosconfig",
         os.path.join(workdir, "talosconfig")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if line:
        process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    return {"first_line": line, "returncode": process.returncode, "stderr": err}

def suite(suite_dir):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", suite_dir, "--talos-emulator",
         "--talos-emulator-time-scale", "20", "--talos-check", "immutability.pid1-is-machined"],
        capture_output=True, text=True, timeout=180)
    return {"returncode": done.returncode, "output": done.stdout + done.stderr}

held = [hold(int(port)) for port in sys.argv[2:]]
result = {
    "held": in_process(), "module": as_module(tempfile.mkdtemp()), "suite": suite(sys.argv[1])
}
for sock in held:
    sock.close()
result["released"] = in_process()
print(json.dumps(result))
"""


def _in_own_network(*ports: int) -> dict[str, dict[str, object]]:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare (util-linux) for a network namespace of the test's own")
    probe = subprocess.run(
        [unshare, "--net", "--map-root-user", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"no network namespace here (unshare: {probe.stderr.decode().strip()})")
    script = 'ip link set lo up 2>/dev/null || true; exec "$0" -c "$@"'
    done = subprocess.run(
        [unshare, "--net", "--map-root-user", "sh", "-c", script, sys.executable, SCENARIO]
        + [str(REPO / "conformance")]
        + [str(port) for port in ports],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _said_once(result: dict[str, dict[str, object]], taken: str) -> None:
    held = result["held"]
    assert held["started"] is False, held
    error = str(held["error"])
    assert error.count(taken) == 1, error
    assert "\n" not in error  # one paragraph
    assert "unshare --net" in error
    assert "Stop that program" in error
    assert "below 1024" not in error  # the old message blamed privileges
    module = result["module"]
    stderr = str(module["stderr"])
    assert module["returncode"] == 1, module
    assert module["first_line"] == "", module
    assert stderr.count(taken) == 1, stderr
    assert "Traceback" not in stderr
    suite = result["suite"]
    assert suite["returncode"] == 4, suite["output"]  # a usage error, said once
    assert str(suite["output"]).count(taken) == 1, suite["output"]
    assert "Traceback" not in str(suite["output"])
    # released, the same emulator starts (nothing of the failed start stayed bound)
    assert result["released"] == {"started": True}


def test_a_kubelet_on_every_address_is_named_once_with_what_to_do() -> None:
    _said_once(_in_own_network(10250), "port 10250 (kubelet) is taken")


def test_a_local_kubernetes_is_named_once_with_what_to_do() -> None:
    _said_once(_in_own_network(10250, 6443), "ports 6443 (kube-apiserver), 10250 (kubelet) are")
