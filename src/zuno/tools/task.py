"""The ``task`` tool: delegate a bounded objective to another agent.

The child runs in its own session, linked to this call, with at most the
delegating agent's tools (see :mod:`zuno.agent.delegation`). Its every call
goes through the dispatcher and is authorized on its own, so approving a
``task`` in strict mode approves the delegation, never the child's effects.
The child's final answer is the result. A delegation the parent cannot give
(an unknown agent, tools it lacks, too deep) is ``blocked: invalid_arguments``.

Declaration: Delegating / Never / ParallelSafe. Several tasks in one reply
run side by side, at most ``concurrency.delegations`` children at once. With
``background: true`` the task is IsolatedBackground: it starts a job in the
runtime's background lane (:mod:`zuno.session.jobs`) and returns its id at once; the
child's answer becomes the job's output, seen through ``job`` and ``bg``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from zuno.config.loading import Config
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.session.jobs import JobEnd, JobIO, JobState

# The agent loop is imported when a task runs: describing the tool needs none of it.
if TYPE_CHECKING:
    from zuno.agent.delegation import ChildRun
    from zuno.session.runtime import Runtime

__all__ = ["TaskArgs", "TaskTool"]


class TaskArgs(ToolArgs):
    """Arguments of ``task``."""

    agent: str = Field(
        min_length=1,
        max_length=64,
        description="The agent to delegate to, by name (see the list in the description).",
    )
    prompt: str = Field(
        min_length=1,
        max_length=20_000,
        description=(
            "The objective and everything the agent needs to reach it: it sees none of "
            "your conversation. Say what to return."
        ),
    )
    description: str | None = Field(
        default=None,
        max_length=80,
        description="A short title for the delegated work (shown in transcripts).",
    )
    tools: list[str] | None = Field(
        default=None,
        max_length=64,
        description=(
            "Narrow the agent's tools to these names. Only your own tools may be named; "
            "omitted means every tool both of you have."
        ),
    )
    background: bool = Field(
        default=False,
        description=(
            "Run it as a background job and return its job id at once; follow it with "
            "job or bg (its answer is the job's output)."
        ),
    )


_BASE = (
    "Delegate a bounded, self-contained objective to another agent, which works in its "
    "own session with at most your tools (optionally fewer) and returns its final answer "
    "as the result. Its tool calls are each checked and approved on their own. Several "
    "task calls in one reply run side by side; background=true returns a job id at once. "
    "Delegation nests at most 3 levels deep."
)


def _describe(config: Config | None) -> str:
    from zuno.session.runtime import BUILTIN_AGENTS

    agents = {**BUILTIN_AGENTS, **(config.agents if config is not None else {})}
    listed = "; ".join(
        f"{name}: {settings.description}" if settings.description else name
        for name, settings in agents.items()
    )
    return f"{_BASE} Agents: {listed}."


_FOREGROUND = Declaration(Effect.DELEGATING, Replay.NEVER, Concurrency.PARALLEL_SAFE)
_BACKGROUND = Declaration(Effect.DELEGATING, Replay.NEVER, Concurrency.ISOLATED_BACKGROUND)


class TaskTool(Tool[TaskArgs]):
    """Run a child agent on an objective and return its answer."""

    name = "task"
    description: ClassVar[str] = _BASE
    args_model = TaskArgs
    declaration = _FOREGROUND
    mixed = True

    def __init__(self, config: Config | None = None) -> None:
        # The agents of this configuration are part of what the model is told.
        self.description = _describe(config)  # pyright: ignore[reportAttributeAccessIssue]

    def declare(self, args: TaskArgs) -> Declaration:
        """IsolatedBackground for a background task, else ParallelSafe; always Delegating."""
        return _BACKGROUND if args.background else _FOREGROUND

    def preview(self, args: TaskArgs, workspace: Path | None = None) -> str:
        """What an approval prompt shows: the agent, its tools and the objective."""
        tools = ", ".join(args.tools) if args.tools is not None else "all of the parent's"
        prompt = args.prompt if len(args.prompt) <= 1500 else args.prompt[:1500] + " ..."
        return f"agent: {args.agent}\ntools: {tools}\nobjective:\n{prompt}"

    async def run(self, args: TaskArgs, ctx: ToolContext) -> ToolResult:
        from zuno.agent.delegation import check_depth, child_tools, run_child

        runtime = ctx.services
        parent = ctx.extra.get("session")
        if runtime is None or parent is None:
            raise ToolError("task needs a runtime session; call it through the dispatcher")
        # Refused here, before a job or a child starts: blocked, not failed.
        check_depth(parent)
        tools = child_tools(runtime, parent, args.agent, args.tools)
        title = args.description or args.prompt.splitlines()[0][:80]

        async def delegate() -> ChildRun:
            return await run_child(
                runtime,
                parent,
                call_id=ctx.call_id,
                agent=args.agent,
                prompt=args.prompt,
                tools=tools,
                title=title,
            )

        if args.background:
            return await self._start_job(runtime, args, tools, title, ctx, delegate)
        return _result(await delegate())

    async def _start_job(
        self,
        runtime: Runtime,
        args: TaskArgs,
        tools: list[str],
        title: str,
        ctx: ToolContext,
        delegate: Callable[[], Awaitable[ChildRun]],
    ) -> ToolResult:
        async def body(io: JobIO) -> JobEnd:
            child = await delegate()
            result = _result(child)
            io.write(result.output.encode("utf-8", "replace"))
            if result.is_error:
                status = child.outcome.status.value
                return JobEnd(1, JobState.FAILED, f"the agent did not finish ({status})")
            return JobEnd(0)

        job = await runtime.jobs.start_for_call(
            ctx, kind="task", description=f"{args.agent}: {title}", body=body
        )
        return ToolResult(
            f"Started background task {job.job_id} (agent {args.agent}). Its answer becomes "
            f'the job\'s output: bg {{"action": "wait", "job_id": "{job.job_id}"}} waits for '
            f'it, bg {{"action": "output", ...}} reads it, job lists it.',
            data={"job_id": job.job_id, "agent": args.agent, "tools": tools},
        )


def _result(child: ChildRun) -> ToolResult:
    from zuno.agent.loop import TurnStatus

    outcome = child.outcome
    data: dict[str, Any] = {
        "session_id": child.session_id,
        "agent": child.agent,
        "model": child.model,
        "status": outcome.status.value,
        "steps": outcome.steps,
    }
    head = f"[agent {child.agent}, session {child.session_id}, {outcome.steps} steps]"
    if outcome.status is TurnStatus.ANSWERED:
        return ToolResult(f"{head}\n{outcome.text}", data=data)
    last = f"\nIts last words:\n{outcome.text}" if outcome.text else ""
    return ToolResult(
        f"{head}\nThe agent did not finish: {outcome.message}.{last}\n"
        "Whatever it changed before stopping stays changed; check before relying on it.",
        data=data,
        is_error=True,
    )
