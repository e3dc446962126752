"""docs/architecture.md's emulator table is generated from the code: it names every module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_emulator_table_is_fresh() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_architecture_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_emulator_table_names_every_module_once() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    emulator = ROOT / "pytest_talos" / "emulator"
    for path in emulator.rglob("*.py"):
        name = path.relative_to(emulator).as_posix()
        if name == "__init__.py":
            continue
        assert page.count(f"| `{name}` |") == 1, name
