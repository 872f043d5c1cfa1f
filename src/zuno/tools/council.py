"""The ``council_run`` tool: one question to every council member, then a synthesis.

The council is configured in ``zuno.json``::

    {"council": {"members": ["explore", "openai:gpt-4o", "anthropic:claude-sonnet-4-5"],
                 "synthesizer": "openai:gpt-4o",
                 "agents": ["build"]}}

A member is an agent name or a ``PROVIDER:MODEL`` (which runs as the explore
agent on that model). Members answer at once, under the delegations bound,
each in its own child session with a read-only surface: the explore agent's
tools, narrowed to what both the asking agent and the member agent have. The
synthesizer (an agent or a model; by default the asking session's model) then
reads every answer, in a child session with no tools. The tool appears only
for the agents listed in ``council.agents``.

Declaration: Delegating / Never / ParallelSafe. Past the delegation depth the
call is refused before any member starts (``blocked: invalid_arguments``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import Field

from zuno.agent.delegation import ChildRun, check_depth, child_tools, run_child
from zuno.agent.loop import TurnStatus
from zuno.agent.prompts import COUNCIL_MEMBER_PROMPT, SYNTHESIS_PROMPT
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay

if TYPE_CHECKING:
    from zuno.dispatch.session_state import SessionState
    from zuno.session.runtime import Runtime

__all__ = ["CouncilArgs", "CouncilTool"]

# A member named as PROVIDER:MODEL runs as this agent on that model.
_MODEL_MEMBER_AGENT = "explore"


class CouncilArgs(ToolArgs):
    """Arguments of ``council_run``."""

    question: str = Field(
        min_length=1,
        max_length=20_000,
        description=(
            "The question for every member, with the context they need: they see none of "
            "your conversation."
        ),
    )


def _member(runtime: Runtime, member: str) -> tuple[str, str | None]:
    """A member as (agent, model): an agent name, or a model run by the explore agent."""
    if member in runtime.agent_names():
        return member, None
    if ":" in member:
        return _MODEL_MEMBER_AGENT, member
    raise ToolError(
        f"council member {member!r} is neither an agent ({', '.join(runtime.agent_names())}) "
        "nor a PROVIDER:MODEL; fix council.members in zuno.json"
    )


def _member_system(runtime: Runtime, agent: str) -> str:
    """A member's system prompt: its own agent's prompt, when it has one, then the council's."""
    own = runtime.agent_settings(agent).prompt
    return f"{own.strip()}\n\n{COUNCIL_MEMBER_PROMPT}" if own else COUNCIL_MEMBER_PROMPT


def _read_only_tools(runtime: Runtime, parent: SessionState, agent: str) -> list[str]:
    explore = runtime.agent_settings(_MODEL_MEMBER_AGENT).tools or []
    from zuno.session.runtime import BUILTIN_AGENTS

    # The built-in explore list is the read-only set, even if zuno.json redefines explore.
    read_only = BUILTIN_AGENTS[_MODEL_MEMBER_AGENT].tools or explore
    mine = set(parent.surface.names)
    return child_tools(runtime, parent, agent, [n for n in read_only if n in mine])


def _entry(number: int, member: str, run: ChildRun | None, error: str | None) -> dict[str, Any]:
    if run is None:
        return {"member": member, "number": number, "status": "error", "error": error}
    outcome = run.outcome
    return {
        "member": member,
        "number": number,
        "agent": run.agent,
        "model": run.model,
        "session_id": run.session_id,
        "status": outcome.status.value,
        "answer": outcome.text,
        "error": None if outcome.status is TurnStatus.ANSWERED else outcome.message,
    }


def _answer_text(entry: dict[str, Any]) -> str:
    if entry.get("status") == "answered":
        return str(entry["answer"])
    partial = f"\n(partial: {entry['answer']})" if entry.get("answer") else ""
    return f"(no answer: {entry['error']}){partial}"


class CouncilTool(Tool[CouncilArgs]):
    """Ask every council member one question at once and synthesize their answers."""

    name = "council_run"
    description = (
        "Put one question to every member of the configured council at once (agents or "
        "models, each investigating with read-only tools in its own session), then have "
        "the synthesizer weigh their answers. Returns each member's answer and the "
        "synthesis. Use it for a decision that benefits from independent opinions; it "
        "costs one run per member."
    )
    args_model = CouncilArgs
    declaration = Declaration(Effect.DELEGATING, Replay.NEVER, Concurrency.PARALLEL_SAFE)

    def preview(self, args: CouncilArgs, workspace: Path | None = None) -> str:
        """What an approval prompt shows: the question."""
        return f"question for the council:\n{args.question[:1500]}"

    async def run(self, args: CouncilArgs, ctx: ToolContext) -> ToolResult:
        runtime: Runtime | None = ctx.services
        parent: SessionState | None = ctx.extra.get("session")
        council = ctx.config.council
        if runtime is None or parent is None or council is None:
            raise ToolError("no council is configured (council in zuno.json)")
        # Too deep for children: refused before any member starts (blocked, not failed).
        check_depth(parent)
        members = [(m, *_member(runtime, m)) for m in council.members]
        entries: list[dict[str, Any]] = [{} for _ in members]

        async def ask(number: int, member: str, agent: str, model: str | None) -> None:
            try:
                run = await run_child(
                    runtime,
                    parent,
                    call_id=ctx.call_id,
                    agent=agent,
                    prompt=args.question,
                    tools=_read_only_tools(runtime, parent, agent),
                    model=model,
                    title=f"council member {number}: {member}",
                    system=_member_system(runtime, agent),
                )
            except ToolError as exc:  # one member that cannot start does not sink the rest
                entries[number - 1] = _entry(number, member, None, str(exc))
            else:
                entries[number - 1] = _entry(number, member, run, None)

        async with anyio.create_task_group() as tg:
            for number, (member, agent, model) in enumerate(members, 1):
                tg.start_soon(ask, number, member, agent, model)
        if not any(e["status"] == "answered" for e in entries):
            raise ToolError(
                "no council member answered: "
                + "; ".join(f"{e['member']}: {e['error']}" for e in entries)
            )
        synthesis = await self._synthesize(runtime, parent, ctx.call_id, args.question, entries)
        lines = [f"Council of {len(entries)} on: {args.question[:200]}"]
        for e in entries:
            where = f", session {e['session_id']}" if e.get("session_id") else ""
            lines.append(f"\n## Member {e['number']}: {e['member']}{where}\n{_answer_text(e)}")
        lines.append(f"\n## Synthesis\n{synthesis['text']}")
        return ToolResult("\n".join(lines), data={"members": entries, "synthesis": synthesis})

    async def _synthesize(
        self,
        runtime: Runtime,
        parent: SessionState,
        call_id: str,
        question: str,
        entries: list[dict[str, Any]],
    ) -> dict[str, Any]:
        council = runtime.config.council
        assert council is not None
        agent, model = (parent.agent_name, None)
        if council.synthesizer:
            agent, model = _member(runtime, council.synthesizer)
        answers = "\n\n".join(
            f"Member {e['number']} ({e['member']}):\n{_answer_text(e)}" for e in entries
        )
        prompt = f"The question:\n{question}\n\nThe members' answers:\n\n{answers}"
        try:
            run = await run_child(
                runtime,
                parent,
                call_id=call_id,
                agent=agent,
                prompt=prompt,
                tools=[],
                model=model,
                title="council synthesis",
                system=SYNTHESIS_PROMPT,
            )
        except ToolError as exc:
            return {"status": "error", "text": f"(no synthesis: {exc})", "session_id": None}
        outcome = run.outcome
        text = outcome.text if outcome.answered else f"(no synthesis: {outcome.message})"
        return {
            "status": outcome.status.value,
            "text": text,
            "session_id": run.session_id,
            "model": run.model,
        }
