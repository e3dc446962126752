"""No module of pytest_talos or conformance imports another module's private name.

What one module shares with another gets a public name in its home module. The only
exceptions: a private *submodule* of the importer's own package (``from pytest_talos.client
import _convert`` inside ``pytest_talos.client``), and the short allow-list below.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("pytest_talos", "conformance")


def _dotted(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(root: Path, path: Path) -> str:
    dotted = _dotted(root, path)
    return dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]


def _absolute(root: Path, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(root, path).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_module(root: Path, dotted: str) -> bool:
    where = root.joinpath(*dotted.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _own_private_submodule(root: Path, path: Path, module: str, name: str) -> bool:
    package = _package_of(root, path)
    in_own_package = package == module or package.startswith(module + ".")
    return in_own_package and _is_module(root, f"{module}.{name}")


def private_imports(root: Path, tops: tuple[str, ...] = SCANNED) -> Iterator[str]:
    """Every ``from <ours> import _name`` under ``root``'s ``tops`` that is not allowed."""
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            if "_proto" in path.parts:
                continue  # generated protobuf code
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom):
                    continue
                module = _absolute(root, path, node)
                if module.split(".")[0] not in tops:
                    continue
                for alias in node.names:
                    name = alias.name
                    if not name.startswith("_") or name.startswith("__"):
                        continue
                    if _own_private_submodule(root, path, module, name):
                        continue
                    where = path.relative_to(root)
                    yield f"{where}:{node.lineno}: from {module} import {name}"


def test_no_module_imports_another_modules_private_name() -> None:
    offenders = list(private_imports(ROOT))
    assert not offenders, "private names imported across modules:\n" + "\n".join(offenders)


def _write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_scan_finds_a_private_name_and_spares_own_private_submodules(tmp_path: Path) -> None:
    _write(tmp_path, "pytest_talos/__init__.py")
    _write(tmp_path, "pytest_talos/client/__init__.py")
    _write(tmp_path, "pytest_talos/client/_convert.py")
    _write(tmp_path, "pytest_talos/client/_calls.py", "from pytest_talos.client import _convert\n")
    _write(tmp_path, "pytest_talos/client/sub/__init__.py", "from .. import _convert\n")
    _write(tmp_path, "pytest_talos/guard.py", "_secret = 1\n")
    _write(tmp_path, "pytest_talos/checks.py", "from pytest_talos.guard import _secret\n")
    _write(tmp_path, "pytest_talos/other.py", "from pytest_talos.client import _convert\n")
    _write(tmp_path, "pytest_talos/rel/__init__.py", "from ..guard import _secret, public\n")
    _write(tmp_path, "conformance/test_x.py", "from pytest_talos.node import _dig\n")

    found = sorted(private_imports(tmp_path))

    assert found == [
        "conformance/test_x.py:1: from pytest_talos.node import _dig",
        "pytest_talos/checks.py:1: from pytest_talos.guard import _secret",
        "pytest_talos/other.py:1: from pytest_talos.client import _convert",
        "pytest_talos/rel/__init__.py:1: from pytest_talos.guard import _secret",
    ]
