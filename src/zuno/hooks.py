"""Hooks: commands and callables consulted before and after each call.

A before hook can deny a call (it is then ``blocked: denied`` and nothing
runs). An after hook sees the outcome; its denial withholds the result from
the model (the effect has already happened and stays recorded as such).

Command hooks (``hooks.before`` / ``hooks.after`` in ``zuno.json``) receive the
call as JSON on stdin and answer on stdout with ``{"decision": "allow"}`` or
``{"decision": "deny", "reason": "..."}``; empty output allows. A hook that
exits non-zero, prints something else or runs past its timeout denies: a
broken guard must not wave calls through.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from anyio.abc import Process

from zuno.config import HookCommand, HookSettings

__all__ = ["HookCall", "HookDecision", "Hooks", "PythonHook"]

Phase = Literal["before", "after"]


@dataclass(frozen=True, slots=True)
class HookCall:
    """What a hook is told about a call."""

    phase: Phase
    session_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    declaration: dict[str, str]
    outcome: str | None = None
    result: str | None = None

    def as_json(self) -> str:
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
class HookDecision:
    """A hook's answer."""

    allow: bool
    reason: str = ""
    hook: str = ""


HookAnswer = "HookDecision | bool | Awaitable[HookDecision | bool | None] | None"
PythonHook = Callable[[HookCall], HookAnswer]

ALLOW = HookDecision(True)


@dataclass
class Hooks:
    """The hooks of a runtime: configured commands, then Python callables."""

    settings: HookSettings = field(default_factory=HookSettings)
    workspace: Path = field(default_factory=Path.cwd)
    before_callables: list[PythonHook] = field(default_factory=lambda: [])
    after_callables: list[PythonHook] = field(default_factory=lambda: [])

    def __bool__(self) -> bool:
        return bool(
            self.settings.before
            or self.settings.after
            or self.before_callables
            or self.after_callables
        )

    async def before(self, call: HookCall) -> HookDecision:
        """The first denial among the before hooks, else allow."""
        return await self._run(self.settings.before, self.before_callables, call)

    async def after(self, call: HookCall) -> HookDecision:
        """The first denial among the after hooks, else allow."""
        return await self._run(self.settings.after, self.after_callables, call)

    async def _run(
        self, commands: Sequence[HookCommand], callables: Sequence[PythonHook], call: HookCall
    ) -> HookDecision:
        for command in commands:
            if command.tools is not None and call.tool not in command.tools:
                continue
            decision = await _run_command(command, call, self.workspace)
            if not decision.allow:
                return decision
        for hook in callables:
            decision = await _run_callable(hook, call)
            if not decision.allow:
                return decision
        return ALLOW


async def _run_callable(hook: PythonHook, call: HookCall) -> HookDecision:
    name = getattr(hook, "__name__", repr(hook))
    try:
        answer = hook(call)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:  # a failing guard denies
        return HookDecision(False, f"hook {name} failed: {exc!r}", name)
    if isinstance(answer, HookDecision):
        return answer
    if answer is None or answer is True:
        return ALLOW
    return HookDecision(False, f"denied by hook {name}", name)


async def _run_command(command: HookCommand, call: HookCall, workspace: Path) -> HookDecision:
    label = command.command if len(command.command) <= 60 else command.command[:57] + "..."
    env = {**os.environ, "ZUNO_HOOK_PHASE": call.phase, "ZUNO_TOOL": call.tool}
    stdout = b""
    process: Process | None = None
    try:
        with anyio.move_on_after(command.timeout) as scope:
            process = await anyio.open_process(
                ["/bin/sh", "-c", command.command],
                cwd=str(workspace),
                env=env,
                start_new_session=True,
            )
            assert process.stdin is not None and process.stdout is not None
            # A hook that does not read its input may still answer.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.send(call.as_json().encode())
            await process.stdin.aclose()
            chunks: list[bytes] = []
            async for chunk in process.stdout:
                chunks.append(chunk)
            stdout = b"".join(chunks)
            await process.wait()
        if scope.cancelled_caught:
            return HookDecision(
                False, f"hook `{label}` timed out after {command.timeout:g}s", label
            )
    except OSError as exc:
        return HookDecision(False, f"hook `{label}` could not start: {exc}", label)
    finally:
        if process is not None:
            if process.returncode is None:
                _kill_group(process)
            with anyio.CancelScope(shield=True):
                await process.aclose()
    assert process is not None
    if process.returncode != 0:
        return HookDecision(False, f"hook `{label}` exited with status {process.returncode}", label)
    return _parse_answer(stdout, label)


def _kill_group(process: Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _parse_answer(stdout: bytes, label: str) -> HookDecision:
    text = stdout.decode("utf-8", errors="replace").strip()
    if not text:
        return HookDecision(True, "", label)
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        return HookDecision(False, f"hook `{label}` printed something that is not JSON", label)
    if not isinstance(answer, dict):
        return HookDecision(False, f"hook `{label}` must print a JSON object", label)
    decision = answer.get("decision")  # type: ignore[union-attr]
    reason = str(answer.get("reason") or "")  # type: ignore[union-attr]
    if decision == "allow":
        return HookDecision(True, reason, label)
    if decision == "deny":
        return HookDecision(False, reason or f"denied by hook `{label}`", label)
    return HookDecision(False, f"hook `{label}` answered an unknown decision {decision!r}", label)
