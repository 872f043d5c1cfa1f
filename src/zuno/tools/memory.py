"""The ``memory_propose`` tool: suggest something worth remembering across sessions.

It is on the surface only when ``memory.enabled`` is true. A proposal changes
nothing an agent can observe: it waits until a person accepts it with
``zuno memory accept ID`` (see :mod:`zuno.durability.memory`).
"""

from __future__ import annotations

from pydantic import Field

from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.durability.memory import MAX_MEMORY_CHARS, MemoryScope, propose_memory

__all__ = ["MemoryProposeArgs", "MemoryProposeTool"]


class MemoryProposeArgs(ToolArgs):
    """Arguments of ``memory_propose``."""

    text: str = Field(
        min_length=1,
        max_length=MAX_MEMORY_CHARS,
        description=(
            "One self-contained fact or preference worth knowing in later sessions "
            f"(at most {MAX_MEMORY_CHARS} characters)."
        ),
    )
    scope: MemoryScope = Field(
        default="workspace",
        description=(
            "workspace (default): only for this workspace folder. user: for this person "
            "in every workspace."
        ),
    )


class MemoryProposeTool(Tool[MemoryProposeArgs]):
    """Propose a memory for a person to accept or reject."""

    name = "memory_propose"
    description = (
        "Propose a memory: a durable fact or preference (a build command, a convention "
        "the user asked for) to give to agents in later sessions. It is only a proposal: "
        "a person accepts or rejects it later, and it has no effect until accepted. "
        "Propose only what will still be true and useful; never secrets."
    )
    args_model = MemoryProposeArgs
    # User-mediated, not side-effecting: the proposal only queues an item for a
    # person, who reviews it later with `zuno memory accept|reject`. Asking for
    # approval now as well would put the same decision before them twice.
    # Never / Exclusive because it still writes a row that must not be doubled.
    declaration = Declaration(Effect.USER_MEDIATED, Replay.NEVER, Concurrency.EXCLUSIVE)

    async def run(self, args: MemoryProposeArgs, ctx: ToolContext) -> ToolResult:
        """Record the proposal in the runtime's store."""
        store = getattr(ctx.services, "store", None)
        if store is None:
            raise ToolError(
                "memory_propose needs a runtime with a store; call it through a Runtime"
            )
        try:
            memory, created = propose_memory(
                store, args.text, args.scope, ctx.workspace, ctx.session_id
            )
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if created:
            output = (
                f"Proposed memory {memory.memory_id} ({memory.scope} scope). It waits for a "
                "person to accept it; until then it has no effect."
            )
        else:
            output = (
                f"The same memory is already {memory.status} (id {memory.memory_id}); "
                "nothing new was proposed."
            )
        return ToolResult(output, data={"memory": memory.as_dict(), "created": created})
