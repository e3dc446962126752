"""Write the emulator's room and module table in docs/architecture.md from the code itself.

Each room is a folder of ``pytest_talos/emulator``, in the order of the import-linter contract
"Emulator rooms point one way" (``pyproject.toml``: top rooms import the ones below); each row
is a module and the first line of its docstring. The table lives between two markers in the
page, so the prose around it stays hand-written; ``--check`` fails when the committed table is
stale (``tests/unit/test_architecture_docs.py`` runs it).

    python scripts/gen_architecture_docs.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMULATOR = ROOT / "pytest_talos" / "emulator"
PAGE = ROOT / "docs" / "architecture.md"
CONTRACT = "Emulator rooms point one way"
BEGIN = "<!-- emulator-rooms:begin (scripts/gen_architecture_docs.py) -->"
END = "<!-- emulator-rooms:end -->"


def room_order() -> list[str]:
    """The rooms, top first, as the contract layers them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["name"] == CONTRACT)["layers"]
    return [name.strip() for layer in layers for name in layer.split("|")]


def summary(path: Path) -> str:
    """The first line of a module's docstring, its table cells' pipes escaped."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = doc.strip().split("\n\n", 1)[0].replace("\n", " ")
    return first.replace("|", "\\|")


def modules_of(room: str) -> Iterator[Path]:
    base = EMULATOR / room
    if base.with_suffix(".py").is_file():
        yield base.with_suffix(".py")
        return
    yield from sorted(base.rglob("*.py"), key=lambda p: (len(p.relative_to(base).parts), p))


def rows() -> Iterator[str]:
    yield "| Room | Module | What it is |"
    yield "| --- | --- | --- |"
    for room in room_order():
        for path in modules_of(room):
            name = path.relative_to(EMULATOR).as_posix()
            shown_room = f"`{room}/`" if (EMULATOR / room).is_dir() else "—"
            yield f"| {shown_room} | `{name}` | {summary(path)} |"


def rendered(page: str) -> str:
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + "\n".join(rows()) + "\n" + END + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the page is stale")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    fresh = rendered(page)
    if args.check:
        if fresh != page:
            sys.stderr.write(
                "docs/architecture.md's emulator table is stale: "
                "run python scripts/gen_architecture_docs.py\n"
            )
            return 1
        return 0
    PAGE.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
