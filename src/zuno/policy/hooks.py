"""Hooks: commands and callables consulted around calls, and told of approvals and sessions.

Before hooks run in order (configured commands, then Python callables), each
once per call. Each may answer:

- ``allow`` (or nothing): go on;
- ``deny``: the call is ``blocked: denied`` and the remaining hooks do not run;
- ``ask``: the call is put to the approver whatever the rules and the mode
  say (a deny rule still denies first);
- ``arguments``: the call runs with these arguments instead. The rewritten
  call is parsed, validated, classified and checked against the read-only
  refusal and the inspection rule again before the next hook sees it, and the
  permission rules judge it at the end (:mod:`zuno.dispatch.preflight`). A hook cannot
  change which tool is called, and since each hook runs once a call is
  rewritten at most once per hook: no loops.

After hooks see the outcome. ``deny`` withholds the result from the model
(the effect has already happened and stays recorded as such); ``context``
adds a note for the model, marked as the hook's, after the result.

Hooks on approvals (``approval_asked``, ``approval_answered``) and sessions
(``session_start``, ``session_end``) only observe: their output is ignored
and their failure stops nothing.

A command gets its payload as JSON on stdin and answers on stdout with a JSON
object (empty output allows). A before or after hook that exits non-zero,
prints something else or runs past its timeout has *failed*: with
``"fail": "closed"`` (the default) that denies, as a broken guard must not
wave calls through; with ``"fail": "open"`` it is ignored. Either way a
``hook.failed`` event records it.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import anyio
from anyio.abc import Process

from zuno.config.hooks import HookCommand, HookSettings
from zuno.config.sandbox import SandboxSettings
from zuno.contract.events import Event
from zuno.execution.sandbox.policy import SandboxError
from zuno.execution.server_launch import Launch, confined, server_launch

__all__ = [
    "MAX_CONTEXT",
    "Hook",
    "HookCall",
    "HookDecision",
    "HookNotice",
    "Hooks",
    "NoticePhase",
    "Phase",
    "PythonHook",
    "Rewrite",
    "context_note",
    "failure_event",
    "rewrite_note",
]

Phase = Literal["before", "after"]
"""The hooks consulted about a call."""

NoticePhase = Literal["approval_asked", "approval_answered", "session_start", "session_end"]
"""The hooks told of something that happened (they only observe)."""

MAX_CONTEXT = 8000
"""Characters of one after hook's ``context`` the model sees (the rest is cut, with a note)."""

_SHOWN_ARGUMENTS = 1000
"""Characters of rewritten arguments quoted back to the model."""


@dataclass(frozen=True, slots=True)
class HookCall:
    """What a before or after hook is told about a call."""

    phase: Phase
    session_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    declaration: dict[str, str]
    outcome: str | None = None
    result: str | None = None

    def as_json(self) -> str:
        """The payload a command reads on stdin."""
        body: dict[str, Any] = {
            "phase": self.phase,
            "session_id": self.session_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "declaration": self.declaration,
        }
        if self.phase == "after":
            body["outcome"] = self.outcome
            body["result"] = self.result
        return json.dumps(body)


@dataclass(frozen=True, slots=True)
class HookNotice:
    """What an observing hook is told: the moment (``phase``) and its facts."""

    phase: NoticePhase
    session_id: str
    data: Mapping[str, Any] = field(default_factory=lambda: {})
    tool: str | None = None
    """The call's tool, for approval notices (a hook's ``tools`` filters on it)."""

    def as_json(self) -> str:
        """The payload a command reads on stdin."""
        return json.dumps({"phase": self.phase, "session_id": self.session_id, **self.data})


@dataclass(frozen=True, slots=True)
class HookDecision:
    """A hook's answer.

    Attributes:
        allow: False denies (before: the call is blocked; after: its result is withheld).
        reason: Why; shown to the model with a denial, an ask or a rewrite.
        hook: Which hook answered (filled in by Zuno).
        ask: Before hooks: put the call to the approver even if the rules would allow it.
        arguments: Before hooks: run the call with these arguments instead
            (checked again, as if the model had sent them).
        context: After hooks: a note added for the model after the result.
        failed: The hook broke (error, bad answer, timeout) instead of answering;
            ``allow`` then says what its ``fail`` setting made of that.
    """

    allow: bool = True
    reason: str = ""
    hook: str = ""
    ask: bool = False
    arguments: dict[str, Any] | None = None
    context: str = ""
    failed: bool = False


PythonHook = Callable[[HookCall], Any]
"""A before or after hook in Python: answers a :class:`HookDecision`, the object a command
would print (a dict), True or None to allow, or False to deny; sync or async."""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A before hook changed a call's arguments: from ``before`` to ``after``."""

    hook: str
    reason: str
    before: dict[str, Any]
    after: dict[str, Any]

    def as_event_data(self) -> dict[str, Any]:
        """The ``hook.rewrote`` event's data."""
        return {
            "hook": self.hook,
            "reason": self.reason,
            "before": self.before,
            "after": self.after,
        }


def rewrite_note(rewrites: Sequence[Rewrite], *, ran: bool) -> str:
    """What the model is told about a call its before hooks rewrote: who, why, and what ran.

    ``ran``: the call ran (a note to put before its result); else it was then
    refused, and the note leads into why.
    """
    hooks = ", ".join(dict.fromkeys(f"`{r.hook}`" for r in rewrites))
    reasons = "; ".join(r.reason for r in rewrites if r.reason)
    because = f" (reason: {reasons})" if reasons else ""
    shown = json.dumps(rewrites[-1].after, ensure_ascii=False, default=repr)
    if len(shown) > _SHOWN_ARGUMENTS:
        shown = shown[: _SHOWN_ARGUMENTS - 3] + "..."
    if ran:
        return (
            f"[Zuno: a before hook ({hooks}) changed this call's arguments{because}; "
            f"what ran: {shown}]\n"
        )
    return (
        f"a before hook ({hooks}) changed this call's arguments{because} to {shown}, "
        "and the changed call was refused: "
    )


def failure_event(
    session_id: str, call_id: str | None, phase: str, decision: HookDecision
) -> Event:
    """The ``hook.failed`` event of a hook that broke (``fail``: what that made of it)."""
    return Event(
        "hook.failed",
        session_id,
        call_id,
        {
            "phase": phase,
            "hook": decision.hook,
            "reason": decision.reason,
            "fail": "open" if decision.allow else "closed",
        },
    )


def context_note(hook: str, context: str) -> str:
    """An after hook's context as the model sees it, marked as the hook's."""
    if len(context) > MAX_CONTEXT:
        context = context[:MAX_CONTEXT] + f"\n[... {len(context) - MAX_CONTEXT} characters cut]"
    return f"\n\n[Context from hook `{hook}`, not from the tool:]\n{context}"


@dataclass(frozen=True, slots=True)
class Hook:
    """One before or after hook, ready to consult about a call."""

    label: str
    fail: Literal["closed", "open"]
    _run: Callable[[HookCall], Awaitable[HookDecision]]

    async def consult(self, call: HookCall) -> HookDecision:
        """The hook's answer; a failure is turned into a denial or an allow by ``fail``."""
        decision = await self._run(call)
        if decision.failed and self.fail == "open":
            return HookDecision(True, decision.reason, self.label, failed=True)
        return decision


@dataclass
class Hooks:
    """The hooks of a runtime: configured commands, then Python callables."""

    settings: HookSettings = field(default_factory=HookSettings)
    workspace: Path = field(default_factory=Path.cwd)
    before_callables: list[PythonHook] = field(default_factory=lambda: [])
    after_callables: list[PythonHook] = field(default_factory=lambda: [])
    sandbox: SandboxSettings | None = None
    """The sandbox hook commands run under (None: the default settings)."""
    protected: tuple[Path, ...] = ()
    """Zuno's own folders, read-only for hook commands (see :mod:`zuno.policy.control_paths`)."""

    def __bool__(self) -> bool:
        """Whether any before or after hook is configured (the dispatcher's fast path)."""
        return bool(
            self.settings.before
            or self.settings.after
            or self.before_callables
            or self.after_callables
        )

    def chain(self, phase: Phase, tool: str) -> list[Hook]:
        """The hooks of ``phase`` that apply to ``tool``, in the order they are consulted."""
        commands = self.settings.before if phase == "before" else self.settings.after
        callables = self.before_callables if phase == "before" else self.after_callables
        chain: list[Hook] = []
        for command in commands:
            if command.tools is not None and tool not in command.tools:
                continue
            chain.append(Hook(_label(command), command.fail, _command_runner(command, self)))
        for hook in callables:
            name = getattr(hook, "__name__", repr(hook))
            chain.append(Hook(name, "closed", _callable_runner(hook, name)))
        return chain

    async def notify(self, notice: HookNotice) -> list[HookDecision]:
        """Tell the observing hooks of ``notice``; returns the failures (nothing else counts)."""
        failures: list[HookDecision] = []
        for command in self._observers(notice):
            decision = await _run_command(command, notice.phase, notice.as_json(), self)
            if decision.failed:
                failures.append(decision)
        return failures

    def notify_now(self, notice: HookNotice) -> list[HookDecision]:
        """:meth:`notify` for synchronous code (a session opened or released)."""
        failures: list[HookDecision] = []
        for command in self._observers(notice):
            decision = _run_command_now(command, notice.phase, notice.as_json(), self)
            if decision.failed:
                failures.append(decision)
        return failures

    def _observers(self, notice: HookNotice) -> list[HookCommand]:
        commands: list[HookCommand] = getattr(self.settings, notice.phase)
        return [
            c for c in commands if c.tools is None or notice.tool is None or notice.tool in c.tools
        ]


def _label(command: HookCommand) -> str:
    return command.command if len(command.command) <= 60 else command.command[:57] + "..."


def _command_runner(
    command: HookCommand, hooks: Hooks
) -> Callable[[HookCall], Awaitable[HookDecision]]:
    async def run(call: HookCall) -> HookDecision:
        return await _run_command(command, call.phase, call.as_json(), hooks, call.tool)

    return run


def _callable_runner(hook: PythonHook, name: str) -> Callable[[HookCall], Awaitable[HookDecision]]:
    async def run(call: HookCall) -> HookDecision:
        try:
            answer = hook(call)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:  # a failing guard denies
            return HookDecision(False, f"hook {name} failed: {exc!r}", name, failed=True)
        if isinstance(answer, HookDecision):
            return _named(answer, name)
        if answer is None or answer is True:
            return HookDecision(True, "", name)
        if isinstance(answer, Mapping):
            return _decision(cast(Mapping[str, Any], answer), call.phase, name)
        return HookDecision(False, f"denied by hook {name}", name)

    return run


def _named(decision: HookDecision, name: str) -> HookDecision:
    """A callable's own decision, checked as a command's answer would be, with its name."""
    if decision.arguments is not None and not isinstance(cast(object, decision.arguments), Mapping):
        return _broken(name, "gave arguments that are not a mapping")
    return HookDecision(
        decision.allow,
        decision.reason or ("" if decision.allow else f"denied by hook {name}"),
        name,
        decision.ask,
        dict(decision.arguments) if decision.arguments is not None else None,
        decision.context,
        decision.failed,
    )


def _broken(label: str, what: str) -> HookDecision:
    return HookDecision(False, f"hook `{label}` {what}", label, failed=True)


@contextlib.contextmanager
def _launch(command: HookCommand, hooks: Hooks, extra: Mapping[str, str]) -> Generator[Launch]:
    """Where and how a hook command starts (see :mod:`zuno.execution.server_launch`), confined
    unless the user's own file says ``"sandbox": false``."""
    launch = server_launch(
        ["/bin/sh", "-c", command.command],
        hooks.workspace,
        {**os.environ, **extra},
        from_workspace=command.from_workspace,
    )
    if not (command.sandbox or command.from_workspace):
        yield launch
        return
    with confined(
        launch,
        hooks.sandbox or SandboxSettings(),
        workspace=hooks.workspace,
        network=command.network,
        protected=hooks.protected,
        explicit_env=extra,
    ) as wrapped:
        yield wrapped


async def _run_command(
    command: HookCommand, phase: str, payload: str, hooks: Hooks, tool: str = ""
) -> HookDecision:
    label = _label(command)
    stdout = b""
    process: Process | None = None
    try:
        with (
            _launch(command, hooks, {"ZUNO_HOOK_PHASE": phase, "ZUNO_TOOL": tool}) as launch,
            anyio.move_on_after(command.timeout) as scope,
        ):
            process = await anyio.open_process(
                launch.argv,
                cwd=str(launch.cwd),
                env=launch.env,
                stderr=subprocess.DEVNULL,  # never read: a chatty hook must not fill a pipe
                start_new_session=True,
            )
            assert process.stdin is not None and process.stdout is not None
            # A hook that does not read its input may still answer.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.send(payload.encode())
            await process.stdin.aclose()
            chunks: list[bytes] = []
            async for chunk in process.stdout:
                chunks.append(chunk)
            stdout = b"".join(chunks)
            await process.wait()
        if scope.cancelled_caught:
            return _broken(label, f"timed out after {command.timeout:g}s")
    except (OSError, SandboxError) as exc:
        return _broken(label, f"could not start: {exc}")
    finally:
        if process is not None:
            if process.returncode is None:
                _kill_group(process.pid, process.kill)
            with anyio.CancelScope(shield=True):
                await process.aclose()
    assert process is not None
    if process.returncode != 0:
        return _broken(label, f"exited with status {process.returncode}")
    return _parse_answer(stdout, phase, label)


def _run_command_now(command: HookCommand, phase: str, payload: str, hooks: Hooks) -> HookDecision:
    """An observing command run from synchronous code; its output is not read."""
    try:
        with _launch(command, hooks, {"ZUNO_HOOK_PHASE": phase, "ZUNO_TOOL": ""}) as launch:
            return _observe(command, payload, launch)
    except SandboxError as exc:
        return _broken(_label(command), f"could not start: {exc}")


def _observe(command: HookCommand, payload: str, launch: Launch) -> HookDecision:
    label = _label(command)
    try:
        process = subprocess.Popen(
            launch.argv,
            cwd=str(launch.cwd),
            env=launch.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        return _broken(label, f"could not start: {exc}")
    try:
        process.communicate(payload.encode(), timeout=command.timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid, process.kill)
        process.wait()
        return _broken(label, f"timed out after {command.timeout:g}s")
    except BaseException:
        _kill_group(process.pid, process.kill)
        process.wait()
        raise
    if process.returncode != 0:
        return _broken(label, f"exited with status {process.returncode}")
    return HookDecision(True, "", label)


def _kill_group(pid: int, kill: Callable[[], None]) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            kill()


def _parse_answer(stdout: bytes, phase: str, label: str) -> HookDecision:
    text = stdout.decode("utf-8", errors="replace").strip()
    if not text or phase not in ("before", "after"):
        return HookDecision(True, "", label)  # observers' output is not an answer
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        return _broken(label, "printed something that is not JSON")
    if not isinstance(answer, dict):
        return _broken(label, "must print a JSON object")
    return _decision(cast(dict[str, Any], answer), phase, label)


def _decision(answer: Mapping[str, Any], phase: str, label: str) -> HookDecision:
    """A hook's JSON answer as a decision; what the phase cannot take is a failure."""
    decision = answer.get("decision", "allow")
    reason = str(answer.get("reason") or "")
    arguments = answer.get("arguments")
    context = answer.get("context")
    if decision not in ("allow", "deny", "ask"):
        return _broken(label, f"answered an unknown decision {decision!r}")
    if phase == "after":
        # Asking and rewriting are for calls yet to run; quietly dropping them would
        # let through what the hook meant to stop.
        if decision == "ask":
            return _broken(label, "answered ask as an after hook (the call already ran)")
        if arguments is not None:
            return _broken(label, "gave arguments as an after hook (the call already ran)")
        if context is not None and not isinstance(context, str):
            return _broken(label, "gave a context that is not a string")
    if arguments is not None and not isinstance(arguments, dict):
        return _broken(label, "gave arguments that are not a JSON object")
    if decision == "deny":
        return HookDecision(False, reason or f"denied by hook `{label}`", label)
    return HookDecision(
        True,
        reason,
        label,
        ask=decision == "ask",
        arguments=cast(dict[str, Any] | None, arguments),
        context=context if phase == "after" and isinstance(context, str) else "",
    )
