"""The layer picture in docs is generated from the import contract CI enforces."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_layer_diagram", ROOT / "scripts" / "gen_layer_diagram.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_layer_diagram", module)
    spec.loader.exec_module(module)
    return module


def test_the_committed_picture_matches_the_contract() -> None:
    assert _script().main(["--check"]) == 0


def test_every_layer_and_module_of_the_contract_is_drawn() -> None:
    script = _script()
    layers = script.read_layers(ROOT / "pyproject.toml")
    svg = script.render(layers)
    names = [name for row in layers for name, _ in row]
    assert {"plugin", "client", "emulator", "transport", "errors"} <= set(names)
    for name in names:
        assert f">{name}</text>" in svg
        assert script.ROLES.get(name), f"{name} has no caption in scripts/gen_layer_diagram.py"


def test_a_stale_picture_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script()
    stale = tmp_path / "layers.svg"
    stale.write_text("<svg/>", encoding="utf-8")
    monkeypatch.setattr(script, "OUTPUT", stale)

    assert script.main(["--check"]) == 1
