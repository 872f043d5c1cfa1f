"""``exec_command``, ``write_stdin``, ``exec_poll`` and ``exec_kill``: interactive processes.

``exec_command`` starts a command (under the sandbox, like ``shell``) that
keeps running between calls, and returns what it printed within ``yield_ms``
with the process's number; ``write_stdin`` types into it, ``exec_poll``
returns what is new, ``exec_kill`` ends it. Each call returns early when the
process ends or waits for input (see :mod:`zuno.execution.pty`).

Declarations: starting and typing change the world (SideEffecting / Never /
Exclusive); polling only observes processes Zuno started (ReadOnly / Safe /
ParallelSafe, an inspection) and may run beside other calls; killing is
SideEffecting / Never / Exclusive: it is as final as ``bg cancel``, and a
retry would not be a plain repeat (the number may be gone by then). A poll
does move the process's read position (each call returns what is new), which
is Zuno's bookkeeping, not an effect: the transcript file keeps every byte,
so output a failed poll took is never lost.

These names form the opt-in ``INTERACTIVE`` group of :mod:`zuno.core.tool_names`:
they are not on the default surface, and an agent's ``tools`` list or the
``tools`` map switches them on. Permission rules name them as they are
(``exec_command`` rules match the command like ``shell`` rules; rules for
``shell`` do not cover them).

A call that finds its process killed at its deadline is reported as such;
``exec_command`` whose own wait sees the deadline pass, or that is
cancelled, is uncertain (the command may have partly run) and the process
is killed. Processes need a running runtime (``async with runtime``), and
end with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import anyio
from pydantic import Field

from zuno.contract.output import OutputLimits, bound_text, format_size
from zuno.contract.tool import ArgumentsRejected, Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import INSPECTION, Declaration
from zuno.execution.process_table import (
    ProcessGone,
    ProcessTable,
    TooManyProcesses,
    processes_for,
)
from zuno.execution.pty import InteractiveProcess, Launched, ProcessState, Settled
from zuno.execution.sandbox.egress.grants import egress_rules
from zuno.execution.sandbox.egress.ledger import refusal_lines
from zuno.execution.sandbox.environment import command_environment
from zuno.execution.sandbox.policy import SandboxError
from zuno.execution.sandbox.selection import policy_for, select_sandbox
from zuno.tools.shell import sandbox_settings

__all__ = [
    "ExecCommandArgs",
    "ExecCommandTool",
    "ExecKillArgs",
    "ExecKillTool",
    "ExecPollArgs",
    "ExecPollTool",
    "WriteStdinArgs",
    "WriteStdinTool",
    "exec_tools",
]

YIELD_MAX_MS = 30_000
_START_YIELD_MS = 10_000
_WRITE_YIELD_MS = 2_000
_POLL_YIELD_MS = 1_000
_CHARS_MAX = 8192
_RESERVE_BYTES = 1024
_RESERVE_LINES = 6

_SIDE_EFFECTING = Declaration()  # SideEffecting / Never / Exclusive

_SESSION_HELP = "The process number that exec_command returned."
_OUTPUT_NOTE = (
    "Returns early when the process ends or waits for input (the first line says which). "
    "Output is what is new since the last call, with terminal control sequences removed; "
    "over 50 KiB or 2000 lines keeps its head and tail, the full text is saved to a file."
)


def _yield_field(default: int) -> Any:
    return Field(
        ge=0,
        le=YIELD_MAX_MS,
        description=f"Milliseconds to wait for output, 0..{YIELD_MAX_MS} (default {default}).",
    )


def _shell() -> str:
    return "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"


def _table(ctx: ToolContext) -> ProcessTable:
    runtime = ctx.services
    if runtime is None or not hasattr(runtime, "store"):
        raise ToolError("interactive processes are not available in this runtime")
    table = processes_for(runtime)
    if not table.running:
        raise ToolError(
            "interactive processes need a running runtime: use `async with runtime:` "
            "(zuno run, zuno call and zuno batch do)"
        )
    return table


def _process(ctx: ToolContext, number: int) -> tuple[ProcessTable, InteractiveProcess]:
    table = _table(ctx)
    try:
        return table, table.get(ctx.session_id, number)
    except ProcessGone as exc:
        raise ToolError(str(exc)) from exc


def _status(proc: InteractiveProcess, settled: Settled | None) -> str:
    n = proc.number
    if proc.ended:
        if proc.state is ProcessState.TIMED_OUT:
            return (
                f"[process {n} was killed at its deadline of {proc.time_limit:g} s with "
                "everything it started; it may have partly run]"
            )
        if proc.state is ProcessState.KILLED:
            return f"[process {n} was killed]"
        if proc.signal is not None:
            return f"[process {n} ended: killed by {proc.signal_name}]"
        code = proc.exit_code
        if code is not None and 128 < code <= 128 + 64:
            # Shells and bwrap report a child killed by signal n as 128+n.
            return f"[process {n} exited with code {code} (128+{code - 128}: killed by a signal)]"
        return f"[process {n} exited with code {code}]"
    if settled is Settled.WAITING:
        return f"[process {n} is waiting for input: type with write_stdin session={n}]"
    return (
        f"[process {n} is still running ({proc.seconds:.1f} s): exec_poll reads more, "
        "write_stdin types, exec_kill stops it]"
    )


def _model_limits(limits: OutputLimits) -> OutputLimits:
    reserve = min(_RESERVE_BYTES, limits.max_bytes // 8)
    return OutputLimits(
        max_bytes=max(256, limits.max_bytes - reserve),
        max_lines=max(4, limits.max_lines - _RESERVE_LINES),
    )


def _report(
    table: ProcessTable,
    proc: InteractiveProcess,
    settled: Settled | None,
    ctx: ToolContext,
    *,
    note: str | None = None,
) -> ToolResult:
    """The new output of proc with its status first; forgets a process fully read."""
    text, dropped = proc.take()
    egress = proc.take_egress()
    status = _status(proc, settled)
    body = bound_text(
        text, _model_limits(ctx.limits), lambda: ctx.artifact_path("output"), "output"
    )
    parts = [status]
    if note:
        parts.append(note)
    if dropped:
        parts.append(
            f"[{format_size(dropped)} of earlier output were dropped from the middle; "
            f"the transcript {proc.transcript} keeps them]"
        )
    parts.append(body.text.rstrip("\n") if body.text else "(no new output)")
    # As for shell: the model reads why a host was refused, so it asks rather than guesses.
    parts += [f"[{line}]" for line in refusal_lines(egress)]
    ended = proc.ended and not proc.unread
    state = proc.state.value
    if ended:
        table.forget(proc)
    data: dict[str, Any] = {
        "session": proc.number,
        "pid": proc.pid,
        "state": state,
        "waiting_for_input": settled is Settled.WAITING and not proc.ended,
        "exit_code": proc.exit_code,
        "signal": proc.signal_name,
        "sandbox": proc.sandbox,
        "tty": proc.tty,
        "transcript": str(proc.transcript),
        "dropped_bytes": dropped,
    }
    if proc.egress is not None:
        data["egress"] = [r.to_json() for r in egress]
    return ToolResult("\n".join(parts), data=data, artifact=body.artifact)


# exec_command ----------------------------------------------------------------------


class ExecCommandArgs(ToolArgs):
    """Arguments of ``exec_command``."""

    command: Annotated[str, Field(min_length=1, description="The command, run with bash -c.")]
    tty: Annotated[
        bool,
        Field(
            description="Run it on a terminal (default): prompts, colours and Ctrl-C work as "
            "at a keyboard. false: plain pipes (stdout and stderr together)."
        ),
    ] = True
    yield_ms: Annotated[int, _yield_field(_START_YIELD_MS)] = _START_YIELD_MS
    workdir: Annotated[
        str | None,
        Field(description="Working directory relative to the workspace root (default: the root)."),
    ] = None
    timeout: Annotated[
        int | None,
        Field(
            ge=1,
            description="Seconds the process may live before it and everything it started are "
            "killed. Default 120; at most the configured maximum (600 unless configured).",
        ),
    ] = None


class ExecCommandTool(Tool[ExecCommandArgs]):
    """``exec_command``: start an interactive process."""

    name: ClassVar[str] = "exec_command"
    description: ClassVar[str] = (
        "Start a command (bash -c) that keeps running between calls, on a terminal by default, "
        "and return its output after yield_ms with its process number. Use it for prompts, "
        "REPLs and programs that ask questions; type with write_stdin, read more with "
        "exec_poll, stop with exec_kill. Runs under the sandbox like shell (only the workspace "
        "and $TMPDIR writable, network off by default). At most 8 processes per session; "
        "they end at their timeout and when Zuno exits. " + _OUTPUT_NOTE
    )
    args_model = ExecCommandArgs
    declaration: ClassVar[Declaration] = _SIDE_EFFECTING
    rule_argument: ClassVar[str | None] = "command"
    rule_match: ClassVar[Literal["path", "prefix", "glob"]] = "prefix"

    def startup_check(self) -> None:
        """Nothing: the sandbox is checked (and reported) when a process starts."""

    async def run(self, args: ExecCommandArgs, ctx: ToolContext) -> ToolResult:
        """Start the process, then wait for output up to yield_ms."""
        table = _table(ctx)
        settings = sandbox_settings(ctx)
        seconds = settings.timeout_default if args.timeout is None else args.timeout
        if seconds > settings.timeout_max:
            raise ArgumentsRejected(
                f"timeout {seconds} s is over the maximum of {settings.timeout_max} s; "
                f"ask for at most {settings.timeout_max} s"
            )
        cwd = ctx.resolve_inside(args.workdir or ".")
        if not cwd.is_dir():
            raise ArgumentsRejected(f"workdir {args.workdir!r} is not a folder in the workspace")
        try:
            sandbox = select_sandbox(settings)
        except SandboxError as exc:
            raise ToolError(str(exc)) from exc
        section: Any = getattr(ctx.config, "tool_output", None)
        cap: Any = getattr(section, "artifact_max_bytes", None)
        spec = Launched(
            argv=[_shell(), "-c", args.command],
            command=args.command,
            cwd=Path(cwd),
            env=command_environment(settings.env_remove, keep=settings.env_keep),
            sandbox=sandbox,
            policy=policy_for(settings, ctx.workspace, protected=ctx.protected),
            tty=args.tty,
            time_limit=seconds,
            transcript=ctx.artifact_path("transcript"),
            transcript_cap=cap if isinstance(cap, int) else None,
            egress=egress_rules(settings, ctx) if settings.proxied else None,
        )
        try:
            proc = table.start(ctx.session_id, ctx.call_id, spec)
        except TooManyProcesses as exc:
            raise ArgumentsRejected(str(exc)) from exc
        except OSError as exc:
            raise ToolError(f"cannot start the command: {exc}") from exc
        try:
            settled = await proc.settle(args.yield_ms / 1000)
        except anyio.get_cancelled_exc_class():
            proc.kill("killed when its exec_command call was cancelled")
            with anyio.CancelScope(shield=True):
                await proc.wait_ended()
            cancelled = _report(table, proc, Settled.ENDED, ctx, note=_CANCELLED)
            cancelled.is_error = cancelled.uncertain = True
            ctx.on_cancel = cancelled
            raise
        result = _report(table, proc, settled, ctx)
        if result.data and result.data["state"] == ProcessState.TIMED_OUT.value:
            # Its own wait saw the deadline, as for shell: it may have partly run.
            result.is_error = result.uncertain = True
            result.reason = result.output.partition("\n")[0].strip("[]")
        return result


_CANCELLED = (
    "[the call was cancelled: the process and everything it started were killed; it may "
    "have partly run]"
)


# write_stdin -----------------------------------------------------------------------


class WriteStdinArgs(ToolArgs):
    """Arguments of ``write_stdin``."""

    session: Annotated[int, Field(ge=1, description=_SESSION_HELP)]
    chars: Annotated[
        str,
        Field(
            min_length=1,
            max_length=_CHARS_MAX,
            description="What to type, as JSON text: \\n is Enter, \\u0003 Ctrl-C, "
            f"\\u0004 Ctrl-D (end of input), \\u001b Escape. At most {_CHARS_MAX} characters.",
        ),
    ]
    yield_ms: Annotated[int, _yield_field(_WRITE_YIELD_MS)] = _WRITE_YIELD_MS


class WriteStdinTool(Tool[WriteStdinArgs]):
    """``write_stdin``: type into an interactive process."""

    name: ClassVar[str] = "write_stdin"
    description: ClassVar[str] = (
        "Type characters into a process started by exec_command and return the output that "
        "follows (on a terminal, what you type is echoed). Control characters such as Ctrl-C "
        "act as signals only with tty=true. " + _OUTPUT_NOTE
    )
    args_model = WriteStdinArgs
    declaration: ClassVar[Declaration] = _SIDE_EFFECTING
    # Rules match what is typed (a deny rule for shell commands included, see
    # zuno.policy.permissions.rule_matches); approval is asked once per process.
    rule_argument: ClassVar[str | None] = "chars"
    rule_match: ClassVar[Literal["path", "prefix", "glob"]] = "prefix"
    scope_approved_once: ClassVar[bool] = True

    def session_scope(self, args: WriteStdinArgs) -> tuple[str, str] | None:
        """Typing into one process: approved once, it is not asked about again."""
        return f"process {args.session}", f"typing into process {args.session}"

    async def run(self, args: WriteStdinArgs, ctx: ToolContext) -> ToolResult:
        """Write the characters, then wait for output up to yield_ms."""
        table, proc = _process(ctx, args.session)
        data = args.chars.encode("utf-8")
        note: str | None = None
        if proc.ended:
            note = "[nothing was typed: the process had already ended]"
        else:
            sent = await proc.write(data, max(1.0, args.yield_ms / 1000))
            if sent < len(data):
                note = (
                    f"[only {sent} of {len(data)} bytes were typed: the process is not "
                    "reading its input]"
                )
        settled = await proc.settle(args.yield_ms / 1000)
        return _report(table, proc, settled, ctx, note=note)


# exec_poll ----------------------------------------------------------------------------


class ExecPollArgs(ToolArgs):
    """Arguments of ``exec_poll``."""

    session: Annotated[int, Field(ge=1, description=_SESSION_HELP)]
    yield_ms: Annotated[int, _yield_field(_POLL_YIELD_MS)] = _POLL_YIELD_MS


class ExecPollTool(Tool[ExecPollArgs]):
    """``exec_poll``: the new output and state of an interactive process."""

    name: ClassVar[str] = "exec_poll"
    description: ClassVar[str] = (
        "Return the new output and the state of a process started by exec_command (running, "
        "waiting for input, or how it ended), waiting up to yield_ms for it to print or end. "
        "Changes nothing; may run beside other calls. " + _OUTPUT_NOTE
    )
    args_model = ExecPollArgs
    declaration: ClassVar[Declaration] = INSPECTION

    async def run(self, args: ExecPollArgs, ctx: ToolContext) -> ToolResult:
        """Wait for output up to yield_ms, then report."""
        table, proc = _process(ctx, args.session)
        settled = await proc.settle(args.yield_ms / 1000)
        return _report(table, proc, settled, ctx)


# exec_kill ----------------------------------------------------------------------------


class ExecKillArgs(ToolArgs):
    """Arguments of ``exec_kill``."""

    session: Annotated[int, Field(ge=1, description=_SESSION_HELP)]


class ExecKillTool(Tool[ExecKillArgs]):
    """``exec_kill``: end an interactive process and everything it started."""

    name: ClassVar[str] = "exec_kill"
    description: ClassVar[str] = (
        "Kill a process started by exec_command, with everything it started, and return its "
        "last output. Needs approval in strict mode."
    )
    args_model = ExecKillArgs
    declaration: ClassVar[Declaration] = _SIDE_EFFECTING

    async def run(self, args: ExecKillArgs, ctx: ToolContext) -> ToolResult:
        """Kill the tree and wait (bounded) for it to be reaped."""
        table, proc = _process(ctx, args.session)
        note = "[it had already ended]" if proc.ended else None
        proc.kill()
        await proc.wait_ended()
        return _report(table, proc, Settled.ENDED, ctx, note=note)


def exec_tools() -> list[Tool[Any]]:
    """A fresh instance of each interactive-process tool."""
    return [ExecCommandTool(), WriteStdinTool(), ExecPollTool(), ExecKillTool()]
