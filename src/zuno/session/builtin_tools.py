"""The built-in tools a runtime has unless it is given others.

:data:`BUILTINS` names each tool and the class that implements it, as text:
a runtime registers every tool without importing any, and a tool's module is
imported the first time the tool is described or called
(:class:`~zuno.dispatch.registry.LazyTool`). ``zuno call read`` then loads
``read`` alone, and ``zuno --help`` none. The runtime needs the table, not the
tools: the tools themselves (:mod:`zuno.tools`) stand above it.

Adding a tool is one :class:`Builtin` line below (and its name in
:mod:`zuno.core.tool_names` when the specification places it).
tests/core/test_builtin_tools_table.py checks every line against the class it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from zuno.dispatch.registry import LazyTool, import_factory

if TYPE_CHECKING:
    from zuno.config.loading import Config
    from zuno.contract.tool import Tool

__all__ = ["BUILTINS", "Builtin", "builtin_tools", "lazy_builtin_tools"]


@dataclass(frozen=True, slots=True)
class Builtin:
    """One built-in tool: its name and the class that implements it."""

    name: str
    home: str
    """``"zuno.tools.module:Class"``."""
    takes: Literal["", "sandbox", "config"] = ""
    """What the constructor is given: nothing, ``config.sandbox`` or the configuration."""
    needs_setup: bool = False
    """The tool implements :class:`~zuno.dispatch.registry.NeedsSetup` (web_search needs a
    backend).
    """

    def make(self, config: Config | None) -> Tool[Any]:
        """A fresh instance (imports the tool's module)."""
        factory = import_factory(self.home)
        if self.takes == "sandbox":
            return factory(config.sandbox if config is not None else None)  # type: ignore[no-any-return]
        if self.takes == "config":
            return factory(config)  # type: ignore[no-any-return]
        return factory()  # type: ignore[no-any-return]


BUILTINS: tuple[Builtin, ...] = (
    Builtin("read", "zuno.tools.read:ReadTool"),
    Builtin("glob", "zuno.tools.search:GlobTool"),
    Builtin("grep", "zuno.tools.search:GrepTool"),
    Builtin("write", "zuno.tools.write:WriteTool"),
    Builtin("apply_patch", "zuno.tools.patch:ApplyPatchTool"),
    Builtin("shell", "zuno.tools.shell:ShellTool", takes="sandbox"),
    Builtin("bg", "zuno.tools.background:BgTool"),
    Builtin("job", "zuno.tools.background:JobTool"),
    Builtin("task", "zuno.tools.task:TaskTool", takes="config"),
    Builtin("webfetch", "zuno.tools.web:WebFetchTool"),
    Builtin("web_search", "zuno.tools.web_search:WebSearchTool", needs_setup=True),
    Builtin("question", "zuno.tools.question:QuestionTool"),
    Builtin("council_run", "zuno.tools.council:CouncilTool"),
    Builtin("edit", "zuno.tools.edit:EditTool"),
    Builtin("execute", "zuno.tools.shell:ExecuteTool", takes="sandbox"),
    Builtin("lsp", "zuno.tools.lsp:LspTool"),
    Builtin("skill", "zuno.tools.skill:SkillTool"),
    Builtin("plan_get", "zuno.tools.state:PlanGetTool"),
    Builtin("plan_update", "zuno.tools.state:PlanUpdateTool"),
    Builtin("todo_get", "zuno.tools.state:TodoGetTool"),
    Builtin("todo_update", "zuno.tools.state:TodoUpdateTool"),
    Builtin("goal_get", "zuno.tools.state:GoalGetTool"),
    Builtin("goal_update", "zuno.tools.state:GoalUpdateTool"),
    Builtin("memory_propose", "zuno.tools.memory:MemoryProposeTool"),
    Builtin("undo", "zuno.tools.undo:UndoTool"),
    Builtin("exec_command", "zuno.tools.exec:ExecCommandTool"),
    Builtin("write_stdin", "zuno.tools.exec:WriteStdinTool"),
    Builtin("exec_poll", "zuno.tools.exec:ExecPollTool"),
    Builtin("exec_kill", "zuno.tools.exec:ExecKillTool"),
)
"""Every tool this build implements, in registration order."""


def builtin_tools(config: Config | None = None) -> list[Tool[Any]]:
    """A fresh instance of every tool this build implements (imports them all)."""
    return [entry.make(config) for entry in BUILTINS]


def lazy_builtin_tools(config: Config | None = None) -> list[LazyTool]:
    """Every built-in tool as a handle that imports, builds and checks it on first use."""
    return [LazyTool(e.name, _maker(e, config), needs_setup=e.needs_setup) for e in BUILTINS]


def _maker(entry: Builtin, config: Config | None) -> Any:
    return lambda: entry.make(config)
