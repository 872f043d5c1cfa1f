"""The built-in tools, one module per family."""

from __future__ import annotations

from typing import Any

from zuno.tool import Tool

__all__ = ["builtin_tools"]


def builtin_tools() -> list[Tool[Any]]:
    """A fresh instance of every tool this build implements."""
    from zuno.tools.read import ReadTool
    from zuno.tools.search import GlobTool, GrepTool
    from zuno.tools.write import WriteTool

    return [ReadTool(), GlobTool(), GrepTool(), WriteTool()]
