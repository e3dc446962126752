"""The import-linter contracts in pyproject.toml cover every top-level module of pytest_talos.

``lint-imports`` itself proves the imports keep the contracts; these tests prove the contracts
leave no module out, so a new module cannot slip past them.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_talos"


def _top_level_modules() -> set[str]:
    found = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    found |= {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    return found


def _contract(name: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return next(contract for contract in contracts if contract["name"] == name)


def test_the_layers_contract_places_every_module_and_is_exhaustive() -> None:
    layers = _contract("Layers point one way")
    assert layers["exhaustive"] is True
    assert layers["containers"] == ["pytest_talos"]
    placed = {
        name.strip().strip("()")
        for layer in layers["layers"]
        for name in layer.replace(":", "|").split("|")
    }
    assert _top_level_modules() <= placed


def test_every_module_but_the_plugin_is_kept_from_pytest_even_indirectly() -> None:
    forbidden = _contract("Only the plugin imports pytest")
    assert forbidden["allow_indirect_imports"] is False
    sources = {name.removeprefix("pytest_talos.") for name in forbidden["source_modules"]}
    assert sources == _top_level_modules() - {"plugin"}
    assert forbidden["ignore_imports"] == ["pytest_talos.hookspecs -> pytest"]


def test_the_hook_specifications_need_pluggy_only_at_run_time() -> None:
    code = (
        "import sys, pytest_talos.hookspecs as h; "
        "assert h.pytest_talos_expected_ports; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )
    assert done.stdout.strip() == "[]"


def test_the_conformance_helpers_contract_names_every_check_module() -> None:
    """import-linter's wildcards stand for whole module names only, so the check modules are
    listed; this keeps the list whole as check modules are added."""
    contract = _contract("Conformance helpers never import a check module")
    checks = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "conformance").rglob("test_*.py")
    }
    assert set(contract["forbidden_modules"]) == checks


def test_the_emulator_rooms_contract_places_every_room_and_is_exhaustive() -> None:
    rooms = _contract("Emulator rooms point one way")
    assert rooms["exhaustive"] is True
    emulator = PACKAGE / "emulator"
    found = {path.stem for path in emulator.glob("*.py") if path.stem != "__init__"}
    found |= {path.parent.name for path in emulator.glob("*/__init__.py")}
    placed = {name.strip() for layer in rooms["layers"] for name in layer.split("|")}
    assert found == placed
