"""The import contract: no import circle inside ``zuno``, and the public names kept.

The graph is Zuno's own modules and every import between them, wherever it
stands: at the top of a module, inside a function, or under ``TYPE_CHECKING``
(a type-only import still ties the two modules' designs together). A circle is
a strongly connected group of modules: each can reach every other through
imports. There is none today (:data:`ALLOWED_CIRCLES` is empty): a new circle
fails. Should one ever be allowed for a while, it is written out there by name;
the second test says when an entry no longer stands.

The layers of the packages (each imports only those below it) are pinned by
``tests/test_layers.py``.

To see today's circles: ``python -m pytest tests/test_import_contract.py``
prints them when the contract is broken.
"""

from __future__ import annotations

import importlib

import grimp
import pytest

import zuno

# The circles that remain, by name: none. Keep it so; a circle is broken by moving the
# shared piece down or inverting the import, never by adding it here.
ALLOWED_CIRCLES: dict[str, frozenset[str]] = {}


def _circles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected groups of two or more modules (Tarjan, iterative)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    work: list[tuple[str, list[str]]] = []  # the depth-first path, each with what is left to visit

    def enter(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        work.append((module, sorted(graph.find_modules_directly_imported_by(module))))

    for root in sorted(graph.modules):
        if root in order:
            continue
        enter(root)
        while work:
            module, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in order:
                    enter(nxt)
                elif nxt in on_stack:
                    low[module] = min(low[module], order[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == order[module]:
                group: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == module:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("zuno", exclude_type_checking_imports=False, cache_dir=None)


@pytest.fixture(scope="module")
def circles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    return _circles(graph)


def _describe(group: frozenset[str]) -> str:
    return ", ".join(sorted(group))


def test_no_import_circle_beyond_the_allowed_ones(circles: list[frozenset[str]]) -> None:
    new = [
        group
        for group in circles
        if not any(group <= allowed for allowed in ALLOWED_CIRCLES.values())
    ]
    assert not new, (
        "new import circle(s) inside zuno (type-only imports count): "
        + " | ".join(_describe(group) for group in new)
        + ". Move the shared piece into a module of its own, or invert the import,"
        " so that imports run one way."
    )


def test_every_allowed_circle_still_stands(circles: list[frozenset[str]]) -> None:
    gone = {name: allowed for name, allowed in ALLOWED_CIRCLES.items() if allowed not in circles}
    assert not gone, (
        "these allowed circles no longer match the code: "
        + "; ".join(f"{name!r} (today: {_today(group, circles)})" for name, group in gone.items())
        + ". Shrink ALLOWED_CIRCLES in tests/test_import_contract.py to what remains."
    )


def _today(allowed: frozenset[str], circles: list[frozenset[str]]) -> str:
    left = [group for group in circles if group & allowed]
    return " | ".join(_describe(group) for group in left) or "gone"


def test_the_circle_finder_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.d")
    assert _circles(graph) == [frozenset({"pkg.a", "pkg.b", "pkg.c"})]


# The public face: these names are importable from ``zuno`` itself.
PUBLIC_NAMES = (
    "AgentSettings",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApproveAll",
    "Approver",
    "BlockKind",
    "CallRequest",
    "CallResult",
    "CallbackApprover",
    "Concurrency",
    "Config",
    "ConfigError",
    "Declaration",
    "DenyAll",
    "Effect",
    "Event",
    "HookCall",
    "HookDecision",
    "Outcome",
    "OutputLimits",
    "PermissionRule",
    "Replay",
    "Runtime",
    "SessionState",
    "TerminalApprover",
    "Tool",
    "ToolArgs",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "TransientError",
    "UncertainOutcome",
    "UnknownAgent",
    "UnknownSession",
    "installed_version",
    "load_config",
    "open_store",
)


def test_the_public_names_are_pinned() -> None:
    assert sorted(zuno.__all__) == sorted(PUBLIC_NAMES), (
        "zuno.__all__ changed: a public name removed breaks every embedder that uses it;"
        " a new one must be added to PUBLIC_NAMES here on purpose"
    )


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_every_public_name_imports_from_zuno(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from zuno import {name}", namespace)  # the statement an embedder writes
    value = namespace[name]
    home = getattr(value, "__module__", None)
    assert isinstance(home, str) and home.startswith("zuno")
    assert getattr(importlib.import_module(home), name) is value
