"""Draw ``docs/architecture.svg``: Zuno's packages by layer, from the real import graph.

Run it from the repository root with the development environment::

    .venv/bin/python scripts/draw_architecture.py          # writes docs/architecture.svg
    .venv/bin/python scripts/draw_architecture.py --check  # exits 1 if the picture is stale

The layer order is read from ``tests/test_layers.py`` (its ``ORDER``), so the
picture and the layer contract cannot disagree. The graph is the one that test
builds with ``grimp``: every import between Zuno's modules, type-only ones
included. Imports are counted module to module and summed per pair of
packages; one arrow stands for each pair.

The picture is a staircase: one band per layer, bottom to top, and each
package's box one step to the right of the layer below it. An import down the
layers leaves the importer's bottom edge and enters the imported box from its
right, so every downward arrow stays in the empty triangle under the stairs.
An import that runs up the layers (a debt the layer contract lists) leaves
the importer's top edge and enters the imported box from its left, in red,
in the triangle above the stairs. The SVG is written by hand: no graphviz.
"""

from __future__ import annotations

import argparse
import ast
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import grimp

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "zuno"
CONTRACT = ROOT / "tests" / "test_layers.py"
PICTURE = ROOT / "docs" / "architecture.svg"

# Geometry, in SVG user units.
BOX_W = 124
BOX_H = 56
STEP_X = BOX_W + 18
BAND_H = 70
MARGIN_L = 64
MARGIN_T = 24
MARGIN_B = 16

DOWN_COLOUR = "#46627f"
UP_COLOUR = "#c0392b"


@dataclass(frozen=True)
class Package:
    """One package of ``zuno``: its layer, its size and its place in the picture."""

    name: str
    layer: int  # 0 is the bottom
    lines: int
    modules: int
    x: float
    y: float  # the top edge of its box


def read_order(contract: Path = CONTRACT) -> list[str]:
    """The layer order, bottom first, as the layer contract test writes it."""
    tree = ast.parse(contract.read_text(encoding="utf-8"))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id == "ORDER" and value is not None:
            return list(ast.literal_eval(value))
    raise SystemExit(f"no ORDER in {contract}: the layer contract names the layers")


def package_of(module: str) -> str | None:
    """The package a module of ``zuno`` belongs to (``None`` for ``zuno`` itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def package_imports(order: list[str]) -> Counter[tuple[str, str]]:
    """Module-to-module imports between two different packages, counted per pair."""
    graph = grimp.build_graph("zuno", exclude_type_checking_imports=False, cache_dir=None)
    pairs: Counter[tuple[str, str]] = Counter()
    for module in graph.modules:
        source = package_of(module)
        if source not in order:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = package_of(imported)
            if target in order and target != source:
                pairs[(source, target)] += 1
    return pairs


def measure(name: str) -> tuple[int, int]:
    """The lines and the modules of one package's source."""
    files = sorted((SOURCE / name).rglob("*.py"))
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in files)
    return lines, len(files)


def place(order: list[str]) -> dict[str, Package]:
    """Every package with its box on the staircase."""
    placed: dict[str, Package] = {}
    for layer, name in enumerate(order):
        lines, modules = measure(name)
        band_top = MARGIN_T + (len(order) - 1 - layer) * BAND_H
        y = band_top + (BAND_H - BOX_H) / 2
        placed[name] = Package(name, layer, lines, modules, MARGIN_L + layer * STEP_X, y)
    return placed


def spread(start: float, length: float, count: int, index: int) -> float:
    """The ``index``-th of ``count`` points spaced evenly inside a side of ``length``."""
    return start + length * (index + 1) / (count + 1)


def width_for(count: int) -> float:
    """An arrow's stroke width: it grows with the number of imports it stands for."""
    return round(0.8 + 0.6 * math.log2(count), 2)


def arrows(pairs: Counter[tuple[str, str]], placed: dict[str, Package]) -> list[str]:
    """The SVG paths of every arrow, ports chosen so an arrow never crosses its siblings."""
    down = {pair: n for pair, n in pairs.items() if placed[pair[1]].layer < placed[pair[0]].layer}
    up = {pair: n for pair, n in pairs.items() if placed[pair[1]].layer > placed[pair[0]].layer}
    ports: dict[tuple[str, str], tuple[float, float]] = {}

    # Downward: nearer targets leave further left; nearer importers arrive higher.
    for name, box in placed.items():
        targets = sorted((t for s, t in down if s == name), key=lambda t: -placed[t].layer)
        for i, target in enumerate(targets):
            ports[(name, target)] = (spread(box.x, BOX_W, len(targets), i), 0.0)
    for name, box in placed.items():
        sources = sorted((s for s, t in down if t == name), key=lambda s: placed[s].layer)
        for i, source in enumerate(sources):
            x, _ = ports[(source, name)]
            ports[(source, name)] = (x, spread(box.y, BOX_H, len(sources), i))

    # Upward: further targets leave further left; further importers arrive higher.
    for name, box in placed.items():
        targets = sorted((t for s, t in up if s == name), key=lambda t: -placed[t].layer)
        for i, target in enumerate(targets):
            ports[(name, target)] = (spread(box.x, BOX_W, len(targets), i), 0.0)
    for name, box in placed.items():
        sources = sorted((s for s, t in up if t == name), key=lambda s: placed[s].layer)
        for i, source in enumerate(sources):
            x, _ = ports[(source, name)]
            ports[(source, name)] = (x, spread(box.y, BOX_H, len(sources), i))

    drawn: list[str] = []
    for (source, target), count in sorted(down.items()):
        x, y = ports[(source, target)]
        start = placed[source].y + BOX_H
        end = placed[target].x + BOX_W
        drawn.append(
            f'<path d="M{x:g},{start:g} V{y:g} H{end + 1:g}" stroke="{DOWN_COLOUR}"'
            f' stroke-width="{width_for(count)}" fill="none" opacity="0.7"'
            f' marker-end="url(#down)"><title>{source} imports {target}:'
            f" {count} module import{'s' if count > 1 else ''}</title></path>"
        )
    for (source, target), count in sorted(up.items()):
        x, y = ports[(source, target)]
        start = placed[source].y
        end = placed[target].x
        drawn.append(
            f'<path d="M{x:g},{start:g} V{y:g} H{end - 1:g}" stroke="{UP_COLOUR}"'
            f' stroke-width="{width_for(count)}" stroke-dasharray="6 3" fill="none"'
            f' marker-end="url(#up)"><title>{source} imports {target}, up the layers:'
            f" {count} module import{'s' if count > 1 else ''}</title></path>"
        )
    return drawn


def bands(placed: dict[str, Package], width: int) -> list[str]:
    """One band per layer, striped, with the layer's number at its left."""
    drawn: list[str] = []
    for box in placed.values():
        band_top = box.y - (BAND_H - BOX_H) / 2
        fill = "#f4f6f8" if box.layer % 2 == 0 else "#ffffff"
        drawn.append(
            f'<rect x="0" y="{band_top:g}" width="{width}" height="{BAND_H}" fill="{fill}"/>'
        )
        drawn.append(
            f'<text x="16" y="{band_top + BAND_H / 2 + 5:g}" class="band">{box.layer + 1}</text>'
        )
    return drawn


def boxes(pairs: Counter[tuple[str, str]], placed: dict[str, Package]) -> list[str]:
    """One box per package: its name and size, and what it imports as a tooltip."""
    drawn: list[str] = []
    for box in placed.values():
        imports = sorted((t for s, t in pairs if s == box.name), key=lambda t: placed[t].layer)
        tip = f"{box.name}: {box.lines} lines in {box.modules} modules; imports " + (
            ", ".join(imports) or "nothing of zuno"
        )
        cx = box.x + BOX_W / 2
        drawn.append(
            f'<g><title>{escape(tip)}</title><rect x="{box.x:g}" y="{box.y:g}" width="{BOX_W}"'
            f' height="{BOX_H}" rx="6" class="box"/>'
            f'<text x="{cx:g}" y="{box.y + 20:g}" class="name">{box.name}</text>'
            f'<text x="{cx:g}" y="{box.y + 35:g}" class="size">{box.lines:,} lines</text>'
            f'<text x="{cx:g}" y="{box.y + 48:g}" class="size">{box.modules} modules</text></g>'
        )
    return drawn


def legend() -> list[str]:
    """The title and the key, in the empty corner above the stairs."""
    lines = [
        ("title", "Zuno's packages by layer: each imports only those below it"),
        ("key", "one band per layer, the bottom first; a box gives the package's size"),
        ("key", "grey arrow: a package's imports of one below it; the wider, the more modules"),
        ("up", "red dashed arrow: an import up the layers, a debt listed in tests/test_layers.py"),
        ("key", "zuno/__init__.py (the public face) and __main__ stand above every layer"),
        ("key", "drawn from the import graph by scripts/draw_architecture.py"),
    ]
    top = MARGIN_T + 20
    return [
        f'<text x="{MARGIN_L}" y="{top + i * 20}" class="{kind}">{escape(text)}</text>'
        for i, (kind, text) in enumerate(lines)
    ]


def draw(order: list[str]) -> str:
    """The whole SVG document for today's code."""
    placed = place(order)
    pairs = package_imports(order)
    width = MARGIN_L + len(order) * STEP_X + 24
    height = MARGIN_T + len(order) * BAND_H + MARGIN_B
    markers = "".join(
        f'<marker id="{name}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7"'
        f' markerHeight="7" markerUnits="userSpaceOnUse" orient="auto">'
        f'<path d="M0,0 L8,4 L0,8 z" fill="{colour}"/></marker>'
        for name, colour in (("down", DOWN_COLOUR), ("up", UP_COLOUR))
    )
    style = (
        "text{font-family:Helvetica,Arial,sans-serif}"
        ".band{font-size:15px;fill:#8a96a3;font-weight:bold}"
        f".box{{fill:#fff;stroke:{DOWN_COLOUR};stroke-width:1.5}}"
        ".name{font-size:15px;font-weight:bold;text-anchor:middle;fill:#1d2b3a}"
        ".size{font-size:11px;text-anchor:middle;fill:#52606d}"
        ".title{font-size:18px;font-weight:bold;fill:#1d2b3a}"
        ".key{font-size:13px;fill:#3e4c59}"
        f".up{{font-size:13px;fill:{UP_COLOUR}}}"
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}">',
        f"<style>{style}</style>",
        f"<defs>{markers}</defs>",
        *bands(placed, width),
        *legend(),
        *arrows(pairs, placed),
        *boxes(pairs, placed),  # last, so a box stands over the arrows that pass it
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the picture, or with ``--check`` say whether it matches the code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the SVG is stale")
    parser.add_argument("--out", type=Path, default=PICTURE, help="where to write the SVG")
    args = parser.parse_args(argv)
    svg = draw(read_order())
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != svg:
            print(f"{args.out} is stale: run scripts/draw_architecture.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(svg, encoding="utf-8")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
