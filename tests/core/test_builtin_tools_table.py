"""The table of built-in tools (zuno.session.builtin_tools.BUILTINS) is true to every tool.

A runtime registers the built-in tools from this table without importing them,
so a line that names the wrong class, forgets a tool or hides that a tool needs
setting up would go unseen until someone calls that tool. These checks import
every tool module and compare.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest

import zuno.tools
from zuno.config.loading import Config
from zuno.contract.tool import Tool
from zuno.core.tool_names import ALL_NAMES
from zuno.dispatch.registry import LazyTool, NeedsSetup, Registry
from zuno.session.builtin_tools import BUILTINS, builtin_tools, lazy_builtin_tools
from zuno.session.runtime import Runtime


def _tool_classes() -> dict[str, type[Tool[Any]]]:
    """Every concrete Tool class with a name defined in a zuno.tools module."""
    found: dict[str, type[Tool[Any]]] = {}
    for info in pkgutil.iter_modules(zuno.tools.__path__):
        module = importlib.import_module(f"zuno.tools.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, Tool)
                and cls.__module__ == module.__name__
                and not inspect.isabstract(cls)
                and isinstance(cls.__dict__.get("name"), str)
            ):
                found[cls.__dict__["name"]] = cls
    return found


def test_every_line_builds_the_tool_it_names() -> None:
    config = Config()
    names = [entry.name for entry in BUILTINS]
    assert len(names) == len(set(names)), "a tool is listed twice"
    for entry in BUILTINS:
        tool = entry.make(config)
        assert tool.name == entry.name, entry
        # The flag the surface uses to decide whether to load a tool to ask it.
        assert entry.needs_setup == isinstance(tool, NeedsSetup), entry


def test_every_tool_class_has_a_line() -> None:
    # A tool class added to a zuno.tools module without a BUILTINS line would never be offered.
    missing = sorted(set(_tool_classes()) - {entry.name for entry in BUILTINS})
    assert missing == [], (
        f"add a Builtin(...) line to zuno.session.builtin_tools.BUILTINS for {missing}"
    )


def test_the_specification_names_are_implemented_or_absent_on_purpose() -> None:
    # Every line's name is one the configuration may use (else zuno.json could not switch it).
    assert {entry.name for entry in BUILTINS} <= ALL_NAMES


def test_lazy_and_eager_registries_offer_the_same_surface(workspace: Path) -> None:
    config = Config.model_validate({"tools": {"edit": True, "execute": True, "lsp": True}})
    eager = Registry(builtin_tools(config)).surface(config)
    lazy = Registry(lazy_builtin_tools(config)).surface(config)
    assert lazy.names == eager.names
    assert lazy.withheld == eager.withheld
    assert [t.declaration for t in lazy.described()] == [t.declaration for t in eager.tools]


def test_a_runtime_imports_a_tool_only_when_it_is_used(workspace: Path) -> None:
    rt = Runtime(workspace, db_path=workspace.parent / "lazy.db")
    try:
        handles = {m.name: m for m in lazy_members(rt.registry)}
        assert set(handles) == {entry.name for entry in BUILTINS}
        state = rt.open_session()
        assert "glob" in state.surface.names
        # Opening a session loaded only what the surface had to ask (web_search's backend).
        assert {n for n, h in handles.items() if h.loaded} == {"web_search"}
        assert state.surface.get("read") is rt.registry.get("read")  # one instance, shared
        assert {n for n, h in handles.items() if h.loaded} == {"web_search", "read"}
    finally:
        rt.close()


def test_a_startup_check_still_refuses_the_call_that_needs_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zuno.execution.ripgrep._locate import RipgrepUnavailable

    # The probe's answer is cached by ZUNO_RG's value: a path of this test's own is fresh.
    monkeypatch.setenv("ZUNO_RG", str(workspace / "no-such-rg"))
    rt = Runtime(workspace, db_path=workspace.parent / "check.db")  # no rg: still starts
    try:
        with pytest.raises(RipgrepUnavailable):
            rt.registry.get("glob")
        assert rt.registry.get("read") is not None
    finally:
        rt.close()


def test_describing_a_tool_does_not_start_it() -> None:
    class Broken(Exception):
        pass

    started: list[str] = []

    def build() -> Tool[Any]:
        tool = BUILTINS[0].make(None)

        def check() -> None:
            started.append(tool.name)
            raise Broken("no sandbox here")

        tool.startup_check = check  # type: ignore[method-assign]
        return tool

    handle = LazyTool(BUILTINS[0].name, build, needs_setup=False)
    surface = Registry([handle]).surface(Config())
    assert [t.name for t in surface.described()] == [BUILTINS[0].name] and started == []
    with pytest.raises(Broken):
        surface.get(BUILTINS[0].name)  # to run it, the tool is started first
    assert started == [BUILTINS[0].name]


def lazy_members(registry: Registry) -> list[LazyTool]:
    members = registry._tools.values()  # pyright: ignore[reportPrivateUsage]
    return [m for m in members if isinstance(m, LazyTool)]
