"""Two tiny tools for the PostgreSQL store tests: one that reads, one with a counted effect."""

from __future__ import annotations

from typing import ClassVar

from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay

__all__ = ["Append", "Echo", "TextArgs"]


class TextArgs(ToolArgs):
    text: str = ""


class Echo(Tool[TextArgs]):
    """Read-only and Safe: returns its text."""

    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "Echo."
    args_model = TextArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE
    )

    async def run(self, args: TextArgs, ctx: ToolContext) -> ToolResult:
        return ToolResult(args.text)


class Append(Tool[TextArgs]):
    """Appends a line to ``effects.txt`` in the workspace: each run is counted on disk."""

    name: ClassVar[str] = "append"
    description: ClassVar[str] = "Append a line."
    args_model = TextArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE
    )

    async def run(self, args: TextArgs, ctx: ToolContext) -> ToolResult:
        with (ctx.workspace / "effects.txt").open("a") as f:
            f.write(args.text + "\n")
        return ToolResult("appended " + args.text)
