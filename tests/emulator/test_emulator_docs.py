"""docs/emulator.md stays in step with the code (RPC table, faults, resources, guesses)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_emulator_docs", ROOT / "scripts" / "gen_emulator_docs.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_emulator_docs", module)
    spec.loader.exec_module(module)
    return module


def test_generated_blocks_are_current() -> None:
    generator = _generator()
    text = (ROOT / "docs" / "emulator.md").read_text(encoding="utf-8")
    assert generator.regenerate(text) == text, "run: python scripts/gen_emulator_docs.py"


def test_rpc_table_lists_every_served_method() -> None:
    generator = _generator()
    table = generator.render_rpcs()
    for path in (
        "/machine.MachineService/ApplyConfiguration",
        "/cosi.resource.State/Watch",
        "/cluster.ClusterService/HealthCheck",
    ):
        assert f"`{path}`" in table
    assert len(table.splitlines()) == 2 + 27 + 6 + 1


def test_every_fault_is_documented() -> None:
    from pytest_talos.emulator import FAULTS

    text = (ROOT / "docs" / "emulator.md").read_text(encoding="utf-8")
    for name in FAULTS:
        assert f"| `{name}` |" in text
