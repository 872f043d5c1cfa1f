"""The built-in tools, one module per family."""

from __future__ import annotations

from typing import Any

from zuno.config import Config
from zuno.tool import Tool

__all__ = ["builtin_tools"]


def builtin_tools(config: Config | None = None) -> list[Tool[Any]]:
    """A fresh instance of every tool this build implements."""
    from zuno.tools.background import BgTool, JobTool
    from zuno.tools.council import CouncilTool
    from zuno.tools.edit import EditTool
    from zuno.tools.exec import exec_tools
    from zuno.tools.lsp import LspTool
    from zuno.tools.memory import MemoryProposeTool
    from zuno.tools.patch import ApplyPatchTool
    from zuno.tools.question import QuestionTool
    from zuno.tools.read import ReadTool
    from zuno.tools.search import GlobTool, GrepTool
    from zuno.tools.shell import ExecuteTool, ShellTool
    from zuno.tools.skill import SkillTool
    from zuno.tools.state import state_tools
    from zuno.tools.task import TaskTool
    from zuno.tools.undo import UndoTool
    from zuno.tools.web import WebFetchTool
    from zuno.tools.web_search import WebSearchTool
    from zuno.tools.write import WriteTool

    sandbox = config.sandbox if config is not None else None
    return [
        ReadTool(),
        GlobTool(),
        GrepTool(),
        WriteTool(),
        ApplyPatchTool(),
        ShellTool(sandbox),
        BgTool(),
        JobTool(),
        TaskTool(config),
        WebFetchTool(),
        WebSearchTool(),
        QuestionTool(),
        CouncilTool(),
        EditTool(),
        ExecuteTool(sandbox),
        LspTool(),
        SkillTool(),
        *state_tools(),
        MemoryProposeTool(),
        UndoTool(),
        *exec_tools(),
    ]
