"""``bg`` and ``job``: inspecting and cancelling background jobs.

``bg`` is a mixed tool, classified from its validated arguments: ``list``,
``output`` and ``wait`` only observe (ReadOnly / Safe), ``cancel`` stops a
process (SideEffecting / Never / Exclusive). ``job`` is always ReadOnly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Self

import anyio
from pydantic import Field, model_validator

from zuno.contract.output import format_size
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import INSPECTION, Declaration
from zuno.durability.store.records import iso
from zuno.execution.sandbox.policy import Sandbox, SandboxPolicy, prepared_launch
from zuno.session.jobs import (
    JobEnd,
    JobIO,
    JobLane,
    JobRecord,
    JobState,
    job_timeout_default,
)

if TYPE_CHECKING:
    from zuno.config.egress import EgressRules
    from zuno.execution.sandbox.egress.proxy import CallProxy

__all__ = ["BgTool", "JobTool", "job_lane", "start_command_job"]

_WAIT_DEFAULT = 30
_WAIT_MAX = 600


def job_lane(ctx: ToolContext) -> JobLane:
    """The runtime's background lane, or a tool error when there is none."""
    lane = getattr(ctx.services, "jobs", None)
    if not isinstance(lane, JobLane):
        raise ToolError("background jobs are not available in this runtime")
    return lane


def _summary(job: JobRecord) -> str:
    ended = f", ended {iso(job.finished_at)}" if job.finished_at else ""
    code = f", exit code {job.exit_code}" if job.exit_code is not None else ""
    detail = f" ({job.detail})" if job.detail else ""
    return (
        f"{job.job_id} [{job.kind}] {job.state.value}{detail}{code}; started "
        f"{iso(job.started_at)}{ended}; output {format_size(job.output_bytes)}; "
        f"{job.description[:200]}"
    )


async def start_command_job(
    lane: JobLane,
    ctx: ToolContext,
    *,
    command: str,
    argv: Sequence[str],
    workdir: Path,
    sandbox: Sandbox,
    policy: SandboxPolicy,
    env: Mapping[str, str],
    time_limit: float | None,
    egress: EgressRules | None = None,
) -> ToolResult:
    """Run a sandboxed command in the background lane; its stdout and stderr go to one log.

    Without a time limit the job gets ``sandbox.job_timeout_default``: a job
    nobody waits for must not run for ever. With ``egress`` (``proxy`` network
    mode) the job gets its own proxy for its whole life: each refusal's reason
    is written into its output as it happens, and its ledger is stored when it
    ends (a ``job.egress`` event of the call that started it).
    """
    from zuno.execution.process import run_process

    if time_limit is None:
        time_limit = job_timeout_default(ctx)

    async def body(io: JobIO) -> JobEnd:
        proxy: CallProxy | None = None
        try:
            async with AsyncExitStack() as stack:
                launch_policy = policy
                if egress is not None:
                    from zuno.execution.sandbox.egress.proxy import call_proxy

                    proxy = await stack.enter_async_context(call_proxy(egress))
                    proxy.on_refused = lambda r: io.write(f"[{r.reason}]\n".encode())
                    launch_policy = replace(policy, egress_fd=proxy.child_fd)
                launch = stack.enter_context(
                    prepared_launch(
                        sandbox,
                        list(argv),
                        launch_policy,
                        cwd=workdir,
                        env=env,
                        deadline=True,
                        time_limit=time_limit,
                    )
                )
                result = await run_process(
                    launch.argv,
                    cwd=launch.cwd,
                    env=launch.env,
                    time_limit=time_limit,
                    on_stdout=io.write,
                    on_stderr=io.write,
                    pass_fds=launch.pass_fds,
                )
        finally:
            if proxy is not None:
                io.record_egress([r.to_json() for r in proxy.records])
        if result.timed_out:
            return JobEnd(result.exit_code, JobState.TIMED_OUT, f"killed after {time_limit}s")
        if result.signal is not None:
            return JobEnd(None, JobState.FAILED, f"killed by signal {result.signal_name}")
        return JobEnd(result.exit_code)

    job = await lane.start_for_call(ctx, kind="shell", description=command, body=body)
    return ToolResult(
        f"Started background job {job.job_id}: {command[:200]}\n"
        f'Follow it with bg {{"action": "output", "job_id": "{job.job_id}"}}, '
        f'wait with {{"action": "wait", ...}}, stop it with {{"action": "cancel", ...}}.',
        data={"job_id": job.job_id, "output_path": job.output_path},
    )


class BgArgs(ToolArgs):
    """Arguments of ``bg``."""

    action: Annotated[
        Literal["list", "output", "wait", "cancel"],
        Field(
            description="list: jobs of this session; output: a job's output from offset; "
            "wait: until the job ends or timeout; cancel: stop the job and its processes."
        ),
    ]
    job_id: Annotated[
        str | None, Field(description="The job (required for output, wait and cancel).")
    ] = None
    offset: Annotated[
        int | None,
        Field(ge=0, description="output: byte offset to read from (default 0; use next_offset)."),
    ] = None
    timeout: Annotated[
        int | None,
        Field(
            ge=0,
            le=_WAIT_MAX,
            description=f"wait: seconds, 0..{_WAIT_MAX} (default {_WAIT_DEFAULT}).",
        ),
    ] = None

    @model_validator(mode="after")
    def _needs_job(self) -> Self:
        if self.action != "list" and not self.job_id:
            raise ValueError(f"`job_id` is required for action {self.action!r}")
        return self


_CANCEL = Declaration()  # SideEffecting / Never / Exclusive: it kills processes


class BgTool(Tool[BgArgs]):
    """``bg``: inspect or cancel background jobs."""

    name: ClassVar[str] = "bg"
    description: ClassVar[str] = (
        "Inspect or cancel background jobs (started with shell background=true or a background "
        "task). Actions: list, output (bounded by the output limits; page with offset and the "
        f"returned next_offset), wait (up to {_WAIT_MAX} s, default {_WAIT_DEFAULT}), cancel "
        "(kills the job's whole process tree; needs approval in strict mode)."
    )
    args_model = BgArgs
    declaration: ClassVar[Declaration] = INSPECTION
    mixed: ClassVar[bool] = True

    def declare(self, args: BgArgs) -> Declaration:
        return _CANCEL if args.action == "cancel" else INSPECTION

    async def run(self, args: BgArgs, ctx: ToolContext) -> ToolResult:
        lane = job_lane(ctx)
        if args.action == "list":
            jobs: list[JobRecord] = lane.list(session_id=ctx.session_id)
            if not jobs:
                return ToolResult("No background jobs in this session.", data={"jobs": []})
            return ToolResult(
                "\n".join(_summary(j) for j in jobs), data={"jobs": [j.as_dict() for j in jobs]}
            )
        assert args.job_id is not None
        job: JobRecord | None = lane.get(args.job_id)
        if job is None:
            raise ToolError(f"no job {args.job_id!r}; bg list shows the jobs of this session")
        if args.action == "output":
            return self._output(lane, job, args.offset or 0, ctx)
        if args.action == "wait":
            seconds = args.timeout if args.timeout is not None else _WAIT_DEFAULT
            with anyio.move_on_after(seconds):
                await lane.wait(job.job_id)
            job = lane.get(job.job_id)
            assert job is not None
            still = " (still running; wait again or read its output)" if not job.state.done else ""
            return ToolResult(_summary(job) + still, data=job.as_dict())
        if job.state.done:
            return ToolResult(
                f"Job {job.job_id} had already ended: {_summary(job)}", data=job.as_dict()
            )
        if job.job_id not in lane.mine_running():
            raise ToolError(
                f"job {job.job_id} belongs to another Zuno process (pid {job.owner_pid}); "
                "it can only be cancelled from there"
            )
        job = await lane.cancel(job.job_id)
        return ToolResult(f"Cancelled: {_summary(job)}", data=job.as_dict())

    def _output(self, lane: JobLane, job: JobRecord, offset: int, ctx: ToolContext) -> ToolResult:
        data, end = lane.read_output(job.job_id, offset, ctx.limits.max_bytes)
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines(keepends=True)
        if len(lines) > ctx.limits.max_lines:
            kept = "".join(lines[: ctx.limits.max_lines])
            end = offset + len(kept.encode("utf-8", errors="replace"))
            text = kept
        total = job.output_bytes
        more = end < total
        tail = (
            f"\n[bytes {offset}-{end} of {total}; more output: call bg output with offset={end}]"
            if more
            else f"\n[bytes {offset}-{end} of {total}; job {job.state.value}]"
        )
        return ToolResult(
            (text or "(no output yet)") + tail,
            data={"next_offset": end, "total_bytes": total, "state": job.state.value},
        )


class JobArgs(ToolArgs):
    """Arguments of ``job``."""

    job_id: Annotated[
        str | None, Field(description="One job; omitted: every job of this session.")
    ] = None


class JobTool(Tool[JobArgs]):
    """``job``: the state of background jobs."""

    name: ClassVar[str] = "job"
    description: ClassVar[str] = (
        "The state of one background job, or of every job of this session: state (running, "
        "succeeded, failed, timed_out, cancelled, lost), start and end times, exit code and "
        "output size. A job is 'lost' when the Zuno process running it is gone."
    )
    args_model = JobArgs
    declaration: ClassVar[Declaration] = INSPECTION

    async def run(self, args: JobArgs, ctx: ToolContext) -> ToolResult:
        lane = job_lane(ctx)
        if args.job_id is not None:
            job: JobRecord | None = lane.get(args.job_id)
            if job is None:
                raise ToolError(f"no job {args.job_id!r}; call job without job_id to list them")
            return ToolResult(_summary(job), data=job.as_dict())
        jobs: list[JobRecord] = lane.list(session_id=ctx.session_id)
        if not jobs:
            return ToolResult("No background jobs in this session.", data={"jobs": []})
        return ToolResult(
            "\n".join(_summary(j) for j in jobs), data={"jobs": [j.as_dict() for j in jobs]}
        )
