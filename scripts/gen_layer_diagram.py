"""Draw the layers of pytest_talos (docs/img/layers.svg) from the import-linter contract.

The picture is generated from ``pyproject.toml``'s "Layers point one way" contract, so the
diagram and the rule that CI enforces (``lint-imports``) are one fact. Run it after changing
the contract; ``--check`` fails when the committed picture is stale (a test runs it).

    python scripts/gen_layer_diagram.py [--check]
"""

from __future__ import annotations

import argparse
import html
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "img" / "layers.svg"
CONTRACT = "Layers point one way"

# What each top-level module is for, in a few words (shown under its name).
ROLES = {
    "plugin": "pytest plugin + suite plugin",
    "drift": "config drift vs git",
    "reporting": "results, HTML, merge",
    "recover": "talos-recover",
    "checks": "assertion helpers",
    "guard": "config guard, locks",
    "certs": "certificate hygiene",
    "hookspecs": "pluggy hooks",
    "wait": "waits with deadlines",
    "cluster": "TalosCluster",
    "node": "TalosNode",
    "client": "machine API + COSI",
    "emulator": "emulated Talos cluster",
    "ports": "port scanner",
    "journal": "change journal",
    "restarts": "restart episodes",
    "transport": "grpclib + mTLS",
    "pki": "CAs, certificates",
    "talosconfig": "talosconfig loading",
    "keyfile": "in-memory keys",
    "endpoint": "host:port parsing",
    "patches": "strategic / JSON6902",
    "_proto": "generated messages",
    "talos_api": "shared Talos facts",
    "releases": "per-release facts",
    "models": "typed results",
    "errors": "error tree",
    "coalesce": "HTTP/2 write batching",
}

BOX_W, BOX_H, GAP_X, GAP_Y, LEFT, TOP = 190, 46, 14, 22, 120, 64


def read_layers(pyproject: Path) -> list[list[tuple[str, bool]]]:
    """The contract's layers, top first: each a list of (module, optional)."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    contracts = data["tool"]["importlinter"]["contracts"]
    contract = next(c for c in contracts if c["name"] == CONTRACT)
    layers: list[list[tuple[str, bool]]] = []
    for entry in contract["layers"]:
        row = []
        for name in entry.split("|"):
            name = name.strip()
            optional = name.startswith("(") and name.endswith(")")
            row.append((name.strip("()"), optional))
        layers.append(row)
    return layers


def _box(x: int, y: int, name: str, optional: bool) -> str:
    dash = ' stroke-dasharray="5 3"' if optional else ""
    fill = "#e8f0fe" if name not in ("emulator", "client") else "#fdf2e0"
    role = html.escape(ROLES.get(name, ""))
    return (
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
        f'stroke="#3c4a63"{dash}/>'
        f'<text x="{x + BOX_W // 2}" y="{y + 20}" class="name">{html.escape(name)}</text>'
        f'<text x="{x + BOX_W // 2}" y="{y + 36}" class="role">{role}</text>'
    )


def render(layers: list[list[tuple[str, bool]]]) -> str:
    """The SVG text: one row per layer, an arrow down the side (imports point down)."""
    widest = max(len(row) for row in layers)
    width = LEFT + widest * (BOX_W + GAP_X) + 20
    height = TOP + len(layers) * (BOX_H + GAP_Y) + 56
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
        "<style>.name{font-size:14px;font-weight:bold;text-anchor:middle;fill:#1b2433}"
        ".role{font-size:11px;text-anchor:middle;fill:#46536b}"
        ".note{font-size:12px;fill:#1b2433}.rank{font-size:11px;fill:#6b778c}</style>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        '<text x="20" y="28" class="note" font-size="15" font-weight="bold">pytest_talos: '
        "a module imports only from the rows below its own</text>",
        '<text x="20" y="48" class="note">boxes side by side never import each other: '
        "client and emulator (orange) share only the rows below them</text>",
    ]
    arrow_x = 60
    any_optional = any(optional for row in layers for _, optional in row)
    optional_note = "; dashed: optional layer" if any_optional else ""
    for rank, row in enumerate(layers):
        y = TOP + rank * (BOX_H + GAP_Y)
        parts.append(f'<text x="20" y="{y + 28}" class="rank">{rank + 1}</text>')
        for column, (name, optional) in enumerate(row):
            parts.append(_box(LEFT + column * (BOX_W + GAP_X), y, name, optional))
    bottom = TOP + len(layers) * (BOX_H + GAP_Y) - GAP_Y
    parts += [
        f'<line x1="{arrow_x}" y1="{TOP}" x2="{arrow_x}" y2="{bottom - 12}" stroke="#3c4a63" '
        'stroke-width="2"/>',
        f'<path d="M{arrow_x - 7},{bottom - 14} L{arrow_x + 7},{bottom - 14} '
        f'L{arrow_x},{bottom} z" fill="#3c4a63"/>',
        f'<text x="{arrow_x + 8}" y="{TOP + 12}" class="rank" '
        f'transform="rotate(90 {arrow_x + 8} {TOP + 12})">imports point down</text>',
        f'<text x="20" y="{bottom + 30}" class="note">generated from pyproject.toml '
        f"[tool.importlinter] “{CONTRACT}” by scripts/gen_layer_diagram.py"
        f"{optional_note}</text>",
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the picture is stale")
    args = parser.parse_args(argv)
    text = render(read_layers(ROOT / "pyproject.toml"))
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{_shown(OUTPUT)} is stale: run python scripts/gen_layer_diagram.py")
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {_shown(OUTPUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
