"""The layer contract: each package of ``zuno`` imports only the packages below it.

``ORDER`` is the house from the ground up; ``docs/architecture.md`` says what
each package owns, and ``scripts/draw_architecture.py`` draws the picture from
this same list. The graph is the one ``tests/test_import_contract.py`` builds:
every import between Zuno's modules, inside functions and under
``TYPE_CHECKING`` included (a type-only import ties two designs together as
much as any other).

The imports that still run up the layers are written out in
``KNOWN_UP_IMPORTS``, one line each, ``importer -> imported``. A new one fails;
a listed one that is gone fails too, so that the list only shrinks: take its
line out. Every module belongs to a package of ``ORDER``, except the few
written in ``OUTSIDE_THE_LAYERS``; a new package, or a new module beside
them, fails until it is placed.
"""

from __future__ import annotations

from collections.abc import Iterable

import grimp
import pytest

# The layers, the ground first. A package may import only packages before it.
ORDER = [
    "core",
    "workspace",
    "config",
    "contract",
    "durability",
    "execution",
    "policy",
    "integrations",
    "dispatch",
    "session",
    "agent",
    "tools",
    "fleet",
    "serve",
    "cli",
]

# Modules that stand above every layer: the public face, which re-exports names
# from many packages, and ``python -m zuno``. No package may import them.
OUTSIDE_THE_LAYERS = frozenset({"zuno", "zuno.__main__"})

# The imports that run up the layers today. Shrink this, never grow it.
KNOWN_UP_IMPORTS: frozenset[str] = frozenset()


def package_of(module: str) -> str | None:
    """The package (the name after ``zuno.``) a module lives in; ``None`` for ``zuno``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def unplaced(modules: Iterable[str], order: list[str]) -> list[str]:
    """The modules that belong to no layer and are not among the few outside them."""
    return sorted(
        module
        for module in modules
        if module not in OUTSIDE_THE_LAYERS and package_of(module) not in order
    )


def up_imports(graph: grimp.ImportGraph, order: list[str]) -> set[str]:
    """Every direct import from a module of one package into a package above it.

    Written ``importer -> imported``. An import of a module outside the layers
    (the public face) from inside a package counts as running up.
    """
    found: set[str] = set()
    for module in graph.modules:
        source = package_of(module)
        if module in OUTSIDE_THE_LAYERS or source not in order:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = package_of(imported)
            above = imported in OUTSIDE_THE_LAYERS or (
                target in order and order.index(target) > order.index(source)
            )
            if above:
                found.add(f"{module} -> {imported}")
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("zuno", exclude_type_checking_imports=False, cache_dir=None)


def test_every_module_has_its_place_in_a_layer(graph: grimp.ImportGraph) -> None:
    stray = unplaced(graph.modules, ORDER)
    assert not stray, (
        "these modules belong to no layer: "
        + ", ".join(stray)
        + ". Move each into the package of its concern (see docs/architecture.md), or,"
        " for a new package, place it in ORDER in tests/test_layers.py at the height"
        " its imports allow, and describe it in docs/architecture.md."
    )


def test_no_import_runs_up_the_layers_beyond_the_known_ones(graph: grimp.ImportGraph) -> None:
    new = sorted(up_imports(graph, ORDER) - KNOWN_UP_IMPORTS)
    assert not new, (
        "new import(s) up the layers (type-only and function-local imports count): "
        + "; ".join(new)
        + f". The order, bottom first: {' < '.join(ORDER)}. Move the shared piece down,"
        " pass it in from above (a parameter, a Protocol in the lower package), or"
        " move the importer up; do not add to KNOWN_UP_IMPORTS."
    )


def test_every_known_up_import_still_stands(graph: grimp.ImportGraph) -> None:
    gone = sorted(KNOWN_UP_IMPORTS - up_imports(graph, ORDER))
    assert not gone, (
        "these KNOWN_UP_IMPORTS no longer run up the layers: "
        + "; ".join(gone)
        + ". Good: take their lines out of KNOWN_UP_IMPORTS in tests/test_layers.py."
    )


def test_the_known_up_imports_are_written_module_to_module() -> None:
    for line in KNOWN_UP_IMPORTS:
        importer, arrow, imported = line.partition(" -> ")
        assert arrow and importer.startswith("zuno.") and imported.startswith("zuno"), line


def test_the_checks_see_an_import_up_and_a_stray_module() -> None:
    fake = grimp.ImportGraph()
    for name in ("zuno", "zuno.low", "zuno.low.a", "zuno.high", "zuno.high.b", "zuno.stray"):
        fake.add_module(name)
    fake.add_import(importer="zuno.high.b", imported="zuno.low.a")  # down: allowed
    fake.add_import(importer="zuno.low.a", imported="zuno.high.b")  # up
    fake.add_import(importer="zuno.low", imported="zuno")  # into the public face: up
    fake.add_import(importer="zuno", imported="zuno.high.b")  # the face may import anything
    order = ["low", "high"]
    assert up_imports(fake, order) == {"zuno.low.a -> zuno.high.b", "zuno.low -> zuno"}
    assert unplaced(fake.modules, order) == ["zuno.stray"]
