"""The ``shell`` and ``execute`` tools: commands under the active sandbox.

Both run one command with a hard deadline (see :mod:`zuno.execution.process`), under the
sandbox the configuration selects (see :mod:`zuno.execution.sandbox`), and report its
exit status (first line) and its stdout and stderr within the output limits,
with the full streams saved as artifacts.

A command that ran to its end is a completed call, outcome ``ok``, whatever
its exit status: a failing test run is information, not a failure of the
tool (``data["exit_status"]`` holds the code, or the signal's name). A
command that outlives its deadline, or whose call is cancelled, is killed
with everything it started and reported as an uncertain outcome, with the
output it printed until then: it may have partly happened, so the runtime
never runs it again. Arguments that cannot be honoured (a timeout over the
maximum, a missing working directory or program) are refused before
anything starts (``blocked: invalid_arguments``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import anyio
from pydantic import Field, field_validator

from zuno.config.loading import Config
from zuno.config.sandbox import SandboxSettings
from zuno.contract.output import BoundedOutput, BoundedText, OutputLimits
from zuno.contract.tool import (
    ArgumentsRejected,
    OutputTap,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolResult,
)
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.durability.artifact_space import removal_notice, trim_session
from zuno.execution.process import OutputSink, ProcessResult, run_process
from zuno.execution.sandbox.environment import command_environment
from zuno.execution.sandbox.policy import Sandbox, SandboxError, SandboxPolicy, prepared_launch
from zuno.execution.sandbox.selection import policy_for, select_sandbox

if TYPE_CHECKING:
    from zuno.config.egress import EgressRules
    from zuno.execution.sandbox.egress.proxy import CallProxy

__all__ = ["ExecuteArgs", "ExecuteTool", "ShellArgs", "ShellTool", "sandbox_settings"]

_TIMEOUT_HELP = (
    "Seconds before the command and everything it started are killed. "
    "Default 120; at most the configured maximum (600 unless configured)."
)
_WORKDIR_HELP = "Working directory relative to the workspace root (default: the root)."

_LIMITS_NOTE = (
    "The first line is the exit code. Output over 50 KiB or 2000 lines keeps its head and "
    "tail, and the full output is saved to a file that read can open; the end of stderr "
    "is always shown. stdin is empty: do not start interactive programs. A command that "
    "times out is killed with everything it started; it may have partly run and is not "
    "retried."
)
_SANDBOX_NOTE = (
    "Runs under the sandbox: by default only the workspace and $TMPDIR are writable "
    "and the network is off."
)

_STDERR_SHARE = 4
"""stderr may use a quarter of the limits; stdout gets the rest."""
_RESERVE_BYTES = 1024
"""Room kept for truncation markers and the status line."""
_RESERVE_LINES = 8


def sandbox_settings(ctx: ToolContext, fallback: SandboxSettings | None = None) -> SandboxSettings:
    """The sandbox section of the context's configuration, else fallback, else the defaults."""
    found: Any = getattr(ctx.config, "sandbox", None)
    if isinstance(found, SandboxSettings):
        return found
    return fallback or SandboxSettings()


def _artifact_cap(ctx: ToolContext) -> int | None:
    """The most one stream's artifact may hold (``tool_output.artifact_max_bytes``), or None.

    Without a cap a command printing without end fills the disk until its deadline;
    with one, the artifact keeps the stream's first and last parts.
    """
    section: Any = getattr(ctx.config, "tool_output", None)
    cap: Any = getattr(section, "artifact_max_bytes", None)
    return cap if isinstance(cap, int) else None


def _session_cap(ctx: ToolContext) -> int | None:
    """The most one session's artifacts may hold together, or None."""
    section: Any = getattr(ctx.config, "tool_output", None)
    cap: Any = getattr(section, "session_artifacts_max_bytes", None)
    return cap if isinstance(cap, int) else None


def _make_room(ctx: ToolContext, kept: list[Path], started: float) -> str | None:
    """Hold the session's artifacts to their cap, oldest first; the notice saying what went."""
    cap = _session_cap(ctx)
    if cap is None or not kept:
        return None
    removed = trim_session(kept[0].parent, cap, kept, newer_than=started)
    return removal_notice(removed, cap) if removed else None


def _shell_argv(command: str) -> list[str]:
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    return [shell, "-c", command]


def _split_limits(limits: OutputLimits) -> tuple[OutputLimits, OutputLimits]:
    """(stdout, stderr) limits whose sum, with markers, fits within limits."""
    err = OutputLimits(
        max_bytes=max(256, limits.max_bytes // _STDERR_SHARE),
        max_lines=max(4, limits.max_lines // _STDERR_SHARE),
    )
    # The status lines need far less than the reserve when the budget is small:
    # a fixed reserve would leave stdout almost nothing of a 1-2 KiB budget.
    reserve = min(_RESERVE_BYTES, limits.max_bytes // 8)
    out = OutputLimits(
        max_bytes=max(256, limits.max_bytes - err.max_bytes - reserve),
        max_lines=max(4, limits.max_lines - err.max_lines - _RESERVE_LINES),
    )
    return out, err


def _status_line(result: ProcessResult, timeout: int) -> str:
    if result.timed_out:
        return (
            f"[timed out after {timeout} s: the command and everything it started were "
            "killed. It may have partly run; check its effects before running it again.]"
        )
    if result.signal is not None:
        return f"[killed by {result.signal_name}]"
    code = result.exit_code
    if code is not None and 128 < code <= 128 + 64:
        # Shells and bwrap report a child killed by signal n as 128+n.
        return f"[exit code {code} (128+{code - 128}: probably killed by a signal)]"
    return f"[exit code {code}]"


def _render(out: BoundedText, err: BoundedText, status: str, abandoned: bool = False) -> str:
    """The status line first, then stdout, then stderr."""
    parts: list[str] = [status + "\n"]
    if out.text:
        parts.append(out.text if out.text.endswith("\n") else out.text + "\n")
    if err.text:
        parts.append("[stderr]\n")
        parts.append(err.text if err.text.endswith("\n") else err.text + "\n")
    if not out.text and not err.text:
        parts.append("(no output)\n")
    if abandoned:
        parts.append("[output after the kill was not read: a process kept the pipes open]\n")
    return "".join(parts).rstrip("\n")


_CANCELLED = (
    "[cancelled while running: the command and everything it started were killed. It may "
    "have partly run; check its effects before running it again.]"
)


def _exit_status(result: ProcessResult) -> int | str | None:
    """How a command that ran to its end ended: its exit code, or the signal's name."""
    if result.timed_out:
        return None
    return result.exit_code if result.exit_code is not None else result.signal_name


def _resolve_timeout(requested: int | None, settings: SandboxSettings) -> int:
    if requested is None:
        return settings.timeout_default
    if requested > settings.timeout_max:
        raise ArgumentsRejected(
            f"timeout {requested} s is over the maximum of {settings.timeout_max} s; "
            f"ask for at most {settings.timeout_max} s or run the command with background=true"
        )
    return requested


def _resolve_workdir(ctx: ToolContext, workdir: str | None) -> Path:
    cwd = ctx.resolve_inside(workdir or ".")
    if not cwd.is_dir():
        raise ArgumentsRejected(f"workdir {workdir!r} is not a folder in the workspace")
    return cwd


def _check_program(program: str, cwd: Path, env: dict[str, str]) -> None:
    """Refuse a program that cannot be found, before a sandbox starts for nothing.

    The sandbox sees the host's programs, so a program found neither on the
    command's PATH nor as a path from the working directory cannot start there.
    """
    if "/" in program:
        found = (cwd / program).is_file() and os.access(cwd / program, os.X_OK)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if not found:
        where = "relative to the working directory" if "/" in program else "on PATH"
        raise ArgumentsRejected(
            f"no executable program {program!r} {where}; check its name or give its full path"
        )


def _selected(settings: SandboxSettings) -> Sandbox:
    try:
        return select_sandbox(settings)
    except SandboxError as exc:
        raise ToolError(str(exc)) from exc


def _tapped(bounded: BoundedOutput, name: str, tap: OutputTap | None) -> OutputSink:
    """What a stream's reader hands each chunk to: the bounded output, then the tap."""
    if tap is None:
        return bounded.feed

    def feed(data: bytes) -> None:
        bounded.feed(data)
        tap(name, data)

    return feed


async def run_sandboxed(
    argv: Sequence[str],
    ctx: ToolContext,
    *,
    time_limit: int | None,
    workdir: str | None,
    settings: SandboxSettings,
    check_program: bool = False,
) -> ToolResult:
    """Run argv in the foreground under settings' sandbox and the context's limits.

    Raises:
        ArgumentsRejected: The timeout, the working directory or (with
            ``check_program``) the program cannot be used; nothing started.
        ToolError: The sandbox or the program could not start.
    """
    seconds = _resolve_timeout(time_limit, settings)
    started = time.time()
    cwd = _resolve_workdir(ctx, workdir)
    env = command_environment(settings.env_remove, keep=settings.env_keep)
    if check_program:
        _check_program(argv[0], cwd, dict(env))
    sandbox = _selected(settings)
    policy: SandboxPolicy = policy_for(settings, ctx.workspace, protected=ctx.protected)
    out_limits, err_limits = _split_limits(ctx.limits)
    cap = _artifact_cap(ctx)
    stdout = BoundedOutput(out_limits, ctx.artifact_path("stdout"), cap)
    stderr = BoundedOutput(err_limits, ctx.artifact_path("stderr"), cap)
    on_stdout, on_stderr = (
        _tapped(stdout, "stdout", ctx.output_tap),
        _tapped(stderr, "stderr", ctx.output_tap),
    )
    egress: CallProxy | None = None
    try:
        async with AsyncExitStack() as stack:
            if settings.proxied:
                from zuno.execution.sandbox.egress.grants import egress_rules
                from zuno.execution.sandbox.egress.proxy import call_proxy

                egress = await stack.enter_async_context(call_proxy(egress_rules(settings, ctx)))
                policy = replace(policy, egress_fd=egress.child_fd)
            try:
                launch = stack.enter_context(
                    prepared_launch(
                        sandbox, argv, policy, cwd=cwd, env=env, deadline=True, time_limit=seconds
                    )
                )
            except SandboxError as exc:
                raise ToolError(str(exc)) from exc
            try:
                result = await run_process(
                    launch.argv,
                    cwd=launch.cwd,
                    env=launch.env,
                    time_limit=seconds,
                    on_stdout=on_stdout,
                    on_stderr=on_stderr,
                    pass_fds=launch.pass_fds,
                )
            except OSError as exc:
                raise ToolError(f"cannot start {argv[0]!r}: {exc}") from exc
    except anyio.get_cancelled_exc_class():
        # The dispatcher stores this in place of a result: what was printed is kept.
        out, err = stdout.finish("stdout"), stderr.finish("stderr")
        ctx.on_cancel = ToolResult(
            output=_render(out, err, _CANCELLED),
            is_error=True,
            uncertain=True,
            artifact=out.artifact or err.artifact,
        )
        raise
    except BaseException:
        stdout.finish("stdout")  # closes the artifacts
        stderr.finish("stderr")
        raise
    out = stdout.finish("stdout")
    err = stderr.finish("stderr")
    status = _status_line(result, seconds)
    data: dict[str, Any] = {
        "exit_status": _exit_status(result),
        "exit_code": result.exit_code,
        "signal": result.signal_name,
        "timed_out": result.timed_out,
        "sandbox": sandbox.name,
        "stdout_bytes": out.total_bytes,
        "stderr_bytes": err.total_bytes,
        "stdout_artifact": str(out.artifact) if out.artifact else None,
        "stderr_artifact": str(err.artifact) if err.artifact else None,
        "duration_s": round(result.elapsed, 3),
    }
    rendered = _render(out, err, status, result.output_abandoned)
    room = _make_room(ctx, [a for a in (out.artifact, err.artifact) if a is not None], started)
    if room is not None:
        rendered += "\n" + room
    if egress is not None:
        data["egress"] = [r.to_json() for r in egress.records]
        from zuno.execution.sandbox.egress.ledger import refusal_lines

        # The model reads why a host was refused, so it asks rather than guesses.
        refused = refusal_lines(egress.records)
        if refused:
            rendered += "\n" + "\n".join(f"[{line}]" for line in refused)
    # Only a timeout leaves the outcome open; any exit status is a completed call.
    return ToolResult(
        output=rendered,
        data=data,
        is_error=result.timed_out,
        uncertain=result.timed_out,
        artifact=out.artifact or err.artifact,
        reason=status.strip("[]") if result.timed_out else None,
    )


_FOREGROUND = Declaration(Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE)
_BACKGROUND = Declaration(Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.ISOLATED_BACKGROUND)


def _egress_rules(settings: SandboxSettings, ctx: ToolContext) -> EgressRules:
    from zuno.execution.sandbox.egress.grants import egress_rules

    return egress_rules(settings, ctx)


class _SandboxedCommand:
    """What both command tools share: settings known at startup, and the startup check."""

    def __init__(self, settings: SandboxSettings | None = None) -> None:
        """Check settings at startup (the context's configuration wins at call time)."""
        self._settings = settings

    def settings_for(self, ctx: ToolContext) -> SandboxSettings:
        """The settings of one call."""
        return sandbox_settings(ctx, self._settings)

    def startup_check(self) -> None:
        """Raise :class:`~zuno.execution.sandbox.SandboxError` when the sandbox cannot start."""
        select_sandbox(self._settings or SandboxSettings())


class ShellArgs(ToolArgs):
    """Arguments of ``shell``."""

    command: Annotated[str, Field(min_length=1, description="The command, run with bash -c.")]
    timeout: Annotated[int | None, Field(ge=1, description=_TIMEOUT_HELP)] = None
    workdir: Annotated[str | None, Field(description=_WORKDIR_HELP)] = None
    background: Annotated[
        bool,
        Field(
            description="Start it as a background job and return at once "
            "(for servers and watchers); follow it with the bg tool."
        ),
    ] = False
    network_hosts: Annotated[
        list[str] | None,
        Field(
            description='Only when sandbox.network is "proxy": hosts this command needs '
            "that sandbox.network_allow lacks (example.org, *.example.org, example.org:443). "
            "The user is asked, and may allow them for this call, the session or for good."
        ),
    ] = None

    @field_validator("network_hosts")
    @classmethod
    def _readable_hosts(cls, value: list[str] | None) -> list[str] | None:
        if value:
            from zuno.config.egress import parse_rules

            parse_rules(value)  # RuleError is a ValueError: invalid arguments
        return value


class ShellTool(_SandboxedCommand, Tool[ShellArgs]):
    """``shell``: run a bash command in the workspace under the sandbox."""

    name: ClassVar[str] = "shell"
    description: ClassVar[str] = (
        f"Run a bash command in the workspace and return its stdout, stderr and exit code. "
        f"{_SANDBOX_NOTE} {_LIMITS_NOTE}"
    )
    args_model = ShellArgs
    declaration: ClassVar[Declaration] = _FOREGROUND
    mixed: ClassVar[bool] = True
    rule_argument: ClassVar[str | None] = "command"
    rule_match: ClassVar[Literal["path", "prefix", "glob"]] = "prefix"

    def declare(self, args: ShellArgs) -> Declaration:
        """IsolatedBackground for a background job, else Exclusive."""
        return _BACKGROUND if args.background else _FOREGROUND

    def network_hosts(self, args: ShellArgs, config: Config) -> tuple[str, ...]:
        """``network_hosts`` in ``proxy`` network mode: always asked about."""
        settings: SandboxSettings | None = getattr(config, "sandbox", None)
        if not args.network_hosts or settings is None or not settings.proxied:
            return ()
        return tuple(args.network_hosts)

    async def run(self, args: ShellArgs, ctx: ToolContext) -> ToolResult:
        """Run the command in the foreground, or hand it to the job lane.

        Hosts of ``network_hosts`` are granted to this call alone: the call was
        asked about because of them (see :meth:`network_request`).
        """
        argv = _shell_argv(args.command)
        if args.network_hosts:
            ctx.extra["network_grants"] = list(args.network_hosts)
        if args.background:
            return await self._start_job(args, argv, ctx)
        return await run_sandboxed(
            argv,
            ctx,
            time_limit=args.timeout,
            workdir=args.workdir,
            settings=self.settings_for(ctx),
        )

    async def _start_job(self, args: ShellArgs, argv: list[str], ctx: ToolContext) -> ToolResult:
        from zuno.tools.background import job_lane, start_command_job

        lane = job_lane(ctx)
        settings = self.settings_for(ctx)
        timeout = None if args.timeout is None else _resolve_timeout(args.timeout, settings)
        return await start_command_job(
            lane,
            ctx,
            command=args.command,
            argv=argv,
            workdir=_resolve_workdir(ctx, args.workdir),
            sandbox=_selected(settings),
            policy=policy_for(settings, ctx.workspace, protected=ctx.protected),
            env=command_environment(settings.env_remove, keep=settings.env_keep),
            time_limit=timeout,
            egress=_egress_rules(settings, ctx) if settings.proxied else None,
        )


class ExecuteArgs(ToolArgs):
    """Arguments of ``execute``."""

    argv: Annotated[
        list[str],
        Field(min_length=1, description="The program and its arguments; no shell is involved."),
    ]
    timeout: Annotated[int | None, Field(ge=1, description=_TIMEOUT_HELP)] = None
    workdir: Annotated[str | None, Field(description=_WORKDIR_HELP)] = None


class ExecuteTool(_SandboxedCommand, Tool[ExecuteArgs]):
    """``execute``: run a program from an argv list, without a shell."""

    name: ClassVar[str] = "execute"
    description: ClassVar[str] = (
        "Run a program from an argv list (no shell: no pipes, globs or variables) in the "
        f"workspace and return its stdout, stderr and exit code. {_SANDBOX_NOTE} {_LIMITS_NOTE}"
    )
    args_model = ExecuteArgs
    declaration: ClassVar[Declaration] = _FOREGROUND
    rule_argument: ClassVar[str | None] = "argv"
    rule_match: ClassVar[Literal["path", "prefix", "glob"]] = "prefix"

    def rule_subject(self, args: ExecuteArgs, workspace: Path) -> str | None:
        """The argv as one shell-quoted string, so prefix rules can match it."""
        return shlex.join(args.argv)

    async def run(self, args: ExecuteArgs, ctx: ToolContext) -> ToolResult:
        """Run the program in the foreground (a program that cannot be found is refused)."""
        return await run_sandboxed(
            args.argv,
            ctx,
            time_limit=args.timeout,
            workdir=args.workdir,
            settings=self.settings_for(ctx),
            check_program=True,
        )
